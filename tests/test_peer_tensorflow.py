"""The package against the real TensorFlow and TF Recommenders, where it names their semantics.

Until these tests the peers were only checked through hand transcriptions of their code
(``tests/test_sampled_losses.py``, ``tests/test_core_steps.py``, ...). Here both libraries get
the same inputs: the same class table, biases, query and candidate embeddings, and the same
draw, a :class:`~candidate_sampling.sampling.samplers.CandidateDraw` passed to TensorFlow as
its ``sampled_values=(sampled_candidates, true_expected_count, sampled_expected_count)``.

* Sampled softmax, NCE, sampled logistic and negative sampling against
  ``tf.nn.sampled_softmax_loss`` / ``tf.nn.nce_loss`` in float64 (values and gradients to
  about 1e-10): ``num_true`` 1 and 2, accidental hits kept or removed, class biases, unique
  draws and draws with repeated ids, log Q subtracted or not (TF always subtracts it:
  expected counts of 1 switch it off exactly, ``log 1 = 0``), and the temperature through
  ``(u·v + b)/τ = (u/τ)·v + b/τ``.
* ``tf.nn.compute_accidental_hits`` against ``accidental_hits``, and TFRS's
  ``RemoveAccidentalHits`` against the in-batch mask.
* The samplers' expected counts against TF's ``*_candidate_sampler`` ops, and their draws
  against TF's by chi-square and inclusion frequencies (fixed seeds).
* ``tfrs.tasks.Retrieval`` against ``in_batch_softmax_loss``, ``hard_negative_softmax_loss``
  and ``RetrievalLoss``. TFRS runs only in float32 (its labels are a float32 ``tf.eye`` and
  its layer casts float64 embeddings down), so the package runs in float64 on
  float32-representable inputs and the two must agree within a worst-case bound derived
  from float32 rounding (:func:`float32_bound`).
* ``hit_rate@K`` against TFRS's ``FactorizedTopK``; ``make_optimizer``'s Adagrad and the
  ``U[−0.05, 0.05]`` initialisation against Keras's defaults.

Differences the notation page documents are tested as the documented relation
(``repeated_hits="mask_all"``; TF's ``k·q`` fallback for unique draws). The module skips
where TensorFlow or TF Recommenders is not installed (the book's own environment).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # TFRS needs Keras 2, set before TF loads
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import inspect  # noqa: E402
import math  # noqa: E402
from dataclasses import replace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

tf = pytest.importorskip("tensorflow")
tfrs = pytest.importorskip("tensorflow_recommenders")

from candidate_sampling import CandidateSet  # noqa: E402
from candidate_sampling.eval.metrics import retrieval_metrics  # noqa: E402
from candidate_sampling.losses import (  # noqa: E402
    NCELoss,
    RetrievalLoss,
    SampledSoftmaxLoss,
    accidental_hits,
    hard_negative_softmax_loss,
    in_batch_softmax_loss,
    nce_loss,
    negative_sampling_loss,
    sampled_logistic_loss,
    sampled_softmax_loss,
)
from candidate_sampling.sampling.samplers import (  # noqa: E402
    CandidateDraw,
    LogUniformSampler,
    UniformSampler,
    UnigramSampler,
)
from candidate_sampling.train import make_optimizer  # noqa: E402

tf.get_logger().setLevel("ERROR")

D64 = torch.float64
EPS32 = float(np.finfo(np.float32).eps)
#: float64 comparisons: both sides compute the same formula in float64.
RTOL64, ATOL64 = 1e-10, 1e-10


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The inputs are tiny: one torch thread, so that torch's idle OpenMP workers do not
    compete with TensorFlow's thread pool for the cores (half this module's time on two
    cores). Restored after the module."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def assert_close64(ours, theirs, what: str) -> None:
    np.testing.assert_allclose(
        np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64),
        rtol=RTOL64, atol=ATOL64, err_msg=what,
    )


# =========================================================================== sampled losses

NUM_CLASSES, DIM, BATCH, NUM_SAMPLES = 12, 4, 5, 6


def make_problem(seed: int, num_true: int) -> dict:
    """float64 ``query`` (B, d), class table ``classes`` (|V|, d), ``class_bias`` (|V|,),
    ``positive_ids`` (B, T) with distinct ids within a row (``T = num_true``)."""
    g = gen(seed)
    order = torch.rand(BATCH, NUM_CLASSES, generator=g).argsort(dim=1)
    return {
        "query": torch.randn(BATCH, DIM, generator=g, dtype=D64),
        "classes": torch.randn(NUM_CLASSES, DIM, generator=g, dtype=D64),
        "class_bias": torch.randn(NUM_CLASSES, generator=g, dtype=D64),
        "positive_ids": order[:, :num_true].clone(),
    }


def with_positives(sampler, draw: CandidateDraw, positive_ids: torch.Tensor) -> CandidateDraw:
    """``draw`` as ``sampler.sample(..., positive_ids=positive_ids)`` returns it: the same ids
    with the positives' log expected count (TF's ``true_expected_count``) added."""
    return replace(
        draw, positive_log_q=sampler.log_q(positive_ids, draw), positive_ids=positive_ids
    )


def make_draw(kind: str, problem: dict, seed: int) -> CandidateDraw:
    """A log-uniform draw of ``NUM_SAMPLES`` ids with accidental hits, for ``problem``.

    ``"unique"``: ``sample(k, unique=True)``; row 0's first positive is set to the second
    sampled id and row 2's last positive to the fourth (in ``problem``, in place), so both
    rows have a hit.
    ``"repeats"``: a draw with replacement (``num_tries = k``, ``log Q = log(k·q)``) whose
    ids are row 0's first positive, ``k − 3`` sampler draws, row 0's first positive
    again and row 1's last positive: a repeated accidental hit, as draws with
    replacement make (TF's ``compute_accidental_hits`` presupposes unique ids).
    """
    sampler = LogUniformSampler(NUM_CLASSES)
    positive_ids = problem["positive_ids"]
    if kind == "unique":
        draw = sampler.sample(NUM_SAMPLES, unique=True, generator=gen(seed))
        for row, col, sampled in ((0, 0, 1), (2, -1, 3)):
            if not bool((positive_ids[row] == draw.ids[sampled]).any()):
                positive_ids[row, col] = draw.ids[sampled]
        assert all(len(set(r)) == len(r) for r in positive_ids.tolist())
    else:
        base = sampler.sample(NUM_SAMPLES - 3, generator=gen(seed)).ids
        first, last = positive_ids[0, 0], positive_ids[1, -1]
        ids = torch.cat([first[None], base, first[None], last[None]])
        placeholder = CandidateDraw(ids, torch.zeros(NUM_SAMPLES), NUM_SAMPLES, False)
        draw = replace(placeholder, log_q=sampler.log_q(ids, placeholder))
    return with_positives(sampler, draw, positive_ids)


def tf_sampled_values(draw: CandidateDraw, *, correct: bool) -> tuple:
    """TF's ``sampled_values`` for ``draw``: the ids and the expected counts, float64.

    ``correct=False`` passes expected counts of 1, so TF subtracts ``log 1 = 0``: exactly
    ``_compute_sampled_logits(subtract_log_q=False)``, which the public losses never pass.
    """
    ids = draw.ids.numpy().astype(np.int64)
    true_count = draw.positive_log_q.double().exp().numpy()
    sampled_count = draw.log_q.double().exp().numpy()
    if not correct:
        true_count, sampled_count = np.ones_like(true_count), np.ones_like(sampled_count)
    return ids, true_count, sampled_count


def tf_loss_and_grads(tf_loss, problem: dict, sampled_values: tuple, *, temperature=1.0,
                      **options) -> tuple:
    """Per-row loss of ``tf.nn.<tf_loss>`` and the gradients of its sum with respect to the
    query, the class table and the biases, all float64.

    TF has no temperature: it gets ``inputs = u/τ`` and ``biases = b/τ``, whose logits are
    ``(u·v + b)/τ``, and the chain rule divides the input and bias gradients by τ.
    """
    positive_ids = problem["positive_ids"].numpy().astype(np.int64)
    inputs = tf.Variable(problem["query"].numpy() / temperature)
    weights = tf.Variable(problem["classes"].numpy())
    biases = tf.Variable(problem["class_bias"].numpy() / temperature)
    with tf.GradientTape() as tape:
        per_row = tf_loss(
            weights=weights, biases=biases, labels=positive_ids, inputs=inputs,
            num_sampled=len(sampled_values[0]), num_classes=NUM_CLASSES,
            num_true=positive_ids.shape[1], sampled_values=sampled_values, **options,
        )
        total = tf.reduce_sum(per_row)
    g_inputs, g_weights, g_biases = tape.gradient(total, [inputs, weights, biases])
    return (
        per_row.numpy(),
        g_inputs.numpy() / temperature,
        tf.convert_to_tensor(g_weights).numpy(),
        tf.convert_to_tensor(g_biases).numpy() / temperature,
    )


def package_loss_and_grads(loss, problem: dict, draw: CandidateDraw, *, correct: bool,
                           **options) -> tuple:
    """Per-row ``loss(query, positives, candidates, reduction="none", **options)`` over the
    draw's two CandidateSets, and the gradients of its sum (query, class table, biases)."""
    query = problem["query"].clone().requires_grad_()
    classes = problem["classes"].clone().requires_grad_()
    class_bias = problem["class_bias"].clone().requires_grad_()
    positives = CandidateSet.positives_of(
        problem["positive_ids"], classes, draw=draw, class_bias=class_bias, correct=correct
    )
    candidates = CandidateSet.from_draw(draw, classes, class_bias=class_bias, correct=correct)
    per_row = loss(query, positives, candidates, reduction="none", **options)
    per_row.sum().backward()
    return tuple(t.detach().numpy() for t in (per_row, query.grad, classes.grad, class_bias.grad))


def assert_same_loss_and_grads(ours: tuple, theirs: tuple) -> None:
    for name, a, b in zip(("per-row loss", "d/dquery", "d/dclasses", "d/dclass_bias"),
                          ours, theirs):
        assert_close64(a, b, name)


def has_hit(draw: CandidateDraw) -> bool:
    return bool(accidental_hits(draw.positive_ids, draw.ids).any())


@pytest.mark.parametrize("temperature", [1.0, 0.5])
@pytest.mark.parametrize("correct", [True, False], ids=["log_q", "no_log_q"])
@pytest.mark.parametrize("kind", ["unique", "repeats"])
@pytest.mark.parametrize("remove_accidental_hits", [True, False], ids=["remove", "keep"])
@pytest.mark.parametrize("num_true", [1, 2])
def test_sampled_softmax_loss_matches_tf_nn_sampled_softmax_loss(
    num_true, remove_accidental_hits, kind, correct, temperature
):
    """``sampled_softmax_loss`` with ``repeated_hits="tensorflow"`` is
    ``tf.nn.sampled_softmax_loss``: per-row loss and gradients (query, class table, biases)
    in float64, for one and two true classes (labels ``1/T``), hits kept or removed, with
    class biases, unique draws and draws with a repeated hit, the log expected count
    subtracted (TF's ``true_expected_count`` / ``sampled_expected_count``) or not, and
    τ = 0.5 (the notation page's ``o = s/τ − log Q``).

    Where no id repeats (unique draws) the default ``repeated_hits="mask_all"`` gives the
    same numbers; with a repeated hit it does not (the notation page, "Masks"; see
    :func:`test_sampled_softmax_mask_all_is_tensorflow_with_every_copy_removed`).
    """
    problem = make_problem(10 + num_true, num_true)
    draw = make_draw(kind, problem, seed=3)
    assert has_hit(draw)
    theirs = tf_loss_and_grads(
        tf.nn.sampled_softmax_loss, problem, tf_sampled_values(draw, correct=correct),
        temperature=temperature, remove_accidental_hits=remove_accidental_hits,
    )
    options = {"temperature": temperature, "remove_accidental_hits": remove_accidental_hits}
    ours = package_loss_and_grads(
        sampled_softmax_loss, problem, draw, correct=correct, repeated_hits="tensorflow",
        **options,
    )
    assert_same_loss_and_grads(ours, theirs)
    default = package_loss_and_grads(sampled_softmax_loss, problem, draw, correct=correct,
                                     **options)
    if kind == "unique" or not remove_accidental_hits:
        assert_same_loss_and_grads(default, theirs)
    else:  # the documented difference: TF keeps every copy but the last as a negative
        assert not np.allclose(default[0], theirs[0], rtol=1e-6)


@pytest.mark.parametrize("num_true", [1, 2])
def test_sampled_softmax_mask_all_is_tensorflow_with_every_copy_removed(num_true):
    """The default ``repeated_hits="mask_all"`` removes *every* column holding one of the
    row's true ids, where TF's ``compute_accidental_hits`` removes only the last copy
    (notation page, "Masks"; chapter 4, "Repeated hits"). The documented relation, checked
    against TF: row by row, the package's loss equals ``tf.nn.sampled_softmax_loss`` on the
    draw with all but the last copy of the row's true ids deleted (TF then removes that
    one), and rows whose true ids are sampled once agree with TF on the whole draw."""
    problem = make_problem(20 + num_true, num_true)
    draw = make_draw("repeats", problem, seed=4)
    ours = package_loss_and_grads(  # hits removed explicitly: the draw repeats ids
        sampled_softmax_loss, problem, draw, correct=True, remove_accidental_hits=True
    )[0]
    whole = tf_loss_and_grads(
        tf.nn.sampled_softmax_loss, problem, tf_sampled_values(draw, correct=True)
    )[0]
    ids, true_count, sampled_count = tf_sampled_values(draw, correct=True)
    repeated_rows = 0
    for i, trues in enumerate(problem["positive_ids"].tolist()):
        copies = [j for j, y in enumerate(ids.tolist()) if y in trues]
        last = {y: j for j, y in enumerate(ids.tolist())}  # TF's map: id -> last position
        keep = [j for j in range(len(ids)) if j not in copies or last[ids[j]] == j]
        row = {key: problem[key] for key in ("classes", "class_bias")}
        row["query"] = problem["query"][i:i + 1]
        row["positive_ids"] = problem["positive_ids"][i:i + 1]
        theirs = tf_loss_and_grads(
            tf.nn.sampled_softmax_loss, row, (ids[keep], true_count[i:i + 1], sampled_count[keep])
        )[0]
        assert_close64(ours[i], theirs[0], f"row {i}")
        if len(copies) > len({ids[j] for j in copies}):  # a true id sampled twice
            repeated_rows += 1
            assert ours[i] < whole[i] - 1e-3, "TF keeps the earlier copy as a negative"
        else:
            assert_close64(ours[i], whole[i], f"row {i}, whole draw")
    assert repeated_rows >= 1


@pytest.mark.parametrize("subtract_log_q", [True, False])
@pytest.mark.parametrize("num_true", [1, 2])
@pytest.mark.parametrize("module", [SampledSoftmaxLoss, NCELoss])
def test_sampled_modules_match_tensorflow_with_its_defaults(module, num_true, subtract_log_q):
    """``SampledSoftmaxLoss`` / ``NCELoss`` with their defaults (unique log-uniform draws,
    hits removed for the softmax and kept for NCE, log Q subtracted) equal
    ``tf.nn.sampled_softmax_loss`` / ``tf.nn.nce_loss`` with theirs, fed the module's own
    ``last_draw``; ``subtract_log_q=False`` equals TF given expected counts of 1.
    ``reduction="mean"`` with ``sample_weight`` is Keras' ``Σ w ℓ / B``."""
    problem = make_problem(30 + num_true, num_true)
    sampler = LogUniformSampler(NUM_CLASSES)
    loss = module(sampler, NUM_SAMPLES, subtract_log_q=subtract_log_q, reduction="none")
    per_row = loss(problem["query"], problem["classes"], problem["positive_ids"],
                   class_bias=problem["class_bias"], generator=gen(5))
    draw = loss.last_draw
    assert draw.unique and draw.num_samples == NUM_SAMPLES
    tf_loss = tf.nn.sampled_softmax_loss if module is SampledSoftmaxLoss else tf.nn.nce_loss
    theirs = tf_loss_and_grads(tf_loss, problem, tf_sampled_values(draw, correct=subtract_log_q))
    assert_close64(per_row.detach(), theirs[0], "per-row loss")
    weight = torch.linspace(0.0, 2.0, BATCH, dtype=D64)
    loss.reduction = "mean"
    mean = loss(problem["query"], problem["classes"], problem["positive_ids"],
                class_bias=problem["class_bias"], sample_weight=weight, generator=gen(5))
    assert_close64(float(mean), float((weight.numpy() * theirs[0]).sum()) / BATCH, "mean")


@pytest.mark.parametrize("module", [SampledSoftmaxLoss, NCELoss])
def test_sampled_modules_with_tensorflow_repeats_match_tensorflow(module):
    """With ``unique=False`` a draw can hold a row's positive several times; with
    ``repeated_hits="tensorflow"`` the modules remove only the last copy, as TF, and equal
    TF fed the module's ``last_draw`` (hits removed on both sides)."""
    problem = make_problem(36, 1)
    loss = module(LogUniformSampler(NUM_CLASSES), 4 * NUM_CLASSES, unique=False,
                  remove_accidental_hits=True, repeated_hits="tensorflow", reduction="none")
    per_row = loss(problem["query"], problem["classes"], problem["positive_ids"],
                   class_bias=problem["class_bias"], generator=gen(8))
    draw = loss.last_draw
    repeated = accidental_hits(draw.positive_ids, draw.ids).sum(1) > 1
    assert bool(repeated.any()), "no row's positive was drawn twice: pick another seed"
    tf_loss = tf.nn.sampled_softmax_loss if module is SampledSoftmaxLoss else tf.nn.nce_loss
    theirs = tf_loss_and_grads(tf_loss, problem, tf_sampled_values(draw, correct=True),
                               remove_accidental_hits=True)
    assert_close64(per_row.detach(), theirs[0], "per-row loss")


@pytest.mark.parametrize("kind", ["unique", "repeats"])
@pytest.mark.parametrize("remove_accidental_hits", [False, True], ids=["keep", "remove"])
@pytest.mark.parametrize("num_true", [1, 2])
def test_nce_loss_matches_tf_nn_nce_loss(num_true, remove_accidental_hits, kind):
    """``nce_loss`` (``repeated_hits="tensorflow"``) is ``tf.nn.nce_loss``: per-row sum of the
    ``T + k`` logistic terms (true columns labelled ``1/T``), values and gradients in
    float64; hits kept (TF's default) or removed. With hits removed it is
    ``sampled_logistic_loss`` (the notation page's table), which must equal TF as well."""
    problem = make_problem(40 + num_true, num_true)
    draw = make_draw(kind, problem, seed=6)
    assert has_hit(draw)
    theirs = tf_loss_and_grads(
        tf.nn.nce_loss, problem, tf_sampled_values(draw, correct=True),
        remove_accidental_hits=remove_accidental_hits,
    )
    ours = package_loss_and_grads(
        nce_loss, problem, draw, correct=True,
        remove_accidental_hits=remove_accidental_hits, repeated_hits="tensorflow",
    )
    assert_same_loss_and_grads(ours, theirs)
    if remove_accidental_hits:
        logistic = package_loss_and_grads(
            sampled_logistic_loss, problem, draw, correct=True, repeated_hits="tensorflow"
        )
        assert_same_loss_and_grads(logistic, theirs)


@pytest.mark.parametrize("remove_accidental_hits", [False, True], ids=["keep", "remove"])
@pytest.mark.parametrize("num_true", [1, 2])
def test_negative_sampling_loss_is_tf_nce_loss_without_log_q(num_true, remove_accidental_hits):
    """``negative_sampling_loss`` (the table's "F, logistic, negatives S") is TF's
    ``nce_loss`` with ``subtract_log_q=False``: expected counts of 1 in ``sampled_values``.
    It ignores the sets' log Q, so it is fed the corrected sets. Hits removed: with
    ``repeated_hits="tensorflow"`` (the draw repeats a hit)."""
    problem = make_problem(50 + num_true, num_true)
    draw = make_draw("repeats", problem, seed=7)
    theirs = tf_loss_and_grads(tf.nn.nce_loss, problem, tf_sampled_values(draw, correct=False),
                               remove_accidental_hits=remove_accidental_hits)
    ours = package_loss_and_grads(negative_sampling_loss, problem, draw, correct=True,
                                  remove_accidental_hits=remove_accidental_hits,
                                  repeated_hits="tensorflow")
    assert_same_loss_and_grads(ours, theirs)


@pytest.mark.parametrize(
    "losses", [(sampled_softmax_loss, "sampled_softmax_loss"), (nce_loss, "nce_loss")],
    ids=["sampled_softmax", "nce"],
)
def test_a_true_id_repeated_within_a_row_matches_tensorflow(losses):
    """``num_true = 2`` rows whose two true ids are the same id, sampled twice, hits
    removed: TF emits the hit once per true id and ``sparse_to_dense`` sets (does not add)
    the repeated entry, so one column is removed once; the package's
    ``repeated_hits="tensorflow"`` gives the same losses and gradients."""
    ours_loss, tf_name = losses
    problem = make_problem(55, 2)
    problem["positive_ids"][0] = 4
    problem["positive_ids"][1, 1] = problem["positive_ids"][1, 0]
    draw = make_draw("repeats", problem, seed=8)
    theirs = tf_loss_and_grads(
        getattr(tf.nn, tf_name), problem, tf_sampled_values(draw, correct=True),
        remove_accidental_hits=True,
    )
    ours = package_loss_and_grads(
        ours_loss, problem, draw, correct=True, remove_accidental_hits=True,
        repeated_hits="tensorflow",
    )
    assert_same_loss_and_grads(ours, theirs)


# =========================================================================== accidental hits


def tf_hit_matrix(positive_ids: np.ndarray, sampled_ids: np.ndarray) -> np.ndarray:
    """``tf.nn.compute_accidental_hits`` as a dense (B, k) bool matrix."""
    rows, cols, weights = tf.nn.compute_accidental_hits(
        positive_ids, sampled_ids, num_true=positive_ids.shape[1]
    )
    assert bool(np.all(weights.numpy() == -np.finfo(np.float32).max))  # TF *adds* −FLT_MAX
    dense = np.zeros((positive_ids.shape[0], len(sampled_ids)), dtype=bool)
    dense[rows.numpy(), cols.numpy()] = True
    return dense


@pytest.mark.parametrize("num_true", [1, 2, 3])
def test_accidental_hits_tensorflow_mode_is_tf_compute_accidental_hits(num_true):
    """``accidental_hits(..., repeated_hits="tensorflow")`` marks exactly the (row, column)
    pairs ``tf.nn.compute_accidental_hits`` returns: a column is a hit when its id is one of
    the row's true ids *and* it is the last column holding that id (TF maps each sampled id
    to one position). ``"mask_all"`` marks every column holding such an id: TF's hits
    spread to every copy of their id. Sampled ids repeat; a row may repeat a true id."""
    g = gen(60 + num_true)
    positive_ids = torch.randint(0, 6, (8, num_true), generator=g)
    positive_ids[0] = 2  # a true id repeated within a row
    sampled_ids = torch.randint(0, 6, (10,), generator=g)
    theirs = tf_hit_matrix(positive_ids.numpy(), sampled_ids.numpy())
    pos = positive_ids if num_true > 1 else positive_ids[:, 0]
    ours = accidental_hits(pos, sampled_ids, repeated_hits="tensorflow").numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert theirs.any() and len(set(sampled_ids.tolist())) < len(sampled_ids)
    same_id = sampled_ids.numpy()[:, None] == sampled_ids.numpy()[None, :]
    spread = (theirs.astype(int) @ same_id.astype(int)) > 0
    np.testing.assert_array_equal(accidental_hits(pos, sampled_ids).numpy(), spread)


def test_in_batch_hits_are_tfrs_remove_accidental_hits():
    """In the in-batch layout (row ``i``'s positive in column ``i``, extra columns after the
    batch), ``accidental_hits(positive_ids, candidate_ids, positive_columns=arange(B))``
    marks exactly the entries TFRS's ``RemoveAccidentalHits`` pushes down by ``MIN_FLOAT``:
    every other column with the row's positive id, every copy (``"mask_all"``)."""
    candidate_ids = np.array([3, 1, 3, 0, 2, 3, 1, 5, 3], dtype=np.int64)
    batch = 5
    labels = tf.eye(batch, len(candidate_ids))
    logits = tf.zeros((batch, len(candidate_ids)))
    pushed = tfrs.layers.loss.RemoveAccidentalHits()(labels, logits, candidate_ids).numpy() < 0
    ours = accidental_hits(
        torch.from_numpy(candidate_ids[:batch]), torch.from_numpy(candidate_ids),
        positive_columns=torch.arange(batch),
    )
    np.testing.assert_array_equal(ours.numpy(), pushed)
    assert pushed.sum() == 7


# =========================================================================== samplers

SAMPLER_SIZE, SAMPLER_K = 200, 12
ZIPF_COUNTS = 1000.0 / np.arange(1, SAMPLER_SIZE + 1)  # float32-exact enough: any counts do


def make_samplers(name: str, size: int = SAMPLER_SIZE):
    """The package's sampler and a call of TF's matching op, ``tf_op(true_classes,
    num_sampled, unique, seed)``; ``fixed_unigram`` with the package's distortion 0.75
    (TF's default is 1.0)."""
    counts = ZIPF_COUNTS[:size]
    if name == "log_uniform":
        sampler = LogUniformSampler(size)

        def tf_op(true, k, unique, seed):
            return tf.random.log_uniform_candidate_sampler(true, 1, k, unique, size, seed=seed)
    elif name == "uniform":
        sampler = UniformSampler(size)

        def tf_op(true, k, unique, seed):
            return tf.random.uniform_candidate_sampler(true, 1, k, unique, size, seed=seed)
    else:
        sampler = UnigramSampler(torch.from_numpy(counts), distortion=0.75)

        def tf_op(true, k, unique, seed):
            return tf.random.fixed_unigram_candidate_sampler(
                true, 1, k, unique, size, unigrams=counts.tolist(), distortion=0.75, seed=seed
            )
    return sampler, tf_op


def count_rtol(name: str, expected_count: np.ndarray, size: int) -> float:
    """Relative float32 tolerance between TF's expected counts and the package's.

    TF computes in float32 (the log-uniform probability in double, then rounded), a few
    roundings: 8 eps. The package returns ``log Q`` rounded to float32: ``eps·|log Q|``
    relative in Q. TF's fixed unigram sums ``|V|`` float32 weights: up to ``|V|·eps``.
    """
    rtol = EPS32 * (8 + float(np.abs(np.log(expected_count)).max()))
    return rtol + (EPS32 * size if name == "unigram" else 0.0)


def all_ids(size: int) -> np.ndarray:
    return np.arange(size, dtype=np.int64)[:, None]


@pytest.mark.parametrize("name", ["log_uniform", "uniform", "unigram"])
def test_expected_counts_with_replacement_match_tensorflow(name):
    """With replacement TF and the package report ``Q = k·q``: TF's ``true_expected_count``
    for every id of the catalogue (passed as its true classes) and its
    ``sampled_expected_count`` for its own draw equal ``exp(sampler.log_q(ids, draw))`` for a
    draw of the same ``k``; so the probabilities ``q`` (log-uniform, uniform, unigram with
    distortion 0.75) are TF's."""
    sampler, tf_op = make_samplers(name)
    tf.random.set_seed(1)
    out = tf_op(all_ids(SAMPLER_SIZE), SAMPLER_K, False, 1)
    draw = sampler.sample(SAMPLER_K, generator=gen(1))
    theirs_true = out.true_expected_count.numpy()[:, 0].astype(np.float64)
    theirs_sampled = out.sampled_expected_count.numpy().astype(np.float64)
    ours_true = sampler.log_q(torch.arange(SAMPLER_SIZE), draw).double().exp().numpy()
    tf_ids = torch.from_numpy(out.sampled_candidates.numpy())
    ours_sampled = sampler.log_q(tf_ids, draw).double().exp().numpy()
    rtol = count_rtol(name, theirs_true, SAMPLER_SIZE)
    np.testing.assert_allclose(ours_true, theirs_true, rtol=rtol, atol=0)
    np.testing.assert_allclose(ours_sampled, theirs_sampled, rtol=rtol, atol=0)
    q = sampler.probs.double().numpy()
    np.testing.assert_allclose(theirs_true / SAMPLER_K, q, rtol=rtol + EPS32, atol=0)


def tf_num_tries(expected_count: np.ndarray, q: np.ndarray, k: int, rtol: float) -> int:
    """The ``num_tries`` behind one of TF's unique draws, read off its expected counts of
    the whole catalogue: ``k`` when they are TF's fallback ``k·q``, else the ``n`` with
    ``Q = 1 − (1 − q)^n`` at the rarest id (checked on every id by the caller)."""
    if np.allclose(expected_count, k * q, rtol=rtol, atol=0):
        return k
    j = int(np.argmin(q))
    n = math.log1p(-expected_count[j]) / math.log1p(-q[j])
    assert abs(n - round(n)) < 1e-3, n
    assert round(n) > k
    return int(round(n))


@pytest.mark.parametrize("name", ["log_uniform", "uniform", "unigram"])
def test_unique_expected_counts_are_tensorflow_s_except_its_fallback(name):
    """Unique draws: TF reports ``1 − (1 − q)^num_tries``, as the package does, except when
    no draw was rejected (``num_tries == k``), where it falls back to ``k·q`` (notation
    page, "TensorFlow's fallback, not copied"). Over 20 seeded TF draws: when TF rejected
    draws, the package's ``log_q`` for a draw with TF's ``num_tries`` equals TF's counts for
    every id; when it did not, TF reports ``k·q`` — above 1 for the log-uniform head id,
    ``k·q(0) ≈ 1.57`` — while the package reports ``1 − (1 − q)^k ≤ 1``. Both cases occur
    (the uniform sampler over 50 ids, so that its draws repeat)."""
    sampler, tf_op = make_samplers(name, size=50 if name == "uniform" else SAMPLER_SIZE)
    size = sampler.num_items
    q = sampler.probs.double().numpy()
    tf.random.set_seed(2)
    seen = {"fallback": 0, "formula": 0}
    for seed in range(20):
        out = tf_op(all_ids(size), SAMPLER_K, True, seed)
        theirs = out.true_expected_count.numpy()[:, 0].astype(np.float64)
        rtol = count_rtol(name, theirs, size)
        num_tries = tf_num_tries(theirs, q, SAMPLER_K, rtol)
        sampled = torch.from_numpy(out.sampled_candidates.numpy())
        assert len(set(sampled.tolist())) == SAMPLER_K
        draw = CandidateDraw(sampled, torch.zeros(SAMPLER_K), num_tries, True)
        ours = sampler.log_q(torch.arange(size), draw).double().exp().numpy()
        assert bool((ours <= 1).all())
        ours_sampled = sampler.log_q(sampled, draw).double().exp().numpy()
        theirs_sampled = out.sampled_expected_count.numpy().astype(np.float64)
        if num_tries > SAMPLER_K:
            seen["formula"] += 1
            np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=0)
            np.testing.assert_allclose(ours_sampled, theirs_sampled, rtol=rtol, atol=0)
        else:
            seen["fallback"] += 1
            np.testing.assert_allclose(theirs, SAMPLER_K * q, rtol=rtol, atol=0)
            np.testing.assert_allclose(ours, -np.expm1(SAMPLER_K * np.log1p(-q)), rtol=rtol)
            head = int(np.argmax(q))
            assert ours[head] < theirs[head] * (1 - 1e-3)  # the package does not copy it
            if name == "log_uniform":
                assert theirs[head] > 1.0 >= ours[head]
    assert seen["fallback"] > 0 and seen["formula"] > 0, seen


