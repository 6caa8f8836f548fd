"""Creating, isolating, repairing and quarantining the shadow repository."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.checkpoints.helpers import git, snap, tree_state, write

from weft.checkpoints import (
    CheckpointRepo,
    CheckpointStorageError,
    checkpoint_git_dir,
)
from weft.checkpoints.packs import CONSOLIDATE_OVER


def _one_checkpoint(git_dir: Path, workspace: Path) -> str:
    """A repository holding one checkpoint of ``a.md``, closed again; its sha."""
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        write(workspace, "a.md", "a")
        return snap(repo, ["*.md"])


def test_the_repository_lives_under_weft_checkpoints(tmp_path: Path) -> None:
    assert checkpoint_git_dir(tmp_path / ".weft") == tmp_path / ".weft/checkpoints/.weftcheckpoints"


def test_a_new_repository_has_main_with_an_empty_initial_commit(
    git_dir: Path, workspace: Path
) -> None:
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert repo.created
        assert repo.repairs == []
        assert repo.branch_tip("main") == repo.initial_sha == repo.head()
        assert tree_state(repo, repo.initial_sha) == {}
        assert git(repo, "log", "-1", "--format=%s", "main").strip() == "Initial checkpoint setup"
        excluded = (git_dir / "info/exclude").read_text().split()
        for name in ("/read_only_data_source", "/rigArchive", ".weft", ".weft.backup-*"):
            assert name in excluded
    with CheckpointRepo.open_or_create(git_dir, workspace) as again:
        assert not again.created
        assert again.initial_sha == repo.initial_sha
    assert not list(git_dir.parent.glob(".weftcheckpoints.tmp-*"))


HOSTILE_CHILD = """
import json, sys
from weft.checkpoints import CheckpointRepo
repo = CheckpointRepo.open_or_create(sys.argv[1], sys.argv[2])
sha = repo.snapshot(["**"], branch="run-r1", parent_expected=repo.initial_sha, kind="completed",
                    codon_id="c", run_id="r1", codon_name="n")
import pygit2
config = pygit2.Repository(sys.argv[1]).config
seen = "hostile.marker" in config
print(json.dumps({"sha": sha, "files": {k: v.hex() for k, v in repo.files(sha).items()},
                  "marker_seen": seen}))
