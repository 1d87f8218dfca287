"""The package on a device without float64 (Apple's MPS), emulated on the CPU.

MPS has no float64: creating or converting a float64 tensor there raises. CI has no Mac,
so this file emulates one. ``FAKE = torch.device("cpu", 0)`` stands for the device: a
tensor moved there (``.to(FAKE)``, ``device=FAKE``) is an :class:`OnDevice`, a CPU tensor
whose ``.device`` reads ``FAKE``; every result of an operation with an ``OnDevice`` input
is one too, until ``.cpu()`` / ``.to("cpu")`` brings it back. :class:`NoFloat64OnDevice`
raises where an operation would leave a float64 tensor on the device, as MPS would, and
the package is told (``device.has_float64``) that ``FAKE`` has no float64, so it takes
the same path as on MPS. The tests run the package's float64 paths (frequencies, log Q,
samplers, metrics, baselines, mining, synthetic data) through it.
"""

from __future__ import annotations

import contextlib
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

import candidate_sampling
from candidate_sampling import CandidateSet
from candidate_sampling import device as device_module

FAKE = torch.device("cpu", 0)
_HOST = torch.device("cpu")


class OnDeviceParameter(torch.nn.Parameter):
    """A module's parameter moved to ``FAKE`` (``module.to(FAKE)`` inside the emulation)."""

    @property
    def device(self) -> torch.device:
        return FAKE


class OnDevice(torch.Tensor):
    """A CPU tensor standing for one on ``FAKE``; see the module docstring."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self) -> torch.device:  # what the package reads to place its work
        return FAKE

    def __format__(self, spec: str) -> str:  # f"{loss:.3f}" as for any tensor
        return self.as_subclass(torch.Tensor).__format__(spec)


def _on_device(t) -> bool:
    return isinstance(t, (OnDevice, OnDeviceParameter))


def _as_device(value):
    return torch.device(value) if isinstance(value, (str, torch.device)) else None


def _placement(func, args, kwargs):
    """True: the result is on the device; False: on the host; None: as its inputs."""
    if func in (torch.Tensor.cpu, torch.Tensor.numpy):
        return False
    if func is torch.Tensor.to:
        target = kwargs.get("device")
        for a in args[1:]:
            if isinstance(a, (str, torch.device)):
                target = a
            elif isinstance(a, torch.Tensor):
                return _on_device(a)
        if target is not None:
            return torch.device(target) == FAKE
        return None
    target = kwargs.get("device")
    if target is not None:
        return torch.device(target) == FAKE
    return None


def _is_float64(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.float64, torch.complex128)


def _to_device_kind(t):
    """``t`` as an :class:`OnDevice` sharing its storage; a leaf stays a leaf (its
    ``.grad`` must be where the caller looks), a result keeps its autograd history."""
    if not isinstance(t, torch.Tensor) or isinstance(t, (OnDevice, torch.nn.Parameter)):
        return t
    if t.layout != torch.strided:  # a sparse gradient cannot be aliased: left as it is
        return t
    if t.is_leaf:
        return t.detach().as_subclass(OnDevice).requires_grad_(t.requires_grad)
    return t.as_subclass(OnDevice)


class NoFloat64OnDevice(TorchFunctionMode):
    """Tracks which tensors are on ``FAKE`` and raises on float64 there (as MPS does).

    ``report``: a callable that receives each violation instead (the run goes on in
    float64), to list every place in one run of a chapter.
    """

    def __init__(self, report=None):
        super().__init__()
        self.report = report

    def _violation(self, func, args) -> None:
        kinds = [type(a).__name__ for a in args]
        message = f"float64 on a device without float64 (MPS): {func} of {kinds}"
        if self.report is None:
            raise TypeError(message)
        self.report(message)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.device:  # constructing a device object is not a computation
            return func(*args, **kwargs)
        place = _placement(func, args, kwargs)
        if place is None:
            place = any(_on_device(t) for t in tree_flatten((args, kwargs))[0])
        call_kwargs = dict(kwargs)
        if "device" in call_kwargs and _as_device(call_kwargs["device"]) == FAKE:
            call_kwargs["device"] = _HOST
        call_args = tuple(_HOST if isinstance(a, torch.device) and a == FAKE else a
                          for a in args)
        if func is torch.Tensor.to and isinstance(call_args[0], torch.Tensor):
            call_args = tuple(a.as_subclass(torch.Tensor) if isinstance(a, OnDevice) and i
                              else a for i, a in enumerate(call_args))
        out = func(*call_args, **call_kwargs)
        if getattr(func, "__name__", "") == "__get__":  # .device, .grad, .data: as they are
            return out
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        moves = func in (torch.Tensor.to, torch.Tensor.cpu)
        if not moves and any(out is t for t in inputs):  # in place, requires_grad_: itself
            if _on_device(out) and _is_float64(out):
                self._violation(func, args)
            return out
        if place:
            if any(_is_float64(t) for t in tree_flatten(out)[0]):
                self._violation(func, args)
            return tree_map(_to_device_kind, out)
        return tree_map(
            lambda t: t.as_subclass(torch.Tensor) if isinstance(t, OnDevice) else t, out
        )


def module_to(original):
    """``nn.Module.to`` that, for ``FAKE``, makes every parameter an
    :class:`OnDeviceParameter` and every buffer an :class:`OnDevice` (same storage)."""

    def to(module, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if isinstance(target, (str, torch.device)) and torch.device(target) == FAKE:
            for sub in module.modules():
                for name, param in list(sub._parameters.items()):
                    if param is not None and not isinstance(param, OnDeviceParameter):
                        sub._parameters[name] = OnDeviceParameter(
                            param.data, requires_grad=param.requires_grad)
                for name, buf in list(sub._buffers.items()):
                    if buf is not None and not isinstance(buf, OnDevice):
                        sub._buffers[name] = buf.as_subclass(OnDevice)
            return module
        return original(module, *args, **kwargs)

    return to


def _has_float64(device) -> bool:
    """The package's test of a device, with ``FAKE`` lacking float64 as MPS does."""
    device = torch.device(device)
    return device.type != "mps" and device != FAKE


