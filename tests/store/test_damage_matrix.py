"""The damage matrix: every file under ``.weft/`` truncated, emptied, deleted or garbled.

One execution is built per module with a real ``weft run`` on the fake agent and
SIGKILLed while its third codon works (c01 and c02 completed, c03 has appended a
partial line to the covered ``log.md``), so the WAL, the shared-memory file and a
dead process's lock are all there. A second, uninterrupted execution of the same
hank gives the reference work tree. Each case copies the killed execution, damages
one file one way, runs ``weft status`` and then ``weft run`` again, and must end in
one of two ways, never in silent loss or doubled work:

* a correct resume: exit 0, c03 and c04 ran once, c01 and c02 did not run again,
  and the work tree equals the uninterrupted run's;
* a clear refusal: exit 1 or 2, one ``weft: error:`` line, no traceback, every
  file under ``.weft/`` still there with its bytes, the work tree untouched.

``weft status`` never prints a traceback. Which cases refuse is pinned below, so a
case that starts to resume (or to refuse) where it did not is noticed.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.runtime.hanks import (
    codon,
    journal,
    read_state,
    scenario,
    subprocess_environment,
    wait_for,
    workspace_files,
    write_hank,
)

from weft.checkpoints.pending import LOG_NAME
from weft.cli import main

TIMEOUT = 60.0


def append(path: str, text: str) -> str:
    """A directive making the fake agent append ``text`` to ``path``."""
    return f"@@fake:append path={path}@@{text}@@end@@\n"


def hank(directory: Path, c03: str) -> Path:
    """Four codons appending to the covered log.md; c03's prompt is a file."""
    return write_hank(
        directory,
        codon("c01", append("log.md", "line c01\n")),
        codon("c02", append("log.md", "line c02\n"), mode="continue-previous"),
        codon("c03", prompt_file="prompts/c03.md"),
        codon("c04", append("log.md", "line c04\n")),
        files={"prompts/c03.md": c03},
    )


FINAL_C03 = append("log.md", "line c03\n")


