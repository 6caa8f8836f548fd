"""What a real ``weft run`` leaves on disk is private to the user (``weft.filemodes``).

Each test runs ``python -m weft run`` on a small hank under the permissive
umask ``022`` and walks the execution folder: Weft's own files and folders
are ``0600`` and ``0700`` (``0640`` and ``0750`` with ``WEFT_SHARED_GROUP``),
while what the agent wrote in ``agentRoot/`` keeps the umask's ``0644``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runtime.hanks import codon, subprocess_environment, write_file, write_hank

UMASK = 0o022
GIT_REPO = Path(".weft") / "checkpoints" / ".weftcheckpoints"
"""The shadow repository: libgit2 writes its inside with its own modes (objects
0444), so its folder's mode is what keeps it private; it is checked, not walked."""


def weft_run(tmp_path: Path, **env: str) -> Path:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("notes.md", "first")),
        codon("b", write_file("more.md", "second"), mode="continue-previous"),
    )
    execution = tmp_path / "ex"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "weft",
            "run",
            str(hank),
            "--execution",
            str(execution),
            "--headless",
        ],
        env={**subprocess_environment(tmp_path), **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        umask=UMASK,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return execution


def modes_of_weft_files(execution: Path) -> dict[str, int]:
    """``relative path -> permission bits`` of the execution folder, ``.weft/``
    and everything below it (the shadow repository's inside excepted)."""
    found = {".": stat.S_IMODE(execution.stat().st_mode)}
    for folder, dirs, files in os.walk(execution / ".weft"):
        here = Path(folder)
        rel = here.relative_to(execution)
        found[str(rel)] = stat.S_IMODE(here.stat().st_mode)
        if rel == GIT_REPO:
            dirs.clear()
            continue
        for name in files:
            found[str(rel / name)] = stat.S_IMODE((here / name).lstat().st_mode)
    return found


def expect(found: dict[str, int], execution: Path, *, folder: int, file: int) -> None:
    def wanted(path: str) -> int:
        if (execution / path).is_dir():
            return folder
        # The server's tokens grant control of the run: the user's alone, shared group or not.
        return 0o600 if path.endswith(".token") else file

    wrong = {path: oct(mode) for path, mode in found.items() if mode != wanted(path)}
    assert not wrong, f"not {oct(folder)}/{oct(file)}: {wrong}"


def test_a_run_keeps_its_files_private_and_the_agents_files_as_the_umask_makes_them(
    tmp_path: Path,
) -> None:
    execution = weft_run(tmp_path)
    found = modes_of_weft_files(execution)
    # What must be there for the walk to mean something: the journal, the
    # snapshots, the lock guard, the agent logs, their folders, the repository.
    for name in (
        ".weft/weft.db",
        ".weft/server.token",
        ".weft/state.json",
        ".weft/state.json.bak",
        ".weft/execution-meta.json",
        ".weft/runtime.lock.guard",
        ".weft/runs",
        ".weft/logs",
        str(GIT_REPO),
    ):
        assert name in found, sorted(found)
    logs = [p for p in found if p.endswith("-claude.log")]
    assert len(logs) == 2, sorted(found)
    expect(found, execution, folder=0o700, file=0o600)
    assert stat.S_IMODE((execution / ".weft" / "checkpoints").stat().st_mode) == 0o700
    # The work tree is the user's project: the umask decides, not Weft.
    workspace = execution / "agentRoot"
    for name in ("notes.md", "more.md"):
        assert stat.S_IMODE((workspace / name).stat().st_mode) == 0o644
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o755


def test_the_shared_group_setting_lets_the_group_read(tmp_path: Path) -> None:
    execution = weft_run(tmp_path, WEFT_SHARED_GROUP="1")
    expect(modes_of_weft_files(execution), execution, folder=0o750, file=0o640)
    assert stat.S_IMODE((execution / "agentRoot" / "notes.md").stat().st_mode) == 0o644


@pytest.mark.parametrize("shared", ["", "1"])
def test_a_run_tightens_the_files_of_an_execution_an_older_weft_left_readable(
    tmp_path: Path, shared: str
) -> None:
    execution = weft_run(tmp_path)
    weft_dir = execution / ".weft"
    weft_dir.chmod(0o755)
    for name in ("weft.db", "state.json", "runtime.lock.guard"):
        (weft_dir / name).chmod(0o644)
    again = subprocess.run(
        [sys.executable, "-m", "weft", "run", "--execution", str(execution), "--headless"],
        env={**subprocess_environment(tmp_path), "WEFT_SHARED_GROUP": shared},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        umask=UMASK,
    )
    assert "Traceback" not in again.stderr, again.stderr
    file = 0o640 if shared else 0o600
    for name in ("weft.db", "state.json", "runtime.lock.guard"):
        assert stat.S_IMODE((weft_dir / name).stat().st_mode) == file, name
    folder = 0o750 if shared else 0o700
    assert stat.S_IMODE(weft_dir.stat().st_mode) == folder
