"""Contrastive losses over a batch of embeddings (chapter 6).

* :func:`info_nce_loss` — InfoNCE (van den Oord et al. 2018): row i of a (B, B) score
  matrix is a softmax over B candidates whose positive is on the diagonal. It is the
  in-batch softmax of chapter 5 seen from the mutual-information side.
* :func:`nt_xent_loss` — NT-Xent (SimCLR): 2N views, cosine similarity / τ, each view's
  positive (its twin) against the other 2N − 2 views; the self-pair is masked out.
* :func:`nt_bxent_loss` — the binary (logistic) variant with explicit positive pairs,
  computed in log space (``softplus``), self-pairs removed by zero weights.
* :func:`supcon_loss` — supervised contrastive (Khosla et al. 2020), ``variant="out"``
  (the default) or ``"in"`` (the average over positives outside or inside the log), or
  ``"pairwise"`` (pytorch-metric-learning's per-pair form).
* :func:`soft_nearest_neighbor_loss` — Frosst, Papernot & Hinton (2019), with squared
  Euclidean or cosine distance, in log-sum-exp form; :class:`SoftNearestNeighborLoss` can
  learn its temperature.
* :func:`alignment_loss`, :func:`uniformity_loss` — Wang & Isola (2020), two properties of
  embeddings on the unit sphere, used as diagnostics in the chapter.

Conventions shared by every loss here (see the notation page, "Contrastive losses"):

* Logits are ``similarity / τ``
  (:func:`~candidate_sampling.losses.core.apply_temperature`; a float or a
  :class:`~candidate_sampling.losses.core.Temperature`, fixed or learnable). Cosine similarity is used wherever the method defines it (NT-Xent,
  NT-BXent, SupCon); InfoNCE uses the plain dot product unless ``normalize=True``.
* A self-pair is removed by :func:`~candidate_sampling.losses.core.mask_logits` (a finite
  ``finfo.min / 2``) inside a softmax, and by a zero weight inside a logistic loss. No
  ±inf ever enters a loss.
* float16 / bfloat16 inputs are computed in float32, and the loss is returned in float32.
* Rows without a positive (SupCon, soft nearest neighbour): such a row has no defined
  loss (its positive set is empty, the log of an empty sum is −∞). It gets a loss of 0
  in ``reduction="none"`` and is left out of ``"mean"``, which averages over the rows
  that do have a positive. If no row has one, ``"mean"`` returns a 0 that is still
  connected to the graph (its gradient is zero), so a training step does not crash.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from candidate_sampling._validate import (
    check_bool,
    check_choice,
    check_ids,
    check_positive,
    check_reduction,
    check_same,
    check_tensor,
    common_float_dtype,
    get_validate_args,
)
from candidate_sampling.losses.core import (
    Temperature,
    check_sample_weight,
    _Loss,
    apply_temperature,
    logistic_terms,
    mask_logits,
    mask_value,
    _positive_column_cross_entropy,
    reduce_loss,
    upcast,
)
from candidate_sampling.losses.hard_negatives import (
    MULTI_POSITIVE_VARIANTS,
    multi_positive_cross_entropy,
)

__all__ = [
    "InfoNCELoss",
    "NTBXentLoss",
    "NTXentLoss",
    "SoftNearestNeighborLoss",
    "SupConLoss",
    "alignment_loss",
    "info_nce_loss",
    "nt_bxent_loss",
    "nt_xent_loss",
    "pairwise_cosine_similarity",
    "pairwise_squared_distance",
    "soft_nearest_neighbor_loss",
    "supcon_loss",
    "uniformity_loss",
]

_DISTANCES = ("squared_euclidean", "cosine")
_SUPCON_VARIANTS = MULTI_POSITIVE_VARIANTS


def _check_embeddings(name: str, tensor: torch.Tensor) -> torch.Tensor:
    return check_tensor(name, tensor, ("n", "d"), floating=True)


def _check_pair(rows: str, **pair: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two (rows, d) embeddings whose row ``i`` is a pair, cast to their common float dtype."""
    (name_a, a), (name_b, b) = pair.items()
    check_tensor(name_a, a, (rows, "d"), floating=True)
    check_tensor(name_b, b, (rows, "d"), floating=True)
    check_same(f"batch size {rows}", **{name_a: a.shape[0], name_b: b.shape[0]})
    check_same("embedding size d", **{name_a: a.shape[1], name_b: b.shape[1]})
    dtype = common_float_dtype(**pair)
    return a.to(dtype), b.to(dtype)


