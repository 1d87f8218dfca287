"""Test-wide settings.

Hypothesis draws its examples from a fixed seed (``derandomize``), so a CI run is
reproducible: a property that fails, fails on every run, and a green run stays green.
Set ``HYPOTHESIS_PROFILE=explore`` to search with fresh random examples locally.
"""

import os

from hypothesis import settings

settings.register_profile("reproducible", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))
