"""``weft status`` and ``weft store rebuild`` on real execution directories."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.builders import lifecycle, move, run_started
from tests.runtime.hanks import (
    codon,
    subprocess_environment,
    wait_for,
    weft_cli,
    weft_run_argv,
    write_hank,
)

from weft import core
from weft.cli import main
from weft.events.stream import SessionCooldownEvent, SessionResumedEvent, StreamData
from weft.server.snapshot import ProgressFeed
from weft.store import ExecutionStore
from weft.windows.park import until_words


async def make_execution(path: Path) -> None:
    store = ExecutionStore.open(path)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    for event in lifecycle("r1", "design"):
        manager.transition(event)
    for event in lifecycle("r1", "build")[:4]:
        manager.transition(event)
    manager.transition(
        move(
            "r1",
            "build",
            "running",
            "failed",
            exit_code=1,
            failure_reason=core.FailureReason(kind="rate-limit", retriable=True, message="429"),
            failed_during="running",
        )
    )
    manager.transition(core.RunFailed(run_id="r1", end_time="t9"))
    await store.close(manager)


def weft(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weft", *args], capture_output=True, text=True, check=False
    )


async def test_status_prints_runs_and_codons(tmp_path: Path) -> None:
    await make_execution(tmp_path)
    done = weft("status", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"Execution {tmp_path.resolve()}"
    assert lines[1] == "  journal: 15 events, state from state.json"
    assert lines[2] == "  total cost: $0.0060"
    assert lines[3].startswith("run r1  failed  started 2026-11-21T00:00:00Z  $0.0060")
    assert lines[4].split() == ["design", "completed", "$0.0060"]
    assert lines[5].split()[:3] == ["build", "failed", "$0.0000"]
    assert lines[5].endswith("during running: 429")


async def test_status_json_is_complete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    await make_execution(tmp_path)
    assert main(["status", str(tmp_path), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["journal"] == {"events": 15, "lastSeq": 15}
    assert status["currentRunId"] is None
    (run,) = status["runs"]
    assert [c["status"] for c in run["codons"]] == ["completed", "failed"]
    assert run["codons"][1]["failureReason"] == {
        "type": "rate-limit",
        "retriable": True,
        "message": "429",
    }


def test_status_of_a_folder_that_is_no_execution_is_a_clear_error(tmp_path: Path) -> None:
    done = weft("status", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr == (
        f"weft: error: {tmp_path}: not an execution (no .weft/ inside) and not a hank; pass an "
        "execution directory, an execution id or a hank (`weft ls` lists the executions)\n"
    )


async def test_status_of_a_damaged_store_refuses_without_a_traceback(tmp_path: Path) -> None:
    await make_execution(tmp_path)
    db = tmp_path / ".weft" / "weft.db"
    db.write_bytes(db.read_bytes()[:100] + b"\x00" * 5000)
    done = weft("status", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.startswith("weft: error: ")
    assert "Traceback" not in done.stderr


async def test_store_rebuild_replaces_a_damaged_state_json(tmp_path: Path) -> None:
    await make_execution(tmp_path)
    state = tmp_path / ".weft" / "state.json"
    expected = json.loads(state.read_bytes())
    state.write_text("{}")
    done = weft("store", "rebuild", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "from 15 journal events (through seq 15)" in done.stdout
    assert json.loads(state.read_bytes()) == expected
    assert not (tmp_path / ".weft" / "runtime.lock").exists()


async def test_a_running_run_nobody_holds_shows_as_crashed_not_yet_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    await store.close(manager)  # the lock is released: as if the process died
    assert main(["status", str(tmp_path)]) == 0
    assert "run r1  crashed (not yet marked)  started" in capsys.readouterr().out
    assert main(["status", str(tmp_path), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["lock"] is None
    assert status["runs"][0]["status"] == "crashed (not yet marked)"


async def test_a_running_run_whose_holder_lives_shows_as_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    await manager.flush()
    try:
        assert main(["status", str(tmp_path), "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["runs"][0]["status"] == "running"
        assert status["lock"] == {"pid": os.getpid(), "runId": "r1", "alive": True}
    finally:
        await store.close(manager)


@pytest.mark.parametrize("damage", ["empty", "delete"])
async def test_status_of_a_lost_journal_says_what_was_lost_without_a_traceback(
    tmp_path: Path, damage: str
) -> None:
    await make_execution(tmp_path)
    db = tmp_path / ".weft" / "weft.db"
    if damage == "empty":
        db.write_bytes(b"")
    else:
        db.unlink()
    done = weft("status", str(tmp_path))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"weft: error: {db} ")
    assert "every journaled event is gone" in line


async def test_the_supervisor_line_says_why_a_session_resumed(tmp_path: Path) -> None:
    """A retry resumes after a cool-down; an urgent message had none (it
    interrupted the agent)."""
    cooldown = SessionCooldownEvent(
        codon_id="build", session=1, duration_ms=2000, backoff_ms=2000,
        error_class="rate_limit", consecutive_errors=1, total_errors=1,
    )  # fmt: skip
    said: dict[str, list[StreamData]] = {
        "build": [cooldown, SessionResumedEvent(codon_id="build", session=2, reason="retry",
                                                resume_session_id="sess-b")],
        "polish": [SessionResumedEvent(codon_id="polish", session=2, reason="urgent",
                                       resume_session_id="sess-p")],
        "draft": [SessionResumedEvent(codon_id="draft", session=2, reason="retry")],
    }  # fmt: skip
    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    for codon_id, events in said.items():
        manager.transition(
            core.CodonStarted(run_id="r1", codon_id=codon_id, start_time="2026-11-21T00:00:00Z")
        )
        for event in events:
            manager.emit(event, run_id="r1", codon_id=codon_id)
        for transition in lifecycle("r1", codon_id)[1:]:
            manager.transition(transition)
    await store.close(manager)
    done = weft("status", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines() if "supervisor:" in line]
    assert lines == [
        "supervisor: session 2 resumed sess-b after a cool-down",
        "supervisor: session 2 resumed sess-p with an urgent message (the agent was interrupted)",
        "supervisor: session 2 started afresh (no session to resume) after a cool-down",
    ]


def garble_a_payload(db: Path) -> None:
    """Bytes that are not UTF-8 in the middle of one journaled payload: pages and
    SQLite's quick check stay intact, the row's text cannot be read."""
    data = bytearray(db.read_bytes())
    at = data.index(b'"type":"CodonTransitioned"')
    data[at + 2 : at + 8] = b"\xff\xfe\xff\xfe\xff\xfe"
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("command", ["status", "logs"])
async def test_a_journal_row_of_random_bytes_is_refused_in_one_line(
    tmp_path: Path, command: str
) -> None:
    await make_execution(tmp_path)
    db = tmp_path / ".weft" / "weft.db"
    garble_a_payload(db)
    done = weft(command, str(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    assert done.stderr == (
        f"weft: error: {db.resolve()}: the journal is damaged (a row's text is not valid "
        "UTF-8); the run will not continue. Keep a copy of .weft/ for inspection; "
        "`weft store rebuild` cannot help when the journal itself is unreadable\n"
    )


async def test_an_edited_cost_in_state_json_shows_the_journals_total_and_says_so(
    tmp_path: Path,
) -> None:
    await make_execution(tmp_path)
    for name in ("state.json", "state.json.bak"):
        path = tmp_path / ".weft" / name
        doc = json.loads(path.read_bytes())
        doc["runs"][0]["codons"][0]["finalCost"] = 99.5
        path.write_text(json.dumps(doc))
    done = weft("status", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "  total cost: $0.0060" in done.stdout.splitlines()
    assert (
        "  note: state.json does not match the journal: runs[0].codons[0].finalCost is 99.5 in "
        "state.json, 0.006 in the journal; the journal wins"
    ) in done.stdout.splitlines()


async def test_a_wrong_journal_seq_is_noted_and_status_reads_the_journal(tmp_path: Path) -> None:
    await make_execution(tmp_path)
    path = tmp_path / ".weft" / "state.json"
    doc = json.loads(path.read_bytes())
    doc["journalSeq"] = 10_000
    path.write_text(json.dumps(doc))
    done = weft("status", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "  total cost: $0.0060" in lines
    assert any(
        line.startswith("  note: state.json says it reflects journal seq 10000 but the journal ")
        and "its journalSeq is wrong" in line
        for line in lines
    ), done.stdout


def test_weft_run_continues_past_a_wrong_journal_seq_and_says_so(tmp_path: Path) -> None:
    from tests.runtime.hanks import codon, subprocess_environment, weft_cli, write_file, write_hank

    hank = write_hank(tmp_path / "hank", codon("a", write_file("notes.md", "first")))
    execution = tmp_path / "ex"
    env = subprocess_environment(tmp_path)
    first = weft_cli("run", hank, "--execution", execution, "--headless", env=env)
    assert first.returncode == 0, first.stderr
    path = execution / ".weft" / "state.json"
    doc = json.loads(path.read_bytes())
    doc["journalSeq"] = 10_000
    path.write_text(json.dumps(doc))
    again = weft_cli("run", "--execution", execution, "--headless", env=env)
    out = again.stdout + again.stderr
    assert "journal lost committed events" not in out
    assert "recovery: state.json says it reflects journal seq 10000" in out, out
    assert again.returncode == 0, out


def test_a_parked_codon_shows_when_it_resumes_on_every_surface(tmp_path: Path) -> None:
    """``weft status`` (text and JSON), the run's own lines and the server's
    progress snapshot all say the codon waits for its usage window, and until
    when, in the same words; a Ctrl-C while it waits stops the run at once."""
    until = int(time.time()) + 3600  # far off: the test never races the opening
    hank = write_hank(
        tmp_path / "hank",
        codon("build", "Build it.", env={"FAKE_AGENT_SCENARIO": f"usage_window,until={until}"}),
    )
    env = subprocess_environment(tmp_path)
    execution = tmp_path / "x"
    run = subprocess.Popen(
        weft_run_argv(hank, execution, "--headless"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    words = until_words(until * 1000 + 10_000, "anthropic", "five_hour")
    try:

        def parked() -> dict[str, Any] | None:
            done = weft_cli("status", "--json", execution, env=env)
            if done.returncode != 0:
                return None
            doc: dict[str, Any] = json.loads(done.stdout)
            (build,) = [c for c in doc["runs"][-1]["codons"] if c["codonId"] == "build"] or [{}]
            session = build.get("session") or {}
            return doc if session.get("type") == "codon.parked" else None

        doc = wait_for(parked, timeout=60)
        (build,) = [c for c in doc["runs"][-1]["codons"] if c["codonId"] == "build"]
        assert build["session"]["resumeAt"] == until * 1000 + 10_000
        assert build["status"] == "running"
        text = weft_cli("status", execution, env=env).stdout
        assert f"supervisor: parked until {words}: the usage window is closed" in text
        stopped_at = time.monotonic()
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=60)
        assert time.monotonic() - stopped_at < 30
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, out
    assert f"parked until {words}" in out
    # The server's one fold, at the moment the codon parked and once the stop ended it.
    store = ExecutionStore.open(execution)
    try:
        rows = [r for page in store.journal.pages() for r in page]
    finally:
        asyncio.run(store.close())
    feed = ProgressFeed()
    snapshots = []
    for row in rows:
        feed.fold_row(row.seq, row.id, row.codon_id, row.payload.encode())
        if row.type == "codon.parked":
            snapshots.append(feed.snapshot().codons[0].parked)
    assert snapshots == [words]
    assert feed.snapshot().codons[0].parked is None
