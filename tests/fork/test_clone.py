"""``weft fork`` and ``weft run --reuse`` end to end on the fake agent: the
fork's history, work tree and sessions are the source's up to the codon, the
source is untouched, and only what changed runs (and is paid for) again."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    codon,
    read_state,
    runs_oldest_first,
    subprocess_environment,
    weft_cli,
    write_file,
    write_hank,
)

from weft.runtime.execution.meta import read_meta

SEVEN = ["c1", "c2", "c3", "c4", "c5", "c6", "c7"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


def seven(tmp_path: Path, fourth: str = "Do c4.") -> Path:
    codons = [
        codon(c, write_file(f"{c}.md", f"{c} was here") + (fourth if c == "c4" else f"Do {c}."),
              mode="fresh" if c == "c1" else "continue-previous")
        for c in SEVEN
    ]  # fmt: skip
    return write_hank(tmp_path / "hank", *codons)


def weft(*args: str | Path, env: dict[str, str]) -> Any:
    return weft_cli(*args, env=env, timeout=120)


TRANSIENT = ("runtime.lock", "weft.db-wal", "weft.db-shm")
"""Not part of the record: the lock, and the files SQLite makes for any reader of a
journal in WAL mode (empty once the reader is gone), as ``weft status`` does too."""


def fingerprint(execution: Path) -> dict[str, str]:
    """Every file of ``.weft/`` and of the work tree, by content."""
    out = {}
    for path in sorted(execution.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name not in TRANSIENT:
            out[str(path.relative_to(execution))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def completed(execution: Path, run: int = -1) -> list[str]:
    runs = runs_oldest_first(read_state(execution))
    return [c["codonId"] for c in runs[run]["codons"] if c["status"] == "completed"]


def test_reuse_runs_only_the_codons_from_the_first_that_changed(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = seven(tmp_path)
    source = tmp_path / "x"
    first = weft("run", hank, "--execution", source, "--headless", env=env)
    assert first.returncode == 0, first.stdout
    before = fingerprint(source)
    seven(tmp_path, fourth="Do c4, but better.")  # the fourth prompt is edited
    refused = weft("run", hank, "--execution", source, "--headless", env=env)
    assert refused.returncode == 2
    assert "--reuse" in refused.stderr
    again = weft("run", hank, "--execution", source, "--reuse", "--json", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads(again.stdout.strip().splitlines()[-1])["data"]
    fork = Path(summary["execution"])
    assert fork != source
    assert summary["reusedFrom"] == {
        "execution": str(source.resolve()),
        "codonId": "c4",
        "codons": 3,
    }
    assert summary["codons"]["completed"] == 4  # c4..c7 ran; c1..c3 were reused
    assert completed(fork) == ["c4", "c5", "c6", "c7"]
    # What the fork's run spent is the four codons' cost, and nothing of c1..c3.
    records = runs_oldest_first(read_state(fork))[-1]["codons"]
    assert summary["totalCost"] == pytest.approx(sum(r["finalCost"] for r in records), abs=1e-6)
    # The source is byte for byte what it was.
    assert fingerprint(source) == before
    meta = read_meta(fork / ".weft" / "execution-meta.json")
    assert meta.forked_from is not None
    assert (meta.forked_from.execution, meta.forked_from.codon_id) == (str(source.resolve()), "c4")
    # c4 continued c3's session, which the fork took with it.
    sessions = {r["codonId"]: r["claudeSessionId"] for r in records}
    source_sessions = {
        r["codonId"]: r["claudeSessionId"]
        for r in runs_oldest_first(read_state(source))[0]["codons"]
    }
    assert sessions["c4"] == source_sessions["c3"]
    text = weft("run", hank, "--execution", source, "--headless", "--reuse", env=env)
    assert "3 codons reused from" in text.stdout


@pytest.mark.parametrize(("at", "kept"), [("c1", []), ("c4", ["c1.md", "c2.md", "c3.md"]),
                                           ("c7", [f"c{i}.md" for i in range(1, 7)])])  # fmt: skip
def test_fork_restores_the_work_tree_the_codon_started_from(
    tmp_path: Path, env: dict[str, str], at: str, kept: list[str]
) -> None:
    hank = seven(tmp_path)
    source = tmp_path / "x"
    assert weft("run", hank, "--execution", source, "--headless", env=env).returncode == 0
    before = fingerprint(source)
    made = weft("fork", source, "--from", at, "--to", tmp_path / "f", "--no-run", env=env)
    assert made.returncode == 0, made.stderr
    fork = tmp_path / "f"
    assert sorted(p.name for p in (fork / "agentRoot").glob("*.md")) == kept
    assert fingerprint(source) == before
    ran = weft("run", "--execution", fork, "--headless", env=env)
    assert ran.returncode == 0, ran.stdout
    assert completed(fork) == SEVEN[SEVEN.index(at) :]
    assert sorted(p.name for p in (fork / "agentRoot").glob("*.md")) == [f"{c}.md" for c in SEVEN]


def test_fork_of_a_codon_not_on_the_thread_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    hank = seven(tmp_path)
    source = tmp_path / "x"
    assert weft("run", hank, "--execution", source, "--headless", env=env).returncode == 0
    refused = weft("fork", source, "--from", "nosuch", env=env)
    assert refused.returncode == 2
    assert "codon 'nosuch' is not on the execution thread" in refused.stderr
    assert not list(tmp_path.glob("x-fork-*"))


def test_status_and_ls_name_a_fork_s_source(tmp_path: Path, env: dict[str, str]) -> None:
    hank = seven(tmp_path)
    assert weft("run", hank, "--headless", env=env).returncode == 0
    (source,) = (tmp_path / "managed").iterdir()
    assert weft("fork", source, "--from", "c2", "--no-run", env=env).returncode == 0
    fork = source.with_name(f"{source.name}-fork-c2")
    listed = {e["id"]: e for e in json.loads(weft("ls", "--json", env=env).stdout)}
    assert listed[fork.name]["forkedFrom"] == {"execution": str(source), "codonId": "c2"}
    assert listed[source.name]["forkedFrom"] is None
    assert f"{fork.name} (fork of {source.name})" in weft("ls", env=env).stdout
    status = json.loads(weft("status", fork, "--json", env=env).stdout)
    assert status["forkedFrom"]["codonId"] == "c2"
    assert f"forked from {source} at c2" in weft("status", fork, env=env).stdout


def test_a_fork_killed_at_any_moment_leaves_no_fork_or_a_usable_one(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = seven(tmp_path)
    source = tmp_path / "x"
    assert weft("run", hank, "--execution", source, "--headless", env=env).returncode == 0
    before = fingerprint(source)
    rng = random.Random(20261128)
    for trial in range(6):
        dest = tmp_path / f"f{trial}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "weft", "fork", str(source), "--from", "c4",
             "--to", str(dest), "--no-run"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(rng.uniform(0.2, 1.6))
        proc.kill()
        proc.wait()
        if dest.exists():
            ran = weft("run", "--execution", dest, "--headless", env=env)
            assert ran.returncode == 0, ran.stdout
            assert completed(dest) == SEVEN[3:]
    assert fingerprint(source) == before
    # The next fork beside them sweeps what the killed ones left half made.
    assert weft("fork", source, "--from", "c4", "--to", tmp_path / "last", "--no-run",
                env=env).returncode == 0  # fmt: skip
    assert not list(tmp_path.glob(".f*.forking-*"))


def test_clean_keeps_a_source_whose_forks_remain(tmp_path: Path, env: dict[str, str]) -> None:
    hank = seven(tmp_path)
    assert weft("run", hank, "--headless", env=env).returncode == 0
    (source,) = (tmp_path / "managed").iterdir()
    assert weft("fork", source, "--from", "c6", "--headless", env=env).returncode == 0
    fork = source.with_name(f"{source.name}-fork-c6")
    cleaned = weft("clean", "--hank", hank, "--state", "completed", env=env)
    # The fork is completed too, so both go, the fork first or together: nothing is kept.
    assert cleaned.returncode == 0, cleaned.stderr
    assert not source.exists()
    assert not fork.exists()
    assert weft("run", hank, "--headless", env=env).returncode == 0
    (source,) = (tmp_path / "managed").iterdir()
    assert weft("fork", source, "--from", "c6", "--no-run", env=env).returncode == 0
    cleaned = weft("clean", "--state", "completed", env=env)  # the fork is rolled-back: it stays
    assert cleaned.returncode == 0, cleaned.stderr
    assert source.exists()
    assert "its forks read its checkpoints" in cleaned.stderr


def test_n_forks_run_side_by_side_and_weft_diff_compares_them(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = seven(tmp_path)
    source = tmp_path / "x"
    assert weft("run", hank, "--execution", source, "--headless", env=env).returncode == 0
    done = weft("fork", source, "--from", "c5", "-m", "fake/opus", "-n", "2", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    forks = [tmp_path / "x-fork-c5", tmp_path / "x-fork-c5-2"]
    for fork in forks:
        assert completed(fork) == SEVEN[4:]
        meta = read_meta(fork / ".weft" / "execution-meta.json")
        assert meta.forked_from is not None
        assert meta.forked_from.codon_id == "c5"
    assert f"Compare them: weft diff {forks[0]} {forks[1]}" in done.stdout
    diff = json.loads(weft("diff", *forks, "--json", env=env).stdout)
    assert diff["divergedAt"] == "c5"
    bad = weft("fork", source, "--from", "c5", "-n", "0", env=env)
    assert bad.returncode == 2
    assert "is not a number of forks from 1 to 64" in bad.stderr
