"""The `txstream_tester` fixture, registered with pytest when txstream is installed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from txstream.model.app import App
from txstream.testing import AppTester


@pytest.fixture
def txstream_tester() -> Callable[..., AppTester]:
    """`txstream_tester(app, **options)`: an `AppTester` for `app` (see its options)."""

    def make(app: App, **options: Any) -> AppTester:
        return AppTester(app, **options)

    return make
