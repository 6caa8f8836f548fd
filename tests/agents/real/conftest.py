"""Fixtures for the real-CLI suites: the pinned binaries, the mock model
servers, and per-test homes (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``).

The binaries come from ``scripts/install_test_clis.py`` (``make test`` runs it).
Without them the tests are skipped with that instruction, except when
``WEFT_REQUIRE_REAL_CLIS=1`` (``make test``, CI): then a missing binary fails.
Real CLIs take 250 MB each, so every test here runs its sessions one at a time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from scripts.install_test_clis import PINS, binaries
from tests.agents.real.mock_anthropic import AnthropicMock
from tests.agents.real.mock_openai import OpenAIMock, codex_config

import weft


def _binary(name: str) -> Path:
    found = binaries().get(name)
    if found is not None:
        return found
    pin = next(p for p in PINS if p.name == name)
    why = f"{pin.requirement} is not installed: run `python scripts/install_test_clis.py`"
    if os.environ.get("WEFT_REQUIRE_REAL_CLIS") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    """The real Claude Code 2.1.330."""
    return _binary("claude")


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The real Codex 0.163.0."""
    return _binary("codex")


@pytest.fixture(scope="module")
def anthropic() -> Iterator[AnthropicMock]:
    with AnthropicMock() as mock:
        yield mock


@pytest.fixture(scope="module")
def openai() -> Iterator[OpenAIMock]:
    with OpenAIMock() as mock:
        yield mock


@dataclass
class Homes:
    """One test's private folders: the work tree and the CLIs' homes."""

    root: Path
    work: Path
    claude_config: Path
    codex_home: Path


@pytest.fixture
def homes() -> Iterator[Homes]:
    # Outside /tmp: Codex refuses to create its PATH helpers under /tmp and
    # says so on stderr on every run.
    root = Path(tempfile.mkdtemp(prefix="weft-real-", dir="/var/tmp"))
    homes = Homes(root, root / "work", root / "claude-config", root / "codex-home")
    for p in (homes.work, homes.claude_config, homes.codex_home):
        p.mkdir(parents=True)
    yield homes
    if not os.environ.get("WEFT_KEEP_REAL_TMP"):
        shutil.rmtree(root, ignore_errors=True)


FAKE_ENV = {"PYTHONPATH": str(Path(weft.__file__).resolve().parents[1])}
"""The fakes run this checkout's code (Weft's env policy drops the parent's PYTHONPATH)."""


def claude_env(mock: AnthropicMock, homes: Homes, **extra: str) -> dict[str, str]:
    """What a Claude session gets on top of Weft's env policy."""
    return {
        "HOME": str(homes.root),
        "CLAUDE_CONFIG_DIR": str(homes.claude_config),
        "ANTHROPIC_BASE_URL": mock.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "IS_SANDBOX": "1",  # root may use bypassPermissions only in a sandbox
        "CLAUDE_CODE_MAX_RETRIES": "0",  # the default retries for about 3 minutes
        "DISABLE_AUTOUPDATER": "1",
        **extra,
    }


def codex_env(mock: OpenAIMock, homes: Homes, *, retries: int = 1, **extra: str) -> dict[str, str]:
    """What a Codex session gets; writes ``config.toml`` pointing at ``mock``."""
    (homes.codex_home / "config.toml").write_text(codex_config(mock.url, retries=retries))
    return {
        "HOME": str(homes.root),
        "CODEX_HOME": str(homes.codex_home),
        "OPENAI_API_KEY": "sk-test",
        **extra,
    }
