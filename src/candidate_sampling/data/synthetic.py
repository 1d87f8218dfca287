"""Synthetic softmax problems with known answers, for the theory chapters (1–4).

Two generators, both with |V| classes whose frequencies follow a Zipf law, like words or
items, and both with the exact true distribution available for comparison:

* :func:`make_softmax_problem` — continuous features. A class is drawn from the Zipf prior,
  then its features from a Gaussian around the class mean, ``x = μ_y + ε``, ε ~ N(0, I).
  Bayes' rule makes the true posterior *exactly* a linear softmax,

      P(y | x) = softmax(W* x + b*)_y,   W* = μ,   b*_y = log prior_y − ‖μ_y‖² / 2,

  and sampling costs O(d) per example whatever |V| is, so problems with 10^5–10^6 classes
  are cheap to generate.
* :func:`make_context_problem` — a finite set of contexts x_c with a table of true
  conditionals P(y | c) = softmax(W x_c + b)_y (the setting of noise-contrastive
  estimation, chapter 3). Pairs (c, y) are drawn from the joint table.

And one retrieval problem, for chapter 9:

* :func:`make_planted_retrieval` — a *planted two-tower model*: users and items have
  latent vectors, an item has a log-popularity bias, and interactions are drawn from

      P(y | u) = softmax_y(s*(u, y)),   s*(u, y) = a_u · e_y + b_y,

  so the exact P(y | u) over a catalogue of 10^5–10^6 items is known and the model family
  "free user and item embeddings with a dot product" contains the truth.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from candidate_sampling._validate import (
    check_float_dtype,
    check_ids,
    check_int_range,
    check_positive,
    check_seed,
    check_tensor,
    check_generator,
    common_float_dtype,
)
from candidate_sampling.device import exact_float64, has_float64

__all__ = [
    "PlantedRetrieval",
    "SyntheticBatch",
    "SyntheticSoftmax",
    "make_context_problem",
    "make_planted_retrieval",
    "make_softmax_problem",
    "zipf_probabilities",
]

#: Largest number of (user, item) scores held at once by the planted problem's chunks.
_PLANTED_CHUNK_ELEMENTS = 1 << 23


def zipf_probabilities(
    num_items: int,
    exponent: float = 1.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Zipf law over ranks: ``p_r ∝ 1 / (r + 1)^exponent`` for r = 0 … |V|−1; shape (|V|,).
    Defaults: ``dtype=torch.float32``."""
    check_int_range("num_items", num_items, 1)
    check_positive("exponent", exponent)
    check_float_dtype("dtype", dtype)
    # in float64 on the CPU (every device, MPS included, gets the same values), then moved
    ranks = torch.arange(1, num_items + 1, dtype=torch.float64)
    probs = torch.softmax(-exponent * torch.log(ranks), dim=0)
    return probs.to(device=device, dtype=dtype)


@dataclass(frozen=True)
class SyntheticBatch:
    """Examples drawn from a :class:`SyntheticSoftmax`: ``query: (n, d)`` features x and
    ``positive_ids: (n,)`` their classes y.

    ``context_ids: (n,)`` for a problem with a finite set of contexts, else ``None``.
    """

    query: torch.Tensor
    positive_ids: torch.Tensor
    context_ids: torch.Tensor | None = None


