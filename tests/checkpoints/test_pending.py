"""The checkpoint log: checkpoints wait in it, reach git in batches, and survive a crash."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.checkpoints.helpers import covered_state, git, snap, tree_state, write

from weft.checkpoints import CheckpointRepo, CheckpointStorageError, run_branch
from weft.checkpoints import pending as pending_module
from weft.checkpoints.packs import OBJ_BLOB, object_id
from weft.checkpoints.pending import LOG_NAME, CheckpointLog, read_log
from weft.checkpoints.repo import FLUSH_EVERY

BRANCH = run_branch("r1")


def _packs(git_dir: Path) -> set[str]:
    return {p.name for p in (git_dir / "objects" / "pack").glob("pack-*.idx")}


def _chain(repo: CheckpointRepo, workspace: Path, n: int, parent: str | None = None) -> list[str]:
    """``n`` checkpoints, each on the last, without asking git for the tip."""
    shas: list[str] = []
    parent = parent or repo.initial_sha
    for i in range(n):
        write(workspace, f"notes/{i % 3}.md", f"version {i}")
        parent = snap(repo, ["notes/**"], codon=f"c{i}", parent=parent)
        shas.append(parent)
    return shas


def test_checkpoints_wait_in_the_log_and_reach_git_together(
    repo: CheckpointRepo, git_dir: Path, workspace: Path
) -> None:
    before = _packs(git_dir)
    shas = _chain(repo, workspace, FLUSH_EVERY - 1)
    assert _packs(git_dir) == before, "a logged checkpoint wrote a pack"
    assert (git_dir / LOG_NAME).stat().st_size > 0
    ref = git_dir / "refs" / "heads" / BRANCH
    assert not ref.exists(), "a logged checkpoint moved the branch in git"
    repo.sync()
    assert len(_packs(git_dir) - before) == 1
    assert (git_dir / LOG_NAME).stat().st_size == 0
    assert git(repo, "rev-parse", BRANCH).strip() == shas[-1]
    assert git(repo, "rev-list", "--count", BRANCH).strip() == str(len(shas) + 1)
    assert tree_state(repo, shas[-1]) == covered_state(workspace, ["notes/**"])


def test_the_log_is_moved_into_git_every_flush_every_checkpoints(
    repo: CheckpointRepo, git_dir: Path, workspace: Path
) -> None:
    before = _packs(git_dir)
    shas = _chain(repo, workspace, 2 * FLUSH_EVERY)
    assert len(_packs(git_dir) - before) == 2
    assert (git_dir / LOG_NAME).stat().st_size == 0
    assert (git_dir / "refs" / "heads" / BRANCH).read_text().strip() == shas[-1]


def test_reads_see_logged_checkpoints(repo: CheckpointRepo, workspace: Path) -> None:
    shas = _chain(repo, workspace, 3)
    assert repo.branch_tip(BRANCH) == shas[-1]
    assert repo.verify(shas) == set(shas)
    assert [c.sha for c in repo.list("r1")] == shas[::-1]
    assert repo.files(shas[0]) == {"notes/0.md": b"version 0"}
    repo.restore(shas[0], ["notes/**"])
    assert sorted(p.name for p in (workspace / "notes").iterdir()) == ["0.md"]


_CRASH = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from weft.checkpoints import CheckpointRepo, run_branch
    git_dir, workspace, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    repo = CheckpointRepo.open_or_create(git_dir, workspace, watch=False)
    parent = repo.initial_sha
    for i in range(n):
        (workspace / "notes").mkdir(exist_ok=True)
        (workspace / "notes" / f"{i % 3}.md").write_text(f"version {i}")
        parent = repo.snapshot(
            ["notes/**"], branch=run_branch("r1"), parent_expected=parent, kind="completed",
            codon_id=f"c{i}", run_id="r1", codon_name="c",
        )
        print(parent, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _crashed_writer(git_dir: Path, workspace: Path, n: int) -> list[str]:
    """The SHAs a writer process took before it was killed (nothing closed)."""
    done = subprocess.run(
        [sys.executable, "-c", _CRASH, str(git_dir), str(workspace), str(n)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.split()


def test_a_killed_writer_loses_no_checkpoint(git_dir: Path, workspace: Path) -> None:
    shas = _crashed_writer(git_dir, workspace, FLUSH_EVERY + 5)
    assert len(shas) == FLUSH_EVERY + 5
    assert read_log(git_dir / LOG_NAME).records == 5
    repo = CheckpointRepo.open_or_create(git_dir, workspace, watch=False)
    try:
        assert any("moved 5 checkpoint(s)" in r for r in repo.repairs), repo.repairs
        assert read_log(git_dir / LOG_NAME).records == 0
        assert repo.verify(shas) == set(shas)
        assert repo.branch_tip(BRANCH) == shas[-1]
        write(workspace, "notes/extra.md", "after the crash")
        after = snap(repo, ["notes/**"], codon="next")
        assert git(repo, "rev-parse", f"{after}^").strip() == shas[-1]
        assert git(repo, "fsck", "--full", "--strict", "--no-dangling") == ""
    finally:
        repo.close()


def test_a_record_cut_short_is_ignored_and_the_log_goes_on(git_dir: Path, workspace: Path) -> None:
    shas = _crashed_writer(git_dir, workspace, 3)
    log = git_dir / LOG_NAME
    whole = log.stat().st_size
    with log.open("r+b") as fh:
        fh.truncate(whole - 7)  # the third record loses its last bytes
    repo = CheckpointRepo.open_or_create(git_dir, workspace, watch=False)
    try:
        assert any("cut short" in r for r in repo.repairs), repo.repairs
        assert repo.branch_tip(BRANCH) == shas[1]
        assert repo.verify(shas) == set(shas[:2])
        again = snap(repo, ["notes/**"], codon="again", parent=shas[1])
        assert repo.verify([again]) == {again}
    finally:
        repo.close()
    assert read_log(log).torn == 0


def test_a_reader_beside_the_writer_sees_the_logged_checkpoints(
    git_dir: Path, workspace: Path
) -> None:
    writer = CheckpointRepo.open_or_create(git_dir, workspace, watch=False)
    try:
        shas = _chain(writer, workspace, 4)
        reader = CheckpointRepo.open_or_create(git_dir, workspace, watch=False, writer=False)
        try:
            assert reader.branch_tip(BRANCH) == shas[-1]
            assert reader.verify(shas) == set(shas)
            assert [c.sha for c in reader.list()] == shas[::-1]
            # The reader writes into git directly, never into the writer's log.
            saved = reader.recovery_snapshot(["notes/**"], reason="beside a live run")
            assert saved.branch.startswith("recovery/")
        finally:
            reader.close()
        assert read_log(git_dir / LOG_NAME).records == 4
        more = _chain(writer, workspace, 2, parent=shas[-1])
        assert writer.branch_tip(BRANCH) == more[-1]
    finally:
        writer.close()


def test_a_reader_beside_the_writer_starts_from_its_newest_checkpoint(
    git_dir: Path, workspace: Path
) -> None:
    """The save before a live rollback lists what differs from the run's newest
    checkpoint: whether the log still holds it or it went into git (an idle run's
    housekeeping), a reader must see it as the head, not HEAD as last saved."""
    writer = CheckpointRepo.open_or_create(git_dir, workspace, watch=False)
    try:
        shas = _chain(writer, workspace, 3)
        for moved in (False, True):
            if moved:
                writer.maintain()  # the idle loop: the log goes into git
                assert read_log(git_dir / LOG_NAME).records == 0
            else:
                assert read_log(git_dir / LOG_NAME).records == 3
            reader = CheckpointRepo.open_or_create(git_dir, workspace, watch=False, writer=False)
            try:
                head = reader.head()
                assert head == shas[-1], moved
                write(workspace, "notes/mine.md", "not checkpointed")
                saved = reader.recovery_snapshot(["notes/**"], reason="beside a live run")
                before, now = reader.files(head), reader.files(saved.sha)
                changed = {p for p in before.keys() | now.keys() if before.get(p) != now.get(p)}
                assert changed == {"notes/mine.md"}, moved
            finally:
                reader.close()
            (workspace / "notes/mine.md").unlink()
    finally:
        writer.close()


@pytest.mark.parametrize("lock", ["index.lock", "HEAD.lock"])
def test_a_locked_head_or_index_delays_their_save_and_loses_nothing(
    git_dir: Path, workspace: Path, lock: str
) -> None:
    """Found in review: reads move the log into git and save HEAD and the index; a
    git command holding their lock made the reads fail, and a HEAD left unsaved
    after the log was emptied hid the newest checkpoint from a reader."""
    writer = CheckpointRepo.open_or_create(git_dir, workspace, watch=False)
    try:
        shas = _chain(writer, workspace, 2)
        (git_dir / lock).write_text("")  # `git status` through git_env(), say
        assert writer.verify(shas) == set(shas)
        assert writer.branch_tip(BRANCH) == shas[-1]
        assert writer.maintain() == 0
        reader = CheckpointRepo.open_or_create(git_dir, workspace, watch=False, writer=False)
        try:
            assert reader.head() == shas[-1]
        finally:
            reader.close()
        (git_dir / lock).unlink()
        more = _chain(writer, workspace, 1, parent=shas[-1])
        writer.sync()
        assert read_log(git_dir / LOG_NAME).records == 0
        assert str(pygit2.Repository(str(git_dir)).head.target) == more[-1]
    finally:
        writer.close()


def test_a_full_disk_while_logging_keeps_the_log_whole(
    repo: CheckpointRepo, git_dir: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shas = _chain(repo, workspace, 2)
    real_write = os.write

    def half_then_full(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 8:
            real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pending_module.os, "write", half_then_full)
    write(workspace, "notes/full.md", "no room")
    with pytest.raises(CheckpointStorageError, match="free disk space"):
        snap(repo, ["notes/**"], codon="full", parent=shas[-1])
    monkeypatch.undo()
    assert read_log(git_dir / LOG_NAME).torn == 0
    assert read_log(git_dir / LOG_NAME).records == 2
    after = snap(repo, ["notes/**"], codon="room again", parent=shas[-1])
    assert repo.verify([*shas, after]) == {*shas, after}


@settings(max_examples=60, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=200), min_size=1, max_size=8),
    cut=st.integers(min_value=0, max_value=4000),
)
def test_any_cut_of_the_log_reads_as_its_whole_records(
    tmp_path_factory: pytest.TempPathFactory, bodies: list[bytes], cut: int
) -> None:
    path = tmp_path_factory.mktemp("log") / LOG_NAME
    log = CheckpointLog(path)
    ends = []
    for i, body in enumerate(bodies):
        sha = object_id(OBJ_BLOB, body)
        log.append([(OBJ_BLOB, sha, body)], [(f"refs/heads/b{i}", sha.hex() * 2)])
        ends.append(path.stat().st_size)
    log.close()
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    read = read_log(path)
    whole = sum(1 for end in ends if end <= cut)
    assert read.records == whole
    assert read.end == (ends[whole - 1] if whole else 0)
    assert read.torn == min(cut, len(data)) - read.end
    assert set(read.tips) == {f"refs/heads/b{i}" for i in range(whole)}


def _packed(git_dir: Path) -> int:
    return sum(p.stat().st_size for p in (git_dir / "objects/pack").glob("*.pack"))


@pytest.mark.parametrize("lock", ["index.lock", "HEAD.lock", f"refs/heads/{run_branch('r1')}.lock"])
def test_a_locked_head_or_index_fails_no_checkpoint(
    git_dir: Path, workspace: Path, lock: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The periodic move of the log into git saves HEAD, the branch and the
    index: a git command holding their lock made every 16th checkpoint fail (and,
    for the branch, every read), though it was saved (in the log and then in
    git). While it holds it, each object is still packed once."""
    n = 3 * FLUSH_EVERY + 2
    free_dir, free_ws = git_dir.parent / "free", workspace.parent / "free-ws"
    with CheckpointRepo.open_or_create(free_dir, free_ws, watch=False) as free:
        _chain(free, free_ws, n)
        free.sync()
    writer = CheckpointRepo.open_or_create(git_dir, workspace, watch=False)
    try:
        (git_dir / lock).write_text("")
        with caplog.at_level(logging.WARNING, logger="weft.checkpoints.repo"):
            shas: list[str] = []
            for _ in range(n // 2):  # reads between checkpoints try the move too
                shas += _chain(writer, workspace, 2, parent=shas[-1] if shas else None)
                assert writer.verify(shas[-2:]) == set(shas[-2:])
        assert writer.verify(shas) == set(shas)
        assert any(lock in r.getMessage() for r in caplog.records), caplog.text
        (git_dir / lock).unlink()
        writer.sync()
        assert str(pygit2.Repository(str(git_dir)).head.target) == shas[-1]
        assert _packed(git_dir) < 1.5 * _packed(free_dir), "objects were packed again"
    finally:
        writer.close()