@pytest.mark.parametrize("name", ["log_uniform", "uniform", "unigram"])
def test_draws_with_replacement_follow_tensorflow_s_distribution(name):
    """The package's sampler and TF's op draw ids from the same ``q``: 20,000 draws of each,
    binned over 30 ids, give Pearson chi-squares against the exact ``n·q`` (and against
    each other) below ``df + 10·sqrt(2 df)``, ten standard deviations of the chi-square
    distribution with ``df = 29`` degrees of freedom (fixed seeds: not flaky)."""
    size, num_draws = 30, 20_000
    sampler, tf_op = make_samplers(name, size=size)
    q = sampler.probs.double().numpy()
    assert float((num_draws * q).min()) > 50  # every bin well filled
    tf.random.set_seed(3)
    theirs = tf_op(all_ids(1), num_draws, False, 3).sampled_candidates.numpy()
    ours = sampler.sample(num_draws, generator=gen(3)).ids.numpy()
    df = size - 1
    bound = df + 10 * math.sqrt(2 * df)
    observed = {}
    for who, ids in (("package", ours), ("TensorFlow", theirs)):
        counts = np.bincount(ids, minlength=size).astype(np.float64)
        observed[who] = counts
        chi2 = float((((counts - num_draws * q) ** 2) / (num_draws * q)).sum())
        assert chi2 < bound, (who, chi2, bound)
    a, b = observed["package"], observed["TensorFlow"]
    two_sample = float((((a - b) ** 2) / (a + b)).sum())  # equal sample sizes
    assert two_sample < bound, two_sample


