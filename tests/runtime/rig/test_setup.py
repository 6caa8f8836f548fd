"""Rig setup on real files and real processes: copies, commands, output, failures, stops."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weft.config.schema import CommandOp, CopyOp
from weft.events.stream import RigOutputEvent, StreamData
from weft.runtime.rig.ignore import IgnoreRules, is_ignored
from weft.runtime.rig.output import LineSplitter
from weft.runtime.rig.setup import OutputLimits, RigResult, run_rig

Op = CopyOp | CommandOp


def ops(*items: dict[str, Any]) -> list[Op]:
    return msgspec.convert(list(items), type=list[Op])


def copy(src: str, dst: str, **kw: Any) -> dict[str, Any]:
    return {"type": "copy", "copy": {"from": src, "to": dst}, **kw}


def cmd(run: str, where: str = "project", **kw: Any) -> dict[str, Any]:
    return {"type": "command", "command": {"run": run, "workingDirectory": where}, **kw}


class Events:
    """Collects emitted events."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: StreamData) -> None:
        self.items.append((event.TYPE, msgspec.to_builtins(event)))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [d for k, d in self.items if k == kind]

    def text(self, stream: str) -> str:
        return "\n".join(d["line"] for d in self.of("rig.output") if d["stream"] == stream)


class Rig:
    def __init__(self, tmp_path: Path) -> None:
        self.hank = tmp_path / "hank"
        self.workspace = tmp_path / "exe" / "agentRoot"
        self.outside = tmp_path / "outside"
        for d in (self.hank, self.workspace, self.outside):
            d.mkdir(parents=True)
        self.events = Events()

    def file(self, rel: str, text: str = "x", mode: int | None = None) -> Path:
        path = self.hank / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if mode is not None:
            path.chmod(mode)
        return path

    async def run(self, *items: dict[str, Any], **kw: Any) -> RigResult:
        kw.setdefault("command_timeout", 30.0)
        kw.setdefault("kill_grace", 1.0)
        return await run_rig(
            ops(*items), hank_dir=self.hank, workspace=self.workspace, emit=self.events, **kw
        )


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


