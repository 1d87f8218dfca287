"""The mixed-negatives training pipeline of source post 000, re-created for benchmark 4 only.

This module is deliberately *not* good code: it re-creates, operation for operation, the
way the post ("Learning RecSys through Papers Vol III – Mixed Negative Sampling") prepares
and trains a batch, so that its cost can be measured next to the package's vectorised
pipeline. It must not be imported by the package or the chapters. What it keeps:

* a torch ``Dataset`` whose ``__getitem__`` looks a user up with ``DataFrame.iloc`` and
  slices a Python list (history of up to 30 items, one label);
* a ``DataLoader`` (batch 256, ``drop_last``) with a Python ``collate_fn`` that computes
  the mixed-negative inclusion probability ``1 − (1 − η)^B (1 − γ)^{B'}`` item by item
  with dictionary look-ups and ``np.log(p + 1e-6)``, runs the duplicate check loop
  (which, as in the post, keeps every row), builds the list of allowed negatives as a
  set difference and draws B' = 256 of them with ``np.random.choice``;
* a model that hashes every item id with three salted **md5** hashes in Python, one list
  comprehension per table, creates a tensor per user and per hash, embeds, sums, appends
  a "DEFAULT" token and averages, stacks the users, and applies a small MLP; it is called
  twice per step (positives, then the shared random negatives, re-embedding the history);
* the loss: cosine similarity × 20, the log-probability list turned into a tensor and
  repeated B times, its diagonal set to 0, concatenated with the random negatives' scores,
  ``nn.CrossEntropyLoss``; Adam (lr 0.01).

Two changes, both in the post's favour, make the comparison like for like: the example
(user, label position) list is drawn once and shared by both pipelines, so they train on
the *same batches* (the post calls ``np.random.choice`` per example instead), and the
history slice starts at ``max(0, label − 30)`` (the post's negative start can give an
empty history). The device is ``get_device()`` instead of the post's hard-coded ``mps``.
"""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

TABLE_SIZE = 1000
MAX_PAD = 30
RANDOM_NEGATIVES = 256


def md5_bucket(text: str) -> int:
    """The post's hash: md5 of the string, as an integer, modulo the table size."""
    return int(hashlib.md5(text.encode("utf-8")).hexdigest(), 16) % TABLE_SIZE


class PostDataset(Dataset):
    """One example per user: (history list, [label]) looked up with ``iloc`` per item."""

    def __init__(self, user_lists: pd.DataFrame, label_positions: np.ndarray) -> None:
        self.d = user_lists
        self.label_positions = label_positions

    def __len__(self) -> int:
        return len(self.d)

    def __getitem__(self, idx):
        user_movies = self.d.iloc[idx]["movieId"]
        label_idx = int(self.label_positions[idx])
        history = user_movies[max(0, label_idx - MAX_PAD) : label_idx]
        return history, [user_movies[label_idx]]


class PostCollate:
    """The post's ``inbatch_collate`` with ``add_uniform=True`` (mixed negatives)."""

    def __init__(self, prob_counter: dict, counter: int) -> None:
        self.prob_counter = prob_counter
        self.counter = counter
        self.all_items = set(prob_counter.keys())

    def get_prob(self, movie_id) -> float:
        return self.prob_counter.get(movie_id, 0) / self.counter

    def log_probability(self, item_id, batch_size: int) -> np.float32:
        in_batch = self.get_prob(item_id)
        uniform = 1.0 / (len(self.all_items) - batch_size)
        not_as_positive = (1 - in_batch) ** batch_size
        not_as_random = (1 - uniform) ** RANDOM_NEGATIVES
        return np.log(1 - not_as_positive * not_as_random + 1e-6).astype(np.float32)

    def __call__(self, batch):
        data = [item[0] for item in batch]
        target = [item[1] for item in batch]
        log_probs = [self.log_probability(t[0], len(batch)) for t in target]
        seen = set()
        data_new, target_new, log_probs_new = [], [], []
        for k in range(len(data)):
            candidate = target[k][0]
            if candidate not in seen:
                seen.add(candidate)
            data_new.append(data[k])  # as in the post: every row is kept
            target_new.append(target[k])
            log_probs_new.append(log_probs[k])
        available = list(self.all_items - seen)
        random_sample = np.random.choice(available, replace=True, size=RANDOM_NEGATIVES).tolist()
        random_log_probs = [self.log_probability(r, len(batch)) for r in random_sample]
        return [data_new, target_new, log_probs_new, random_sample, random_log_probs]


