"""Execution directories: input resolution, create/resume rules, data linking and hashing."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.runtime import hanks

from weft.runtime.execution.prepare import (
    BASE_DIR_ENV,
    DATA_LINK,
    META_FILE,
    DataMismatchError,
    ExecutionLayout,
    ExecutionMetaError,
    ExecutionSetupError,
    HankChangedError,
    InputPathError,
    PreparedExecution,
    RunSettings,
    RunSettingsChangedError,
    hank_hash,
    hash_data,
    managed_base_dir,
    prepare_execution,
    read_meta,
    write_meta,
)

HANK = {
    "meta": {"name": "demo", "version": "1.0.0"},
    "hank": [{"id": "a", "name": "A", "model": "fake/ok", "continuationMode": "fresh"}],
}


def write_hank(path: Path, doc: dict[str, object] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc or HANK))
    return path


def make_data(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


class Answers:
    """A prompt that replays answers and records the questions."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.questions: list[str] = []

    def __call__(self, question: str) -> bool:
        self.questions.append(question)
        return self.answers.pop(0)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, Path]:
    return {
        "hank": write_hank(tmp_path / "project" / "hank.json"),
        "data": make_data(tmp_path / "data", {"a.csv": "x,y\n1,2\n", "sub/b.txt": "hello"}),
        "base": tmp_path / "managed",
    }


def prepare(e: dict[str, Path], **kw: object) -> PreparedExecution:
    args: dict[str, object] = {"interactive": False, "base_dir": e["base"]}
    args.update(kw)
    data = args.pop("data", e["data"])
    hank = args.pop("hank", e["hank"])
    return prepare_execution(hank, data, **args)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- create


def test_a_new_execution_has_the_layout_and_metadata(env: dict[str, Path]) -> None:
    prepared = prepare(env)
    layout = prepared.layout
    assert not prepared.resumed
    assert layout.root.parent == env["base"].resolve()
    assert re.fullmatch(r"\d{13}-[0-9a-f]{4}-[0-9a-f]{6}", layout.root.name)
    assert layout.root.name.endswith(prepared.meta.data_hash[:6])
    for path in (layout.workspace, layout.rig_archive, layout.runs, layout.logs):
        assert path.is_dir()
    assert not layout.checkpoints.exists()  # the checkpoint repository creates it atomically
    meta = json.loads(layout.meta_path.read_text())
    assert meta["hankPath"] == str(env["hank"].resolve())
    assert meta["hankHash"] == hank_hash(env["hank"])
    assert meta["readOnlySourceDataPath"] == str(env["data"].resolve())
    assert meta["dataHash"] == hash_data(env["data"]).value
    assert meta["dataHashMode"] == "content"
    assert meta["linkType"] == "symlink"
    assert meta["dataKind"] == "directory"
    assert meta["createdAt"] == meta["lastUsed"]
    assert not list(layout.weft_dir.glob("*.tmp"))


def test_folder_data_is_linked_as_the_data_slot(env: dict[str, Path]) -> None:
    layout = prepare(env).layout
    assert layout.data_link.is_symlink()
    assert Path(os.readlink(layout.data_link)) == env["data"].resolve()
    assert (layout.data_link / "sub" / "b.txt").read_text() == "hello"


def test_file_data_lives_under_the_slot_by_its_name(env: dict[str, Path], tmp_path: Path) -> None:
    single = tmp_path / "table.csv"
    single.write_text("1,2\n")
    prepared = prepare(env, data=single)
    link = prepared.layout.data_link / "table.csv"
    assert prepared.layout.data_link.is_dir()
    assert not prepared.layout.data_link.is_symlink()
    assert link.is_symlink()
    assert link.read_text() == "1,2\n"
    assert prepared.meta.data_kind == "file"


def test_no_data_makes_no_slot(env: dict[str, Path]) -> None:
    prepared = prepare(env, data=None)
    assert not prepared.layout.data_link.exists()
    assert prepared.meta.link_type == "none"
    assert prepared.meta.data_hash_mode == "none"
    assert prepared.layout.root.name.endswith("-nodata")