async def wait_dead(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert not [p for p in pids if alive(p)]


# --------------------------------------------------------------------------- copy


async def test_a_folder_is_copied_with_modes_and_default_ignores(rig: Rig) -> None:
    rig.file("tpl/run.sh", "#!/bin/sh\n", mode=0o755)
    rig.file("tpl/sub/data.txt", "data", mode=0o640)
    rig.file("tpl/node_modules/pkg/index.js")
    rig.file("tpl/dist/out.js")
    rig.file("tpl/sub/debug.log")
    rig.file("tpl/.git/HEAD")
    rig.file("tpl/.weft/state.json")
    old = time.time() - 86400
    os.utime(rig.hank / "tpl/sub/data.txt", (old, old))
    result = await rig.run(copy("tpl", "scaffold"))
    assert result.ok
    out = rig.workspace / "scaffold"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["run.sh", "sub/data.txt"]
    assert stat.S_IMODE((out / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "sub/data.txt").stat().st_mode) == 0o640
    assert abs((out / "sub/data.txt").stat().st_mtime - old) < 1
    op = result.operations[0]
    assert set(op.ignored) == {
        "tpl/.git/",
        "tpl/.weft/",
        "tpl/dist/",
        "tpl/node_modules/",
        "tpl/sub/debug.log",
    }
    assert op.files_copied == 2
    assert result.last_copied == out
    [info] = rig.events.of("info")
    assert "5 ignored entries" in info["message"]
    assert "tpl/node_modules/" in info["message"]


async def test_the_hank_gitignore_replaces_the_defaults(rig: Rig) -> None:
    (rig.hank / ".gitignore").write_text("# mine\n*.tmp\n!keep.tmp\n/tpl/secret/\n")
    rig.file("tpl/node_modules/a.js")
    rig.file("tpl/x.tmp")
    rig.file("tpl/keep.tmp")
    rig.file("tpl/secret/key")
    rig.file("tpl/deep/secret/kept")
    rig.file("tpl/app.log")
    result = await rig.run(copy("tpl", "t"))
    out = rig.workspace / "t"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["app.log", "deep/secret/kept", "keep.tmp", "node_modules/a.js"]
    assert set(result.operations[0].ignored) == {"tpl/x.tmp", "tpl/secret/"}


async def test_a_nested_gitignore_rules_its_own_subtree(rig: Rig) -> None:
    rig.file("tpl/lib/.gitignore", "*.gen\n")
    rig.file("tpl/lib/a.gen")
    rig.file("tpl/lib/a.src")
    rig.file("tpl/top.gen")
    await rig.run(copy("tpl", "t"))
    out = rig.workspace / "t"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["lib/.gitignore", "lib/a.src", "top.gen"]


async def test_a_named_source_is_copied_even_if_a_rule_matches_it(rig: Rig) -> None:
    rig.file("build.log", "explicit")
    result = await rig.run(copy("build.log", "logs/build.log"))
    assert result.ok
    assert (rig.workspace / "logs/build.log").read_text() == "explicit"
    assert result.last_copied == rig.workspace / "logs/build.log"


async def test_a_folder_merges_into_an_existing_one(rig: Rig) -> None:
    rig.file("tpl/new.txt", "new")
    rig.file("tpl/same.txt", "from hank")
    (rig.workspace / "t").mkdir()
    (rig.workspace / "t/mine.txt").write_text("agent")
    (rig.workspace / "t/same.txt").write_text("old")
    (rig.workspace / "t/same.txt").chmod(0o444)
    assert (await rig.run(copy("tpl", "t"))).ok
    assert (rig.workspace / "t/mine.txt").read_text() == "agent"
    assert (rig.workspace / "t/same.txt").read_text() == "from hank"
    assert (rig.workspace / "t/new.txt").read_text() == "new"


async def test_links_inside_the_copied_folder_are_kept(rig: Rig) -> None:
    rig.file("tpl/real/a.txt", "a")
    os.symlink("real/a.txt", rig.hank / "tpl/alias.txt")
    os.symlink("real", rig.hank / "tpl/alias-dir")
    assert (await rig.run(copy("tpl", "t"))).ok
    assert os.readlink(rig.workspace / "t/alias.txt") == "real/a.txt"
    assert (rig.workspace / "t/alias-dir/a.txt").read_text() == "a"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("../outside/secret", 'may not contain ".."'),
        ("tpl/../../outside/secret", 'may not contain ".."'),
        ("/etc/passwd", "must be a relative path"),
        (".", "the hank folder itself"),
        ("missing", "does not exist"),
        (".git/config", 'may not name or enter ".git"'),
        ("link-to-outside", "is a symbolic link"),
        ("link-to-outside/secret", "is a symbolic link"),
        ("tpl-escape", "outside the copied folder"),
        ("tpl-abs", "outside the copied folder"),
        ("tpl-fifo", "not a regular file, folder or link"),
    ],
)
async def test_sources_that_leave_the_hank_are_refused(rig: Rig, source: str, message: str) -> None:
    (rig.outside / "secret").write_text("do not copy")
    rig.file(".git/config")
    os.symlink(rig.outside, rig.hank / "link-to-outside")
    rig.file("tpl-escape/ok.txt")
    os.symlink("../../outside/secret", rig.hank / "tpl-escape/evil")
    rig.file("tpl-abs/ok.txt")
    os.symlink(rig.hank / "tpl-abs/ok.txt", rig.hank / "tpl-abs/abs")
    rig.file("tpl-fifo/ok.txt")
    os.mkfifo(rig.hank / "tpl-fifo/pipe")
    result = await rig.run(copy(source, "t"))
    assert result.failure is not None
    assert result.failure.failure_type == "other"
    assert message in (result.failure.message or "")
    assert result.reason is not None
    assert result.reason.startswith(f'Rig setup failed at copy operation 1 ("{source}" -> "t"): ')
    copied = [p for p in rig.workspace.rglob("*") if p.name in ("secret", "evil")]
    assert copied == []
    [failed] = rig.events.of("rig.setup.failed")
    assert failed["failureType"] == "other"
    assert failed["ignored"] is False


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("../escape", 'may not contain ".."'),
        ("/tmp/abs", "must be a relative path"),
        (".weft/x", 'may not name or enter ".weft"'),
        ("src/.git/hooks", 'may not name or enter ".git"'),
        ("read_only_data_source/x", "read-only data"),
        ("out-link/x", "is a symbolic link"),
        ("plain.txt/x", "is not a folder"),
    ],
)
async def test_targets_that_leave_the_workspace_are_refused(
    rig: Rig, target: str, message: str
) -> None:
    rig.file("f.txt", "payload")
    os.symlink(rig.outside, rig.workspace / "out-link")
    (rig.workspace / "plain.txt").write_text("")
    result = await rig.run(copy("f.txt", target))
    assert result.failure is not None
    assert message in (result.failure.message or "")
    assert list(rig.outside.iterdir()) == []
    assert not (rig.workspace.parent / "escape").exists()