class PostModel(nn.Module):
    """Three salted md5-hashed embedding tables, summed; history averaged; an MLP on top."""

    def __init__(
        self,
        device: torch.device,
        table_size: int = TABLE_SIZE,
        embed_dim: int = 64,
        seed: int = 182,
    ) -> None:
        super().__init__()
        self.device = device
        self.embed1 = nn.Embedding(table_size, embed_dim)
        self.embed2 = nn.Embedding(table_size, embed_dim)
        self.embed3 = nn.Embedding(table_size, embed_dim)
        rng = np.random.RandomState(seed)
        self.embeds = [(getattr(self, f"embed{k}"), int(rng.choice(100000))) for k in (1, 2, 3)]
        self.model = nn.Sequential(
            nn.Linear(embed_dim, embed_dim),
            nn.ReLU(),
            nn.Linear(embed_dim, embed_dim),
            nn.ReLU(),
            nn.Linear(embed_dim, embed_dim),
        )

    def embed(self, x, max_pad, default=False):
        out = None
        x = copy.deepcopy(x)
        if default:
            x.insert(0, "DEFAULT")
        for embedder, salt in self.embeds:
            items = [md5_bucket(str(salt) + "_" + str(k)) for k in x][:max_pad]
            embedded = embedder(torch.IntTensor(items).to(self.device))
            out = embedded if out is None else out + embedded
        return out

    def embed_stack(self, x):
        return torch.stack([self.embed(k, max_pad=len(k)) for k in x], 0)

    def _embed_transform(self, y, max_pad):
        x = self.embed(y, max_pad, default=True)
        return torch.sum(x, 0) / x.shape[0]

    def embed_and_avg(self, data, max_pad):
        return torch.stack([self._embed_transform(x, max_pad) for x in data], 0).unsqueeze(1)

    def forward(self, x):
        lhs = self.model(self.embed_and_avg(x["history"], MAX_PAD))
        rhs = self.embed_stack(x["to_rank"])
        return lhs.squeeze(1), rhs.squeeze(1)


def _cos_sim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.normalize(a, dim=1) @ F.normalize(b, dim=1).T


class PostMixedLoss(nn.Module):
    """The post's mixed-negatives loss: cosine × scale, logQ list → repeated tensor."""

    def __init__(self, device: torch.device, scale: float = 20.0) -> None:
        super().__init__()
        self.scale = scale
        self.device = device
        self.cross_entropy = nn.CrossEntropyLoss()

    def forward(self, output, log_candidate_probabilities, random_scores, log_sample_prob):
        a, b = output
        log_q = torch.as_tensor(log_candidate_probabilities).reshape(1, -1)
        log_q = log_q.repeat(a.size(0), 1).to(self.device)
        log_q.fill_diagonal_(0)
        scores = _cos_sim(a, b) * self.scale
        labels = torch.arange(0, scores.size(0), device=scores.device)
        corrected = scores - log_q
        random_a, random_b = random_scores[0], random_scores[1].squeeze(0)
        log_q_random = torch.as_tensor(log_sample_prob).reshape(1, -1)
        log_q_random = log_q_random.repeat(random_a.size(0), 1).to(self.device)
        random_sim = _cos_sim(random_a, random_b) * self.scale - log_q_random
        return self.cross_entropy(torch.cat((corrected, random_sim), dim=1), labels)


def user_lists_frame(sequences: list[list[int]]) -> pd.DataFrame:
    """The post's per-user frame: one row per user, a ``movieId`` column of Python lists."""
    return pd.DataFrame({"movieId": sequences})


def label_counts(dataset: PostDataset, order: list[int], batch_size: int) -> tuple[dict, int]:
    """The post's pass over the training loader counting labels (setup, not timed)."""
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        drop_last=True,
        sampler=order,
        collate_fn=lambda batch: [[b[0] for b in batch], [b[1] for b in batch]],
    )
    prob_counter: dict = {}
    counter = 0
    for _, labels in loader:
        for item in labels:
            counter += 1
            prob_counter[item[0]] = prob_counter.get(item[0], 0) + 1
    return prob_counter, counter


def train_epoch(model, loss_fn, optimizer, loader, timings: dict | None = None) -> int:
    """The post's ``train_one_epoch`` body; returns the number of examples trained on."""
    import time

    examples = 0
    it = iter(loader)
    while True:
        start = time.perf_counter()
        try:
            inputs, labels, log_probs, random_samples, random_log_probs = next(it)
        except StopIteration:
            break
        data_done = time.perf_counter()
        optimizer.zero_grad()
        outputs = model({"history": inputs, "to_rank": labels})
        random_outputs = model({"history": inputs, "to_rank": [random_samples]})
        loss = loss_fn(outputs, log_probs, random_outputs, random_log_probs)
        loss.backward()
        optimizer.step()
        loss.item()
        if timings is not None:
            timings["data_s"] = timings.get("data_s", 0.0) + data_done - start
            timings["step_s"] = timings.get("step_s", 0.0) + time.perf_counter() - data_done
        examples += len(inputs)
    return examples
