"""Test-wide settings.

Hypothesis draws its examples from a fixed seed (``derandomize``), so a CI run is
reproducible: a property that fails, fails on every run, and a green run stays green.
Set ``HYPOTHESIS_PROFILE=explore`` to search with fresh random examples locally.

The package's value checks are a process-wide switch
(:func:`candidate_sampling.set_validate_args`); the autouse fixture below puts it back
after every test, so a test that turns the checks off cannot leak that into the next one.
"""

import os

import pytest
from hypothesis import settings

import candidate_sampling

settings.register_profile("reproducible", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))


@pytest.fixture(autouse=True)
def _restore_validate_args():
    before = candidate_sampling.get_validate_args()
    yield
    candidate_sampling.set_validate_args(before)
