"""A checkpoint of 10 changed files in a 5,000-file workspace, beside the git CLI.

Three identical workspaces (4,900 Python files in 100 nested folders, 99 docs
and a README), checkpointed with the same patterns after the same kind of edit
(10 files appended to, chosen at random each round):

- baseline: the git CLI doing what a checkpoint does, ``git add -A`` of the same
  patterns as ``:(glob)`` pathspecs, then ``git commit``, in the shadow
  repository's isolated environment (no user or system config);
- Weft as the runtime runs it, with the inotify change hints;
- Weft comparing every covered file (no hints: other platforms, or the first
  checkpoint after a restart).

Each round's edit is setup, not timed; the checkpoint is. The summary line
gives the ratio to the baseline and each median in milliseconds.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from weft.checkpoints import CheckpointRepo, git_environment

FILES = 5_000
CHANGED = 10
ROUNDS = 40
PATTERNS = ["src/**/*.py", "docs/**", "*.md"]
PATHSPECS = [f":(glob){p}" for p in PATTERNS]


def _make_workspace(root: Path) -> list[Path]:
    rng = random.Random(7)
    files: list[Path] = []
    for d in range(100):
        folder = root / "src" / f"pkg{d // 10}" / f"mod{d}"
        folder.mkdir(parents=True)
        for f in range(49):
            path = folder / f"file{f}.py"
            path.write_text("x = 1\n" * rng.randint(20, 300))
            files.append(path)
    (root / "docs").mkdir()
    for i in range(99):
        path = root / "docs" / f"page{i}.md"
        path.write_text(f"# page {i}\n" * 50)
        files.append(path)
    (root / "README.md").write_text("readme\n")
    files.append(root / "README.md")
    assert len(files) == FILES
    return files


@dataclass
class Subject:
    """One workspace and the function that checkpoints it."""

    files: list[Path]
    checkpoint: Callable[[], None]
    rng: random.Random = field(default_factory=lambda: random.Random(11))
    rounds: int = 0

    def edit(self) -> tuple[tuple[()], dict[str, Any]]:
        self.rounds += 1
        for path in self.rng.sample(self.files, CHANGED):
            with open(path, "a") as fh:
                fh.write(f"# edit {self.rounds}\n")
        return (), {}


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="weft-bench-ckpt-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _weft(root: Path, name: str, *, watch: bool) -> tuple[Subject, CheckpointRepo]:
    workspace = root / name / "agentRoot"
    files = _make_workspace(workspace)
    repo = CheckpointRepo.open_or_create(
        root / name / ".weft/checkpoints/.weftcheckpoints", workspace, watch=watch
    )
    state = {"tip": repo.initial_sha, "n": 0}

    def checkpoint() -> None:
        state["n"] += 1
        state["tip"] = repo.snapshot(
            PATTERNS,
            branch="run-bench",
            parent_expected=state["tip"],
            kind="completed",
            codon_id=f"c{state['n']}",
            run_id="bench",
            codon_name="bench",
        )

    checkpoint()  # the first checkpoint stores all 5,000 files; not measured
    return Subject(files, checkpoint), repo


@pytest.fixture(scope="module")
def weft_watched(root: Path) -> Iterator[Subject]:
    subject, repo = _weft(root, "watched", watch=True)
    assert repo.watching, "inotify is not available here"
    yield subject
    repo.close()


@pytest.fixture(scope="module")
def weft_full_scan(root: Path) -> Iterator[Subject]:
    subject, repo = _weft(root, "scan", watch=False)
    yield subject
    repo.close()


@pytest.fixture(scope="module")
def git_cli(root: Path) -> Subject:
    workspace = root / "cli" / "agentRoot"
    files = _make_workspace(workspace)
    git_dir = root / "cli" / ".weft/checkpoints/.weftcheckpoints"
    git_dir.parent.mkdir(parents=True)
    env = git_environment(git_dir, workspace)
    subprocess.run(["git", "init", "-q", "-b", "main"], env=env, check=True)
    counter = {"n": 0}

    def checkpoint() -> None:
        counter["n"] += 1
        subprocess.run(["git", "add", "-A", "--", *PATHSPECS], env=env, check=True)
        message = f"completed:c{counter['n']} [run:bench] bench"
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", message], env=env, check=True)

    checkpoint()
    return Subject(files, checkpoint)


def _run(benchmark: Any, subject: Subject) -> None:
    benchmark.pedantic(subject.checkpoint, setup=subject.edit, rounds=ROUNDS, warmup_rounds=2)
    if benchmark.stats is not None:
        median_ms = benchmark.stats.stats.median * 1e3
        benchmark.extra_info["summary"] = f"median {median_ms:.2f} ms per checkpoint"


GROUP = "checkpoints: 10 changed of 5,000 files"


@pytest.mark.benchmark(group=GROUP)
def test_checkpoint_git_cli_baseline(benchmark: Any, git_cli: Subject) -> None:
    _run(benchmark, git_cli)


@pytest.mark.benchmark(group=GROUP)
def test_checkpoint_weft_watched(benchmark: Any, weft_watched: Subject) -> None:
    _run(benchmark, weft_watched)


@pytest.mark.benchmark(group=GROUP)
def test_checkpoint_weft_full_scan(benchmark: Any, weft_full_scan: Subject) -> None:
    _run(benchmark, weft_full_scan)