async def test_a_symlink_at_the_target_is_replaced_not_written_through(rig: Rig) -> None:
    rig.file("f.txt", "payload")
    victim = rig.outside / "victim"
    victim.write_text("untouched")
    os.symlink(victim, rig.workspace / "f.txt")
    assert (await rig.run(copy("f.txt", "f.txt"))).ok
    assert victim.read_text() == "untouched"
    assert not (rig.workspace / "f.txt").is_symlink()
    assert (rig.workspace / "f.txt").read_text() == "payload"


async def test_a_folder_is_not_merged_through_a_symlinked_subfolder(rig: Rig) -> None:
    rig.file("tpl/sub/a.txt", "payload")
    (rig.workspace / "t").mkdir()
    os.symlink(rig.outside, rig.workspace / "t/sub")
    result = await rig.run(copy("tpl", "t"))
    assert result.failure is not None
    assert "symbolic link" in (result.failure.message or "")
    assert list(rig.outside.iterdir()) == []


async def test_a_file_onto_an_existing_folder_is_an_error(rig: Rig) -> None:
    rig.file("f.txt")
    (rig.workspace / "dir").mkdir()
    result = await rig.run(copy("f.txt", "dir"))
    assert result.failure is not None
    assert "is a folder" in (result.failure.message or "")


async def test_a_copy_into_itself_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # The execution lives inside the copied folder: the walk would meet its own
    # output and copy it again, level after level.
    hank = tmp_path / "hank"
    (hank / "work").mkdir(parents=True)
    (hank / "work" / "f.txt").write_text("x")
    workspace = hank / "work" / "exec" / "agentRoot"
    workspace.mkdir(parents=True)
    events = Events()
    result = await run_rig(ops(copy("work", "w")), hank_dir=hank, workspace=workspace, emit=events)
    assert result.failure is not None
    assert "lies inside the source" in (result.failure.message or "")
    assert list(workspace.iterdir()) == []
    [failed] = events.of("rig.setup.failed")
    assert failed["operationType"] == "copy"


async def test_a_copy_over_its_own_source_is_refused(tmp_path: Path) -> None:
    # The hank sits inside the workspace and the copy targets a folder holding
    # its source: the source would be overwritten by itself.
    workspace = tmp_path / "exe" / "agentRoot"
    hank = workspace / "h"
    (hank / "tpl").mkdir(parents=True)
    (hank / "tpl" / "f.txt").write_text("precious")
    result = await run_rig(ops(copy("tpl", "h")), hank_dir=hank, workspace=workspace, emit=Events())
    assert result.failure is not None
    assert "inside the target" in (result.failure.message or "")
    assert (hank / "tpl" / "f.txt").read_text() == "precious"


# --------------------------------------------------------------------------- ignore rules


GIT_PATTERNS = [
    "*.log",
    "build/",
    "/top.txt",
    "docs/**/*.md",
    "**/cache",
    "a/**",
    "!a/keep.txt",
    "x?z",
    "[ab]c.txt",
    "[!d]e.txt",
    "lib/*.o",
    "nested/deep/",
    "\\#hash",
]
GIT_PATHS = [
    "app.log",
    "src/app.log",
    "build/x",
    "src/build/y",
    "top.txt",
    "src/top.txt",
    "docs/a.md",
    "docs/x/y/b.md",
    "docs/b.txt",
    "cache/z",
    "src/cache/z",
    "a/keep.txt",
    "a/b/c.txt",
    "xyz",
    "xz",
    "ac.txt",
    "cc.txt",
    "ee.txt",
    "de.txt",
    "lib/m.o",
    "lib/sub/m.o",
    "nested/deep/f",
    "other/nested/deep/f",
    "#hash",
    "plain.txt",
]


def git_ignored(root: Path, patterns: list[str], paths: list[str]) -> set[str]:
    """The files ``git`` itself ignores under ``patterns``."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("\n".join(patterns) + "\n")
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(out.splitlines()) - {".gitignore"}


def weft_ignored(patterns: list[str], paths: list[str]) -> set[str]:
    """The files Weft's walk skips: the path or one of its folders is ignored."""
    rules = (IgnoreRules(patterns),)
    ignored = set()
    for rel in paths:
        parts = rel.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(is_ignored(rules, p, i < len(parts) - 1) for i, p in enumerate(prefixes)):
            ignored.add(rel)
    return ignored


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_ignore_rules_agree_with_git(tmp_path: Path) -> None:
    assert weft_ignored(GIT_PATTERNS, GIT_PATHS) == git_ignored(tmp_path, GIT_PATTERNS, GIT_PATHS)