@dataclass(frozen=True)
class SyntheticSoftmax:
    """A softmax problem with known true parameters: ``logits(x) = x @ weights.T + bias``.

    ``weights: (|V|, d)``, ``bias: (|V|,)``, ``prior: (|V|,)`` the Zipf law the classes follow,
    ``contexts: (C, d)`` for a finite-context problem, else ``None`` (Gaussian features
    around the class means ``weights``).
    """

    weights: torch.Tensor
    bias: torch.Tensor
    prior: torch.Tensor
    contexts: torch.Tensor | None = None

    @property
    def num_items(self) -> int:
        return self.weights.shape[0]

    @property
    def dim(self) -> int:
        return self.weights.shape[1]

    @property
    def device(self) -> torch.device:
        return self.weights.device

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """True logits ``s*(x, y)`` for every class: (n, d) → (n, |V|)."""
        check_tensor("x", x, ("n", self.dim), floating=True)
        dtype = common_float_dtype(x=x, weights=self.weights)  # float16 x: scored in float32
        return x.to(dtype) @ self.weights.to(dtype).T + self.bias.to(dtype)

    def log_probs(self, x: torch.Tensor) -> torch.Tensor:
        """True ``log P(y | x)`` for every class: (n, d) → (n, |V|)."""
        return torch.log_softmax(self.logits(x), dim=-1)

    def context_log_probs(self) -> torch.Tensor:
        """The table ``log P(y | c)`` of a finite-context problem: (C, |V|)."""
        if self.contexts is None:
            raise ValueError("context_log_probs needs a problem made by make_context_problem")
        return self.log_probs(self.contexts)

    def sample(self, num_examples: int, generator: torch.Generator | None = None) -> SyntheticBatch:
        """Draw ``num_examples`` pairs (x, y) from the problem's joint distribution.

        ``generator`` must live on the problem's device (``torch.Generator(device)``).
        """
        check_int_range("num_examples", num_examples, 1)
        check_generator("generator", generator, self.device)
        if self.contexts is None:
            y = torch.multinomial(self.prior, num_examples, replacement=True, generator=generator)
            noise = torch.randn(num_examples, self.dim, device=self.device, generator=generator)
            return SyntheticBatch(query=self.weights[y] + noise, positive_ids=y)
        joint = (
            self.context_log_probs() - torch.log(torch.tensor(float(len(self.contexts))))
        ).exp()
        flat = torch.multinomial(
            joint.flatten(), num_examples, replacement=True, generator=generator
        )
        context_ids, y = flat // self.num_items, flat % self.num_items
        return SyntheticBatch(
            query=self.contexts[context_ids], positive_ids=y, context_ids=context_ids
        )