@pytest.mark.parametrize("name", ["log_uniform", "unigram", "uniform"])
def test_unique_inclusion_frequency_audits_tensorflow_and_the_package(name):
    """The notation page's claim, with TF's own draws: over 3,000 unique TF draws of
    ``k = 5`` ids out of 50, each id's inclusion frequency is within five binomial
    standard deviations of the package's ``1 − (1 − q)^num_tries`` averaged over the draws
    (``num_tries`` read off TF's report), while TF's reported counts — ``k·q`` in the draws
    without a rejection — miss the head ids by more than five for the log-uniform and
    unigram samplers. And the package's own unique draws include every id as often as
    TF's (two-sample z below 5)."""
    # 3,000 draws: over seeds 4, 10, 13, 14, 21 and 33 the formula's largest |z| (of 50
    # ids) was 2.0-3.1 and TF's rule's 12.5-19 (at 1,200 draws: up to 4.4, and down to 6.2)
    size, k, trials = 50, 5, 3000
    sampler, tf_op = make_samplers(name, size=size)
    q = sampler.probs.double().numpy()
    tf.random.set_seed(4)
    included, reported, formula = np.zeros(size), np.zeros(size), np.zeros(size)
    for _ in range(trials):
        out = tf_op(all_ids(size), k, True, 4)
        theirs = out.true_expected_count.numpy()[:, 0].astype(np.float64)
        num_tries = tf_num_tries(theirs, q, k, count_rtol(name, theirs, size))
        included[out.sampled_candidates.numpy()] += 1
        reported += theirs
        formula += -np.expm1(num_tries * np.log1p(-q))
    included, reported, formula = included / trials, reported / trials, formula / trials
    sigma = np.sqrt(formula * (1 - formula) / trials)
    assert float(np.abs((included - formula) / sigma).max()) < 5
    tf_rule = float(np.abs((included - reported) / sigma).max())
    if name != "uniform":
        assert tf_rule > 5, tf_rule
    g = gen(4)
    ours = np.zeros(size)
    for _ in range(trials):
        ours[sampler.sample(k, unique=True, generator=g).ids.numpy()] += 1
    ours /= trials
    pooled = np.sqrt((ours * (1 - ours) + included * (1 - included)) / trials)
    assert float(np.abs((ours - included) / pooled).max()) < 5