def test_copied_data_is_read_only_and_independent(env: dict[str, Path]) -> None:
    prepared = prepare(env, copy=True)
    slot = prepared.layout.data_link
    assert not slot.is_symlink()
    copied = slot / "sub" / "b.txt"
    assert copied.read_text() == "hello"
    assert stat.S_IMODE(copied.stat().st_mode) & 0o222 == 0
    assert prepared.meta.link_type == "copy"
    (env["data"] / "sub" / "b.txt").write_text("changed")
    assert copied.read_text() == "hello"
    # The user's data keeps its permissions.
    assert stat.S_IMODE((env["data"] / "a.csv").stat().st_mode) & 0o200


def test_base_dir_comes_from_the_environment(tmp_path: Path) -> None:
    assert managed_base_dir(env={BASE_DIR_ENV: str(tmp_path / "x")}) == tmp_path / "x"
    assert managed_base_dir(env={}) == Path("~/.weft-executions").expanduser().resolve()
    assert managed_base_dir(tmp_path / "y", env={BASE_DIR_ENV: "/nope"}) == tmp_path / "y"


# --------------------------------------------------------------------------- resume


def test_same_hank_and_same_data_resume_the_execution(env: dict[str, Path], tmp_path: Path) -> None:
    first = prepare(env)
    twin = make_data(tmp_path / "twin", {"a.csv": "x,y\n1,2\n", "sub/b.txt": "hello"})
    second = prepare(env, data=twin)
    assert second.resumed
    assert second.layout.root == first.layout.root
    # Same contents elsewhere: the workspace now links to the path given.
    assert Path(os.readlink(second.layout.data_link)) == twin.resolve()
    assert second.meta.last_used >= first.meta.last_used
    assert read_meta(first.layout.meta_path) == second.meta


def test_other_data_or_another_hank_make_a_new_execution(
    env: dict[str, Path], tmp_path: Path
) -> None:
    first = prepare(env)
    other = make_data(tmp_path / "other", {"a.csv": "different"})
    by_data = prepare(env, data=other)
    other_hank = write_hank(tmp_path / "other-project" / "hank.json")
    by_hank = prepare(env, hank=other_hank)
    roots = {first.layout.root, by_data.layout.root, by_hank.layout.root}
    assert len(roots) == 3
    assert not by_data.resumed
    assert not by_hank.resumed


def test_new_always_makes_a_new_execution_and_the_latest_is_resumed(
    env: dict[str, Path],
) -> None:
    first = prepare(env)
    second = prepare(env, new=True)
    assert second.layout.root != first.layout.root
    assert not second.resumed
    again = prepare(env)
    assert again.resumed
    assert again.layout.root == second.layout.root
    prepare(env, execution_dir=None)  # resumes second again, updating lastUsed
    meta = json.loads(first.layout.meta_path.read_text())
    meta["lastUsed"] = "2999-01-01T00:00:00.000Z"
    first.layout.meta_path.write_text(json.dumps(meta))
    assert prepare(env).layout.root == first.layout.root


def test_a_reformatted_hank_is_not_a_change(env: dict[str, Path]) -> None:
    prepare(env)
    doc = {"$schema": "https://example/hank.schema.json", **HANK}
    env["hank"].write_text(json.dumps(doc, indent=4, sort_keys=True))
    resumed = prepare(env)
    assert resumed.resumed
    assert not resumed.hank_changed
    assert not resumed.warnings


def changed(e: dict[str, Path]) -> None:
    doc = json.loads(json.dumps(HANK))
    doc["hank"][0]["model"] = "fake/other"
    e["hank"].write_text(json.dumps(doc))


def test_a_changed_hank_is_refused_without_a_person(env: dict[str, Path]) -> None:
    first = prepare(env)
    changed(env)
    with pytest.raises(HankChangedError, match=r"non-interactive.*--yes.*--new"):
        prepare(env)
    assert read_meta(first.layout.meta_path).hank_hash == first.meta.hank_hash


def test_a_changed_hank_is_accepted_with_yes(env: dict[str, Path]) -> None:
    first = prepare(env)
    changed(env)
    resumed = prepare(env, yes=True)
    assert resumed.resumed
    assert resumed.hank_changed
    assert resumed.layout.root == first.layout.root
    assert resumed.meta.hank_hash == hank_hash(env["hank"]) != first.meta.hank_hash
    assert any("hank changed" in w for w in resumed.warnings)
    assert not prepare(env).hank_changed  # accepted once, recorded