def _same_label_pairs(
    embeddings: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Checks (n, d) ``embeddings`` and their (n,) class ids; returns ``(eye, same)``, both
    (n, n) bool: the self-pairs, and the pairs ``i ≠ j`` with ``labels[i] == labels[j]``."""
    _check_embeddings("embeddings", embeddings)
    check_tensor("labels", labels, ("n",), floating=False)
    if labels.dtype == torch.bool:
        raise ValueError(f"labels must be an integer tensor of class ids, got {labels.dtype}")
    check_same("number of rows n", embeddings=embeddings.shape[0], labels=labels.shape[0])
    eye = _eye(embeddings.shape[0], embeddings.device)
    return eye, (labels[:, None] == labels[None, :]) & ~eye


def _eye(n: int, device: torch.device) -> torch.Tensor:
    return torch.eye(n, dtype=torch.bool, device=device)


def pairwise_cosine_similarity(
    a: torch.Tensor, b: torch.Tensor | None = None, *, eps: float = 1e-8
) -> torch.Tensor:
    """Cosine similarity of every row of ``a`` with every row of ``b`` (default ``b = a``).

    ``a``: (n, d), ``b``: (m, d) → (n, m), entries ``a_i·b_j / (‖a_i‖ ‖b_j‖)``; a row of
    norm below ``eps`` (> 0, default 1e-8) is treated as having norm ``eps``. Half inputs
    give float32.
    """
    _check_embeddings("a", a)
    check_positive("eps", eps)
    a_n = F.normalize(upcast(a), dim=-1, eps=eps)
    if b is None:
        return a_n @ a_n.T
    _check_embeddings("b", b)
    check_same("embedding size d", a=a.shape[1], b=b.shape[1])
    b_n = F.normalize(upcast(b), dim=-1, eps=eps)
    dtype = torch.promote_types(a_n.dtype, b_n.dtype)
    return a_n.to(dtype) @ b_n.to(dtype).T


def pairwise_squared_distance(a: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """Squared Euclidean distances ``‖a_i − b_j‖²`` (default ``b = a``): (n, d), (m, d) → (n, m).

    Computed as ``‖a_i‖² + ‖b_j‖² − 2 a_i·b_j`` clamped at 0 (rounding can make it slightly
    negative); unlike ``torch.cdist(...) ** 2`` it has a finite gradient at distance 0.
    The diagonal of the ``b = a`` case is exactly 0. Half inputs give float32.
    """
    _check_embeddings("a", a)
    a_w = upcast(a)
    b_w = a_w if b is None else upcast(_check_embeddings("b", b))
    if b is not None:
        check_same("embedding size d", a=a.shape[1], b=b.shape[1])
        dtype = torch.promote_types(a_w.dtype, b_w.dtype)
        a_w, b_w = a_w.to(dtype), b_w.to(dtype)
    sq = (a_w * a_w).sum(-1)[:, None] + (b_w * b_w).sum(-1)[None, :] - 2 * a_w @ b_w.T
    sq = sq.clamp(min=0)
    if b is None:
        sq = sq.masked_fill(_eye(a.shape[0], a.device), 0.0)
    return sq


def info_nce_loss(
    query: torch.Tensor,
    key: torch.Tensor,
    *,
    temperature: float | Temperature = 1.0,
    symmetric: bool = False,
    normalize: bool = False,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """InfoNCE: row i's positive is ``key[i]``, the other B − 1 keys are its negatives.

    ``query``: (B, d), ``key``: (B, d). With scores ``S = query @ key.T`` (cosine
    similarities if ``normalize``) and logits ``S / τ``, the per-row loss is

        ℓ_i = −log( exp(S_ii/τ) / Σ_j exp(S_ij/τ) ) = logsumexp_j(S_ij/τ) − S_ii/τ,

    i.e. cross-entropy over the (B, B) logit matrix with targets ``arange(B)`` — the
    in-batch softmax of chapter 5 without a log Q correction. ``symmetric=True`` averages
    it with the key → query direction (the columns), as in CLIP. Returns the ``reduction``
    ("mean" over rows) of the (B,) losses. With the optimal critic,
    I(x; c) ≥ log B − E[loss] (chapter 6).
    Defaults: ``temperature=1.0``, ``symmetric=False``, ``normalize=False``.
    """
    query, key = _check_pair("B", query=query, key=key)
    check_reduction(reduction)
    symmetric, normalize = check_bool("symmetric", symmetric), check_bool("normalize", normalize)
    if normalize:
        scores = pairwise_cosine_similarity(query, key)
    else:
        scores = query @ key.T
    logits = apply_temperature(scores, temperature, inplace=True)  # scores: ours
    diagonal = torch.arange(logits.shape[0], device=logits.device)
    per_row = _positive_column_cross_entropy(logits, diagonal)
    if symmetric:
        per_row = 0.5 * (per_row + _positive_column_cross_entropy(logits.T, diagonal))
    return reduce_loss(per_row, reduction, sample_weight=sample_weight)


def nt_xent_loss(
    view1: torch.Tensor,
    view2: torch.Tensor,
    *,
    temperature: float | Temperature = 0.5,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """NT-Xent (SimCLR): each of the 2N views against its twin and the other 2N − 2 views.

    ``view1``, ``view2``: (N, d), row k of both are two views of example k. With
    ``z = cat(view1, view2)`` (2N, d), cosine similarities ``S`` and the self-pairs masked,

        ℓ_i = −log( exp(S_{i,p(i)}/τ) / Σ_{k≠i} exp(S_ik/τ) ),   p(i) = (i + N) mod 2N.

    Returns the ``reduction`` of the (2N,) per-view losses ("mean" averages over all 2N
    views, as SimCLR). If all 2N embeddings are identical, every ℓ_i = log(2N − 1).
    Defaults: ``temperature=0.5``.
    """
    view1, view2 = _check_pair("N", view1=view1, view2=view2)
    check_reduction(reduction)
    n = view1.shape[0]
    z = torch.cat([view1, view2], dim=0)
    logits = apply_temperature(pairwise_cosine_similarity(z), temperature, inplace=True)
    # the self-pairs are the diagonal: masked in place, without a (2N, 2N) mask
    logits = logits.fill_diagonal_(mask_value(logits.dtype))
    rows = torch.arange(2 * n, device=z.device)
    per_view = _positive_column_cross_entropy(logits, (rows + n) % (2 * n))
    return reduce_loss(per_view, reduction, sample_weight=sample_weight)


def nt_bxent_loss(
    embeddings: torch.Tensor,
    positive_pairs: torch.Tensor,
    *,
    temperature: float | Temperature = 0.5,
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """NT-BXent: a logistic loss on every (i, j ≠ i) pair, positives given explicitly.

    ``embeddings``: (n, d); ``positive_pairs``: (P, 2) integer index pairs ``(i, j)``
    meaning "j is a positive of anchor i" (directed: pass both ``(i, j)`` and ``(j, i)``
    for a symmetric relation; duplicates count once; ``i == j`` is rejected, the
    self-pair is never a term). With ``z_ij = cos(e_i, e_j) / τ``, P(i) the positives and
    N(i) the other j ≠ i,

        ℓ_i = (1/|P(i)|) Σ_{j∈P(i)} softplus(−z_ij) + (1/|N(i)|) Σ_{j∈N(i)} softplus(z_ij),

    i.e. the mean binary cross-entropy of the positive pairs plus that of the negative
    pairs, per row, as in the source post — but in log space (``softplus(−z) = −log σ(z)``)
    so nothing saturates at small τ. An empty P(i) or N(i) contributes 0. Returns the
    ``reduction`` of the (n,) row losses.
    Defaults: ``temperature=0.5``, ``reduction="mean"``.
    """
    _check_embeddings("embeddings", embeddings)
    check_tensor("positive_pairs", positive_pairs, ("P", 2), floating=False)
    check_reduction(reduction)
    n = embeddings.shape[0]
    check_ids("positive_pairs", positive_pairs, n)
    if get_validate_args() and bool((positive_pairs[:, 0] == positive_pairs[:, 1]).any()):
        raise ValueError(
            "positive_pairs must not contain self-pairs (i, i); "
            "the self-pair is removed from the loss"
        )
    eye = _eye(n, embeddings.device)
    pos = torch.zeros(n, n, dtype=torch.bool, device=embeddings.device)
    pos[positive_pairs[:, 0], positive_pairs[:, 1]] = True
    neg = ~pos & ~eye
    logits = apply_temperature(pairwise_cosine_similarity(embeddings), temperature, inplace=True)
    labels = pos.to(logits.dtype)  # 1 on a positive pair, 0 on a negative one
    terms = logistic_terms(logits, labels, removed=eye)
    pos_term = torch.where(pos, terms, 0.0).sum(1) / pos.sum(1).clamp(min=1)
    neg_term = torch.where(neg, terms, 0.0).sum(1) / neg.sum(1).clamp(min=1)
    return reduce_loss(pos_term + neg_term, reduction, sample_weight=sample_weight)


def supcon_loss(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float | Temperature = 0.1,
    variant: str = "out",
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Supervised contrastive loss (Khosla et al. 2020), ``variant`` "out", "in" or "pairwise".

    ``embeddings``: (n, d) — all views of the batch stacked; ``labels``: (n,) integer class
    ids (views of the same example share a label). With cosine logits ``z_ia = S_ia / τ``,
    A(i) = {a ≠ i}, P(i) = {p ≠ i : y_p = y_i} and ``log p_ip = z_ip − logsumexp_{a∈A(i)} z_ia``,

        L_out,i = −(1/|P(i)|) Σ_{p∈P(i)} log p_ip              (average outside the log)
        L_in,i  = −log( (1/|P(i)|) Σ_{p∈P(i)} p_ip )           (average inside the log)

    ``variant="out"`` is the default (Khosla et al.'s recommended form); ``"pairwise"`` is
    pytorch-metric-learning's ``NTXentLoss`` with several positives: each positive ``p``
    against the anchor's negatives only, ``−log(e^{z_ip} / (e^{z_ip} + Σ_{n∉P(i)}
    e^{z_in}))`` averaged over the row's positives
    (:func:`~candidate_sampling.losses.hard_negatives.multi_positive_cross_entropy`). L_in ≤
    L_out by Jensen, and L_pairwise ≤ L_out. Rows with an empty P(i) get 0 in ``"none"`` and
    are left out of ``"mean"`` (the mean over rows with a positive; 0 with a zero gradient
    if none has one). With two views and ``labels = arange(N).repeat(2)`` both variants
    equal NT-Xent. "out" is pytorch-metric-learning's ``SupConLoss`` (its default reducer
    averages over the rows with a positive too), except that PML returns 0 for the whole
    batch when no pair in it is negative (one label for all); here each row keeps Khosla et
    al.'s L_out.
    Defaults: ``temperature=0.1``, ``reduction="mean"``.
    """
    eye, pos = _same_label_pairs(embeddings, labels)
    check_choice("variant", variant, _SUPCON_VARIANTS)
    check_reduction(reduction)
    num_pos = pos.sum(1)
    logits = apply_temperature(pairwise_cosine_similarity(embeddings), temperature, inplace=True)
    logits = mask_logits(logits, eye, inplace=True)
    per_row = multi_positive_cross_entropy(logits, pos, variant=variant)
    return reduce_loss(per_row, reduction, valid=num_pos > 0, sample_weight=sample_weight)


def soft_nearest_neighbor_loss(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float | Temperature = 1.0,
    distance: str = "squared_euclidean",
    sample_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Soft nearest neighbour loss (Frosst, Papernot & Hinton 2019), in log-sum-exp form.

    ``embeddings``: (n, d), ``labels``: (n,) integer class ids. With distances ``D_ij``
    (``"squared_euclidean"`` ‖e_i − e_j‖², or ``"cosine"`` 1 − cos(e_i, e_j)) and
    temperature T,

        ℓ_i = −log( Σ_{j≠i, y_j=y_i} exp(−D_ij/T) / Σ_{k≠i} exp(−D_ik/T) )
            = logsumexp_{k≠i}(−D_ik/T) − logsumexp_{j≠i, y_j=y_i}(−D_ij/T).

    The ratio form underflows to 0/0 when every neighbour is far away; this form does not.
    ``temperature``: a float or a learnable
    :class:`~candidate_sampling.losses.core.Temperature`. A row with no other point of its class has no loss
    (the source's ratio gives log 0): it gets 0 in ``"none"`` and is left out of
    ``"mean"``, as in :func:`supcon_loss`.
    Defaults: ``temperature=1.0``, ``reduction="mean"``.
    """
    eye, same = _same_label_pairs(embeddings, labels)
    check_choice("distance", distance, _DISTANCES)
    check_reduction(reduction)
    if distance == "squared_euclidean":
        dist = pairwise_squared_distance(embeddings)
    else:
        dist = 1.0 - pairwise_cosine_similarity(embeddings)
    logits = apply_temperature(dist.neg_(), temperature, inplace=True)
    # a huge distance over a tiny T could reach −inf; keep every logit finite
    logits = logits.clamp(min=mask_value(logits.dtype))
    logits = mask_logits(logits, eye)
    per_row = torch.logsumexp(logits, dim=1) - torch.logsumexp(mask_logits(logits, ~same), dim=1)
    return reduce_loss(per_row, reduction, valid=same.any(1), sample_weight=sample_weight)


def alignment_loss(
    view1: torch.Tensor,
    view2: torch.Tensor,
    *,
    alpha: float = 2.0,
    sample_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Alignment (Wang & Isola 2020): ``mean_i ‖f_i − g_i‖^α`` of the L2-normalised rows.

    ``view1``, ``view2``: (N, d), row i of each are a positive pair; rows are normalised to
    the unit sphere first. ``alpha`` (default 2, the paper's): the power. Lower is better
    (positives close); the range is [0, 2^α]. ``sample_weight``: (N,) per-pair weights,
    the mean then ``Σ_i w_i ‖f_i − g_i‖^α / N`` as every loss of the package
    (:func:`~candidate_sampling.losses.core.reduce_loss`).
    """
    check_tensor("view1", view1, ("N", "d"), floating=True)
    check_tensor("view2", view2, ("N", "d"), floating=True)
    check_same("shape", view1=tuple(view1.shape), view2=tuple(view2.shape))
    check_positive("alpha", alpha)
    dtype = common_float_dtype(view1=view1, view2=view2)
    f = F.normalize(view1.to(dtype), dim=-1)
    g = F.normalize(view2.to(dtype), dim=-1)
    per_pair = ((f - g).pow(2).sum(-1) + 1e-12).pow(alpha / 2)
    return reduce_loss(per_pair, "mean", sample_weight=sample_weight)


def uniformity_loss(
    embeddings: torch.Tensor, *, t: float = 2.0, sample_weight: torch.Tensor | None = None
) -> torch.Tensor:
    """Uniformity (Wang & Isola 2020): ``log mean_{i<j} exp(−t ‖f_i − f_j‖²)``, normalised rows.

    ``embeddings``: (n, d) with n ≥ 2, normalised to the unit sphere first; ``t`` (default
    2, the paper's): the kernel's scale; computed with logsumexp. Lower is more uniform; a
    collapsed representation (all rows equal) gives the maximum, 0. ``sample_weight``:
    (n,) per-row weights; pair ``(i, j)`` then weighs ``w_i w_j`` in the mean,
    ``log(Σ_{i<j} w_i w_j e^{−t‖f_i − f_j‖²} / Σ_{i<j} w_i w_j)`` (all ones: the plain
    mean), and 0 when every pair weighs 0.
    """
    _check_embeddings("embeddings", embeddings)
    if embeddings.shape[0] < 2:
        raise ValueError(f"embeddings must have at least 2 rows, got {embeddings.shape[0]}")
    check_positive("t", t)
    sample_weight = check_sample_weight(sample_weight, embeddings.shape[0])
    f = F.normalize(upcast(embeddings), dim=-1)
    sq = pairwise_squared_distance(f)
    i, j = torch.triu_indices(f.shape[0], f.shape[0], offset=1, device=f.device)
    terms = -t * sq[i, j]
    if sample_weight is None:
        return torch.logsumexp(terms, dim=0) - math.log(i.numel())
    w = sample_weight.to(f.device, f.dtype)
    pair_weight = w[i] * w[j]
    some = pair_weight.sum() > 0  # else: a graph-connected 0 (every pair weighs 0)
    pair_weight = torch.where(some, pair_weight, torch.ones_like(pair_weight))
    log_mean = torch.logsumexp(terms + torch.log(pair_weight), dim=0) - torch.log(
        pair_weight.sum()
    )
    return torch.where(some, log_mean, log_mean * 0.0)


class InfoNCELoss(_Loss):
    """Module form of :func:`info_nce_loss`: ``forward(query, key, *, sample_weight=None)``.
    Defaults: ``temperature=1.0``, ``symmetric=False``, ``normalize=False``,
    ``reduction="mean"``.
    ``symmetric=True`` averages both directions, as CLIP's loss."""

    _options = ("temperature", "symmetric", "normalize", "reduction")
    _fn = staticmethod(info_nce_loss)

    def __init__(
        self,
        *,
        temperature: float | Temperature = 1.0,
        symmetric: bool = False,
        normalize: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        self.symmetric = check_bool("symmetric", symmetric)
        self.normalize = check_bool("normalize", normalize)


class NTXentLoss(_Loss):
    """Module form of :func:`nt_xent_loss`: ``forward(view1, view2, *, sample_weight=None)``.
    Defaults: ``temperature=0.5``, ``reduction="mean"``."""

    _fn = staticmethod(nt_xent_loss)

    def __init__(
        self, *, temperature: float | Temperature = 0.5, reduction: str = "mean"
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)


class NTBXentLoss(NTXentLoss):
    """Module form of :func:`nt_bxent_loss`: ``forward(embeddings, positive_pairs, *,
    sample_weight=None)``.
    Defaults: ``temperature=0.5``, ``reduction="mean"``."""

    _fn = staticmethod(nt_bxent_loss)


class SupConLoss(_Loss):
    """Module form of :func:`supcon_loss`: ``forward(embeddings, labels, *,
    sample_weight=None)``. Defaults: ``temperature=0.1``, ``variant="out"`` (Khosla et
    al.; ``"pairwise"`` is pytorch-metric-learning's form), ``reduction="mean"``."""

    _options = ("temperature", "variant", "reduction")
    _fn = staticmethod(supcon_loss)

    def __init__(
        self,
        *,
        temperature: float | Temperature = 0.1,
        variant: str = "out",
        reduction: str = "mean",
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        self.variant = check_choice("variant", variant, _SUPCON_VARIANTS)


class SoftNearestNeighborLoss(_Loss):
    """Module form of :func:`soft_nearest_neighbor_loss`, optionally learning T.

    ``temperature``: a float or a :class:`~candidate_sampling.losses.core.Temperature`
    (``Temperature(1.0, learnable=True)`` learns T; its parameter is the module's).
    ``forward(embeddings, labels, *, sample_weight=None)``.
    Defaults: ``distance="squared_euclidean"``, ``reduction="mean"``.
    """

    _options = ("temperature", "distance", "reduction")
    _fn = staticmethod(soft_nearest_neighbor_loss)

    def __init__(
        self,
        *,
        temperature: float | Temperature = 1.0,
        distance: str = "squared_euclidean",
        reduction: str = "mean",
    ) -> None:
        super().__init__(temperature=temperature, reduction=reduction)
        self.distance = check_choice("distance", distance, _DISTANCES)