SEGMENT = st.sampled_from(["a", "b", "ab", "x.log", "c.md"])
PATTERN = st.lists(
    st.sampled_from(["a", "b", "*", "?", "**", "*.log", "[ab]", "x*", "c.md"]),
    min_size=1,
    max_size=3,
).map("/".join)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@settings(max_examples=30)
@given(
    patterns=st.lists(
        st.tuples(st.booleans(), st.booleans(), st.booleans(), PATTERN).map(
            lambda t: ("!" if t[0] else "") + ("/" if t[1] else "") + t[3] + ("/" if t[2] else "")
        ),
        min_size=1,
        max_size=4,
    ),
    paths=st.lists(st.lists(SEGMENT, min_size=1, max_size=3).map("/".join), max_size=8),
)
def test_generated_ignore_rules_agree_with_git(patterns: list[str], paths: list[str]) -> None:
    import tempfile

    # A name cannot be both a file and a folder.
    files = sorted(set(paths))
    files = [p for p in files if not any(q.startswith(p + "/") for q in files)]
    with tempfile.TemporaryDirectory() as tmp:
        assert weft_ignored(patterns, files) == git_ignored(Path(tmp), patterns, files)


# --------------------------------------------------------------------------- commands


async def test_commands_run_in_the_workspace_with_the_given_env(rig: Rig) -> None:
    env = {"PATH": os.environ["PATH"], "GREETING": "hello"}
    result = await rig.run(cmd('pwd; echo "$GREETING"; touch made-here'), env=env)
    assert result.ok
    assert rig.events.text("stdout").splitlines() == [str(rig.workspace), "hello"]
    assert (rig.workspace / "made-here").exists()
    assert result.operations[0].exit_code == 0
    assert result.command_count == 1


async def test_last_copied_is_the_working_directory_of_later_commands(rig: Rig) -> None:
    rig.file("tpl/a.txt")
    rig.file("cfg.ini")
    result = await rig.run(
        copy("tpl", "deep/scaffold"),
        cmd("pwd > ../where-1", "lastCopied"),
        copy("cfg.ini", "conf/app.ini"),
        cmd("pwd > where-2", "lastCopied"),
        cmd("pwd > where-3"),
    )
    assert result.ok
    assert (rig.workspace / "deep/where-1").read_text().strip() == str(
        rig.workspace / "deep/scaffold"
    )
    assert (rig.workspace / "conf/where-2").read_text().strip() == str(rig.workspace / "conf")
    assert (rig.workspace / "where-3").read_text().strip() == str(rig.workspace)
    assert result.last_copied == rig.workspace / "conf/app.ini"


async def test_last_copied_without_a_copy_fails_clearly(rig: Rig) -> None:
    result = await rig.run(cmd("touch nope", "lastCopied"))
    assert result.failure is not None
    assert result.failure.failure_type == "other"
    assert "no copy succeeded before it" in (result.failure.message or "")
    assert not (rig.workspace / "nope").exists()


async def test_a_failure_stops_the_rig_and_describes_itself(rig: Rig) -> None:
    result = await rig.run(
        cmd("echo one"),
        cmd("echo building; echo 'npm ERR! missing' >&2; exit 7"),
        cmd("touch should-not-exist"),
        codon_id="build",
    )
    assert not result.ok
    failure = result.failure
    assert failure is not None
    assert (failure.index, failure.type, failure.exit_code) == (1, "command", 7)
    assert failure.failure_type == "command_failed"
    assert failure.output_tail.splitlines() == ["building", "npm ERR! missing"]
    assert result.reason == (
        "Rig setup failed at command operation 2 "
        "(\"echo building; echo 'npm ERR! missing' >&2; exit 7\"): exit code 7: "
        "building\nnpm ERR! missing"
    )
    assert not (rig.workspace / "should-not-exist").exists()
    assert len(result.operations) == 2
    [failed] = rig.events.of("rig.setup.failed")
    assert failed == {
        "failureType": "command_failed",
        "operationType": "command",
        "commandIndex": 1,
        "ignored": False,
        "message": "exit code 7",
        "exitCode": 7,
        "codonId": "build",
    }
    assert all(d["codonId"] == "build" for d in rig.events.of("rig.output"))