def test_a_changed_hank_asks_the_person(env: dict[str, Path]) -> None:
    first = prepare(env)
    changed(env)
    no = Answers(False)
    with pytest.raises(HankChangedError, match=r"declined.*--new"):
        prepare(env, interactive=True, prompt=no)
    assert len(no.questions) == 1
    assert first.layout.execution_id in no.questions[0]
    assert read_meta(first.layout.meta_path).hank_hash == first.meta.hank_hash
    yes = Answers(True)
    resumed = prepare(env, interactive=True, prompt=yes)
    assert resumed.hank_changed
    assert resumed.layout.root == first.layout.root
    assert len(yes.questions) == 1


def test_corrupt_metadata_of_other_executions_is_skipped_with_a_warning(
    env: dict[str, Path],
) -> None:
    first = prepare(env)
    first.layout.meta_path.write_text("{ not json")
    fresh = prepare(env)
    assert not fresh.resumed
    assert fresh.layout.root != first.layout.root
    assert any(str(first.layout.root) in w and "unreadable" in w for w in fresh.warnings)
    assert first.layout.meta_path.read_text() == "{ not json"


def test_slow_data_falls_back_to_a_metadata_hash(env: dict[str, Path]) -> None:
    prepared = prepare(env, data_hash_time_limit=0.0)
    assert prepared.meta.data_hash_mode == "metadata"
    assert any("modification times" in w for w in prepared.warnings)
    again = prepare(env, data_hash_time_limit=0.0)
    assert again.resumed
    assert again.layout.root == prepared.layout.root


# --------------------------------------------------------------------------- explicit directory