def make_softmax_problem(
    num_items: int,
    dim: int = 16,
    *,
    zipf_exponent: float = 1.0,
    separation: float = 1.0,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> SyntheticSoftmax:
    """A Zipfian classification problem whose true posterior is a linear softmax.

    Class means μ_y ~ N(0, separation² I) in ``dim`` dimensions; features x = μ_y + N(0, I).
    Larger ``separation`` makes classes easier to tell apart. Parameters are drawn on the
    CPU from ``seed`` and moved to ``device``, so a seed gives the same problem everywhere.
    Defaults: ``dim=16``, ``zipf_exponent=1.0``, ``separation=1.0``, ``seed=0``.
    """
    check_int_range("num_items", num_items, 2)
    check_int_range("dim", dim, 1)
    check_positive("separation", separation)
    gen = torch.Generator().manual_seed(check_seed(seed))
    means = separation * torch.randn(num_items, dim, generator=gen, dtype=torch.float64)
    check_positive("zipf_exponent", zipf_exponent)
    prior = zipf_probabilities(num_items, zipf_exponent, dtype=torch.float64)
    bias = torch.log(prior) - 0.5 * (means**2).sum(dim=1)
    return SyntheticSoftmax(
        weights=means.float().to(device),
        bias=bias.float().to(device),
        prior=prior.float().to(device),
    )


def make_context_problem(
    num_items: int,
    num_contexts: int,
    dim: int = 16,
    *,
    zipf_exponent: float = 1.0,
    signal: float = 1.0,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> SyntheticSoftmax:
    """A finite-context problem: contexts x_c ~ N(0, I/d), P(y | c) = softmax(W x_c + b).

    ``b`` is the log of a Zipf law and W has N(0, signal²) entries, so every context prefers
    the frequent classes and ``signal`` sets how much contexts differ from one another.
    Defaults: ``dim=16``, ``zipf_exponent=1.0``, ``signal=1.0``, ``seed=0``.
    """
    check_int_range("num_items", num_items, 2)
    check_int_range("num_contexts", num_contexts, 1)
    check_int_range("dim", dim, 1)
    check_positive("signal", signal)
    gen = torch.Generator().manual_seed(check_seed(seed))
    weights = signal * torch.randn(num_items, dim, generator=gen)
    contexts = torch.randn(num_contexts, dim, generator=gen) / dim**0.5
    check_positive("zipf_exponent", zipf_exponent)
    prior = zipf_probabilities(num_items, zipf_exponent)
    return SyntheticSoftmax(
        weights=weights.to(device),
        bias=torch.log(prior).to(device),
        prior=prior.to(device),
        contexts=contexts.to(device),
    )


@dataclass(frozen=True)
class PlantedRetrieval:
    """A planted two-tower retrieval problem with its exact ``P(y | u)`` (chapter 9).

    ``user_vectors: (U, d)`` the latent users ``a_u``, ``item_vectors: (|V|, d)`` the latent
    items ``e_y``, ``item_bias: (|V|,)`` the items' log-popularity ``b_y``, ``prior: (|V|,)``
    the Zipf law the bias was built from (item 0 the most popular). The planted score and
    distribution are

        s*(u, y) = a_u · e_y + b_y,        P(y | u) = exp s*(u, y) / Σ_{y'} exp s*(u, y').

    Users are equally likely, so an interaction ``(u, y)`` has probability
    ``P(y | u) / U`` and the marginal popularity of item ``y`` is
    ``P(y) = (1/U) Σ_u P(y | u)`` (:meth:`item_marginal`). Everything over the catalogue
    is computed in chunks of users so that at most ~8M scores exist at once.
    """

    user_vectors: torch.Tensor
    item_vectors: torch.Tensor
    item_bias: torch.Tensor
    prior: torch.Tensor

    @property
    def num_users(self) -> int:
        return self.user_vectors.shape[0]

    @property
    def num_items(self) -> int:
        return self.item_vectors.shape[0]

    @property
    def dim(self) -> int:
        return self.item_vectors.shape[1]

    @property
    def device(self) -> torch.device:
        return self.item_vectors.device

    def _chunk(self, chunk_size: int | None) -> int:
        if chunk_size is None:
            return max(1, _PLANTED_CHUNK_ELEMENTS // self.num_items)
        return check_int_range("chunk_size", chunk_size, 1)

    def two_tower(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The truth as a plain dot product: ``(U, d+1)`` and ``(|V|, d+1)`` embeddings.

        Users get ``[a_u, 1]`` and items ``[e_y, b_y]``, so ``user @ item.T = s*``. A
        two-tower model with free ``d+1``-dimensional embeddings can therefore represent
        the planted model exactly; the metrics of :mod:`candidate_sampling.eval.metrics` take
        these as an oracle's embeddings.
        """
        ones = torch.ones(self.num_users, 1, device=self.device, dtype=self.user_vectors.dtype)
        users = torch.cat([self.user_vectors, ones], dim=1)
        items = torch.cat([self.item_vectors, self.item_bias[:, None]], dim=1)
        return users, items

    def _check_users(self, user_ids: torch.Tensor) -> torch.Tensor:
        check_tensor("user_ids", user_ids, ("n",), floating=False, allow_empty=True)
        check_ids("user_ids", user_ids, self.num_users)
        return user_ids.to(self.device)

    def scores(self, user_ids: torch.Tensor) -> torch.Tensor:
        """Planted scores ``s*(u, y)`` of every item: ``user_ids (n,)`` → ``(n, |V|)``."""
        users = self._check_users(user_ids)
        return self.user_vectors[users] @ self.item_vectors.T + self.item_bias

    def log_probs(self, user_ids: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
        """Exact ``log P(y | u)`` of every item: ``user_ids (n,)`` → ``(n, |V|)`` float32.

        Computed ``chunk_size`` users at a time (default: ~8M scores per chunk); the result
        itself is ``n · |V|`` floats, so keep ``n`` small for a large catalogue.
        """
        users = self._check_users(user_ids)
        chunk = self._chunk(chunk_size)
        out = torch.empty(users.shape[0], self.num_items, device=self.device)
        for start in range(0, users.shape[0], chunk):
            rows = users[start : start + chunk]
            scores = self.user_vectors[rows] @ self.item_vectors.T + self.item_bias
            out[start : start + chunk] = torch.log_softmax(scores, dim=1)
        return out

    def item_marginal(self, *, chunk_size: int | None = None) -> torch.Tensor:
        """Exact marginal popularity ``P(y) = (1/U) Σ_u P(y | u)``: ``(|V|,)`` float64 (on
        the CPU where the device has no float64, MPS).

        Costs ``U · |V|`` scores, in chunks of users.
        """
        chunk = self._chunk(chunk_size)
        host = self.device if has_float64(self.device) else torch.device("cpu")
        total = torch.zeros(self.num_items, dtype=torch.float64, device=host)
        for start in range(0, self.num_users, chunk):
            rows = torch.arange(start, min(start + chunk, self.num_users), device=self.device)
            scores = self.user_vectors[rows] @ self.item_vectors.T + self.item_bias
            # a float32 sum of a few rows, accumulated in float64
            total += exact_float64(torch.softmax(scores, dim=1).sum(0)).to(total.device)
        return total / self.num_users

    def sample(
        self,
        num_examples: int,
        generator: torch.Generator | None = None,
        *,
        user_ids: torch.Tensor | None = None,
        chunk_size: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw interactions ``(user_ids (n,), positive_ids (n,))`` from the planted model.

        Users are uniform over ``[0, U)`` (or ``user_ids`` (n,) are given and only the items
        are drawn); each item is an exact draw from ``P(y | u)``: per chunk of distinct
        users, ``torch.multinomial`` on the softmax of their planted scores, as many draws
        as the user has examples. The cost is ``O(#distinct users · |V| · d)``, not
        ``O(n · |V|)``. ``generator`` must live on the problem's device. The pairs are
        returned in a random order.
        """
        check_generator("generator", generator, self.device)
        if user_ids is None:
            check_int_range("num_examples", num_examples, 1)
            users = torch.randint(
                self.num_users, (num_examples,), device=self.device, generator=generator
            )
        else:
            users = self._check_users(user_ids)
            if users.shape[0] != num_examples:
                raise ValueError(
                    f"user_ids must have num_examples = {num_examples} entries, "
                    f"got {users.shape[0]}"
                )
        order = torch.argsort(users, stable=True)
        sorted_users = users[order]
        distinct, counts = torch.unique_consecutive(sorted_users, return_counts=True)
        items_sorted = torch.empty_like(sorted_users)
        chunk = self._chunk(chunk_size)
        offset = 0
        for start in range(0, distinct.shape[0], chunk):
            rows, n_rows = distinct[start : start + chunk], counts[start : start + chunk]
            scores = self.user_vectors[rows] @ self.item_vectors.T + self.item_bias
            probs = torch.softmax(scores, dim=1)
            draws = torch.multinomial(
                probs, int(n_rows.max()), replacement=True, generator=generator
            )  # (c, max count): keep the first count_u draws of each row
            keep = torch.arange(draws.shape[1], device=self.device)[None, :] < n_rows[:, None]
            taken = draws[keep]
            items_sorted[offset : offset + taken.shape[0]] = taken
            offset += taken.shape[0]
        positive_ids = torch.empty_like(items_sorted)
        positive_ids[order] = items_sorted
        shuffle = torch.randperm(users.shape[0], device=self.device, generator=generator)
        if user_ids is not None:  # keep the caller's order
            return users, positive_ids
        return users[shuffle], positive_ids[shuffle]


def make_planted_retrieval(
    num_users: int,
    num_items: int,
    dim: int = 16,
    *,
    zipf_exponent: float = 1.0,
    signal: float = 1.5,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> PlantedRetrieval:
    """A planted two-tower retrieval problem with Zipf item popularity (chapter 9).

    Items ``e_y ~ N(0, I_d)``, users ``a_u ~ N(0, signal² I_d / d)``, so a user's affinity
    ``a_u · e_y`` has a standard deviation of about ``signal`` across items. The bias

        b_y = log π_y − signal² ‖e_y‖² / (2d),    π = Zipf(zipf_exponent) over ranks,

    subtracts the mean boost ``log E_u[exp(a_u · e_y)]`` an item gets from the users, so the
    marginal popularity of item ``y`` stays close to ``π_y`` (item 0 the most popular).
    Parameters are drawn on the CPU from ``seed`` (the same problem on every device) and
    moved to ``device``. Returns a :class:`PlantedRetrieval`.
    Defaults: ``dim=16``, ``zipf_exponent=1.0``, ``signal=1.5``, ``seed=0``.
    """
    check_int_range("num_users", num_users, 1)
    check_int_range("num_items", num_items, 2)
    check_int_range("dim", dim, 1)
    check_positive("zipf_exponent", zipf_exponent)
    check_positive("signal", signal)
    gen = torch.Generator().manual_seed(check_seed(seed))
    items = torch.randn(num_items, dim, generator=gen, dtype=torch.float64)
    users = (signal / dim**0.5) * torch.randn(num_users, dim, generator=gen, dtype=torch.float64)
    check_positive("zipf_exponent", zipf_exponent)
    prior = zipf_probabilities(num_items, zipf_exponent, dtype=torch.float64)
    bias = torch.log(prior) - signal**2 * (items**2).sum(1) / (2 * dim)
    return PlantedRetrieval(
        user_vectors=users.float().to(device),
        item_vectors=items.float().to(device),
        item_bias=bias.float().to(device),
        prior=prior.float().to(device),
    )
