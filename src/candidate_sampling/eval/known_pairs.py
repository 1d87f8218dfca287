"""Known (user, item) pairs: the one object for "items this user has already seen".

Three jobs read the same table (chapters 5, 8 and 9):

* **metrics** remove a user's training items from the ranking of a held-out positive
  (:func:`~candidate_sampling.eval.metrics.positive_ranks`, ``top_k_items``, the sampled
  protocol) — never the positive itself;
* **baselines** rank score matrices by the same rule
  (:func:`~candidate_sampling.eval.baselines.ranks_from_scores`);
* **mining** drops known positives from a query's hard-negative candidates
  (:meth:`~candidate_sampling.scale.mining.HardNegativeMiner.mine`), where a known item is
  a false negative, not a hard one.

:class:`KnownPairs` stores each pair as the int64 key ``user · num_items + item`` in one
sorted, de-duplicated tensor. Sorted keys are sorted by user, then item, so the same tensor
is also a compressed-sparse-row table (each user's first key and count, for the users
present only, so sparse user ids cost nothing): the three questions asked of it are a
``torch.searchsorted`` ("is this (row, candidate) pair known?", (B, C) at once), a lookup of
the user's count ("how many items does this user know?") and a scatter ("set every known
item of these rows of a score matrix to −inf"), all vectorised on the table's device.
When ``num_users · num_items`` is at most ``dense_limit`` a dense bool matrix is kept too
and :meth:`KnownPairs.mask` is a plain lookup.

The "user" is whatever keys a row: a user id in chapters 5 and 9, a class label in the
digits of chapter 8 (every training image of the same class is a known positive).
"""

from __future__ import annotations

import torch

from candidate_sampling._validate import (
    check_device,
    check_ids,
    check_int_range,
    check_parallel,
    check_tensor,
    get_validate_args,
)

__all__ = ["KnownPairs"]


