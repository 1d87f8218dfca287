"""Every public bool option is type-checked at its entry: ``'no'`` or ``1`` is a ValueError
naming the option, never a truthy value that silently runs as True.

The list is explicit: (entry point, minimal valid arguments, option name). A new public
option typed ``bool`` belongs here. The check is a type check: it runs with the value
checks switched off too (``validate_args(False)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from candidate_sampling import CandidateSet, set_validate_args, validate_args
from candidate_sampling._validate import check_bool
from candidate_sampling.candidates import gather_rows
from candidate_sampling.losses import (
    HardNegativeSoftmaxLoss,
    InfoNCELoss,
    NCELoss,
    RetrievalLoss,
    SampledSoftmaxLoss,
    SigmoidPairwiseLoss,
    Temperature,
    apply_temperature,
    candidate_logits,
    correct_logits,
    hard_negative_softmax_loss,
    hits_to_remove,
    in_batch_logits,
    in_batch_softmax_loss,
    info_nce_loss,
    logistic_terms,
    mask_logits,
    nce_loss,
    negative_sampling_loss,
    resolve_method,
    sampled_softmax_loss,
    sigmoid_pair_terms,
    sigmoid_pairwise_loss,
)
from candidate_sampling.models import ItemTower, UserTower
from candidate_sampling.sampling import (
    CandidateDraw,
    StreamingFrequencyEstimator,
    UniformSampler,
    log_expected_count,
)
from candidate_sampling.scale.distributed import gathered_softmax_loss, ring_sigmoid_loss
from candidate_sampling.scale.gradcache import checkpointed_in_batch_softmax_loss
from candidate_sampling.scale.mining import MinedNegatives
from candidate_sampling.train import OptimizerGroup, iterate_batches, train

# ---------------------------------------------------------------- small valid inputs

_g = torch.Generator().manual_seed(0)
QUERY = torch.randn(3, 4, generator=_g)
TABLE = torch.randn(10, 4, generator=_g)
IDS = torch.tensor([0, 1, 2])
POSITIVES = CandidateSet(torch.randn(3, 4, generator=_g), IDS)
CANDIDATES = CandidateSet(torch.randn(5, 4, generator=_g), torch.tensor([2, 3, 4, 5, 6]))
LOGITS = torch.randn(3, 5, generator=_g)
SAMPLER = UniformSampler(10)
DRAW = SAMPLER.sample(4, generator=torch.Generator().manual_seed(1), positive_ids=IDS)
MINED = MinedNegatives(
    ids=torch.tensor([[3, 4], [5, -1], [6, 7]]),
    scores=torch.zeros(3, 2),
    ranks=torch.tensor([[0, 1], [0, 1], [0, 1]]),
    valid=torch.tensor([[True, True], [True, False], [True, True]]),
)


def _model() -> torch.nn.Module:
    return torch.nn.Linear(2, 1)


def _optimizer_group() -> OptimizerGroup:
    return OptimizerGroup([torch.optim.SGD(_model().parameters(), lr=0.1)])


def _enter_validate_args(value):
    with validate_args(value):
        pass


def _iterate_batches(**options):
    return list(iterate_batches([torch.arange(5)], 2, **options))


def _train(**options):
    return train(
        _model(),
        lambda model, batch: model(batch[0]).pow(2).mean(),
        [torch.randn(4, 2)],
        epochs=1,
        batch_size=2,
        **{"progress": False, **options},
    )


# (entry point, positional arguments, keyword arguments, option name)
CASES = [
    (set_validate_args, (), {}, "value"),
    (_enter_validate_args, (), {}, "value"),
    (Temperature, (0.5,), {}, "learnable"),
    (Temperature.from_scale, (10.0,), {}, "learnable"),
    (apply_temperature, (LOGITS, 0.5), {}, "inplace"),
    (correct_logits, (LOGITS, torch.zeros(5)), {}, "inplace"),
    (correct_logits, (LOGITS, None), {}, "inplace"),
    (mask_logits, (LOGITS, torch.zeros(5, dtype=torch.bool)), {}, "inplace"),
    (logistic_terms, (LOGITS, 0.0), {}, "inplace"),
    (hits_to_remove, (IDS, CANDIDATES), {}, "remove_accidental_hits"),
    (hits_to_remove, (IDS, CANDIDATES), {}, "logistic"),
    (candidate_logits, (QUERY, POSITIVES, CANDIDATES), {}, "remove_accidental_hits"),
    (sampled_softmax_loss, (QUERY, POSITIVES, CANDIDATES), {}, "remove_accidental_hits"),
    (nce_loss, (QUERY, POSITIVES, CANDIDATES), {}, "remove_accidental_hits"),
    (negative_sampling_loss, (QUERY, POSITIVES, CANDIDATES), {}, "remove_accidental_hits"),
    (SampledSoftmaxLoss, (SAMPLER, 4), {}, "unique"),
    (SampledSoftmaxLoss, (SAMPLER, 4), {}, "remove_accidental_hits"),
    (SampledSoftmaxLoss, (SAMPLER, 4), {}, "subtract_log_q"),
    (SampledSoftmaxLoss, (SAMPLER, 4), {}, "sparse"),
    (NCELoss, (SAMPLER, 4), {}, "unique"),
    (NCELoss, (SAMPLER, 4), {}, "remove_accidental_hits"),
    (NCELoss, (SAMPLER, 4), {}, "subtract_log_q"),
    (NCELoss, (SAMPLER, 4), {}, "sparse"),
    (in_batch_logits, (QUERY, POSITIVES, CANDIDATES), {}, "remove_accidental_hits"),
    (in_batch_softmax_loss, (QUERY, POSITIVES, CANDIDATES), {}, "remove_accidental_hits"),
    (RetrievalLoss, (), {"sampler": SAMPLER, "num_samples": 2}, "unique"),
    (RetrievalLoss, (), {}, "remove_accidental_hits"),
    (info_nce_loss, (QUERY, QUERY), {}, "symmetric"),
    (info_nce_loss, (QUERY, QUERY), {}, "normalize"),
    (InfoNCELoss, (), {}, "symmetric"),
    (InfoNCELoss, (), {}, "normalize"),
    (
        sigmoid_pair_terms,
        (LOGITS, IDS, torch.arange(5)),
        {"positive_columns": IDS},
        "remove_accidental_hits",
    ),
    (sigmoid_pairwise_loss, (QUERY, POSITIVES, CANDIDATES), {}, "remove_accidental_hits"),
    (SigmoidPairwiseLoss, (), {}, "learnable"),
    (SigmoidPairwiseLoss, (), {}, "remove_accidental_hits"),
    (
        hard_negative_softmax_loss,
        (QUERY, POSITIVES, CANDIDATES),
        {},
        "remove_accidental_hits",
    ),
    (HardNegativeSoftmaxLoss, (), {}, "remove_accidental_hits"),
    (resolve_method, (64, 1000), {}, "half"),
    (
        checkpointed_in_batch_softmax_loss,
        (QUERY, POSITIVES, CANDIDATES),
        {"block_size": 2},
        "remove_accidental_hits",
    ),
    (gathered_softmax_loss, (QUERY, POSITIVES, CANDIDATES), {}, "remove_accidental_hits"),
    (ring_sigmoid_loss, (QUERY, POSITIVES), {}, "remove_accidental_hits"),
    (MINED.candidates, (TABLE,), {}, "share"),
    (gather_rows, (TABLE, IDS), {}, "sparse"),
    (CandidateSet.from_ids, (IDS, TABLE), {}, "sparse"),
    (CandidateSet.from_draw, (DRAW, TABLE), {}, "correct"),
    (CandidateSet.from_draw, (DRAW, TABLE), {}, "sparse"),
    (CandidateSet.positives_of, (IDS, TABLE), {"draw": DRAW}, "correct"),
    (CandidateSet.positives_of, (IDS, TABLE), {"draw": DRAW}, "sparse"),
    (ItemTower, (10,), {}, "sparse"),
    (UserTower, (5,), {}, "sparse"),
    (lambda **kw: _optimizer_group().zero_grad(**kw), (), {}, "set_to_none"),
    (_iterate_batches, (), {}, "shuffle"),
    (_iterate_batches, (), {}, "drop_last"),
    (_train, (), {}, "drop_last"),
    (_train, (), {}, "progress"),
    (CandidateDraw, (DRAW.ids, DRAW.log_q, 4), {}, "unique"),
    (SAMPLER.sample, (4,), {}, "unique"),
    (log_expected_count, (torch.full((3,), 0.1),), {"num_samples": 2, "num_tries": 2}, "unique"),
    (StreamingFrequencyEstimator, (16,), {}, "hash_ids"),
    (StreamingFrequencyEstimator, (16,), {}, "warm_start"),
]


def _name(entry) -> str:
    name = getattr(entry, "__qualname__", repr(entry))
    return name.lstrip("_").replace("<lambda>", "OptimizerGroup.zero_grad")


IDS_OF_CASES = [f"{_name(entry)}-{option}" for entry, _, _, option in CASES]


@pytest.mark.parametrize(("entry", "args", "kwargs", "option"), CASES, ids=IDS_OF_CASES)
@pytest.mark.parametrize("bad", ["no", 1], ids=["str", "int"])
@pytest.mark.parametrize("validate", [True, False], ids=["validate", "no-validate"])
def test_bool_option_rejects_non_bool(entry, args, kwargs, option, bad, validate):
    message = rf"\b{option} must be a bool, got {type(bad).__name__}"
    with validate_args(validate), pytest.raises(ValueError, match=message):
        entry(*args, **{**kwargs, option: bad})


@pytest.mark.parametrize(("entry", "args", "kwargs", "option"), CASES, ids=IDS_OF_CASES)
@pytest.mark.parametrize("good", [True, False, np.True_])
def test_bool_option_accepts_bool(entry, args, kwargs, option, good):
    # the minimal arguments are valid: the failure above is the option's, nothing else's
    with validate_args(True):  # restores the switch that set_validate_args(False) turns off
        entry(*args, **{**kwargs, option: good})


def test_check_bool_returns_a_python_bool():
    assert check_bool("flag", True) is True
    assert check_bool("flag", False) is False
    assert check_bool("flag", np.True_) is True
    assert check_bool("flag", np.bool_(False)) is False
    for bad in ("yes", 0, 1, 1.0, None, np.int64(1), torch.tensor(True), [True]):
        with pytest.raises(ValueError, match=r"flag must be a bool, got "):
            check_bool("flag", bad)


def test_a_bool_option_is_stored_as_a_python_bool():
    loss = SampledSoftmaxLoss(SAMPLER, 4, unique=np.False_, sparse=np.True_)
    assert loss.unique is False and loss.sparse is True


def _public_bool_options() -> set[tuple[str, str]]:
    """(qualified name, option) of every bool-typed parameter of the public API: the
    functions and classes in each module's ``__all__`` and the public methods the package
    defines on those classes (not the ones inherited from torch)."""
    import importlib
    import inspect
    import pkgutil

    import candidate_sampling

    def ours(obj) -> bool:
        return str(getattr(obj, "__module__", "")).split(".")[0] == "candidate_sampling"

    def typed_bool(p: inspect.Parameter) -> bool:
        annotation = p.annotation if isinstance(p.annotation, str) else ""
        return isinstance(p.default, bool) or "bool" in annotation.split(" | ")

    modules = [candidate_sampling] + [
        importlib.import_module(m.name)
        for m in pkgutil.walk_packages(candidate_sampling.__path__, "candidate_sampling.")
    ]
    found = set()
    for module in modules:
        for public in getattr(module, "__all__", []):
            obj = getattr(module, public, None)
            if obj is None or not ours(obj):
                continue
            callables = [(obj.__qualname__, obj)]
            if inspect.isclass(obj):
                callables += [
                    (member.__qualname__, member)
                    for name, member in inspect.getmembers(obj)
                    if not name.startswith("_") and callable(member) and ours(member)
                ]
            for qualname, fn in callables:
                try:
                    parameters = inspect.signature(fn).parameters.values()
                except (TypeError, ValueError):
                    continue
                found |= {(qualname, p.name) for p in parameters if typed_bool(p)}
    return found


def test_every_public_bool_option_is_in_the_list():
    # a new bool option is tested only if it is listed in CASES: this finds the ones not
    aliases = {"enter_validate_args": "validate_args"}
    listed = {(aliases.get(_name(entry), _name(entry)), option)
              for entry, _, _, option in CASES}
    missing = _public_bool_options() - listed
    assert not missing, f"bool options missing from CASES: {sorted(missing)}"