async def test_allow_failure_lets_the_rig_go_on(rig: Rig) -> None:
    result = await rig.run(
        cmd("exit 3", allowFailure=True),
        copy("missing", "x", allowFailure=True),
        cmd("touch reached"),
    )
    assert result.ok
    assert (rig.workspace / "reached").exists()
    assert [op.failure_ignored for op in result.operations] == [True, True, False]
    assert [d["ignored"] for d in rig.events.of("rig.setup.failed")] == [True, True]
    assert result.last_copied is None


async def test_ignore_failures_covers_every_operation(rig: Rig) -> None:
    result = await rig.run(cmd("exit 1"), cmd("touch reached"), ignore_failures=True)
    assert result.ok
    assert [op.failure_ignored for op in result.ignored_failures] == [True]
    assert (rig.workspace / "reached").exists()


async def test_a_command_that_cannot_start_is_an_other_failure(rig: Rig) -> None:
    rig.file("tpl/a")
    result = await rig.run(copy("tpl", "gone"), cmd("rm -rf gone"), cmd("true", "lastCopied"))
    assert result.failure is not None
    assert result.failure.failure_type == "other"
    assert "could not start /bin/sh" in (result.failure.message or "")


async def test_a_signal_death_is_reported(rig: Rig) -> None:
    result = await rig.run(cmd("kill -TERM $$"))
    assert result.failure is not None
    assert result.failure.exit_code == -15
    assert result.failure.message == "killed by SIGTERM"


# --------------------------------------------------------------------------- output


async def test_output_is_streamed_per_stream_and_coalesced(rig: Rig) -> None:
    # Each stream's 200 lines leave in one write, so how they coalesce does not
    # hang on how fast a loaded machine runs the shell's loop.
    script = (
        "out=$(for i in $(seq 1 200); do echo out-$i; done); "
        "err=$(for i in $(seq 1 200); do echo err-$i; done); "
        'echo "$out"; echo "$err" >&2'
    )
    await rig.run(cmd(script, allowFailure=True), cmd("echo second"))
    outputs = rig.events.of("rig.output")
    first = [d for d in outputs if d["commandIndex"] == 0]
    assert rig.events.text("stdout").splitlines()[:200] == [f"out-{i}" for i in range(1, 201)]
    assert [line for d in first if d["stream"] == "stderr" for line in d["line"].split("\n")] == [
        f"err-{i}" for i in range(1, 201)
    ]
    assert sum(d["lines"] for d in first) == 400
    # 400 lines printed at once cannot be 400 events.
    assert len(first) < 40
    assert all("droppedLines" not in d for d in first)
    assert [d["line"] for d in outputs if d["commandIndex"] == 1] == ["second"]


async def test_a_quiet_stream_is_flushed_without_waiting_for_the_end(rig: Rig) -> None:
    # The command only finishes once the test has seen its first line.
    go = rig.workspace / "go"

    def emit(event: StreamData) -> None:
        rig.events(event)
        if isinstance(event, RigOutputEvent) and event.line == "early":
            go.touch()

    script = "echo early; while [ ! -e go ]; do sleep 0.01; done; echo late"
    result = await run_rig(
        ops(cmd(script)),
        hank_dir=rig.hank,
        workspace=rig.workspace,
        emit=emit,
        command_timeout=20,
    )
    assert result.ok
    assert [d["line"] for d in rig.events.of("rig.output")] == ["early", "late"]


async def test_a_flood_is_bounded_and_keeps_its_tail(rig: Rig) -> None:
    limits = OutputLimits(
        interval=0.05, event_bytes=2048, streamed_bytes=16 * 1024, trickle_interval=0.2
    )
    # About 8 MB of output: far more than the journal may take.
    script = "seq 1 1000000; exit 1"
    started = time.monotonic()
    result = await rig.run(cmd(script), limits=limits)
    elapsed = time.monotonic() - started
    events = rig.events.of("rig.output")
    streamed = sum(len(d["line"]) for d in events)
    assert streamed < limits.streamed_bytes + 2 * limits.event_bytes + 1024
    windows = elapsed / limits.interval + 2
    assert len(events) <= 2 * windows
    total = sum(d["lines"] + d.get("droppedLines", 0) for d in events)
    assert total == 1_000_000
    stdout = [d for d in events if d["stream"] == "stdout"]
    assert stdout[-1]["line"].split("\n")[-1] == "1000000"
    failure = result.failure
    assert failure is not None
    assert failure.output_tail.splitlines()[-2:] == ["999999", "1000000"]
    assert len(failure.output_tail) <= limits.tail_bytes
    reason = result.reason or ""
    assert reason.endswith("999999\n1000000")
    assert len(reason) < 2200