repo.close()
"""


def test_the_users_git_configuration_changes_nothing(
    tmp_path: Path, git_dir: Path, workspace: Path
) -> None:
    home = tmp_path / "home"
    xdg = tmp_path / "xdg"
    templates = tmp_path / "templates"
    (templates / "hooks").mkdir(parents=True)
    (templates / "hooks" / "evil").write_text("#!/bin/sh\n")
    (xdg / "git").mkdir(parents=True)
    home.mkdir()
    ignore_all = tmp_path / "ignore-all"
    ignore_all.write_text("*\n")
    hostile = textwrap.dedent(f"""\
        [core]
            autocrlf = true
            excludesFile = {ignore_all}
            attributesFile = {tmp_path / "attrs"}
            fileMode = false
            symlinks = false
        [user]
            name = Mallory
            email = mallory@example.com
        [init]
            templateDir = {templates}
            defaultBranch = trunk
        [commit]
            gpgSign = true
        [hostile]
            marker = global config leaked in
        """)
    (tmp_path / "attrs").write_text("* text eol=crlf\n")
    (home / ".gitconfig").write_text(hostile)
    (xdg / "git" / "config").write_text(hostile)
    (xdg / "git" / "ignore").write_text("*\n")
    write(workspace, "notes/a.md", b"line one\nline two\n")
    write(workspace, "run.sh", "#!/bin/sh\n", executable=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(xdg),
        "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
    }
    out = subprocess.run(
        [sys.executable, "-c", HOSTILE_CHILD, str(git_dir), str(workspace)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["files"] == {
        "notes/a.md": b"line one\nline two\n".hex(),
        "run.sh": b"#!/bin/sh\n".hex(),
    }
    assert result["marker_seen"] is False, "libgit2 read the user's global config"
    assert not (git_dir / "hooks" / "evil").exists()
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert repo.branch_tip("main") is not None
        assert tree_state(repo, result["sha"])["run.sh"][0] == "100755"
        author = git(repo, "log", "-1", "--format=%an <%ae>", result["sha"]).strip()
        assert author == "Weft Runtime <runtime@weft.invalid>"
        assert git(repo, "cat-file", "-p", result["sha"]).count("gpgsig") == 0
        assert git(repo, "config", "hostile.marker", check=False) == ""


# ------------------------------------------------------------------ damage


def test_a_torn_head_is_rewritten_and_history_kept(git_dir: Path, workspace: Path) -> None:
    sha = _one_checkpoint(git_dir, workspace)
    (git_dir / "HEAD").write_bytes(b"\x00\xffgarbage")
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert any("torn HEAD" in r for r in repo.repairs)
        assert repo.exists(sha)
        assert repo.branch_tip("run-r1") == sha
        write(workspace, "b.md", "b")
        after = snap(repo, ["*.md"])
        assert set(tree_state(repo, after)) == {"a.md", "b.md"}


def test_a_head_naming_a_missing_branch_is_reset_to_main(git_dir: Path, workspace: Path) -> None:
    CheckpointRepo.open_or_create(git_dir, workspace).close()
    (git_dir / "HEAD").write_text("ref: refs/heads/vanished\n")
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert any("did not resolve" in r for r in repo.repairs)
        assert repo.head() == repo.initial_sha


def test_a_missing_objects_folder_is_quarantined_and_rebuilt(
    git_dir: Path, workspace: Path
) -> None:
    old = _one_checkpoint(git_dir, workspace)
    shutil.rmtree(git_dir / "objects")
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert repo.created
        (note,) = [r for r in repo.repairs if "quarantine" in r]
        assert "objects folder is missing" in note
        quarantined = list(git_dir.parent.glob(".weftcheckpoints-quarantine-*"))
        assert len(quarantined) == 1
        assert (quarantined[0] / "refs/heads/run-r1").is_file()
        assert not repo.exists(old)
        assert (workspace / "a.md").read_text() == "a", "the workspace is never touched"
        sha = snap(repo, ["*.md"])
        assert set(tree_state(repo, sha)) == {"a.md"}


def test_a_cut_short_loose_object_is_set_aside_instead_of_hanging_libgit2(
    git_dir: Path, workspace: Path
) -> None:
    """libgit2 1.9 loops for ever reading a loose object whose zlib stream is
    cut short; the open checks every loose object first (in a child process,
    so a regression is a timeout, not a hung suite)."""
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        initial = repo.initial_sha
    loose = git_dir / "objects" / initial[:2] / initial[2:]
    data = loose.read_bytes()
    loose.chmod(0o644)
    loose.write_bytes(data[: len(data) // 2])
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from weft.checkpoints import CheckpointRepo
        with CheckpointRepo.open_or_create(Path({str(git_dir)!r}), Path({str(workspace)!r})) as r:
            print("\\n".join(r.repairs))
            print("created" if r.created else "kept")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert f"set the damaged object {initial} aside" in done.stdout
    # Without its initial commit the repository is quarantined and rebuilt;
    # the damaged object is kept beside it.
    assert done.stdout.strip().endswith("created")
    (aside,) = git_dir.parent.glob(".weftcheckpoints-damaged-objects-*")
    assert (aside / initial).read_bytes() == data[: len(data) // 2]


@pytest.mark.parametrize("how", ["truncate", "garble", "index"])
def test_a_damaged_pack_is_set_aside_and_its_checkpoints_count_as_missing(
    git_dir: Path, workspace: Path, how: str
) -> None:
    first = _one_checkpoint(git_dir, workspace)
    packs = sorted((git_dir / "objects" / "pack").glob("*.pack"))
    (pack,) = packs
    target = pack.with_suffix(".idx") if how == "index" else pack
    data = target.read_bytes()
    target.chmod(0o644)
    if how == "truncate":
        target.write_bytes(data[: len(data) // 2])
    else:
        middle = len(data) // 2
        target.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert any(f"damaged pack {pack.name}" in r for r in repo.repairs), repo.repairs
        assert repo.verify([first, repo.initial_sha]) == {repo.initial_sha}
        assert repo.head() == repo.initial_sha
        # A new run checkpoints as before (run-r1's tip is the lost commit).
        write(workspace, "b.md", "b")
        after = snap(repo, ["*.md"], run="r2")
        assert set(tree_state(repo, after)) == {"a.md", "b.md"}
    (aside,) = git_dir.parent.glob(".weftcheckpoints-damaged-objects-*")
    assert (aside / target.name).read_bytes() != data


def test_a_torn_init_without_a_commit_is_rebuilt(git_dir: Path, workspace: Path) -> None:
    git_dir.parent.mkdir(parents=True)
    subprocess.run(
        ["git", "init", "-q", "--bare", str(git_dir)],
        check=True,
        env={"PATH": os.environ["PATH"], "HOME": str(git_dir.parent)},
    )
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert any("main branch is missing" in r for r in repo.repairs)
        assert repo.branch_tip("main") == repo.initial_sha


def _plant_leftovers(git_dir: Path, content: bytes) -> tuple[list[Path], Path]:
    """What a writer leaves while it works (or after a crash): lock files, a
    pack without its index, a temporary pack, an unfinished repository."""
    files = [
        git_dir / "index.lock",
        git_dir / "HEAD.lock",
        git_dir / "refs/heads/run-r1.lock",
        git_dir / "objects/pack/pack-0123.pack",
        git_dir / "objects/pack/tmp_pack-0123_99.idx",
    ]
    for path in files:
        path.write_bytes(content)
    temp = git_dir.parent / ".weftcheckpoints.tmp-1-2"
    (temp / "objects").mkdir(parents=True)
    return files, temp


def test_stale_locks_temp_folders_and_unfinished_packs_are_swept(
    git_dir: Path, workspace: Path
) -> None:
    _one_checkpoint(git_dir, workspace)
    leftovers, temp = _plant_leftovers(git_dir, b"stale")
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        for path in leftovers:
            assert not path.exists(), path
        assert not temp.exists()
        assert len(repo.repairs) == len(leftovers) + 1
        write(workspace, "a.md", "b")
        snap(repo, ["*.md"])


def test_a_garbage_index_is_rebuilt_from_head(git_dir: Path, workspace: Path) -> None:
    _one_checkpoint(git_dir, workspace)
    (git_dir / "index").write_bytes(b"DIRC garbage")
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert any("unreadable index" in r for r in repo.repairs)
        (workspace / "a.md").unlink()
        after = snap(repo, ["*.md"])
        assert tree_state(repo, after) == {}


def test_unreadable_storage_is_reported_and_left_alone(git_dir: Path, workspace: Path) -> None:
    git_dir.parent.mkdir(parents=True)
    git_dir.write_text("not a folder")
    with pytest.raises(CheckpointStorageError, match="checkpoint storage could not be read"):
        CheckpointRepo.open_or_create(git_dir, workspace)
    assert git_dir.read_text() == "not a folder"


def test_unreadable_storage_for_permissions(git_dir: Path, workspace: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores permissions")
    CheckpointRepo.open_or_create(git_dir, workspace).close()
    git_dir.chmod(0)
    try:
        with pytest.raises(CheckpointStorageError, match="permission denied"):
            CheckpointRepo.open_or_create(git_dir, workspace)
    finally:
        git_dir.chmod(0o755)


def test_many_small_packs_are_merged_on_open(git_dir: Path, workspace: Path) -> None:
    with CheckpointRepo.open_or_create(git_dir, workspace, watch=False) as repo:
        shas = []
        for i in range(CONSOLIDATE_OVER + 5):
            write(workspace, "a.md", str(i))
            shas.append(snap(repo, ["*.md"]))
    packs = list((git_dir / "objects/pack").glob("*.idx"))
    assert len(packs) > CONSOLIDATE_OVER
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert len(list((git_dir / "objects/pack").glob("*.idx"))) <= 2
        assert repo.verify(shas) == set(shas)
        assert repo.files(shas[3]) == {"a.md": b"3"}
    assert git(repo, "fsck", "--full", "--strict", "--no-dangling") == ""


KILLED_CHILD = """
import sys
from weft.checkpoints import CheckpointRepo
CheckpointRepo.open_or_create(sys.argv[1], sys.argv[2])
"""


def test_a_creation_killed_at_any_moment_leaves_nothing_half_built(
    git_dir: Path, workspace: Path
) -> None:
    for delay in (0.05, 0.1, 0.15, 0.2, 0.3):
        proc = subprocess.Popen([sys.executable, "-c", KILLED_CHILD, str(git_dir), str(workspace)])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if git_dir.exists():
            # Either complete (renamed into place) or absent: never a torn repository.
            with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
                assert not any("quarantine" in r for r in repo.repairs)
                assert repo.branch_tip("main") == repo.initial_sha
            shutil.rmtree(git_dir)
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert repo.branch_tip("main") == repo.initial_sha
    assert not list(git_dir.parent.glob(".weftcheckpoints.tmp-*"))


def test_the_repository_config_is_pinned_at_every_open(git_dir: Path, workspace: Path) -> None:
    CheckpointRepo.open_or_create(git_dir, workspace).close()
    config = git_dir / "config"
    config.write_text(config.read_text() + "[core]\n\tautocrlf = true\n")
    write(workspace, "a.txt", b"one\r\ntwo\n")
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert "autocrlf = true" not in config.read_text()
        assert repo.files(snap(repo, ["a.txt"])) == {"a.txt": b"one\r\ntwo\n"}
    config.write_bytes(b"[core\x00garbage")
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert any("unreadable repository config" in r for r in repo.repairs)


def test_an_opener_beside_a_live_run_sweeps_merges_and_writes_nothing_of_the_owner_s(
    git_dir: Path, workspace: Path
) -> None:
    """``weft thread`` or a live rollback's save opens beside the run that owns the
    repository: the owner's locks and packs in progress are not debris."""
    owner = CheckpointRepo.open_or_create(git_dir, workspace)
    try:
        write(workspace, "a.md", "a")
        tip = snap(owner, ["*.md"])
        owner.sync()
        for i in range(CONSOLIDATE_OVER + 2):
            write(workspace, "a.md", f"v{i}")
            tip = snap(owner, ["*.md"])
            owner.sync()  # one pack per checkpoint: enough for a merge on open
        in_progress, temp = _plant_leftovers(git_dir, b"being written")
        packs = sorted(p.name for p in (git_dir / "objects/pack").glob("*.idx"))
        kept = {p: p.stat().st_mtime_ns for p in (git_dir / "index", git_dir / "HEAD")}

        with CheckpointRepo.open_or_create(git_dir, workspace, writer=False) as reader:
            assert reader.repairs == []
            assert reader.exists(tip)
            write(workspace, "b.md", "beside")
            snap(reader, ["*.md"], run="beside")
            assert reader.maintain(over=0) == 0

        for path in in_progress:
            assert path.read_bytes() == b"being written", path
        assert temp.is_dir()
        now = {p.name for p in (git_dir / "objects/pack").glob("*.idx")}
        assert set(packs) <= now, "a pack of the owner was merged away"
        for path, mtime in kept.items():
            assert path.stat().st_mtime_ns == mtime, f"{path.name} was rewritten"
    finally:
        for path in git_dir.glob("**/*.lock"):
            path.unlink()  # the owner's own, planted: it closes next
        owner.close()


