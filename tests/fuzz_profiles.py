"""The hypothesis profiles of the fuzz tests: `fast` by default (what CI runs in
seconds), `deep` with `HYPOTHESIS_PROFILE=deep` (many more examples). `FUZZ`
is the chosen one, a decorator. From tests/test_fuzz_fronts.py."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fast",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.register_profile(
    "deep",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile("deep" if os.environ.get("HYPOTHESIS_PROFILE") == "deep" else "fast")
