"""Test configuration: async tests run on uvloop; hypothesis has no deadline.

Coroutine tests are run here rather than by a plugin so that every async test
gets a fresh uvloop event loop, as Weft itself uses.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop
from hypothesis import settings

settings.register_profile("default", deadline=None)
settings.load_profile("default")


@pytest.fixture(autouse=True)
def _private_usage_windows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test its own usage-window registry: a window one test closes must
    not hold back another (the registry is the user's, shared by design)."""
    path = tmp_path_factory.mktemp("windows") / "usage-windows.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WEFT_USAGE_WINDOWS", str(path))
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs ``async def`` tests to completion on a new uvloop loop."""
    func = pyfuncitem.obj
    if not inspect.iscoroutinefunction(func):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(func(**kwargs))
    return True