@contextlib.contextmanager
def device_without_float64(report=None):
    """Inside: ``FAKE`` lacks float64 for the package (every module's ``has_float64``),
    ``module.to(FAKE)`` marks parameters, and :class:`NoFloat64OnDevice` is active
    (``report`` as there). Everything is restored on exit. Used by the tests below and by
    ``.ci/run_chapter_without_float64.py``."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(candidate_sampling.__path__, "candidate_sampling."):
        importlib.import_module(info.name)  # every module that holds a has_float64
    patched = [(module, module.has_float64) for name, module in list(sys.modules.items())
               if name.startswith("candidate_sampling") and hasattr(module, "has_float64")]
    original_to = torch.nn.Module.to
    try:
        for module, _ in patched:
            module.has_float64 = _has_float64
        torch.nn.Module.to = module_to(original_to)
        with NoFloat64OnDevice(report=report):
            yield
    finally:
        torch.nn.Module.to = original_to
        for module, function in patched:
            module.has_float64 = function


@pytest.fixture
def no_float64():
    with device_without_float64():
        yield


def test_the_emulation_raises_where_mps_would(no_float64):
    x = torch.ones(3).to(FAKE)
    assert isinstance(x, OnDevice) and x.device == FAKE
    with pytest.raises(TypeError, match="float64"):
        x.double()
    with pytest.raises(TypeError, match="float64"):
        torch.zeros(2, dtype=torch.float64, device=FAKE)
    with pytest.raises(TypeError, match="float64"):
        torch.arange(3, dtype=torch.float64, device=x.device)
    host = x.cpu().double()  # the way around it
    assert not isinstance(host, OnDevice) and host.dtype == torch.float64
    assert isinstance(x * 2, OnDevice) and not isinstance((x * 2).cpu(), OnDevice)
    assert device_module.has_float64(FAKE) is False


def _counts(n=50, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, 20, (n,), generator=gen).to(FAKE)


def test_frequencies_and_log_q(no_float64):
    from candidate_sampling.sampling.frequency import (
        StreamingFrequencyEstimator,
        item_counts,
        item_probabilities,
        log_expected_count,
        mixed_log_q,
    )

    ids = torch.randint(0, 50, (200,)).to(FAKE)
    counts = item_counts(ids, 50)
    p = item_probabilities(counts + 1)
    assert isinstance(p, OnDevice) and p.dtype == torch.float32
    assert abs(float(p.sum().cpu()) - 1) < 1e-5
    for unique, tries in ((True, 20), (False, 16)):
        lq = log_expected_count(p, num_samples=16, num_tries=tries, unique=unique)
        assert isinstance(lq, OnDevice) and lq.dtype == torch.float32
    q = mixed_log_q(p, torch.full((50,), 1 / 50).to(FAKE), batch_size=8, num_samples=4)
    assert isinstance(q, OnDevice) and torch.isfinite(q.cpu()).all()
    est = StreamingFrequencyEstimator(num_buckets=64, device=FAKE)
    for _ in range(3):
        est.update(ids[:32])
    assert isinstance(est.estimate(ids[:5]), OnDevice)


def test_samplers(no_float64):
    from candidate_sampling.sampling.samplers import (
        LogUniformSampler,
        UniformSampler,
        UnigramSampler,
    )

    gen = torch.Generator(FAKE).manual_seed(0)
    positives = torch.tensor([1, 2, 3]).to(FAKE)
    for sampler in (
        UnigramSampler(_counts(), device=FAKE),
        UnigramSampler(_counts(), distortion=0.75, device=FAKE),
        LogUniformSampler(50, device=FAKE),
        UniformSampler(50, device=FAKE),
    ):
        for unique in (True, False):
            draw = sampler.sample(8, unique=unique, generator=gen, positive_ids=positives)
            assert draw.ids.shape == (8,)
            assert torch.isfinite(draw.log_q.cpu()).all()


def test_losses_with_log_q_from_every_source(no_float64):
    from candidate_sampling.losses import RetrievalLoss, SampledSoftmaxLoss
    from candidate_sampling.sampling.frequency import (
        StreamingFrequencyEstimator,
        item_probabilities,
    )
    from candidate_sampling.sampling.samplers import LogUniformSampler, UniformSampler

    torch.manual_seed(0)
    # leaf tensors on the device (an nn.Parameter cannot stand for one in the emulation)
    weights = torch.randn(50, 8).to(FAKE).requires_grad_()

    def table(ids):
        return weights[ids]

    ids = torch.randint(0, 50, (6,)).to(FAKE)
    query = torch.randn(6, 8).to(FAKE)
    probs = item_probabilities(_counts())
    gen = torch.Generator(FAKE).manual_seed(0)
    losses = [
        RetrievalLoss(item_probabilities=probs),
        RetrievalLoss(item_probabilities=probs, sampler=UniformSampler(50, device=FAKE),
                      num_samples=5),
        RetrievalLoss(frequency_estimator=StreamingFrequencyEstimator(
            num_buckets=64, device=FAKE)),
    ]
    for loss in losses:
        value = loss(query, table(ids), ids, item_encoder=table, generator=gen)
        assert torch.isfinite(value.cpu())
        value.backward()
    sampled = SampledSoftmaxLoss(LogUniformSampler(50, device=FAKE), 10)
    assert torch.isfinite(sampled(query, weights, ids, generator=gen).cpu())
    assert isinstance(CandidateSet(table(ids), ids).embeddings, OnDevice)


def test_metrics_baselines_and_mining(no_float64):
    from candidate_sampling.eval import KnownPairs
    from candidate_sampling.eval.baselines import most_popular_scores
    from candidate_sampling.eval.metrics import (
        metrics_from_ranks,
        popularity_strata,
        positive_ranks,
        stratified_metrics,
    )
    from candidate_sampling.scale.mining import HardNegativeMiner

    torch.manual_seed(0)
    users, items = torch.randn(10, 4).to(FAKE), torch.randn(50, 4).to(FAKE)
    test_users = torch.arange(10).to(FAKE)
    test_items = torch.randint(0, 50, (10,)).to(FAKE)
    known = KnownPairs(test_users, (test_items + 1) % 50, num_items=50)
    ranks = positive_ranks(users, items, test_users, test_items, known=known)
    metrics_from_ranks(ranks, test_users, ks=(5, 10))
    counts = _counts()
    scores = most_popular_scores(counts)
    assert isinstance(scores, OnDevice) and scores.dtype == torch.float32
    strata = popularity_strata(counts)
    stratified_metrics(ranks, test_users, test_items, strata, ks=(5,))
    miner = HardNegativeMiner(index="torch").build(items)
    for sampling in ("top", "random"):
        gen = torch.Generator(FAKE).manual_seed(0) if sampling == "random" else None
        mined = miner.mine(users[:4], num_negatives=3, positive_ids=test_items[:4],
                           known=known, user_index=test_users[:4], sampling=sampling,
                           generator=gen)
        assert mined.ids.shape[0] == 4


def test_synthetic_problems(no_float64):
    from candidate_sampling.data.synthetic import (
        make_planted_retrieval,
        make_softmax_problem,
        zipf_probabilities,
    )

    p = zipf_probabilities(100, dtype=torch.float32, device=FAKE)
    assert isinstance(p, OnDevice) and abs(float(p.sum().cpu()) - 1) < 1e-5
    problem = make_softmax_problem(100, 4, seed=0, device=FAKE)
    batch = problem.sample(16, torch.Generator(FAKE).manual_seed(0))
    assert isinstance(batch.query, OnDevice)
    planted = make_planted_retrieval(5, 100, 4, seed=0, device=FAKE)
    users, items = planted.sample(20, torch.Generator(FAKE).manual_seed(0))
    assert isinstance(items, OnDevice)
    planted.log_probs(torch.arange(3).to(FAKE))
    marginal = planted.item_marginal()  # float64: on the host where the device lacks it
    assert not isinstance(marginal, OnDevice) and marginal.dtype == torch.float64



def test_a_two_tower_model_trains_with_every_log_q_source(no_float64):
    """``model.to(FAKE)``, the package's training loop and the retrieval loss with log Q
    from frequencies, a streaming estimate and mixed negatives, then the metrics."""
    from candidate_sampling.eval.metrics import metrics_from_ranks, positive_ranks
    from candidate_sampling.losses import RetrievalLoss
    from candidate_sampling.models import ItemTower, TwoTowerModel, UserTower
    from candidate_sampling.sampling.frequency import (
        StreamingFrequencyEstimator,
        item_counts,
        item_probabilities,
    )
    from candidate_sampling.sampling.samplers import UniformSampler
    from candidate_sampling.train import make_optimizer, train

    torch.manual_seed(0)
    users = torch.randint(0, 20, (256,))
    items = torch.randint(0, 60, (256,))
    probs = item_probabilities(item_counts(items.to(FAKE), 60) + 1)
    gen = torch.Generator(FAKE).manual_seed(0)
    for loss in (
        RetrievalLoss(item_probabilities=probs),
        RetrievalLoss(frequency_estimator=StreamingFrequencyEstimator(64, device=FAKE)),
        RetrievalLoss(item_probabilities=probs, sampler=UniformSampler(60, device=FAKE),
                      num_samples=8),
    ):
        model = TwoTowerModel(UserTower(20, dim=8), ItemTower(60, 8)).to(FAKE)
        assert model.item_tower.all_items().device == FAKE

        def step(model, batch, loss=loss):
            u_ids, i_ids = batch
            u, v = model(i_ids, user_ids=u_ids)
            return loss(u, v, i_ids, item_encoder=model.item_tower, generator=gen)

        history = train(model, step, (users.to(FAKE), items.to(FAKE)), epochs=1,
                        batch_size=64, optimizer=make_optimizer(model, "adagrad", 0.1),
                        progress=False)
        assert torch.isfinite(torch.tensor(history["loss"].to_numpy())).all()
        with torch.no_grad():
            ranks = positive_ranks(model.user_tower.all_users(), model.item_tower.all_items(),
                                   users[:32].to(FAKE), items[:32].to(FAKE))
        metrics_from_ranks(ranks, users[:32].to(FAKE), ks=(10,))