def weft(*args: str | Path, env: dict[str, str], timeout: float = TIMEOUT) -> tuple[int, str]:
    """Runs ``python -m weft``; returns (exit code, stdout + stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "weft", *map(str, args)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@dataclass(frozen=True)
class Built:
    """The killed execution (``root/ex`` with its hank in ``root/hank``) and the
    reference work tree."""

    root: Path
    reference: dict[str, str]
    env: dict[str, str]


def _running_c03(execution: Path) -> dict[str, object] | None:
    if not (execution / ".weft" / "weft.db").exists():
        return None
    log = execution / "agentRoot" / "log.md"
    if not log.exists() or "partial" not in log.read_text():
        return None
    state = read_state(execution)
    if not state["runs"]:
        return None
    record = {c["codonId"]: c for c in state["runs"][0]["codons"]}.get("c03")
    return record if record is not None and record["status"] == "running" else None


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Builds the killed execution and the uninterrupted reference once."""
    base = tmp_path_factory.mktemp("damage")
    env = subprocess_environment(base)
    reference = base / "reference"
    code, out = weft(
        "run", hank(reference / "hank", FINAL_C03), "--execution", reference / "ex",
        "--headless", env=env,
    )  # fmt: skip
    assert code == 0, out
    root = base / "killed"
    path = hank(root / "hank", append("log.md", "line c03 partial\n") + scenario("hang_after_init"))
    execution = root / "ex"
    proc = subprocess.Popen(
        [sys.executable, "-m", "weft", "run", str(path), "--execution", str(execution),
         "--headless"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        record = wait_for(lambda: _running_c03(execution), timeout=TIMEOUT, what="c03 at work")
    finally:
        proc.kill()
        proc.wait()
    # The dead run's agent is its own process group; it must not write on.
    with_pid = record.get("claudePid")
    if isinstance(with_pid, int):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(with_pid, signal.SIGKILL)
    (root / "hank" / "prompts" / "c03.md").write_text(FINAL_C03)
    for name in ("weft.db-wal", "weft.db-shm", "runtime.lock", "state.json.bak"):
        assert (execution / ".weft" / name).exists(), name
    return Built(root, workspace_files(reference / "ex"), env)


# --------------------------------------------------------------------------- the matrix

REPO = "checkpoints/.weftcheckpoints"


def _initial_commit(weft_dir: Path) -> Path:
    """The loose object of the repository's first commit (``main`` points at it;
    the checkpoints themselves are written as packs)."""
    sha = (weft_dir / REPO / "refs" / "heads" / "main").read_text().strip()
    return weft_dir / REPO / "objects" / sha[:2] / sha[2:]


TARGETS: dict[str, Callable[[Path], Path]] = {
    "state.json": lambda w: w / "state.json",
    "state.json.bak": lambda w: w / "state.json.bak",
    "weft.db": lambda w: w / "weft.db",
    "weft.db-wal": lambda w: w / "weft.db-wal",
    "weft.db-shm": lambda w: w / "weft.db-shm",
    "runtime.lock": lambda w: w / "runtime.lock",
    "execution-meta.json": lambda w: w / "execution-meta.json",
    "server.token": lambda w: w / "server.token",
    "repo HEAD": lambda w: w / REPO / "HEAD",
    "repo ref main": lambda w: w / REPO / "refs" / "heads" / "main",
    "repo initial commit": _initial_commit,
    # The run was killed after three checkpoints: they are in the checkpoint
    # log, not yet in a pack (tests/checkpoints covers damaged packs).
    "repo checkpoint log": lambda w: w / REPO / LOG_NAME,
}


def damage(path: Path, how: str) -> None:
    """Damages ``path``: cut to half, to nothing, removed, or its middle half random."""
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "delete":
        path.unlink()
    else:
        rng = random.Random(f"{path.name}-{len(data)}")
        middle = bytes(rng.randrange(256) for _ in range(max(1, len(data) // 2)))
        path.write_bytes(data[: len(data) // 4] + middle + data[len(data) // 4 + len(middle) :])


DAMAGES = ("truncate", "empty", "delete", "garble")

REFUSED = {
    # The journal lost committed events: the snapshots prove it (seq beyond the
    # end, no schema), the file is gone, or the WAL's checksum chain breaks.
    ("weft.db", "empty"),
    ("weft.db", "delete"),
    ("weft.db-wal", "truncate"),
    ("weft.db-wal", "empty"),
    ("weft.db-wal", "delete"),
    ("weft.db-wal", "garble"),
    # An unreadable lock may belong to a live process: fail closed.
    ("runtime.lock", "truncate"),
    ("runtime.lock", "empty"),
    ("runtime.lock", "garble"),
    # execution-meta.json ties the execution to its hank and data.
    *(("execution-meta.json", how) for how in DAMAGES),
    # A damaged ref, or lost commits the thread continues from.
    ("repo ref main", "truncate"),
    ("repo ref main", "empty"),
    ("repo ref main", "garble"),
    ("repo ref main", "delete"),
    ("repo initial commit", "truncate"),
    ("repo initial commit", "empty"),
    ("repo initial commit", "delete"),
    ("repo initial commit", "garble"),
    ("repo checkpoint log", "truncate"),
    ("repo checkpoint log", "empty"),
    ("repo checkpoint log", "delete"),
    ("repo checkpoint log", "garble"),
}


def files_under(directory: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


CASES = [pytest.param(target, how, id=f"{target}-{how}") for target in TARGETS for how in DAMAGES]


@pytest.mark.parametrize(("target", "how"), CASES)
def test_damage_ends_in_a_correct_resume_or_a_clear_refusal(
    built: Built, tmp_path: Path, target: str, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "case"
    shutil.copytree(built.root, root, symlinks=True)
    execution = root / "ex"
    weft_dir = execution / ".weft"
    damage(TARGETS[target](weft_dir), how)
    before = files_under(weft_dir)
    tree = workspace_files(execution)

    # In-process (it only reads): an exception escaping main() is the traceback
    # a user would see.
    assert main(["status", str(execution)]) in (0, 1, 2)
    status = capsys.readouterr()
    assert "Traceback" not in status.out + status.err

    code, out = weft(
        "run", root / "hank", "--execution", execution, "--headless", "--yes",
        env=built.env, timeout=TIMEOUT,
    )  # fmt: skip
    assert "Traceback" not in out, out
    if (target, how) in REFUSED:
        assert code in (1, 2), out
        errors = [line for line in out.splitlines() if line.startswith("weft: error:")]
        assert len(errors) == 1, out
        assert workspace_files(execution) == tree
        after = files_under(weft_dir)
        # Nothing is deleted or rewritten. SQLite may fold its WAL into weft.db
        # on close; a dead process's lock may be taken over and released; the
        # execution's meta records each opening; the checkpoint repository
        # quarantines what it cannot read (its own repairs, kept aside).
        volatile = {"weft.db", "weft.db-wal", "weft.db-shm", "runtime.lock", "execution-meta.json"}
        volatile.discard(target)
        for name, data in before.items():
            if name in volatile or name.startswith("checkpoints/"):
                continue
            assert after.get(name) == data, f"{name} changed by a refused run"
        return
    assert code == 0, out
    assert workspace_files(execution) == built.reference
    ran = [
        data["codonId"]
        for kind, data in journal(execution)
        if kind == "CodonTransitioned" and data["to"] == "completed"
    ]
    assert ran == ["c01", "c02", "c03", "c04"], ran


@pytest.mark.parametrize("lost", ["weft.db-wal", "weft.db"])
def test_after_a_refused_loss_rebuild_from_snapshot_resumes_cleanly(
    built: Built, tmp_path: Path, lost: str
) -> None:
    root = tmp_path / "case"
    shutil.copytree(built.root, root, symlinks=True)
    execution = root / "ex"
    (execution / ".weft" / lost).unlink()
    run = ("run", root / "hank", "--execution", execution, "--headless", "--yes")
    code, out = weft(*run, env=built.env)
    assert code == 1, out
    assert "weft store rebuild --from-snapshot" in out

    code, out = weft("store", "rebuild", "--from-snapshot", execution, env=built.env)
    assert code == 0, out
    assert out.startswith("Journal restored from state.json")
    code, out = weft(*run, env=built.env)
    assert code == 0, out
    assert "Traceback" not in out
    assert workspace_files(execution) == built.reference
    state = read_state(execution)
    done = [
        c["codonId"]
        for r in reversed(state["runs"])
        for c in r["codons"]
        if c["status"] == "completed"
    ]
    assert done == ["c01", "c02", "c03", "c04"]
