"""Device choice, seeding, synchronisation and the timing helper (no timing assertions)."""

import random

import numpy as np
import pytest
import torch

import candidate_sampling
from candidate_sampling.device import (
    DEVICE_ENV_VAR,
    get_device,
    seed_everything,
    synchronize,
    time_calls,
)


def test_default_device_is_cpu_without_accelerators(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV_VAR, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert get_device() == torch.device("cpu")


def test_cuda_preferred_then_mps(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV_VAR, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert get_device() == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert get_device() == torch.device("mps")


def test_environment_variable_overrides(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(DEVICE_ENV_VAR, "cpu")
    assert get_device() == torch.device("cpu")


def test_environment_variable_bad_values(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV_VAR, "not-a-device")
    with pytest.raises(ValueError, match=DEVICE_ENV_VAR):
        get_device()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(DEVICE_ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        get_device()


def test_seed_everything_repeats_all_generators():
    seed_everything(123)
    first = (random.random(), np.random.rand(), torch.rand(3))
    gen = seed_everything(123)
    second = (random.random(), np.random.rand(), torch.rand(3))
    assert first[0] == second[0] and first[1] == second[1]
    assert torch.equal(first[2], second[2])
    assert isinstance(gen, torch.Generator) and gen.initial_seed() == 123


@pytest.mark.parametrize("bad", [-1, 1.5, "3"])
def test_seed_everything_rejects_bad_seeds(bad):
    with pytest.raises(ValueError, match="seed"):
        seed_everything(bad)


def test_synchronize_is_a_no_op_on_cpu():
    synchronize(torch.device("cpu"))


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return sum(range(100))  # a little work, so a call takes measurable time


@pytest.mark.parametrize(("repeats", "warmup"), [(1, 0), (5, 1), (3, 4)])
def test_time_calls_times_each_repeat_after_the_warmup(repeats, warmup):
    fn = Counter()
    times = time_calls(fn, device="cpu", repeats=repeats, warmup=warmup)
    assert isinstance(times, list) and len(times) == repeats
    assert all(isinstance(t, float) and t > 0 for t in times)
    assert fn.calls == warmup + repeats


def test_time_calls_defaults_and_device_arguments(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV_VAR, "cpu")
    fn = Counter()
    assert len(time_calls(fn)) == 5 and fn.calls == 6  # repeats=5, warmup=1, get_device()
    assert len(time_calls(fn, device=torch.device("cpu"), repeats=2, warmup=0)) == 2
    assert candidate_sampling.time_calls is time_calls


def test_time_calls_repeats_until_min_seconds_up_to_max_repeats():
    """min_seconds can only add calls, and never beyond max_repeats."""
    fn = Counter()
    times = time_calls(fn, device="cpu", repeats=2, warmup=0, min_seconds=3600.0, max_repeats=7)
    assert len(times) == 7 and fn.calls == 7


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_time_calls_rejects_bad_repeats(bad):
    fn = Counter()
    with pytest.raises(ValueError, match="repeats must be an int >= 1"):
        time_calls(fn, device="cpu", repeats=bad)
    assert fn.calls == 0


@pytest.mark.parametrize("bad", [-1, 0.5, False])
def test_time_calls_rejects_bad_warmup(bad):
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        time_calls(Counter(), device="cpu", warmup=bad)


def test_book_seed_is_the_seed_without_the_variable(monkeypatch):
    monkeypatch.delenv("CANDIDATE_SAMPLING_SEED", raising=False)
    assert candidate_sampling.seed_offset() == 0
    assert [candidate_sampling.book_seed(s) for s in (0, 3, 42)] == [0, 3, 42]


def test_book_seed_moves_every_seed_by_the_offset(monkeypatch):
    from candidate_sampling.device import SEED_STRIDE

    monkeypatch.setenv("CANDIDATE_SAMPLING_SEED", "2")
    assert candidate_sampling.seed_offset() == 2
    assert candidate_sampling.book_seed(5) == 5 + 2 * SEED_STRIDE
    lowest_of_offset_2 = candidate_sampling.book_seed(0)
    # seeds below the stride never collide across offsets: offset 1's highest < offset 2's lowest
    monkeypatch.setenv("CANDIDATE_SAMPLING_SEED", "1")
    assert candidate_sampling.book_seed(SEED_STRIDE - 1) < lowest_of_offset_2


@pytest.mark.parametrize("raw", ["-1", "one", "1.5"])
def test_seed_offset_rejects_bad_values_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("CANDIDATE_SAMPLING_SEED", raw)
    with pytest.raises(ValueError, match="CANDIDATE_SAMPLING_SEED must be a non-negative"):
        candidate_sampling.book_seed(0)


@pytest.mark.parametrize("seed", [-1, 1.0, True])
def test_book_seed_rejects_bad_seeds(seed):
    with pytest.raises(ValueError, match="seed must be"):
        candidate_sampling.book_seed(seed)


def test_float64_helpers_name_their_bad_argument():
    from candidate_sampling import exact_float64, float64_or_float32, has_float64

    assert has_float64("cpu") and has_float64(torch.device("cuda", 1))
    assert not has_float64("mps") and float64_or_float32("mps") == torch.float32
    assert float64_or_float32("cpu") == torch.float64
    for bad in (3, None, "nonsense"):
        with pytest.raises(ValueError, match="device"):
            has_float64(bad)
    with pytest.raises(ValueError, match="tensor"):
        exact_float64([1.0, 2.0])
    out = exact_float64(torch.tensor([1, 2]))
    assert out.dtype == torch.float64 and out.tolist() == [1.0, 2.0]
