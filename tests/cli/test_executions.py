"""Finding executions: ``weft ls``, ``weft clean``, the execution argument of every
command (a directory, an id, a hank, or nothing) and ``weft run --execution``.

One real execution is made by ``weft run`` on the fake agent per test module;
tests copy it under a managed root of their own and change only what they test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import codon, subprocess_environment, write_hank

from weft.agents.fake.claude_session import sanitize_cwd
from weft.cli.clean import candidates, duration
from weft.cli.resolve import ResolveError, resolve_execution, scan
from weft.store.lock import LOCK
from weft.web.listing import read_execution

TIMEOUT = 60.0


def weft(*args: str | Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m weft`` to the end."""
    return subprocess.run(
        [sys.executable, "-m", "weft", *map(str, args)],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A hank and one completed managed execution of it (made by a real ``weft run``)."""
    tmp = tmp_path_factory.mktemp("made")
    hank = write_hank(tmp / "project", codon("a"), codon("b"))
    env = subprocess_environment(tmp)
    done = weft("run", "--headless", env=env, cwd=hank.parent)
    assert done.returncode == 0, done.stderr + done.stdout
    (execution,) = (tmp / "managed").iterdir()
    return hank, execution


@pytest.fixture
def world(
    made: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """This test's managed root holding a copy of the made execution; the hank and the
    fake agent's sessions copied too."""
    hank_src, execution_src = made
    project = tmp_path / "project"
    shutil.copytree(hank_src.parent, project)
    managed = tmp_path / "managed"
    managed.mkdir()
    execution = managed / execution_src.name
    shutil.copytree(execution_src, execution, symlinks=True)
    set_meta(execution, hankPath=str((project / "hank.json").resolve()))
    env = subprocess_environment(tmp_path)
    # The fake agent's sessions, where it looks for them from the copy's workspace.
    made_sessions = execution_src.parent.parent / "claude-config" / "projects"
    workspace = made_sessions / sanitize_cwd(str(execution_src / "agentRoot"))
    if workspace.is_dir():
        projects = Path(env["CLAUDE_CONFIG_DIR"]) / "projects"
        shutil.copytree(workspace, projects / sanitize_cwd(str(execution / "agentRoot")))
    monkeypatch.setenv("WEFT_RUNTIME_EXECUTION_BASE_DIR", str(managed))
    return {"project": project, "managed": managed, "execution": execution, "env": env}


def set_meta(execution: Path, **fields: Any) -> None:
    path = execution / ".weft" / "execution-meta.json"
    meta = json.loads(path.read_text())
    meta.update(fields)
    path.write_text(json.dumps(meta))


def copy_as(world: dict[str, Any], name: str, **meta: Any) -> Path:
    """Another execution in the managed root: a copy of the made one, its metadata changed."""
    target: Path = world["managed"] / name
    shutil.copytree(world["execution"], target, symlinks=True)
    set_meta(target, **meta)
    return target


def stamp(delta: timedelta) -> str:
    return (datetime.now(UTC) - delta).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- resolving


def test_a_directory_an_id_a_prefix_and_a_hank_all_name_the_execution(
    world: dict[str, Any],
) -> None:
    execution: Path = world["execution"]
    elsewhere = world["project"].parent
    assert resolve_execution(str(execution), cwd=elsewhere) == execution
    assert resolve_execution(str(execution / ".weft"), cwd=elsewhere) == execution
    assert resolve_execution(execution.name, cwd=elsewhere) == execution
    assert resolve_execution(execution.name[:9], cwd=elsewhere) == execution
    assert resolve_execution("project/hank.json", cwd=elsewhere) == execution
    assert resolve_execution("project", cwd=elsewhere) == execution
    # No argument: the latest execution of ./hank.json, or the folder itself.
    assert resolve_execution(None, cwd=world["project"]) == execution
    assert resolve_execution(None, cwd=execution) == execution


def test_a_hank_means_its_most_recently_used_execution(world: dict[str, Any]) -> None:
    old = world["execution"]
    set_meta(old, lastUsed=stamp(timedelta(days=2)))
    newer = copy_as(world, "2-newer", lastUsed=stamp(timedelta(hours=1)))
    copy_as(world, "3-other-hank", lastUsed=stamp(timedelta(0)), hankPath="/elsewhere/hank.json")
    assert resolve_execution(None, cwd=world["project"]) == newer


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("nowhere/at/all", "no such execution directory, execution id or hank"),
        ("project/prompt.md", "not an execution"),
        (None, "is not an execution and holds no hank.json"),
    ],
)
def test_what_names_no_execution_is_refused_with_what_was_expected(
    world: dict[str, Any], arg: str | None, expected: str
) -> None:
    (world["project"] / "prompt.md").write_text("x")
    with pytest.raises(ResolveError, match=expected):
        resolve_execution(arg, cwd=world["project"].parent)