async def test_long_lines_are_cut_into_pieces(rig: Rig) -> None:
    limits = OutputLimits(line_bytes=100)
    await rig.run(cmd("head -c 250 /dev/zero | tr '\\0' a; echo; printf tail"), limits=limits)
    text = rig.events.text("stdout").split("\n")
    assert [len(t) for t in text] == [100, 100, 50, 4]


@given(
    lines=st.lists(st.text(alphabet="ab\r", max_size=12), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_line_splitting_ignores_chunk_boundaries(lines: list[str], cuts: list[int]) -> None:
    data = "".join(f"{line}\n" for line in lines).encode()
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    framer = LineSplitter(line_bytes=1 << 20, keep=1 << 20)
    out: list[str] = []
    for a, b in itertools.pairwise(bounds):
        got, skipped = framer.push(data[a:b])
        assert skipped == 0
        out.extend(got)
    out.extend(framer.finish())
    assert out == [line.removesuffix("\r") for line in lines]


def test_a_large_chunk_keeps_only_its_newest_lines() -> None:
    framer = LineSplitter(line_bytes=1000, keep=20)
    lines, skipped = framer.push(b"".join(b"line-%03d\n" % i for i in range(100)))
    assert lines[-1] == "line-099"
    assert skipped + len(lines) == 100
    assert sum(len(x) + 1 for x in lines) <= 20 + 9


# --------------------------------------------------------------------------- stopping


async def test_a_timeout_kills_the_process_group(rig: Rig) -> None:
    script = "trap '' TERM; sleep 60 & echo $! > bg.pid; echo $$ > sh.pid; wait"
    started = time.monotonic()
    result = await rig.run(cmd(script), command_timeout=0.5, kill_grace=0.3)
    assert time.monotonic() - started < 10
    failure = result.failure
    assert failure is not None
    assert failure.failure_type == "timeout"
    assert failure.message == "timed out after 0.5 s"
    pids = [int((rig.workspace / n).read_text()) for n in ("bg.pid", "sh.pid")]
    await wait_dead(pids)


async def test_leftover_background_processes_are_killed(rig: Rig) -> None:
    result = await rig.run(cmd("sleep 60 & echo $! > bg.pid; echo started"))
    assert result.ok
    await wait_dead([int((rig.workspace / "bg.pid").read_text())])


async def test_cancelling_the_rig_kills_the_process_group(rig: Rig) -> None:
    script = "sleep 60 & echo $! > bg.pid; echo $$ > sh.pid; echo ready; wait"
    task = asyncio.create_task(rig.run(cmd(script), kill_grace=0.5))
    await wait_for_file(rig.workspace / "sh.pid")
    pids = [int((rig.workspace / n).read_text()) for n in ("bg.pid", "sh.pid")]
    assert all(alive(p) for p in pids)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The shell is reaped by the time the cancelled rig returns; its orphaned
    # child has been signalled and dies as soon as the kernel gets to it.
    assert not alive(pids[1])
    await wait_dead(pids)
    assert "ready" in rig.events.text("stdout")


async def test_cancelling_a_stubborn_command_escalates_to_sigkill(rig: Rig) -> None:
    script = "trap '' TERM; echo $$ > sh.pid; while :; do sleep 0.05; done"
    task = asyncio.create_task(rig.run(cmd(script), kill_grace=0.3))
    await wait_for_file(rig.workspace / "sh.pid")
    pid = int((rig.workspace / "sh.pid").read_text())
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started >= 0.3
    await wait_dead([pid])


async def test_cancelling_during_a_copy_stops_it(rig: Rig) -> None:
    for i in range(400):
        rig.file(f"big/f{i:03d}.txt", "x" * 2000)
    task = asyncio.create_task(rig.run(copy("big", "b"), cmd("touch after")))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    copied = len(list((rig.workspace / "b").glob("*"))) if (rig.workspace / "b").exists() else 0
    await asyncio.sleep(0.2)
    # Nothing is copied after the cancelled rig returned, and no command ran.
    after = len(list((rig.workspace / "b").glob("*"))) if (rig.workspace / "b").exists() else 0
    assert after == copied
    assert not (rig.workspace / "after").exists()
