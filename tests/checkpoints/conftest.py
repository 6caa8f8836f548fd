"""Fixtures: a workspace, its shadow repository, with and without the change watcher."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from weft.checkpoints import CheckpointRepo


@pytest.fixture(params=[True, False], ids=["watch", "scan"])
def watch(request: pytest.FixtureRequest) -> bool:
    """Every repository test runs with inotify hints and with full comparisons."""
    return bool(request.param)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The agent's workspace (agentRoot), empty."""
    path = tmp_path / "agentRoot"
    path.mkdir()
    return path


@pytest.fixture
def git_dir(tmp_path: Path) -> Path:
    """Where the shadow repository lives."""
    return tmp_path / ".weft" / "checkpoints" / ".weftcheckpoints"


@pytest.fixture
def repo(git_dir: Path, workspace: Path, watch: bool) -> Iterator[CheckpointRepo]:
    """An open shadow repository over ``workspace``."""
    opened = CheckpointRepo.open_or_create(git_dir, workspace, watch=watch)
    try:
        yield opened
    finally:
        opened.close()