def test_a_hank_without_an_execution_says_how_to_start_one(world: dict[str, Any]) -> None:
    fresh = write_hank(world["project"].parent / "fresh", codon("a"))
    with pytest.raises(ResolveError, match="has no execution yet"):
        resolve_execution(None, cwd=fresh.parent)


@pytest.mark.parametrize(
    "argv",
    [
        ["rollback", "--last-success"],
        ["store", "rebuild"],
        ["status"],
        ["thread"],
        ["checkpoints"],
        ["attach", "--headless"],
    ],
)
def test_commands_on_a_mistyped_path_create_nothing_there(
    world: dict[str, Any], tmp_path: Path, argv: list[str]
) -> None:
    typo = tmp_path / "typo"
    typo.mkdir()
    done = weft(*argv, "typo", env=world["env"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "not an execution" in done.stderr
    assert list(typo.iterdir()) == []
    # And from an empty folder with no argument at all.
    done = weft(*argv, env=world["env"], cwd=typo)
    assert done.returncode == 2, done.stderr
    assert list(typo.iterdir()) == []


@pytest.mark.parametrize("how", ["nothing", "hank", "id"])
def test_breaker_reset_names_the_execution_as_every_command_does(
    world: dict[str, Any], how: str
) -> None:
    execution = world["execution"]
    named = {"nothing": [], "hank": ["project"], "id": [execution.name[:8]]}[how]
    cwd = world["project"] if how == "nothing" else world["project"].parent
    done = weft("breaker", "reset", *named, "anthropic", env=world["env"], cwd=cwd)
    assert done.returncode == 2
    # Found: what stops it is that no run is live on it.
    assert f"{execution}: no run is active" in done.stderr, done.stderr


def test_status_thread_and_checkpoints_find_the_execution_from_the_hank_folder(
    world: dict[str, Any],
) -> None:
    for command in ("status", "thread", "checkpoints"):
        done = weft(command, "--json", env=world["env"], cwd=world["project"])
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout)
    status = json.loads(weft("status", "--json", env=world["env"], cwd=world["project"]).stdout)
    assert status["execution"] == str(world["execution"])


# --------------------------------------------------------------------------- weft ls


def test_ls_lists_newest_first_with_hank_data_state_cost_and_size(
    world: dict[str, Any],
) -> None:
    set_meta(world["execution"], lastUsed=stamp(timedelta(days=3)))
    copy_as(world, "9-newest", lastUsed=stamp(timedelta(minutes=5)), hankPath="/x/other.json")
    done = weft("ls", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr
    header, first, second = done.stdout.splitlines()
    assert header.split() == ["ID", "HANK", "DATA", "STATE", "LAST", "USED", "COST", "SIZE"]
    assert first.startswith("9-newest")
    assert "5m ago" in first
    assert "x/other.json" in first
    assert second.startswith(world["execution"].name)
    assert "project/hank.json" in second
    assert "completed" in second
    assert "3d ago" in second
    assert "$0.0" in second
    assert "kB" in second
    listed = json.loads(weft("executions", "--json", env=world["env"], cwd=world["project"]).stdout)
    assert [e["id"] for e in listed] == ["9-newest", world["execution"].name]
    assert listed[1]["cost"] > 0
    assert listed[1]["sizeBytes"] > 0
    assert listed[1]["state"] == "completed"


def test_ls_filters_by_hank_and_state(world: dict[str, Any]) -> None:
    copy_as(world, "9-other", hankPath="/x/other.json")
    mine = json.loads(
        weft(
            "ls", "--hank", "project", "--json", env=world["env"], cwd=world["project"].parent
        ).stdout
    )
    assert [e["id"] for e in mine] == [world["execution"].name]
    failed = json.loads(
        weft("ls", "--state", "failed", "--json", env=world["env"], cwd=world["project"]).stdout
    )
    assert failed == []


def test_ls_shows_a_held_execution_as_live(world: dict[str, Any]) -> None:
    lock = world["execution"] / ".weft" / LOCK
    lock.write_text(
        json.dumps(
            {
                "pid": os.getppid(),
                "startTime": stamp(timedelta(0)),
                "lastHeartbeat": datetime.now(UTC).timestamp(),
                "runId": "r",
            }
        )
    )
    (info,) = scan()
    assert info.state == "live"


# --------------------------------------------------------------------------- weft clean


def test_clean_dry_run_removes_nothing_and_clean_removes_completed_ones(
    world: dict[str, Any],
) -> None:
    execution = world["execution"]
    dry = weft("clean", "--dry-run", env=world["env"], cwd=world["project"])
    assert dry.returncode == 0, dry.stderr
    assert f"would remove {execution}" in dry.stdout
    assert "would remove 1 execution," in dry.stdout
    assert execution.is_dir()
    done = weft("clean", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr
    assert "removed 1 execution," in done.stdout
    assert not execution.exists()
    assert "nothing to remove" in weft("clean", env=world["env"], cwd=world["project"]).stdout


def test_clean_filters_by_state_and_age(world: dict[str, Any]) -> None:
    found = scan()
    assert candidates(found, states=["failed"], older_than=None, hank=None) == []
    set_meta(world["execution"], lastUsed=stamp(timedelta(days=2)))
    found = scan()
    assert candidates(found, states=None, older_than=duration("3d"), hank=None) == []
    assert len(candidates(found, states=["any"], older_than=duration("1d"), hank=None)) == 1


def test_clean_never_removes_a_live_execution(world: dict[str, Any]) -> None:
    found = [
        type(e)(**{**{f: getattr(e, f) for f in e.__slots__}, "live_pid": 1, "state": "live"})
        for e in scan()
    ]
    assert candidates(found, states=["any"], older_than=None, hank=None) == []


def test_clean_keeps_an_execution_a_run_is_preparing(world: dict[str, Any]) -> None:
    import fcntl

    from weft.cli.clean import remove

    (info,) = scan()
    fd = os.open(info.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert remove(info) == "a `weft run` is preparing it right now"
    finally:
        os.close(fd)
    assert info.root.is_dir()


def test_a_rolled_back_execution_is_not_completed_and_clean_keeps_it(
    world: dict[str, Any],
) -> None:
    done = weft("rollback", "--codon", "a", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr + done.stdout
    thread = weft("thread", env=world["env"], cwd=world["project"])
    assert "next codon: b" in thread.stdout
    (info,) = scan()
    assert info.state == "rolled-back"
    assert read_execution(world["execution"]).state == "rolled-back"  # weft ui's list too
    listed = weft("ls", "--state", "rolled-back", env=world["env"], cwd=world["project"])
    assert "rolled-back" in listed.stdout.splitlines()[1]
    dry = weft("clean", "--dry-run", env=world["env"], cwd=world["project"])
    assert "nothing to remove" in dry.stdout
    asked = weft("clean", "--state", "rolled-back", "-n", env=world["env"], cwd=world["project"])
    assert f"would remove {world['execution']}" in asked.stdout


def test_an_execution_with_codons_left_is_incomplete(world: dict[str, Any]) -> None:
    _rewrite(world, codon("a"), codon("b"), codon("c"), codon("d"))
    spent = sum(r.get("finalCost") or 0.0 for run in _state(world)["runs"] for r in run["codons"])
    args = ("run", "--headless", "--yes", "--max-cost", f"{spent + 0.002:.4f}")
    done = weft(*args, env=world["env"], cwd=world["project"])
    assert done.returncode == 3, done.stderr + done.stdout  # stopped by the budget
    (info,) = scan()
    assert info.state == "budget-stopped"  # not failed, not completed: codons are left
    assert candidates(scan(), states=None, older_than=None, hank=None) == []


@pytest.mark.parametrize("text", ["", "7 days", "-1d", "1y"])
def test_a_bad_age_is_a_usage_error(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        duration(text)


# --------------------------------------------------------------------------- weft run --execution


def test_the_continue_command_works_from_any_folder_with_the_runs_flags(
    world: dict[str, Any], tmp_path: Path
) -> None:
    execution = world["execution"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = weft(
        "run",
        "--execution",
        execution,
        "--headless",
        "-m",
        "fake/sonnet",  # the model it ran on: another one is a change to confirm
        "--max-cost",
        "5",
        env=world["env"],
        cwd=elsewhere,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    (line,) = [x for x in done.stdout.splitlines() if "continue " in x]
    command = line.split("continue", 1)[1].strip()
    assert command == f"weft run --execution {execution} --model fake/sonnet --max-cost 5"
    # The printed command itself, from yet another folder, works.
    again = weft(*command.split()[1:], "--headless", env=world["env"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr + again.stdout


def test_another_hank_needs_rebind_and_says_so(world: dict[str, Any], tmp_path: Path) -> None:
    execution = world["execution"]
    other = tmp_path / "other.json"
    doc = json.loads((world["project"] / "hank.json").read_text())
    doc["hank"].append(codon("c"))  # what ran is unchanged: a rebind may follow it
    other.write_text(json.dumps(doc))
    refused = weft(
        "run",
        other,
        "--execution",
        execution,
        "--headless",
        "--yes",
        env=world["env"],
        cwd=tmp_path,
    )
    assert refused.returncode == 2
    assert "add --rebind" in refused.stderr
    assert str(other) in refused.stderr
    meta = json.loads((execution / ".weft" / "execution-meta.json").read_text())
    assert meta["hankPath"] == str((world["project"] / "hank.json").resolve())
    done = weft(
        "run",
        other,
        "--execution",
        execution,
        "--headless",
        "--rebind",
        env=world["env"],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"rebound execution {execution}" in done.stdout
    meta = json.loads((execution / ".weft" / "execution-meta.json").read_text())
    assert meta["hankPath"] == str(other)


def test_checkpoints_show_a_time_column_newest_first(world: dict[str, Any]) -> None:
    done = weft("checkpoints", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["TIME", "SHA", "TYPE", "CODON", "RUN"]
    assert [row.split()[4] for row in rows] == ["b", "a"]
    times = [" ".join(row.split()[:2]) for row in rows]
    assert times == sorted(times, reverse=True)


def test_inline_input_is_the_data_and_the_same_text_resumes(
    world: dict[str, Any], tmp_path: Path
) -> None:
    env = {**world["env"], "XDG_CACHE_HOME": str(tmp_path / "cache")}
    first = weft("run", "--headless", "-i", "hello there", env=env, cwd=world["project"])
    assert first.returncode == 0, first.stderr + first.stdout
    assert "Created execution" in first.stdout
    (cached,) = (tmp_path / "cache" / "weft" / "inputs").glob("*/input.txt")
    assert cached.read_text() == "hello there"
    again = weft("run", "--input", "hello there", "--headless", env=env, cwd=world["project"])
    assert again.returncode == 0, again.stderr
    assert "Resuming execution" in again.stdout
    both = weft("run", "hank.json", "data", "-i", "x", env=env, cwd=world["project"])
    assert both.returncode == 2
    assert "pass the data one way" in both.stderr


def test_json_mode_prints_why_a_run_was_refused_on_stdout(
    world: dict[str, Any], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hank": [{"id": "x"}]}))
    done = weft("run", bad, "--json", env=world["env"], cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stdout.splitlines()
    refused = json.loads(line)
    assert refused["type"] == "run.refused"
    assert refused["data"]["exitCode"] == 2
    assert {p["code"] for p in refused["data"]["problems"]} >= {"missing_prompt"}
    assert "weft: error: invalid configuration" in done.stderr


def test_p_is_port() -> None:
    from weft.cli import build_parser

    assert build_parser().parse_args(["run", "-p", "8123"]).port == 8123


def test_a_weft_json_next_to_the_hank_is_used_and_said(
    world: dict[str, Any], tmp_path: Path
) -> None:
    env = {**world["env"], "XDG_CONFIG_HOME": str(tmp_path / "config")}
    (world["project"] / "weft.json").write_text(json.dumps({"model": "fake/haiku"}))
    done = weft("run", "--headless", "--new", env=env, cwd=tmp_path / "project")
    assert done.returncode == 0, done.stderr
    assert f"settings from {world['project'] / 'weft.json'}" in done.stdout
    assert "(fake/haiku)" in done.stdout


def test_a_user_weft_json_is_the_fallback(tmp_path: Path) -> None:
    from weft.cli.run import discover_config

    hank = write_hank(tmp_path / "h", codon("a"))
    user = tmp_path / "config" / "weft" / "weft.json"
    old = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    try:
        assert discover_config(hank) is None
        user.parent.mkdir(parents=True)
        user.write_text("{}")
        assert discover_config(hank) == user
        (hank.parent / "weft.json").write_text("{}")
        assert discover_config(hank) == hank.parent / "weft.json"
    finally:
        if old is None:
            del os.environ["XDG_CONFIG_HOME"]
        else:
            os.environ["XDG_CONFIG_HOME"] = old


def test_run_refuses_before_creating_anything_what_a_codon_would_meet(tmp_path: Path) -> None:
    env = subprocess_environment(tmp_path)
    env["PATH"] = os.path.dirname(sys.executable)  # no claude here
    env.pop("WEFT_CLAUDE_BIN", None)
    hank = write_hank(tmp_path / "h", codon("a"), codon("b", model="sonnet"))
    done = weft("run", hank, "--headless", env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert "`claude` is not on PATH" in done.stderr
    assert "weft run -m fake/sonnet" in done.stderr
    assert not (tmp_path / "managed").exists()
    typo = write_hank(tmp_path / "t", codon("a", prompt="See <%DATA_DIRR%>."))
    done = weft("run", typo, "--headless", env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert "unknown template variable <%DATA_DIRR%>" in done.stderr
    assert not (tmp_path / "managed").exists()


def _state(world: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((world["execution"] / ".weft" / "state.json").read_text())
    return state


def _statuses(world: dict[str, Any]) -> dict[str, list[str]]:
    """Codon id -> the status of each of its records, over every run."""
    out: dict[str, list[str]] = {}
    for run in _state(world)["runs"]:
        for record in run["codons"]:
            out.setdefault(record["codonId"], []).append(record["status"])
    return out


def _rewrite(world: dict[str, Any], *codons: dict[str, Any]) -> None:
    hank = world["project"] / "hank.json"
    doc = json.loads(hank.read_text())
    doc["hank"] = list(codons)
    hank.write_text(json.dumps(doc))


def test_a_codon_added_after_what_ran_runs_on_resume(world: dict[str, Any]) -> None:
    _rewrite(world, codon("a"), codon("b"), codon("c"))
    done = weft("run", "--headless", "--yes", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr + done.stdout
    assert "resuming with the changed hank" in done.stdout
    assert "The plan follows the changed hank after b: added c" in done.stdout
    statuses = _statuses(world)
    assert statuses["c"] == ["completed"]
    assert statuses["a"] == ["completed"]
    assert statuses["b"] == ["completed"]
    assert [e["codonId"] for e in _state(world)["executionPlan"]] == ["a", "b", "c"]


def test_an_added_codon_that_continues_the_previous_one_resumes_its_session(
    world: dict[str, Any],
) -> None:
    # The added codon's predecessor finished in the earlier run: its session is in
    # the thread, not in this run's sessions.
    _rewrite(world, codon("a"), codon("b"), codon("c", mode="continue-previous"))
    done = weft("run", "--headless", "--yes", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr + done.stdout
    assert "no_session" not in done.stdout + done.stderr
    runs = _state(world)["runs"]
    records = {r["codonId"]: r for run in runs for r in run["codons"] if r["status"] == "completed"}
    assert records["c"]["claudeSessionId"] == records["b"]["claudeSessionId"]


def test_codons_removed_before_they_ran_do_not_run(world: dict[str, Any]) -> None:
    crash = "@@fake:scenario=auth_error@@"  # a permanent failure: no cool-downs
    _rewrite(world, codon("a"), codon("b"), codon("c", prompt=crash), codon("d"))
    done = weft("run", "--headless", "--yes", env=world["env"], cwd=world["project"])
    assert done.returncode != 0
    assert "d" not in _statuses(world)
    _rewrite(world, codon("a"), codon("b"), codon("e"))
    done = weft("run", "--headless", "--yes", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr + done.stdout
    statuses = _statuses(world)
    assert statuses["e"] == ["completed"]
    assert "d" not in statuses
    assert "completed" not in statuses["c"]  # its failed attempts only: it did not run again
    assert [e["codonId"] for e in _state(world)["executionPlan"]] == ["a", "b", "e"]


def test_codons_removed_after_a_stopped_run_stay_removed(world: dict[str, Any]) -> None:
    # A budget stops the run in c with d left to run (the thread did not fail). The
    # cap sits just above what a and b spent, well inside c's spend (every fake codon
    # costs over a cent; how much varies with the prompt's paths, so the cap is
    # measured from this execution rather than written down).
    _rewrite(world, codon("a"), codon("b"), codon("c"), codon("d"))
    spent = sum(r.get("finalCost") or 0.0 for run in _state(world)["runs"] for r in run["codons"])
    assert spent > 0.005
    args = ("run", "--headless", "--yes", "--max-cost", f"{spent + 0.002:.4f}")
    done = weft(*args, env=world["env"], cwd=world["project"])
    assert done.returncode == 3, done.stderr + done.stdout
    assert "d" not in _statuses(world)
    _rewrite(world, codon("a"), codon("b"), codon("c"))
    for _ in range(2):  # the removal is journaled: the next resume does not bring d back
        # The cap given above is kept with the execution: raised, or c stays to do.
        args = ("run", "--headless", "--yes", "--max-cost", "5")
        done = weft(*args, env=world["env"], cwd=world["project"])
        assert done.returncode == 0, done.stderr + done.stdout
        assert "d" not in _statuses(world)
    assert [e["codonId"] for e in _state(world)["executionPlan"]] == ["a", "b", "c"]


def test_a_change_to_what_ran_is_refused_with_the_difference(world: dict[str, Any]) -> None:
    before = _state(world)
    _rewrite(world, codon("a", prompt="Other words.\n"), codon("b"))
    done = weft("run", "--headless", "--yes", env=world["env"], cwd=world["project"])
    assert done.returncode == 2
    assert "changed what execution" in done.stderr
    assert "changed a, which already ran" in done.stderr
    assert "--new" in done.stderr
    _rewrite(world, codon("a"), codon("c"))
    done = weft("run", "--headless", "--yes", env=world["env"], cwd=world["project"])
    assert done.returncode == 2
    assert "removed b, which already ran (ran: a, b; now: a, c)" in done.stderr
    _rewrite(world, codon("z"), codon("a"), codon("b"))
    done = weft("run", "--headless", "--yes", env=world["env"], cwd=world["project"])
    assert done.returncode == 2
    assert "no longer starts with what already ran (a, b)" in done.stderr
    assert _state(world) == before  # nothing ran, nothing recorded


def test_the_idle_timeout_reaches_the_server_from_the_flag_or_the_setting(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from weft.cli import build_parser
    from weft.cli.run import _options, _settings
    from weft.config.loader import load_hank

    loaded = load_hank(world["project"] / "hank.json", check_environment=False)
    args = build_parser().parse_args(["run", "--idle-timeout", "7"])
    settings = _settings(args, loaded).config
    assert _options(args, settings, {}).server_idle_timeout == 7
    args = build_parser().parse_args(["run"])
    assert _options(args, _settings(args, loaded).config, {}).server_idle_timeout == 0
    monkeypatch.setenv("WEFT_RUNTIME_IDLE_TIMEOUT", "5")
    assert _options(args, _settings(args, loaded).config, {}).server_idle_timeout == 5
    # A run with it set goes through (it used to be refused).
    env = {**world["env"], "WEFT_RUNTIME_IDLE_TIMEOUT": "5"}
    done = weft("run", "--headless", "--new", env=env, cwd=world["project"])
    assert done.returncode == 0, done.stderr
    done = weft("run", "--headless", "--idle-timeout", "256", env=env, cwd=world["project"])
    assert done.returncode == 2
    assert "'256' is not a whole number of seconds from 0 to 255" in done.stderr


def test_headless_lines_use_user_words_and_json_keeps_the_states(
    world: dict[str, Any],
) -> None:
    done = weft("run", "--new", "--headless", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr
    assert "completing-sentinels" not in done.stdout
    assert "idle:" not in done.stdout
    assert "a: finishing" in done.stdout
    assert "a: starting the agent" in done.stdout
    raw = weft("run", "--new", "--json", env=world["env"], cwd=world["project"])
    assert '"completing-sentinels"' in raw.stdout


def test_verbose_lines_show_the_agents_tool_calls_and_messages(tmp_path: Path) -> None:
    from tests.runtime.hanks import write_file

    hank = write_hank(tmp_path / "v", codon("a", write_file("notes.md", "hello")))
    env = subprocess_environment(tmp_path)
    done = weft("run", "--verbose", env=env, cwd=hank.parent)  # no TTY needed: lines
    assert done.returncode == 0, done.stderr
    assert "a: tool Write notes.md" in done.stdout
    assert "a: Write ok" in done.stdout
    assert "a: says: " in done.stdout
    plain = weft("run", "--new", "--headless", env=env, cwd=hank.parent)
    assert "a: tool Write" not in plain.stdout
    both = weft("run", "--new", "--json", "--verbose", env=env, cwd=hank.parent)
    assert both.returncode == 2
    assert "--json already prints every event" in both.stderr


def test_a_closed_pipe_ends_a_command_quietly(world: dict[str, Any]) -> None:
    for command in ("ls", "status", "thread", "checkpoints"):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before anything is written (| head, done)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "weft", command],
                env=world["env"],
                cwd=world["project"],
                stdin=subprocess.DEVNULL,
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=TIMEOUT,
                check=False,
            )
        finally:
            os.close(write)
        assert done.returncode == 141, (command, done.stderr)
        assert done.stderr == "", command