def test_unique_uniform_num_tries_follow_tensorflow():
    """The unique uniform sampler with ``4k > |V|`` takes a random permutation and draws
    ``num_tries`` from the coupon-collector distribution instead of drawing one id at a
    time (the samplers module). TF draws one at a time: over 400 draws of ``k = 20`` out
    of 50, the mean ``num_tries`` of TF (read off its expected counts) and of the package
    are both within five standard errors of the exact mean ``Σ_{i<k} n/(n − i)``."""
    size, k, trials = 50, 20, 400
    sampler, tf_op = make_samplers("uniform", size=size)
    q = np.full(size, 1.0 / size)
    tf.random.set_seed(5)
    theirs = []
    for _ in range(trials):
        counts = tf_op(all_ids(size), k, True, 5).true_expected_count.numpy()[:, 0]
        counts = counts.astype(np.float64)
        theirs.append(tf_num_tries(counts, q, k, count_rtol("uniform", counts, size)))
    g = gen(5)
    ours = [sampler.sample(k, unique=True, generator=g).num_tries for _ in range(trials)]
    i = np.arange(k)
    mean = float((size / (size - i)).sum())
    std_error = math.sqrt(float(((i / size) / (1 - i / size) ** 2).sum()) / trials)
    for who, tries in (("TensorFlow", theirs), ("package", ours)):
        assert abs(np.mean(tries) - mean) < 5 * std_error, (who, np.mean(tries), mean)