def test_an_explicit_missing_directory_is_created_then_resumed(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "runs" / "mine"
    created = prepare(env, execution_dir=target)
    assert not created.resumed
    assert created.layout.root == target.resolve()
    assert not env["base"].exists()
    resumed = prepare(env, execution_dir=target)
    assert resumed.resumed
    assert resumed.layout.root == target.resolve()


def test_an_explicit_resume_without_data_uses_the_recorded_data(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    prepare(env, execution_dir=target)
    resumed = prepare(env, execution_dir=target, data=None)
    assert resumed.resumed
    assert resumed.data_path == env["data"].resolve()
    resumed.layout.data_link.unlink()
    repaired = prepare(env, execution_dir=target, data=None)
    assert repaired.layout.data_link.is_symlink()
    assert any("relinked" in w for w in repaired.warnings)


def test_an_explicit_resume_whose_data_vanished_asks_for_it(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    prepare(env, execution_dir=target)
    env["data"].rename(tmp_path / "moved")
    with pytest.raises(DataMismatchError, match="no longer exists; pass the data again"):
        prepare(env, execution_dir=target, data=None)


def test_different_data_in_an_explicit_execution_needs_force(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    first = prepare(env, execution_dir=target)
    other = make_data(tmp_path / "other", {"z": "new"})
    with pytest.raises(DataMismatchError, match=r"--force.*--new --force.*drop --execution"):
        prepare(env, execution_dir=target, data=other)
    assert read_meta(first.layout.meta_path).data_hash == first.meta.data_hash
    forced = prepare(env, execution_dir=target, data=other, force=True)
    assert forced.resumed
    assert Path(os.readlink(forced.layout.data_link)) == other.resolve()
    assert forced.meta.data_hash == hash_data(other).value
    assert any("instead of" in w for w in forced.warnings)
    assert (env["data"] / "a.csv").exists()


def test_relinking_copied_data_keeps_the_old_copy(env: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "exe"
    prepare(env, execution_dir=target, copy=True)
    other = make_data(tmp_path / "other", {"z": "new"})
    forced = prepare(env, execution_dir=target, data=other, force=True)
    parked = list(forced.layout.weft_dir.glob("replaced-data-*"))
    assert len(parked) == 1
    assert (parked[0] / "a.csv").read_text() == "x,y\n1,2\n"


def test_a_foreign_non_empty_directory_needs_confirmation(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = make_data(tmp_path / "busy", {"notes.md": "mine", "src/x.py": "1"})
    with pytest.raises(ExecutionSetupError, match=r"1 files, 1 folders.*--yes"):
        prepare(env, execution_dir=target)
    assert not (target / ".weft").exists()
    with pytest.raises(ExecutionSetupError, match="not creating"):
        prepare(env, execution_dir=target, interactive=True, prompt=Answers(False))
    created = prepare(env, execution_dir=target, interactive=True, prompt=Answers(True))
    assert not created.resumed
    assert (target / "notes.md").read_text() == "mine"
    assert (target / "src" / "x.py").read_text() == "1"


def test_the_managed_root_only_allows_resuming(env: dict[str, Path]) -> None:
    first = prepare(env)
    with pytest.raises(ExecutionSetupError, match="managed root"):
        prepare(env, execution_dir=env["base"] / "made-up")
    with pytest.raises(ExecutionSetupError, match="managed root"):
        prepare(env, execution_dir=first.layout.root, new=True, force=True)
    assert prepare(env, execution_dir=first.layout.root).resumed


def test_new_on_an_existing_execution_needs_force(env: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "exe"
    prepare(env, execution_dir=target)
    with pytest.raises(ExecutionSetupError, match="add --force"):
        prepare(env, execution_dir=target, new=True)
    assert (target / ".weft" / META_FILE).exists()


def test_new_force_sets_the_old_execution_aside(env: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "exe"
    old = prepare(env, execution_dir=target)
    (old.layout.workspace / "work.txt").write_text("agent output")
    (old.layout.weft_dir / "state.json").write_text("{}")
    fresh = prepare(env, execution_dir=target, new=True, force=True)
    assert not fresh.resumed
    assert fresh.backup is not None
    backup = fresh.backup
    assert re.fullmatch(r"\.weft\.backup-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d", backup.name)
    assert (backup / "state.json").read_text() == "{}"
    assert (backup / META_FILE).exists()
    assert (backup / "agentRoot" / "work.txt").read_text() == "agent output"
    assert not (fresh.layout.workspace / "work.txt").exists()
    assert not (fresh.layout.weft_dir / "state.json").exists()
    assert fresh.layout.data_link.is_symlink()
    assert any(str(backup) in w for w in fresh.warnings)


def test_new_force_can_keep_the_workspace(env: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "exe"
    old = prepare(env, execution_dir=target)
    (old.layout.workspace / "work.txt").write_text("keep me")
    fresh = prepare(env, execution_dir=target, new=True, force=True, keep_workspace=True)
    assert (fresh.layout.workspace / "work.txt").read_text() == "keep me"
    assert fresh.layout.data_link.is_symlink()
    assert fresh.backup is not None
    assert not (fresh.backup / "agentRoot").exists()


def test_corrupt_metadata_in_an_explicit_directory_says_how_to_fix_it(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    prepared = prepare(env, execution_dir=target)
    prepared.layout.meta_path.write_text('{"version": "1.0.0"}')
    with pytest.raises(ExecutionMetaError, match=r"execution-meta.json.*--new --force"):
        prepare(env, execution_dir=target)
    recovered = prepare(env, execution_dir=target, new=True, force=True)
    assert recovered.backup is not None
    assert (recovered.backup / META_FILE).read_text() == '{"version": "1.0.0"}'


def test_metadata_from_a_newer_major_version_is_refused(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    prepared = prepare(env, execution_dir=target)
    meta = json.loads(prepared.layout.meta_path.read_text())
    meta["version"] = "2.0.0"
    meta["somethingNew"] = True
    prepared.layout.meta_path.write_text(json.dumps(meta))
    with pytest.raises(ExecutionMetaError, match=r"version 2\.0\.0 is not supported"):
        prepare(env, execution_dir=target)


def test_an_interrupted_creation_is_completed(env: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "exe"
    ExecutionLayout(target).create_dirs()
    created = prepare(env, execution_dir=target)
    assert not created.resumed
    assert created.layout.meta_path.exists()


def test_state_without_metadata_is_not_overwritten(env: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "exe"
    layout = ExecutionLayout(target)
    layout.create_dirs()
    (layout.weft_dir / "weft.db").write_bytes(b"journal")
    with pytest.raises(ExecutionMetaError, match=r"holds state.*--new --force"):
        prepare(env, execution_dir=target)
    assert (layout.weft_dir / "weft.db").read_bytes() == b"journal"


def test_the_execution_may_not_live_inside_its_data(env: dict[str, Path]) -> None:
    with pytest.raises(ExecutionSetupError, match="inside the data"):
        prepare(env, execution_dir=env["data"] / "exe")
    with pytest.raises(ExecutionSetupError, match="inside the data"):
        prepare(env, execution_dir=env["data"])


# --------------------------------------------------------------------------- hashes


def test_the_data_hash_follows_contents_not_location(tmp_path: Path) -> None:
    a = make_data(tmp_path / "a", {"x.txt": "1", "d/y.txt": "2"})
    b = make_data(tmp_path / "b", {"d/y.txt": "2", "x.txt": "1"})
    assert hash_data(a) == hash_data(b)
    (b / "d" / "y.txt").write_text("3")
    assert hash_data(a).value != hash_data(b).value
    c = make_data(tmp_path / "c", {"x.txt": "1", "e/y.txt": "2"})
    assert hash_data(a).value != hash_data(c).value
    (tmp_path / "c" / "empty").mkdir()
    assert (
        hash_data(c).value
        != hash_data(make_data(tmp_path / "c2", {"x.txt": "1", "e/y.txt": "2"})).value
    )


def test_a_single_file_hash_includes_its_name(tmp_path: Path) -> None:
    (tmp_path / "one.csv").write_text("same")
    (tmp_path / "two.csv").write_text("same")
    assert hash_data(tmp_path / "one.csv").value != hash_data(tmp_path / "two.csv").value
    assert hash_data(tmp_path / "one.csv").mode == "content"


@given(
    st.dictionaries(
        st.from_regex(r"[a-c]{1,2}(/[a-c]{1,2})?", fullmatch=True),
        st.binary(max_size=64),
        min_size=1,
        max_size=6,
    )
)
def test_the_data_hash_is_independent_of_creation_order(files: dict[str, bytes]) -> None:
    import tempfile

    # A name cannot be both a file and a folder.
    names = set(files)
    files = {k: v for k, v in files.items() if not any(n.startswith(k + "/") for n in names)}
    with tempfile.TemporaryDirectory() as tmp:
        forward, backward = Path(tmp, "f"), Path(tmp, "b")
        for root, order in ((forward, list(files)), (backward, list(reversed(files)))):
            for name in order:
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_bytes(files[name])
        assert hash_data(forward) == hash_data(backward)


def test_hank_hash_reports_invalid_json(tmp_path: Path) -> None:
    bad = tmp_path / "hank.json"
    bad.write_text("{")
    with pytest.raises(InputPathError, match="not valid JSON"):
        hank_hash(bad)


def test_file_data_keeps_its_slot_name(env: dict[str, Path], tmp_path: Path) -> None:
    single = tmp_path / "t.csv"
    single.write_text("1")
    prepared = prepare(env, data=single, copy=True)
    copied = prepared.layout.workspace / DATA_LINK / "t.csv"
    assert copied.read_text() == "1"
    assert not copied.is_symlink()


# --------------------------------------------------------------------------- creation races


def test_concurrent_metadata_writes_never_rename_each_others_temp_file(
    env: dict[str, Path], tmp_path: Path
) -> None:
    prepared = prepare(env)
    path = prepared.layout.meta_path
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(50):
                write_meta(path, prepared.meta)
        except BaseException as exc:  # collected: the assertion names it
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert read_meta(path) == prepared.meta
    assert sorted(p.name for p in path.parent.glob("execution-meta.json*")) == [META_FILE]


RUN = (sys.executable, "-m", "weft", "run")


def _weft_run(*args: str | Path, cwd: Path, environ: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "weft", "run", *map(str, args), "--headless"],
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _slow_hank(directory: Path, ms: int) -> Path:
    return hanks.write_hank(
        directory,
        hanks.codon("a", hanks.write_file("a.md", "A\n") + f"@@fake:sleep ms={ms}@@\n"),
    )


def test_two_runs_started_at_the_same_instant_never_crash(tmp_path: Path) -> None:
    """The loser of a creation or resume race says "already running" (exit 1);
    4 rounds: two creating one explicit execution, two resuming a managed one."""
    environ = hanks.subprocess_environment(tmp_path)
    hank = _slow_hank(tmp_path / "hank", 400)
    rounds = [("--execution", tmp_path / f"explicit-{n}") for n in range(2)] + [(), ()]
    for n, extra in enumerate(rounds):
        pair = [_weft_run(hank, *extra, cwd=tmp_path, environ=environ) for _ in range(2)]
        results = [(p.wait(timeout=60), *p.communicate()) for p in pair]
        codes = sorted(code for code, _, _ in results)
        for code, out, err in results:
            assert "Traceback" not in out + err, f"round {n}: {err}"
            if code == 1:
                assert "already running" in err, f"round {n}: {err}"
        assert codes in ([0, 0], [0, 1]), f"round {n}: {results}"


def test_new_force_refuses_while_a_live_process_holds_the_execution(tmp_path: Path) -> None:
    environ = hanks.subprocess_environment(tmp_path)
    hank = _slow_hank(tmp_path / "hank", 60_000)
    execution = tmp_path / "busy"
    running = _weft_run(hank, "--execution", execution, cwd=tmp_path, environ=environ)
    try:
        hanks.wait_for(lambda: (execution / ".weft" / "runtime.lock").exists(), what="the lock")
        refused = subprocess.run(
            [*RUN, str(hank), "--execution", str(execution), "--new", "--force", "--headless"],
            cwd=tmp_path,
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert refused.returncode == 1, refused.stderr
        assert "Traceback" not in refused.stdout + refused.stderr
        assert f"PID {running.pid}" in refused.stderr
        assert "does not move a live execution away" in refused.stderr
        assert not list(execution.glob(".weft.backup-*"))
        assert running.poll() is None
    finally:
        running.terminate()
        running.wait(timeout=60)
    # Once the holder is gone, --new --force sets the execution aside as documented.
    prepared = prepare_execution(
        hank, None, execution_dir=execution, new=True, force=True, interactive=False
    )
    assert prepared.backup is not None
    assert (prepared.backup / "execution-meta.json").exists()


# --------------------------------------------------------------------------- run settings


def _ran(layout: ExecutionLayout, *, finished: tuple[str, ...], status: str = "failed") -> None:
    """A state.json saying codons a and b were planned on fake/ok and ``finished`` ran
    (no journal: the settings check reads the snapshot then)."""
    plan = [{"codonId": c, "codon": {"id": c, "model": "fake/ok"}} for c in ("a", "b")]
    codons = [{"codonId": c, "status": "completed"} for c in finished]
    state = {"executionPlan": plan, "runs": [{"status": status, "codons": codons}]}
    (layout.weft_dir / "state.json").write_text(json.dumps(state))


def test_settings_given_are_kept_and_a_resume_without_them_keeps_them(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    given = RunSettings(model="fake/ok", max_dollars=2.5, max_seconds=60)
    created = prepare(env, execution_dir=target, settings=given)
    assert created.settings == given
    assert json.loads(created.layout.meta_path.read_text())["runSettings"] == {
        "model": "fake/ok",
        "maxDollars": 2.5,
        "maxSeconds": 60,
    }
    resumed = prepare(env, execution_dir=target)
    assert resumed.settings == given
    assert any("--max-cost $2.5 is kept with execution" in n for n in resumed.notes)
    assert any("--max-time 60s is kept with execution" in n for n in resumed.notes)
    assert read_meta(resumed.layout.meta_path).run_settings == given


def test_a_new_ceiling_replaces_the_kept_one_and_says_so(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    prepare(env, execution_dir=target, settings=RunSettings(max_dollars=1))
    raised = prepare(env, execution_dir=target, settings=RunSettings(max_dollars=3))
    assert raised.settings.max_dollars == 3
    assert raised.notes == (f"--max-cost $3 replaces the $1 kept with execution {target.name}",)
    assert read_meta(raised.layout.meta_path).run_settings.max_dollars == 3


def test_another_model_after_a_run_is_refused_without_a_person_to_ask(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    layout = prepare(env, execution_dir=target).layout
    _ran(layout, finished=("a",))
    with pytest.raises(RunSettingsChangedError) as caught:
        prepare(env, execution_dir=target, settings=RunSettings(model="fake/other"))
    message = str(caught.value)
    assert "runs on (fake/ok)" in message
    for choice in ("--yes", "--new", "drop --model"):
        assert choice in message
    assert read_meta(layout.meta_path).run_settings == RunSettings()


def test_another_model_is_asked_and_yes_makes_the_rest_follow_it(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    layout = prepare(env, execution_dir=target).layout
    _ran(layout, finished=("a",))
    answers = Answers(True)
    loaded: list[str | None] = []

    def load(model: str | None) -> Any:
        loaded.append(model)
        return None

    resumed = prepare(
        env,
        execution_dir=target,
        interactive=True,
        prompt=answers,
        settings=RunSettings(model="fake/other"),
        setting_names={"model": "WEFT_RUNTIME_MODEL"},
        load_hank=load,
    )
    (question,) = answers.questions
    assert "WEFT_RUNTIME_MODEL asks for fake/other" in question
    assert resumed.hank_changed  # the run re-plans b on the new model
    assert resumed.settings.model == "fake/other"
    assert loaded == []  # the hank was loaded with the asked model already
    assert read_meta(layout.meta_path).run_settings.model == "fake/other"

    # Declined: refused, nothing recorded.
    with pytest.raises(RunSettingsChangedError, match="was declined"):
        prepare(
            env,
            execution_dir=target,
            interactive=True,
            prompt=Answers(False),
            settings=RunSettings(model="fake/third"),
        )
    assert read_meta(layout.meta_path).run_settings.model == "fake/other"

    # Without the flag: the kept model, the hank loaded with it, and said.
    kept = prepare(env, execution_dir=target, load_hank=load)
    assert kept.settings.model == "fake/other"
    assert loaded == ["fake/other"]
    assert kept.hank_changed  # b is still planned on fake/ok in the stored plan
    assert any("codons run on fake/other, kept with execution" in n for n in kept.notes)


def test_another_model_on_a_complete_execution_names_new_as_the_way(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    layout = prepare(env, execution_dir=target).layout
    _ran(layout, finished=("a", "b"), status="completed")
    with pytest.raises(RunSettingsChangedError, match=r"is complete.*Add --new"):
        prepare(env, execution_dir=target, settings=RunSettings(model="fake/other"))
    same = prepare(env, execution_dir=target, settings=RunSettings(model="fake/ok"))
    assert not same.hank_changed
    assert same.notes == ()


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ('{"maxDollars": 1e999}', r"out of range - at `\$\.runSettings\.maxDollars`"),
        ('{"maxSeconds": -3}', r"Expected `float` > 0.0 - at `\$\.runSettings\.maxSeconds`"),
        ('{"maxDollars": "5"}', r"got `str` - at `\$\.runSettings\.maxDollars`"),
        ('{"model": 7}', r"at `\$\.runSettings\.model`"),
        ("[]", r"at `\$\.runSettings`"),
    ],
)
def test_a_garbage_kept_setting_is_a_metadata_error_saying_where(
    env: dict[str, Path], tmp_path: Path, settings: str, match: str
) -> None:
    target = tmp_path / "exe"
    meta_path = prepare(env, execution_dir=target).layout.meta_path
    doc = json.loads(meta_path.read_text())
    del doc["runSettings"]
    text = json.dumps(doc).removesuffix("}")
    meta_path.write_text(f'{text}, "runSettings": {settings}}}')
    with pytest.raises(ExecutionMetaError, match=match):
        read_meta(meta_path)
    with pytest.raises(ExecutionMetaError, match="--new --force"):
        prepare(env, execution_dir=target)


def test_metadata_without_run_settings_keeps_nothing(env: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "exe"
    meta_path = prepare(env, execution_dir=target).layout.meta_path
    doc = json.loads(meta_path.read_text())
    del doc["runSettings"]
    meta_path.write_text(json.dumps(doc))
    assert read_meta(meta_path).run_settings == RunSettings()


def test_another_sentinel_model_after_a_run_is_refused_and_yes_keeps_it(
    env: dict[str, Path], tmp_path: Path
) -> None:
    target = tmp_path / "exe"
    layout = prepare(
        env, execution_dir=target, settings=RunSettings(sentinel_model="fake/a")
    ).layout
    _ran(layout, finished=("a",))
    with pytest.raises(RunSettingsChangedError, match=r"--new.*drop --sentinel-model"):
        prepare(env, execution_dir=target, settings=RunSettings(sentinel_model="fake/b"))
    accepted = prepare(
        env, execution_dir=target, yes=True, settings=RunSettings(sentinel_model="fake/b")
    )
    assert accepted.settings.sentinel_model == "fake/b"
    assert not accepted.hank_changed  # sentinels are no part of the plan
    kept = prepare(env, execution_dir=target)
    assert kept.settings.sentinel_model == "fake/b"
    assert any("sentinels run on fake/b, kept with execution" in n for n in kept.notes)
