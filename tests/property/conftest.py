"""Hypothesis profiles: a quick run in `make test`, a long one under `TXSTREAM_FAULTS=long`.

No example database: a failure prints its minimal example and a `@reproduce_failure` blob,
which is what to paste into the test to rerun it; a database would only litter the checkout.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tests.support.scale import LONG

settings.register_profile(
    "short",
    max_examples=150,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=5_000,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("long" if LONG else "short")