def test_learned_unigram_is_a_unigram_over_one_plus_the_seen_counts():
    """TF's ``learned_unigram_candidate_sampler`` has no package twin; its expected counts
    are a fixed unigram's: before its ``t``-th call it draws from counts ``1 + `` the true
    classes of the calls before (it updates after sampling), distortion 1. So a package
    ``UnigramSampler(1 + seen, distortion=1.0)`` reports TF's ``k·q`` for every id."""
    size, k = 7, 4
    true_classes = np.array([[0], [0], [3], [5], [3], [0]], dtype=np.int64)
    catalogue = np.concatenate([true_classes, all_ids(size)])  # trues, then every id
    tf.random.set_seed(86_753)  # a fresh kernel: the op keeps its counts per seed
    seen = np.zeros(size)
    for _ in range(3):
        out = tf.random.learned_unigram_candidate_sampler(catalogue, 1, k, False, size, seed=9)
        theirs = out.true_expected_count.numpy()[len(true_classes):, 0].astype(np.float64)
        sampler = UnigramSampler(torch.from_numpy(1.0 + seen), distortion=1.0)
        draw = sampler.sample(k, generator=gen(0))
        ours = sampler.log_q(torch.arange(size), draw).double().exp().numpy()
        np.testing.assert_allclose(ours, theirs, rtol=count_rtol("unigram", theirs, size))
        seen += np.bincount(catalogue[:, 0], minlength=size)


