"""Fixtures of the fake-agent tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import Fake


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Fake]:
    """A fake-agent runner rooted in a fresh temporary directory."""
    return Fake(tmp_path)