def test_an_opener_beside_a_live_run_reports_damage_and_leaves_it(
    git_dir: Path, workspace: Path
) -> None:
    _one_checkpoint(git_dir, workspace)
    (git_dir / "refs/heads/main").write_text("0" * 40 + "\n")
    with pytest.raises(CheckpointStorageError) as caught:
        CheckpointRepo.open_or_create(git_dir, workspace, writer=False)
    message = str(caught.value)
    assert "left alone" in message
    assert "weft run" in message
    assert "\n" not in message
    assert not list(git_dir.parent.glob(".weftcheckpoints-quarantine-*"))
    with CheckpointRepo.open_or_create(git_dir, workspace) as repo:
        assert any("quarantine" in r for r in repo.repairs)  # the owner repairs it


def test_an_opener_beside_a_run_creates_nothing(tmp_path: Path) -> None:
    """A reader that finds no repository says so: making one (or the workspace)
    would race the run that is about to."""
    git_dir = tmp_path / ".weft/checkpoints/.weftcheckpoints"
    workspace = tmp_path / "agentRoot"
    with pytest.raises(CheckpointStorageError, match=r"no checkpoint repository at .*weft run"):
        CheckpointRepo.open_or_create(git_dir, workspace, writer=False)
    assert not (tmp_path / ".weft").exists()
    assert not workspace.exists()