# =========================================================================== TF Recommenders


def float32_bound(query, embeddings, log_q, temperature, sample_weight) -> tuple[float, float]:
    """Bounds on |TFRS in float32 − the exact loss| and on its gradients' entries.

    A logit ``u·v/τ − log Q`` in float32 is off by at most ``γ_{d+2}·a`` with
    ``a = Σ_k |u_k v_k|/τ + |log Q|`` (Higham's dot-product bound; ``γ_n ≈ n·eps``); the
    log-sum-exp over ``C`` columns and the cross-entropy add ``(C + 4)·eps·(1 + max a)``.
    So row ``i`` is off by ``(d + C + 8)·eps·(1 + max_j a_ij)`` and the weighted sum by the
    weighted sum of those, plus ``B·eps·|loss|`` for the sum itself. A gradient entry is a
    sum of ``(p − y)·v/τ`` (or ``·u/τ``): the probabilities are off by twice the logit
    error, relative, times the largest ``Σ |v|/τ``.
    """
    batch, dim = query.shape
    num_cols = embeddings.shape[0]
    a = np.abs(query) @ np.abs(embeddings).T / temperature
    if log_q is not None:
        a = a + np.abs(log_q)[None, :]
    per_row = (dim + num_cols + 8) * EPS32 * (1 + a.max(1))
    w = np.ones(batch) if sample_weight is None else sample_weight
    loss_bound = float((w * per_row).sum())
    scale = (np.abs(embeddings).sum(0).max() + np.abs(query).sum(0).max()) / temperature
    grad_bound = float(2 * per_row.max() * w.max() * scale)
    return loss_bound, grad_bound


def tfrs_retrieval(query, embeddings, candidate_ids, *, probability=None, sample_weight=None,
                   score_mask=None, loss=None, **options) -> tuple:
    """``tfrs.tasks.Retrieval(**options)(...)`` in float32 (metrics off), and its gradients
    with respect to the query and candidate embeddings."""
    task = tfrs.tasks.Retrieval(loss=loss, **options)
    q = tf.Variable(query.astype(np.float32))
    c = tf.Variable(embeddings.astype(np.float32))
    with tf.GradientTape() as tape:
        value = task(
            q, c,
            sample_weight=None if sample_weight is None else sample_weight.astype(np.float32),
            candidate_sampling_probability=(
                None if probability is None else probability.astype(np.float32)
            ),
            candidate_ids=candidate_ids, compute_metrics=False, score_mask=score_mask,
        )
    g_q, g_c = tape.gradient(value, [q, c])
    return float(value.numpy()), g_q.numpy(), g_c.numpy()


def retrieval_batch(seed: int, num_extra: int, *, batch: int = 6, dim: int = 4) -> dict:
    """float32-representable inputs of one TFRS call: ``query`` (B, d), ``embeddings``
    (B + B', d) — the positives, then ``B'`` extra negatives — ``candidate_ids`` with
    duplicates within the batch and among the extras, a sampling probability per column
    in [1e-3, 1) and ``sample_weight`` in [0, 2)."""
    rng = np.random.default_rng(seed)
    ids = np.array([3, 1, 3, 0, 2, 1, 3, 7, 1, 9], dtype=np.int64)[: batch + num_extra]
    return {
        "query": rng.normal(size=(batch, dim)).astype(np.float32).astype(np.float64),
        "embeddings": rng.normal(size=(batch + num_extra, dim))
        .astype(np.float32).astype(np.float64),
        "candidate_ids": ids,
        "probability": rng.uniform(1e-3, 1.0, size=batch + num_extra)
        .astype(np.float32).astype(np.float64),
        "sample_weight": rng.uniform(0.0, 2.0, size=batch).astype(np.float32).astype(np.float64),
    }


def package_sets(data: dict, log_q) -> tuple:
    """The in-batch contract: ``positives`` = the first ``B`` columns, ``candidates`` = the
    extras (None when there are none); float64 embeddings that require a gradient."""
    batch = data["query"].shape[0]
    emb = torch.tensor(data["embeddings"], dtype=D64, requires_grad=True)
    ids = torch.from_numpy(data["candidate_ids"])
    lq = None if log_q is None else torch.tensor(log_q, dtype=D64)
    positives = CandidateSet(emb[:batch], ids[:batch], None if lq is None else lq[:batch])
    candidates = None
    if len(ids) > batch:
        candidates = CandidateSet(emb[batch:], ids[batch:], None if lq is None else lq[batch:])
    return emb, positives, candidates


