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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from candidate_sampling._validate import check_int_range, check_positive, check_tensor

__all__ = [
    "zipf_probabilities",
    "SyntheticSoftmax",
    "SyntheticBatch",
    "make_softmax_problem",
    "make_context_problem",
]


def zipf_probabilities(
    num_classes: int,
    exponent: float = 1.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Zipf law over ranks: ``p_r ∝ 1 / (r + 1)^exponent`` for r = 0 … |V|−1; shape (|V|,)."""
    check_int_range("num_classes", num_classes, 1)
    check_positive("exponent", exponent)
    ranks = torch.arange(1, num_classes + 1, device=device, dtype=torch.float64)
    return torch.softmax(-exponent * torch.log(ranks), dim=0).to(dtype)


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
    def num_classes(self) -> int:
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
        return x @ self.weights.T + self.bias

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
        context_ids, y = flat // self.num_classes, flat % self.num_classes
        return SyntheticBatch(
            query=self.contexts[context_ids], positive_ids=y, context_ids=context_ids
        )


def make_softmax_problem(
    num_classes: int,
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
    """
    check_int_range("num_classes", num_classes, 2)
    check_int_range("dim", dim, 1)
    check_positive("separation", separation)
    gen = torch.Generator().manual_seed(seed)
    means = separation * torch.randn(num_classes, dim, generator=gen, dtype=torch.float64)
    prior = zipf_probabilities(num_classes, zipf_exponent, dtype=torch.float64)
    bias = torch.log(prior) - 0.5 * (means**2).sum(dim=1)
    return SyntheticSoftmax(
        weights=means.float().to(device),
        bias=bias.float().to(device),
        prior=prior.float().to(device),
    )


def make_context_problem(
    num_classes: int,
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
    """
    check_int_range("num_classes", num_classes, 2)
    check_int_range("num_contexts", num_contexts, 1)
    check_int_range("dim", dim, 1)
    check_positive("signal", signal)
    gen = torch.Generator().manual_seed(seed)
    weights = signal * torch.randn(num_classes, dim, generator=gen)
    contexts = torch.randn(num_contexts, dim, generator=gen) / dim**0.5
    prior = zipf_probabilities(num_classes, zipf_exponent)
    return SyntheticSoftmax(
        weights=weights.to(device),
        bias=torch.log(prior).to(device),
        prior=prior.to(device),
        contexts=contexts.to(device),
    )
