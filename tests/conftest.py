from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# CI runs the contract's 500 examples per property; locally set HYPOTHESIS_PROFILE=dev for speed.
settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
