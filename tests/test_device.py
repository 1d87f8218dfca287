import random

import numpy as np
import pytest
import torch

from candidate_sampling.device import DEVICE_ENV_VAR, get_device, seed_everything, synchronize


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