@pytest.mark.parametrize("use_probability", [True, False], ids=["log_q", "no_log_q"])
@pytest.mark.parametrize("use_weight", [True, False], ids=["weighted", "unweighted"])
@pytest.mark.parametrize("num_extra", [0, 3])
@pytest.mark.parametrize("remove_accidental_hits", [False, True], ids=["keep", "remove"])
@pytest.mark.parametrize("temperature", [None, 0.5])
def test_in_batch_softmax_loss_matches_tfrs_retrieval(
    temperature, remove_accidental_hits, num_extra, use_weight, use_probability
):
    """``in_batch_softmax_loss(reduction="sum")`` is ``tfrs.tasks.Retrieval``'s loss (a
    ``CategoricalCrossentropy`` with ``Reduction.SUM``), and its gradients with respect to
    the query and the candidate embeddings are TFRS's, within the float32 bound: TFRS's
    options set the same way (temperature, ``remove_accidental_hits`` — the package's
    default, None, keeps the batch's copies as TFRS's False does, and removes the hits of
    hand-built extra columns, a fixed set — ``sample_weight``, ``candidate_sampling_probability`` p as
    ``log_q = log p``, extra candidate rows after the batch). ``reduction="mean"`` is the
    sum over ``B`` (notation page, "Sign and reduction"), and the same task built with
    Keras' ``SUM_OVER_BATCH_SIZE`` loss gives it too."""
    defaults = inspect.signature(tfrs.tasks.Retrieval).parameters
    assert defaults["remove_accidental_hits"].default is False  # "TFRS's default is off"
    assert inspect.signature(in_batch_softmax_loss).parameters[
        "remove_accidental_hits"].default is None  # by source: the batch's copies kept
    data = retrieval_batch(70 + num_extra, num_extra)
    weight = data["sample_weight"] if use_weight else None
    probability = data["probability"] if use_probability else None
    tfrs_options = {"temperature": temperature, "remove_accidental_hits": remove_accidental_hits}
    theirs, g_query, g_emb = tfrs_retrieval(
        data["query"], data["embeddings"], data["candidate_ids"], probability=probability,
        sample_weight=weight, **tfrs_options,
    )
    tau = 1.0 if temperature is None else temperature
    log_q = None if probability is None else np.log(probability)
    emb, positives, candidates = package_sets(data, log_q)
    query = torch.tensor(data["query"], requires_grad=True)
    options = {
        "temperature": tau, "remove_accidental_hits": remove_accidental_hits,
        "sample_weight": None if weight is None else torch.from_numpy(weight),
    }
    ours = in_batch_softmax_loss(query, positives, candidates, reduction="sum", **options)
    ours.backward()
    loss_bound, grad_bound = float32_bound(data["query"], data["embeddings"], log_q, tau, weight)
    loss_bound += len(data["query"]) * EPS32 * abs(theirs)
    assert abs(ours.item() - theirs) <= loss_bound, (ours.item(), theirs, loss_bound)
    np.testing.assert_allclose(query.grad.numpy(), g_query, rtol=0, atol=grad_bound)
    np.testing.assert_allclose(emb.grad.numpy(), g_emb, rtol=0, atol=grad_bound)
    batch = len(data["query"])
    mean = in_batch_softmax_loss(query, positives, candidates, reduction="mean", **options)
    mean = mean.item()
    assert abs(mean * batch - theirs) <= loss_bound
    keras_mean = tf.keras.losses.CategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE
    )
    theirs_mean = tfrs_retrieval(
        data["query"], data["embeddings"], data["candidate_ids"], probability=probability,
        sample_weight=weight, loss=keras_mean, **tfrs_options,
    )[0]
    assert abs(mean - theirs_mean) <= loss_bound / batch
    if not num_extra and not remove_accidental_hits:  # the defaults agree on the batch
        default = in_batch_softmax_loss(
            query, positives, candidates, reduction="sum",
            **{k: v for k, v in options.items() if k != "remove_accidental_hits"},
        )
        assert abs(default.item() - theirs) <= loss_bound


# k = 0 leaves TFRS's cross-entropy one column; Keras warns about it
@pytest.mark.filterwarnings("ignore:In loss categorical_crossentropy:SyntaxWarning")
@pytest.mark.parametrize("remove_accidental_hits", [False, True], ids=["keep", "remove"])
@pytest.mark.parametrize("num_hard_negatives", [0, 1, 3, 100])
def test_hard_negative_softmax_loss_matches_tfrs_num_hard_negatives(
    num_hard_negatives, remove_accidental_hits
):
    """``hard_negative_softmax_loss(num_hard_negatives=k)`` is ``Retrieval(num_hard_negatives
    =k)``: the positive and the ``k`` highest corrected logits, after temperature, log Q and
    hit removal; ``k = 0`` keeps only the positive (loss 0, TFRS's code, not its
    docstring), ``k`` beyond the columns keeps them all. Extra candidates, weights, log Q
    and τ = 0.5 included; values and gradients within the float32 bound."""
    data = retrieval_batch(80, 3)
    weight, probability = data["sample_weight"], data["probability"]
    theirs, g_query, g_emb = tfrs_retrieval(
        data["query"], data["embeddings"], data["candidate_ids"], probability=probability,
        sample_weight=weight, temperature=0.5, num_hard_negatives=num_hard_negatives,
        remove_accidental_hits=remove_accidental_hits,
    )
    emb, positives, candidates = package_sets(data, np.log(probability))
    query = torch.tensor(data["query"], requires_grad=True)
    ours = hard_negative_softmax_loss(
        query, positives, candidates, temperature=0.5, num_hard_negatives=num_hard_negatives,
        remove_accidental_hits=remove_accidental_hits, sample_weight=torch.from_numpy(weight),
        reduction="sum",
    )
    ours.backward()
    ours = ours.item()
    loss_bound, grad_bound = float32_bound(
        data["query"], data["embeddings"], np.log(probability), 0.5, weight
    )
    loss_bound += len(data["query"]) * EPS32 * abs(theirs)
    assert abs(ours - theirs) <= loss_bound, (ours, theirs, loss_bound)
    np.testing.assert_allclose(query.grad.numpy(), g_query, rtol=0, atol=grad_bound)
    np.testing.assert_allclose(emb.grad.numpy(), g_emb, rtol=0, atol=grad_bound)
    if num_hard_negatives == 0:
        assert ours == 0.0 and theirs == 0.0


@pytest.mark.parametrize("remove_accidental_hits", [True, False], ids=["remove", "keep"])
@pytest.mark.parametrize("unique", [False, True])
def test_retrieval_loss_module_matches_tfrs_with_mixed_negatives(unique, remove_accidental_hits):
    """``RetrievalLoss(item_probabilities=p, sampler, num_samples=B')`` is TFRS's
    ``Retrieval`` given the same ``B + B'`` candidate rows and, as its
    ``candidate_sampling_probability``, the mixture ``Q*/(B + B')`` with
    ``Q* = B·p(y) + (the extras' expected count)`` — the notation page's "mixture" form,
    the same loss as the package's expected count ``Q*`` (constant factor), and inside
    TFRS's clip range [1e-6, 1]. ``reduction="sum"`` with ``sample_weight``, τ = 0.5."""
    num_items, batch, num_samples, dim = 10, 6, 4, 4
    rng = np.random.default_rng(90)
    table = torch.tensor(rng.normal(size=(num_items, dim)).astype(np.float32), dtype=D64)
    counts = torch.tensor(rng.integers(1, 20, size=num_items), dtype=D64)
    p = (counts / counts.sum()).float()
    positive_ids = torch.tensor([3, 1, 3, 0, 2, 1])
    query = torch.tensor(rng.normal(size=(batch, dim)).astype(np.float32), dtype=D64)
    weight = torch.tensor(rng.uniform(0, 2, size=batch).astype(np.float32), dtype=D64)
    sampler = LogUniformSampler(num_items)
    encoded = []

    def item_encoder(ids):
        encoded.append(ids)
        return table[ids]

    task = RetrievalLoss(
        temperature=0.5, item_probabilities=p, sampler=sampler, num_samples=num_samples,
        unique=unique, remove_accidental_hits=remove_accidental_hits, reduction="sum",
    )
    ours = task(query, table[positive_ids], positive_ids, item_encoder=item_encoder,
                sample_weight=weight, generator=gen(9))
    draw = sampler.sample(num_samples, unique=unique, generator=gen(9))  # the module's draw
    assert torch.equal(encoded[0], draw.ids)
    ids = torch.cat([positive_ids, draw.ids])
    r = sampler.probs.double()[ids]
    extra = -torch.expm1(draw.num_tries * torch.log1p(-r)) if unique else num_samples * r
    mixture = ((batch * p.double()[ids] + extra) / (batch + num_samples)).numpy()
    embeddings = table[ids].numpy()
    theirs = tfrs_retrieval(
        query.numpy(), embeddings, ids.numpy(), probability=mixture,
        sample_weight=weight.numpy(), temperature=0.5,
        remove_accidental_hits=remove_accidental_hits,
    )[0]
    # the package rounds log Q* to float32: eps·|log Q*| more per logit, inside the bound
    bound = float32_bound(query.numpy(), embeddings, np.log(mixture * (batch + num_samples)),
                          0.5, weight.numpy())[0] + batch * EPS32 * abs(theirs)
    assert abs(float(ours) - theirs) <= bound, (float(ours), theirs, bound)