class KnownPairs:
    """A table of known ``(user, item)`` pairs, e.g. every training rating.

    ``user_index``: (n,) and ``item_ids``: (n,) integer tensors, one pair per entry
    (repeats count once); ``num_items``: the catalogue size |V|, items lie in
    ``[0, num_items)``; users are ``>= 0``. ``dense_limit``: keep a dense (U, |V|) bool
    matrix as well when ``U · |V|`` is at most this many entries (default 2^26, 64 MiB).
    The table lives on ``user_index``'s device; :meth:`to` moves it. Chapters 5, 8, 9.
    """

    def __init__(
        self,
        user_index: torch.Tensor,
        item_ids: torch.Tensor,
        *,
        num_items: int,
        dense_limit: int = 2**26,
    ) -> None:
        check_parallel(
            "number of pairs n", allow_empty=True, user_index=user_index, item_ids=item_ids
        )
        check_int_range("num_items", num_items, 1)
        check_int_range("dense_limit", dense_limit, 0)
        # the key user · num_items + item is unique only for ids in range (value checks)
        check_ids("item_ids", item_ids, num_items)
        if get_validate_args() and user_index.numel() and int(user_index.min()) < 0:
            raise ValueError(f"user_index must be >= 0, got {int(user_index.min())}")
        device = user_index.device
        self.num_items = num_items
        self.keys = torch.unique(user_index.long() * num_items + item_ids.to(device).long())
        self.num_users = int(self.keys[-1]) // num_items + 1 if self.keys.numel() else 0
        # CSR over the users present: sorted users, their first key and their count
        self._users, self._counts = torch.unique_consecutive(
            torch.div(self.keys, num_items, rounding_mode="floor"), return_counts=True
        )
        self._starts = torch.cumsum(self._counts, 0) - self._counts
        self._dense: torch.Tensor | None = None
        if 0 < self.num_users * num_items <= dense_limit:
            dense = torch.zeros(self.num_users * num_items, dtype=torch.bool, device=device)
            dense[self.keys] = True
            self._dense = dense.view(self.num_users, num_items)

    # ------------------------------------------------------------------ the table
    def __len__(self) -> int:
        return int(self.keys.numel())

    def __repr__(self) -> str:
        return (
            f"KnownPairs({len(self)} pairs, num_users={self.num_users}, "
            f"num_items={self.num_items}, device={self.device})"
        )

    @property
    def device(self) -> torch.device:
        return self.keys.device

    @property
    def user_index(self) -> torch.Tensor:
        """(n',) the user of every stored pair (sorted by user, then item)."""
        return torch.div(self.keys, self.num_items, rounding_mode="floor")

    @property
    def item_ids(self) -> torch.Tensor:
        """(n',) the item of every stored pair, in the order of :attr:`user_index`."""
        return self.keys % self.num_items

    def to(self, device: torch.device | str) -> KnownPairs:
        """Move the table to ``device`` (returns ``self``)."""
        device = check_device("device", device)
        self.keys = self.keys.to(device)
        self._users = self._users.to(device)
        self._counts = self._counts.to(device)
        self._starts = self._starts.to(device)
        if self._dense is not None:
            self._dense = self._dense.to(device)
        return self

    def check_catalogue(self, num_items: int, name: str = "known") -> None:
        """Raise unless the table was built for a catalogue of ``num_items`` items."""
        check_int_range("num_items", num_items, 1)
        if self.num_items != num_items:
            raise ValueError(
                f"{name} must be built for the catalogue of {num_items} items, got "
                f"{name}.num_items={self.num_items}"
            )

    def check_users(self, num_users: int, name: str = "known") -> None:
        """Raise unless every stored user lies in ``[0, num_users)`` (e.g. embedding rows)."""
        check_int_range("num_users", num_users, 0)
        if self.num_users > num_users:
            raise ValueError(
                f"{name} holds pairs of user {self.num_users - 1}, but there are only "
                f"{num_users} users"
            )

    # ------------------------------------------------------------------ questions
    def counts(self, user_index: torch.Tensor) -> torch.Tensor:
        """(B,) int64: how many known items each user of ``user_index`` (B,) has (0 if none,
        a user the table never saw or a negative index among them)."""
        check_tensor("user_index", user_index, ("B",), floating=False, allow_empty=True)
        return self._counts_of(user_index)

    def _counts_of(self, user_index: torch.Tensor) -> torch.Tensor:
        """:meth:`counts` of checked users."""
        return self._rows(user_index.to(self.device).long())[1]

    def _rows(self, users: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each user's first position in :attr:`keys` and number of known items (0 if none)."""
        if len(self) == 0:
            return torch.zeros_like(users), torch.zeros_like(users)
        pos = torch.searchsorted(self._users, users).clamp(max=self._users.numel() - 1)
        found = self._users[pos] == users
        zero = torch.zeros_like(users)
        starts = torch.where(found, self._starts[pos], zero)
        return starts, torch.where(found, self._counts[pos], zero)

    def mask(self, user_index: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        """(B, C) bool: True where ``(user_index[i], item_ids[.., j])`` is a known pair.

        ``user_index``: (B,); ``item_ids``: (C,) shared by every row or (B, C) per row.
        Items outside ``[0, num_items)`` (the ``-1`` padding of mined negatives) and users
        the table never saw (a negative index among them) are never known. Result on the
        table's device.
        """
        check_tensor("user_index", user_index, ("B",), floating=False, allow_empty=True)
        if not isinstance(item_ids, torch.Tensor) or item_ids.dim() not in (1, 2):
            got = tuple(item_ids.shape) if isinstance(item_ids, torch.Tensor) else None
            raise ValueError(f"item_ids must have shape (C,) or (B, C), got {got}")
        shape = ("C",) if item_ids.dim() == 1 else (user_index.shape[0], "C")
        check_tensor("item_ids", item_ids, shape, floating=False, allow_empty=True)
        return self._mask(user_index, item_ids)

    def _mask(self, user_index: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        """:meth:`mask` of checked arguments."""
        users = user_index.to(self.device).long()
        items = item_ids.to(self.device).long()
        if items.dim() == 1:
            items = items[None, :].expand(users.shape[0], -1)
        valid = (items >= 0) & (items < self.num_items)
        valid &= ((users >= 0) & (users < self.num_users))[:, None]
        if self.num_users == 0:
            return torch.zeros_like(valid)
        items = items.clamp(0, self.num_items - 1)
        users = users.clamp(0, self.num_users - 1)[:, None].expand_as(items)
        if self._dense is not None:
            return self._dense[users, items] & valid
        query = (users * self.num_items + items).reshape(-1)
        pos = torch.searchsorted(self.keys, query).clamp(max=len(self) - 1)
        return (self.keys[pos] == query).reshape(items.shape) & valid

    def contains(self, user_index: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        """(n,) bool: whether each pair ``(user_index[i], item_ids[i])`` is known."""
        check_parallel(
            "number of pairs n", allow_empty=True, user_index=user_index, item_ids=item_ids
        )
        return self._mask(user_index, item_ids[:, None])[:, 0]

    def fill_(
        self, scores: torch.Tensor, user_index: torch.Tensor, value: float = float("-inf")
    ) -> torch.Tensor:
        """Set ``scores[r, y] = value`` for every known item ``y`` of ``user_index[r]``, in place.

        ``scores``: (B, |V|) rows of a score matrix over the whole catalogue;
        ``user_index``: (B,) the user of each row. One scatter of the rows' CSR slices (no
        (B, |V|) mask is built). Returns ``scores``. The metrics compute the positive's
        score *before* calling it, so a known positive is never removed from its own
        ranking.
        Defaults: ``value=-inf``.
        """
        check_tensor("scores", scores, ("B", self.num_items), floating=True)
        check_tensor("user_index", user_index, (scores.shape[0],), floating=False)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"value must be a number (-inf: removed), got {value!r}")
        return self._fill(scores, user_index, value)

    def _fill(
        self, scores: torch.Tensor, user_index: torch.Tensor, value: float = float("-inf")
    ) -> torch.Tensor:
        """:meth:`fill_` of checked arguments."""
        users = user_index.to(self.device).long()
        if len(self) == 0 or users.numel() == 0:
            return scores
        start, counts = self._rows(users)
        total = int(counts.sum())
        if total == 0:
            return scores
        rows = torch.repeat_interleave(torch.arange(users.shape[0], device=self.device), counts)
        first = torch.repeat_interleave(start - (torch.cumsum(counts, 0) - counts), counts)
        cols = self.keys[first + torch.arange(total, device=self.device)] % self.num_items
        scores[rows.to(scores.device), cols.to(scores.device)] = value
        return scores


def check_known(
    known: object, num_users: int | None = None, num_items: int | None = None
) -> KnownPairs | None:
    """``known`` must be None or a :class:`KnownPairs` of this catalogue and user count."""
    if known is None:
        return None
    if not isinstance(known, KnownPairs):
        raise ValueError(
            "known must be a KnownPairs (candidate_sampling.eval.KnownPairs(user_index, "
            f"item_ids, num_items=...)), got {type(known).__name__}"
        )
    if num_items is not None:
        known.check_catalogue(num_items)
    if num_users is not None:
        known.check_users(num_users)
    return known
