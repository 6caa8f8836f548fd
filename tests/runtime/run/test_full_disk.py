"""A full disk under ``weft run``: every trial ends cleanly, and freeing space resumes.

The execution lives on a small tmpfs (CI runs as root; without root or
``mount`` the tests are skipped with the reason). The disk is full (a) before
the run starts, (b) from a random moment of the run on (a filler thread
writes until ``ENOSPC``; seeded, so the moments repeat), or (c) because the
run itself fills it (its rig copies incompressible files). Every trial must
exit with 1 within 30 s, with no traceback and one line that names what could
not be written and says that running the same command again resumes. Then
space is freed (the filler removed, or the tmpfs grown), the same command
runs to the end, and the workspace and the last checkpoint equal those of an
uninterrupted run of the same hank. A SIGTERM sent while a run stalls on a
full disk ends it too.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.runtime.hanks import (
    checkpoint_tree,
    codon,
    read_state,
    subprocess_environment,
    weft_run_argv,
    write_file,
    write_hank,
)

TRIAL_TIMEOUT = 30.0
"""Every trial must end within this (the issue's bound)."""
BLOB_BYTES = 600_000
"""Size of each rig-copied file: random bytes, so git cannot compress them."""
TRIALS = 8
WEFT_RUN = (sys.executable, "-m", "weft", "run")
SEED = 1414


class Tmpfs:
    """A tmpfs mounted for one test; ``fill`` takes every free byte, ``free`` gives them back."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        self._filler = path / "filler"
        path.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {result.stderr.strip()}")

    def fill(self) -> None:
        """Writes the filler file until the disk says ``ENOSPC``."""
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError), self._filler.open("ab", buffering=0) as f:
            while True:
                f.write(chunk)

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def resize(self, size: str) -> None:
        subprocess.run(
            ["mount", "-o", f"remount,size={size}", str(self.path)], check=True, capture_output=True
        )

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)


@pytest.fixture
def tmpfs_factory(tmp_path: Path) -> Iterator[list[Tmpfs]]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mounts: list[Tmpfs] = []
    yield mounts
    for mount in mounts:
        mount.unmount()


def disk_hank(directory: Path) -> Path:
    """Three codons: a copies blob1 by rig and writes a.md; b continues a's session,
    runs a shell tool and writes b.md; c copies blob2 and writes c.md. Every step
    rewrites its files whole, so a codon run again leaves the same tree."""
    rng = random.Random(SEED)
    files = {
        "blob1.bin": "",
        "blob2.bin": "",
    }
    path = write_hank(
        directory,
        codon(
            "a",
            write_file("a.md", "alpha\n"),
            files=("**/*.md", "data/**"),
            rigSetup=[{"type": "copy", "copy": {"from": "blob1.bin", "to": "data/blob1.bin"}}],
        ),
        codon(
            "b",
            write_file("b.md", "beta\n") + "@@fake:bash@@ printf 'tool\\n' > tool.md @@end@@\n",
            mode="continue-previous",
        ),
        codon(
            "c",
            write_file("c.md", "gamma\n") + "@@fake:sleep ms=200@@\n",
            rigSetup=[{"type": "copy", "copy": {"from": "blob2.bin", "to": "data/blob2.bin"}}],
        ),
        files=files,
    )
    for name in files:
        (directory / name).write_bytes(rng.randbytes(BLOB_BYTES))
    return path


def weft_run(
    hank: Path, execution: Path, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        weft_run_argv(hank, execution),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TRIAL_TIMEOUT,
        check=False,
    )


def tree(execution: Path) -> dict[str, bytes]:
    """Every regular file of the workspace (the data link excluded), as bytes."""
    root = execution / "agentRoot"
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith("read_only_data_source")
    }


def last_checkpoint(execution: Path) -> dict[str, bytes]:
    state = read_state(execution)
    codons = [c for run in state["runs"] for c in run["codons"] if c["status"] == "completed"]
    newest = max(codons, key=lambda c: c["endTime"])
    return checkpoint_tree(execution, newest["completionCheckpoint"])


def assert_clean_failure(result: subprocess.CompletedProcess[str], trial: str) -> None:
    """Exit 1, no traceback, and one line saying what could not be written and how to go on."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, f"{trial}: {output}"
    assert result.returncode == 1, f"{trial}: exit {result.returncode}\n{output}"
    reasons = [
        line
        for line in output.splitlines()
        if "cannot write" in line and "run the same command again to resume" in line
    ]
    assert reasons, f"{trial}: no one-line reason in\n{output}"


def assert_same_as_uninterrupted(
    execution: Path, reference: Path, trial: str, result: subprocess.CompletedProcess[str]
) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{trial}: the resume failed\n{output}"
    assert "Traceback" not in output, f"{trial}: {output}"
    assert tree(execution) == tree(reference), f"{trial}: the work tree differs"
    assert last_checkpoint(execution) == last_checkpoint(reference), f"{trial}: checkpoint differs"
    state = read_state(execution)
    done = [c["codonId"] for run in state["runs"] for c in run["codons"]]
    assert {"a", "b", "c"} <= set(done), f"{trial}: {done}"


@dataclass(frozen=True)
class Setup:
    hank: Path
    reference: Path
    """The execution of one uninterrupted run."""
    env: dict[str, str]
    duration: float
    """How long the uninterrupted run took (seconds, process start to exit)."""


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    env = subprocess_environment(tmp_path)
    hank = disk_hank(tmp_path / "hank")
    reference = tmp_path / "reference"
    before = time.monotonic()
    result = weft_run(hank, reference, env, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return Setup(hank, reference, env, time.monotonic() - before)


def test_a_disk_full_before_the_start_is_refused_in_one_line_and_resumes_once_freed(
    tmp_path: Path, tmpfs_factory: list[Tmpfs], setup: Setup
) -> None:
    hank, reference, env = setup.hank, setup.reference, setup.env
    disk = Tmpfs(tmp_path / "disk", "8m")
    tmpfs_factory.append(disk)
    fresh, started = disk.path / "fresh", disk.path / "started"
    assert weft_run(hank, started, env, tmp_path).returncode == 0
    disk.fill()
    for trial, execution in (("new execution", fresh), ("resumed execution", started)):
        before = time.monotonic()
        result = weft_run(hank, execution, env, tmp_path)
        assert time.monotonic() - before < TRIAL_TIMEOUT
        assert_clean_failure(result, trial)
    disk.free()
    for trial, execution in (("new execution", fresh), ("resumed execution", started)):
        result = weft_run(hank, execution, env, tmp_path)
        assert_same_as_uninterrupted(execution, reference, trial, result)


def test_a_disk_filling_at_random_moments_ends_each_run_cleanly_and_the_resume_completes(
    tmp_path: Path, tmpfs_factory: list[Tmpfs], setup: Setup
) -> None:
    hank, reference, env = setup.hank, setup.reference, setup.env
    disk = Tmpfs(tmp_path / "disk", "16m")
    tmpfs_factory.append(disk)
    rng = random.Random(SEED)
    failed = 0
    for n in range(TRIALS):
        execution = disk.path / f"trial-{n}"
        # Anywhere in the run, Python's start-up included: creation, rig copies,
        # agent logs, checkpoints, the journal, snapshots.
        delay = rng.uniform(0.05, 0.95) * setup.duration
        trial = f"trial {n} (disk full after {delay:.2f} s)"
        timer = threading.Timer(delay, disk.fill)
        before = time.monotonic()
        timer.start()
        try:
            result = weft_run(hank, execution, env, tmp_path)
        finally:
            timer.cancel()
            timer.join()
        assert time.monotonic() - before < TRIAL_TIMEOUT, trial
        if result.returncode != 0:  # the filler may come after the run's last write
            assert_clean_failure(result, trial)
            failed += 1
        disk.free()
        resumed = weft_run(hank, execution, env, tmp_path)
        assert_same_as_uninterrupted(execution, reference, trial, resumed)
        # Nothing is left behind on the disk for the next trial.
        subprocess.run(["rm", "-rf", str(execution)], check=True)
    assert failed >= TRIALS // 2, f"only {failed} of {TRIALS} trials met a full disk"


def test_a_run_that_fills_its_disk_itself_ends_cleanly_and_resumes_on_a_bigger_disk(
    tmp_path: Path, tmpfs_factory: list[Tmpfs], setup: Setup
) -> None:
    hank, reference, env = setup.hank, setup.reference, setup.env
    # Two 600 kB blobs in the workspace and in git, plus the store: ~2.6 MB.
    disk = Tmpfs(tmp_path / "disk", "2m")
    tmpfs_factory.append(disk)
    execution = disk.path / "natural"
    before = time.monotonic()
    result = weft_run(hank, execution, env, tmp_path)
    assert time.monotonic() - before < TRIAL_TIMEOUT
    assert_clean_failure(result, "natural fill")
    assert "retry" not in result.stdout.lower(), "a full disk is not retried"
    disk.resize("32m")
    resumed = weft_run(hank, execution, env, tmp_path)
    assert_same_as_uninterrupted(execution, reference, "natural fill", resumed)


def test_sigterm_ends_a_run_stalled_on_a_full_disk(
    tmp_path: Path, tmpfs_factory: list[Tmpfs]
) -> None:
    env = subprocess_environment(tmp_path)
    hank = write_hank(
        tmp_path / "slow",
        codon("a", write_file("a.md", "alpha\n") + "@@fake:sleep ms=60000@@\n"),
    )
    disk = Tmpfs(tmp_path / "disk", "8m")
    tmpfs_factory.append(disk)
    execution = disk.path / "slow"
    out = (tmp_path / "slow.out").open("w+")
    proc = subprocess.Popen(
        weft_run_argv(hank, execution),
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + TRIAL_TIMEOUT
        while "a: running" not in (tmp_path / "slow.out").read_text():
            assert proc.poll() is None, (tmp_path / "slow.out").read_text()
            assert time.monotonic() < deadline, "the codon never started"
            time.sleep(0.05)
        disk.fill()  # the agent sleeps: nothing notices the full disk until the stop
        before = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=TRIAL_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = (tmp_path / "slow.out").read_text()
    assert time.monotonic() - before < 15, output
    assert "Traceback" not in output, output
    assert code in (1, 128 + signal.SIGTERM), output