def test_candidate_set_mask_matches_tfrs_score_mask():
    """A per-row ``CandidateSet.mask`` (True = valid) on the extra columns removes what
    TFRS's ``score_mask`` (False = not considered) removes: the same loss."""
    data = retrieval_batch(100, 3)
    batch = len(data["query"])
    rng = np.random.default_rng(100)
    keep_extra = rng.uniform(size=(batch, 3)) < 0.5
    score_mask = np.concatenate([np.ones((batch, batch), dtype=bool), keep_extra], axis=1)
    theirs = tfrs_retrieval(data["query"], data["embeddings"], data["candidate_ids"],
                            probability=data["probability"], score_mask=score_mask)[0]
    emb, positives, candidates = package_sets(data, np.log(data["probability"]))
    candidates = candidates.with_mask(torch.from_numpy(keep_extra))
    ours = in_batch_softmax_loss(torch.from_numpy(data["query"]), positives, candidates,
                                 remove_accidental_hits=False, reduction="sum").item()
    bound = float32_bound(data["query"], data["embeddings"], np.log(data["probability"]),
                          1.0, None)[0] + batch * EPS32 * abs(theirs)
    assert abs(ours - theirs) <= bound
    assert not keep_extra.all() and keep_extra.any()


def test_tfrs_clips_the_sampling_probability_the_package_does_not():
    """TFRS subtracts ``log clip(p, 1e-6, 1)`` (``SamplingProbablityCorrection``); the
    package subtracts the log Q it is given. The two agree for ``p`` in [1e-6, 1] (the other
    tests) and part outside it: with a column at ``p = 1e-8`` and one expected count above 1,
    TFRS's loss equals the package's with the clipped log Q, not the exact one. (The
    notation page does not mention the clip; chapter 4's "Clipping q at 1e-6" discusses it
    without naming TFRS.)"""
    data = retrieval_batch(110, 3)
    probability = data["probability"].copy()
    probability[-1] = 1e-8  # a tail extra
    probability[0] = 3.0  # an expected count B·p > 1, passed as a "probability"
    theirs = tfrs_retrieval(data["query"], data["embeddings"], data["candidate_ids"],
                            probability=probability)[0]
    batch = len(data["query"])

    def package(log_q):
        _, positives, candidates = package_sets(data, log_q)
        return in_batch_softmax_loss(torch.from_numpy(data["query"]), positives, candidates,
                                     remove_accidental_hits=False, reduction="sum").item()

    clipped = np.log(np.clip(probability, 1e-6, 1.0))
    bound = float32_bound(data["query"], data["embeddings"], clipped, 1.0, None)[0]
    bound += batch * EPS32 * abs(theirs)
    assert abs(package(clipped) - theirs) <= bound
    assert abs(package(np.log(probability)) - theirs) > 100 * bound


# =========================================================================== metrics, Keras


def test_hit_rate_is_tfrs_factorized_top_k_accuracy():
    """``hit_rate@K`` is TF Recommenders' factorized top-K categorical accuracy (the metrics
    module says so): TFRS's ``FactorizedTopK`` over a brute-force index of the catalogue,
    score-based (no ids), gives the same share for every K. Integer embeddings make every
    score exact in float32 and make ties common: both count a tie in the positive's
    favour (TFRS through ``in_top_k``, the package's rank "strictly higher")."""
    rng = np.random.default_rng(120)
    num_items, num_pairs, ks = 20, 30, (1, 3, 5, 10)
    items = rng.integers(-2, 3, size=(num_items, 3)).astype(np.float32)
    queries = rng.integers(-2, 3, size=(num_pairs, 3)).astype(np.float32)
    positive_ids = rng.integers(0, num_items, size=num_pairs)
    index = tfrs.layers.factorized_top_k.BruteForce().index(items)
    metric = tfrs.metrics.FactorizedTopK(candidates=index, ks=ks)
    metric.update_state(queries, items[positive_ids])
    theirs = [float(m.result()) for m in metric._top_k_metrics]  # one Mean per K, in order
    ours = retrieval_metrics(
        torch.from_numpy(queries).double(), torch.from_numpy(items).double(),
        torch.arange(num_pairs), torch.from_numpy(positive_ids), ks=ks,
    )
    for k, value in zip(ks, theirs):
        assert abs(ours[f"hit_rate@{k}"] - value) <= EPS32, (k, ours[f"hit_rate@{k}"], value)
    assert len(set(theirs)) > 1


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")  # torch's Adagrad
@pytest.mark.parametrize("sparse", [True, False])
def test_make_optimizer_with_a_tenth_reproduces_keras_adagrad(sparse):
    """Two Keras defaults the book copies for TF Recommenders (notation page,
    "Initialisation and optimisers"): ``Embedding`` tables start as ``RandomUniform(−0.05,
    0.05)``, and Keras's ``Adagrad`` starts its accumulator at 0.1, so
    ``make_optimizer(model, "adagrad", lr, initial_accumulator_value=0.1)`` follows it:
    three steps on an embedding table (sparse and dense gradients, a repeated id) agree
    with Keras within the one remaining difference, the epsilon (Keras
    ``lr·g/sqrt(acc + 1e-7)``, PyTorch ``lr·g/(sqrt(acc) + 1e-10)``), at most
    ``lr·|g|·(1e-7/(2·acc^1.5) + 1e-10/acc)`` per step with ``acc ≥ 0.1``."""
    config = tf.keras.layers.Embedding(10, 4).embeddings_initializer.get_config()
    assert (config["minval"], config["maxval"]) == (-0.05, 0.05)
    lr, steps = 0.1, 3
    rng = np.random.default_rng(130)
    table = rng.uniform(-0.05, 0.05, size=(6, 3))
    ids, weights = np.array([1, 3, 1, 4]), rng.normal(size=(4, 3))
    theirs = tf.Variable(table)
    keras = tf.keras.optimizers.Adagrad(learning_rate=lr)
    assert keras.get_config()["initial_accumulator_value"] == 0.1
    embedding = torch.nn.Embedding(6, 3, sparse=sparse, _weight=torch.tensor(table))
    ours = make_optimizer(embedding, "adagrad", lr, initial_accumulator_value=0.1)
    bound, scale = 0.0, lr * (1e-7 / (2 * 0.1**1.5) + 1e-10 / 0.1)
    for step in range(1, steps + 1):
        with tf.GradientTape() as tape:
            rows = tf.gather(theirs, ids) if sparse else tf.matmul(np.eye(6)[ids], theirs)
            loss = tf.reduce_sum(rows * weights * step)
        keras.apply_gradients([(tape.gradient(loss, theirs), theirs)])
        ours.zero_grad()
        (embedding(torch.from_numpy(ids)) * torch.from_numpy(weights) * step).sum().backward()
        grad = embedding.weight.grad
        bound += scale * float((grad.to_dense() if sparse else grad).abs().max())
        ours.step()
    difference = float(np.abs(embedding.weight.detach().numpy() - theirs.numpy()).max())
    assert difference <= bound + 1e-15, (difference, bound)
