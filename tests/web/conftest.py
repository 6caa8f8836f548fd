"""Fixtures of the dashboard tests: one headless Chromium per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.web.browser import artifacts_dir, chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (the test is skipped when there is none)."""
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The browser, on a blank page; a screenshot of the last page is kept
    (``<test name>-end.png``) whatever the outcome."""
    browser.get("about:blank")
    yield browser
    browser.save_screenshot(str(artifacts_dir() / f"{request.node.name}-end.png"))
