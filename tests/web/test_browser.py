"""The dashboard in a real headless Chromium, on real ``weft run`` processes
(the fake agent, manual mode, so each codon waits for a command)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.web.browser import LiveRun, artifacts_dir, journal_end, live_run, stats, wait_for
from websockets.sync.client import connect

CODON_ROWS = "#codons tr[data-key]"


def rows(page: Any) -> list[tuple[str, str]]:
    """(codon id, state) of each row of the codon table."""
    found: list[list[str]] = page.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(tr => [tr.dataset.codon, tr.dataset.state]);",
        CODON_ROWS,
    )
    return [(c, s) for c, s in found]


def idle(page: Any) -> str:
    text: str = page.find_element("id", "idle").text
    return text


def click_command(page: Any, command: str) -> None:
    page.find_element("css selector", f'button[data-command="{command}"]').click()


def next_codon(page: Any, done: int) -> None:
    """Clicks "Next codon" and waits until ``done`` codons are completed and the run idles."""
    click_command(page, "codon.next")
    wait_for(
        lambda: sum(s == "completed" for _, s in rows(page)) == done and "Waiting" in idle(page),
        f"{done} completed codons",
        page=page,
    )


def open_dashboard(page: Any, run: LiveRun, token: str | None) -> None:
    page.get(run.url(token))
    wait_for(lambda: page.execute_script("return document.body.dataset.replayed"), "the replay")


def assert_exact(page: Any, run: LiveRun) -> None:
    """The page has every journaled event, once, in order."""
    end = journal_end(run.execution)
    wait_for(lambda: stats(page)["lastSeq"] == end, f"the page to reach seq {end}", page=page)
    got = stats(page)
    assert got["events"] == end
    assert got["duplicates"] == 0
    assert got["gaps"] == 0


def send_command(run: LiveRun, command: str) -> dict[str, Any]:
    """One command from a second, non-browser client; its answer."""
    with connect(f"ws://127.0.0.1:{run.port}/") as ws:
        ws.send(
            json.dumps({"type": "handshake", "data": {"mode": "readandwrite", "token": run.token}})
        )
        ws.send(json.dumps({"id": "t1", "type": command}))
        while True:
            msg = json.loads(ws.recv(timeout=10))
            if msg.get("data", {}).get("commandId") == "t1":
                answer: dict[str, Any] = msg
                return answer


def test_the_table_fills_and_follows_a_live_run(page: Any, tmp_path: Path) -> None:
    with live_run(tmp_path) as run:
        open_dashboard(page, run, run.token)
        assert page.find_element("id", "mode").text == "read-write"
        assert "token" not in page.current_url  # the fragment is gone from the address bar
        wait_for(lambda: "Waiting for codon.next" in idle(page), "the idle notice", page=page)
        assert rows(page) == []
        next_codon(page, 1)
        assert rows(page) == [("greet", "completed")]
        next_codon(page, 2)
        next_codon(page, 3)
        assert [c for c, _ in rows(page)] == ["greet", "polish", "draft#0"]
        # The loop's codons sit under their iteration's heading.
        groups = [g.text for g in page.find_elements("css selector", "#codons tr.group")]
        assert any("loop drafts" in g and "iteration 0" in g for g in groups), groups
        # Every accepted click was answered by the server's ack.
        actions = [li.text for li in page.find_elements("css selector", "#actions li")]
        assert actions == ["codon.next: accepted"] * 3
        # Checkpoints with their files, a chart, a timeline with the run.
        checkpoints = page.find_element("id", "checkpoints").text
        assert "completed" in checkpoints
        assert "notes.md" in checkpoints
        assert page.find_elements("css selector", "#chart polyline.cost")
        assert "fresh" in page.find_element("id", "timeline").text
        assert_exact(page, run)
        page.save_screenshot(str(artifacts_dir() / "dashboard-live.png"))


def test_a_transcript_opens_with_tool_calls_and_their_results(page: Any, tmp_path: Path) -> None:
    with live_run(tmp_path) as run:
        open_dashboard(page, run, run.token)
        wait_for(lambda: "Waiting" in idle(page), "the idle notice", page=page)
        next_codon(page, 1)
        page.find_element("css selector", '#codons tr[data-codon="greet"]').click()
        transcript = page.find_element("id", "transcript")
        wait_for(lambda: "I wrote notes.md" in transcript.text, "the assistant's text", page=page)
        tool = page.find_element("css selector", "#transcript details.t-tool_use")
        assert tool.get_attribute("open") is None  # collapsed until asked
        tool.find_element("css selector", "summary").click()
        text = tool.text
        assert "notes.md" in text
        assert "Welcome to the Weft demo" in text
        assert tool.find_elements("css selector", ".t-result")  # and its result
        page.save_screenshot(str(artifacts_dir() / "dashboard-transcript.png"))


def test_a_rollback_from_the_page_changes_the_work_tree(page: Any, tmp_path: Path) -> None:
    with live_run(tmp_path) as run:
        notes = run.execution / "agentRoot" / "notes.md"
        open_dashboard(page, run, run.token)
        wait_for(lambda: "Waiting" in idle(page), "the idle notice", page=page)
        next_codon(page, 1)
        next_codon(page, 2)
        assert "thank you for trying" in notes.read_text()
        # greet's "completed" checkpoint: before polish changed notes.md.
        row = wait_for(
            lambda: [
                tr
                for tr in page.find_elements("css selector", "#checkpoints tr[data-sha]")
                if "greet" in tr.text and "completed" in tr.text
            ],
            "greet's checkpoint",
        )[0]
        row.find_element("css selector", "button.rollback").click()
        dialog = page.find_element("id", "confirm")
        assert dialog.is_displayed()
        assert "greet" in dialog.text
        page.save_screenshot(str(artifacts_dir() / "dashboard-rollback-confirm.png"))
        page.find_element("id", "confirm-ok").click()
        wait_for(
            lambda: "Rollback completed" in page.find_element("id", "errors").text,
            "the rollback's completion",
            page=page,
        )
        actions = [li.text for li in page.find_elements("css selector", "#actions li")]
        assert actions[0] == "rollback.toCheckpoint: accepted", actions
        assert notes.read_text() == "# Hello\n\nWelcome to the Weft demo.\n"
        # polish is superseded on the thread; a second run continues.
        wait_for(
            lambda: page.find_elements(
                "css selector", '#codons tr.superseded[data-codon="polish"]'
            ),
            "polish marked superseded",
            page=page,
        )
        assert "rollback" in page.find_element("id", "timeline").text
        assert_exact(page, run)


def test_an_urgent_message_from_the_page_resumes_the_agent_with_it(
    page: Any, tmp_path: Path
) -> None:
    from tests.runtime.hanks import codon, journal, scenario, write_hank

    # A codon that works slowly (200 lines 50 ms apart) and stops on SIGTERM.
    slow = codon("work", scenario("sigterm,lines=200,interval_ms=50") + "Work slowly.")
    hank = write_hank(tmp_path / "hank", slow)
    with live_run(tmp_path, "x", hank) as run:
        open_dashboard(page, run, run.token)
        wait_for(lambda: "Waiting" in idle(page), "the idle notice", page=page)
        click_command(page, "codon.next")
        wait_for(lambda: rows(page) == [("work", "running")], "the codon at work", page=page)
        page.find_element("css selector", '#codons tr[data-codon="work"]').click()
        wait_for(
            lambda: page.find_elements("css selector", "#transcript p.t-message"),
            "the agent's first words",
            page=page,
        )
        box = page.find_element("id", "message-text")
        box.send_keys("Say hi now.")
        page.find_element("id", "message-urgent").click()
        wait_for(
            lambda: "codon.message: accepted" in page.find_element("id", "actions").text,
            "the server's ack",
            page=page,
        )
        assert box.get_attribute("value") == ""  # sent: the box is cleared
        # The agent's session was interrupted and resumed with the message.
        wait_for(lambda: rows(page) == [("work", "completed")], "the codon's end", page=page)
        transcript = page.find_element("id", "transcript")
        wait_for(lambda: 'You asked: "Say hi now."' in transcript.text, "the reply", page=page)
        text = transcript.text
        said = text.index("urgent message: Say hi now.")
        resumed = text.index("(an urgent message)")
        assert said < resumed < text.index('You asked: "Say hi now."'), text
        errors = page.find_element("id", "errors")
        wait_for(
            lambda: "urgent message: Say hi now. (to work)" in errors.text,
            "the message in the errors and recovery list",
            page=page,
        )
        page.save_screenshot(str(artifacts_dir() / "dashboard-urgent-message.png"))
        # With no agent session running, an urgent message is refused, and the text stays.
        box.send_keys("Too late.")
        page.find_element("id", "message-urgent").click()
        refusal = wait_for(
            lambda: page.execute_script(
                "const li = document.querySelector('#actions li.refused');"
                "return li && li.textContent;"
            ),
            "the refusal",
            page=page,
        )
        assert "no agent session is running" in refusal, refusal
        assert box.get_attribute("value") == "Too late."
        assert_exact(page, run)
    messages = [data for kind, data in journal(run.execution) if kind == "session.message"]
    assert messages == [{"message": "Say hi now.", "urgent": True, "codonId": "work"}]


def test_a_read_only_visitor_sees_the_run_but_cannot_steer_it(page: Any, tmp_path: Path) -> None:
    with live_run(tmp_path) as run:
        wait_for(lambda: "start greet" in idle_text(run), "the run to wait for a command")
        answer = send_command(run, "codon.next")
        assert answer["type"] == "command.ack", answer
        wait_for(lambda: "start polish" in idle_text(run), "the first codon")
        # No token in the address: the login form, and nothing of the run.
        page.get(run.url(None))
        wait_for(lambda: page.find_element("id", "login").is_displayed(), "the login form")
        assert "INVALID_TOKEN" not in page.find_element("id", "login").text
        assert rows(page) == []
        # The read token typed into the form: the run, read-only.
        page.find_element("id", "token-input").send_keys(run.read_token)
        page.find_element("css selector", "#login button").click()
        wait_for(lambda: page.execute_script("return document.body.dataset.replayed"), "replay")
        assert page.find_element("id", "mode").text == "read-only"
        assert not page.find_element("id", "controls").is_displayed()
        wait_for(lambda: rows(page) == [("greet", "completed")], "greet", page=page)
        buttons = page.find_elements("css selector", "#checkpoints button.rollback")
        assert buttons
        assert not any(b.is_displayed() for b in buttons)
        # Even a command forced through the page's own socket is refused by the server.
        before = journal_end(run.execution)
        page.execute_script("window.weftDashboard.send('codon.next')")
        answer = wait_for(
            lambda: page.execute_script(
                "const li = document.querySelector('#actions li.refused');"
                "return li && li.textContent;"
            ),
            "the refusal",
            page=page,
        )
        assert "Insufficient permissions" in answer or "read-only" in answer.lower(), answer
        assert rows(page) == [("greet", "completed")]
        assert journal_end(run.execution) == before
        page.save_screenshot(str(artifacts_dir() / "dashboard-readonly.png"))


def idle_text(run: LiveRun) -> str:
    """What the journal's newest ``server.idle`` says (read without the page)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{run.execution / '.weft' / 'weft.db'}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT payload FROM events WHERE type = 'server.idle' ORDER BY seq DESC LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    return "" if row is None else str(json.loads(row[0])["data"]["message"])


def test_a_dropped_connection_resumes_with_no_missing_or_doubled_event(
    page: Any, tmp_path: Path
) -> None:
    with live_run(tmp_path) as run:
        open_dashboard(page, run, run.token)
        wait_for(lambda: "Waiting" in idle(page), "the idle notice", page=page)
        next_codon(page, 1)
        seen = stats(page)["lastSeq"]
        # Drop the page's connection and keep it away while a whole codon runs.
        page.execute_script("window.weftDashboard.drop(3000)")
        wait_for(
            lambda: "disconnected" in page.find_element("id", "connection").text,
            "the page to notice",
        )
        answer = send_command(run, "codon.next")
        assert answer["type"] == "command.ack", answer
        wait_for(
            lambda: idle_text(run).startswith("Waiting for codon.next to start draft"), "polish"
        )
        assert journal_end(run.execution) > seen + 10  # the page missed a codon's events
        assert stats(page)["lastSeq"] == seen
        wait_for(lambda: page.find_element("id", "connection").text == "live", "the reconnect")
        assert_exact(page, run)
        assert stats(page)["connects"] == 2
        assert rows(page) == [("greet", "completed"), ("polish", "completed")]


def test_weft_ui_lists_the_executions_and_opens_a_finished_and_a_live_one(
    page: Any, tmp_path: Path
) -> None:
    import subprocess
    import sys

    from tests.web.browser import HELLO, child_environment

    root = tmp_path / "executions"
    finished = root / "done"
    argv = [sys.executable, "-m", "weft", "run", str(HELLO), "--execution", str(finished)]
    env = child_environment(tmp_path)
    subprocess.run([*argv, "--headless"], env=env, capture_output=True, timeout=120, check=True)
    token_file = tmp_path / "ui.token"
    with live_run(tmp_path, "running") as run:
        ui = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "weft",
                "ui",
                "--root",
                str(root),
                "--token-file",
                str(token_file),
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert ui.stdout is not None
            address = ui.stdout.readline().split(": ", 1)[1].split(" ")[0]
            # Without the token: the login form, no data.
            page.get(address)
            wait_for(lambda: page.find_element("id", "login").is_displayed(), "the login form")
            assert not page.find_elements("css selector", "#executions tr[data-id]")
            page.get(f"{address}#token={token_file.read_text().strip()}")
            wait_for(
                lambda: len(page.find_elements("css selector", "#executions tr[data-id]")) == 2,
                "two executions",
                page=page,
            )
            states = {
                tr.get_attribute("data-id"): tr.get_attribute("data-state")
                for tr in page.find_elements("css selector", "#executions tr[data-id]")
            }
            assert states == {"done": "completed", "running": "live"}
            assert "hello" in page.find_element("id", "executions").text
            page.save_screenshot(str(artifacts_dir() / "ui-list.png"))
            # A finished execution: a read-only replay of its whole journal.
            page.find_element("css selector", '#executions tr[data-id="done"] button.open').click()
            wait_for(
                lambda: page.execute_script("return document.body.dataset.replayed"),
                "the replay",
                page=page,
            )
            assert page.find_element("id", "mode").text == "read-only"
            wait_for(lambda: len(rows(page)) == 6, "six codons", page=page)
            assert all(state == "completed" for _, state in rows(page))
            assert stats(page)["lastSeq"] == journal_end(finished)
            page.save_screenshot(str(artifacts_dir() / "ui-replay.png"))
            # A live one: its own run's server, read-write, steerable.
            page.back()
            wait_for(
                lambda: page.find_elements(
                    "css selector", '#executions tr[data-id="running"] button.open'
                ),
                "the list again",
            )
            page.find_element(
                "css selector", '#executions tr[data-id="running"] button.open'
            ).click()
            wait_for(lambda: f":{run.port}/" in page.current_url, "the live run's page")
            wait_for(lambda: page.find_element("id", "mode").text == "read-write", "read-write")
            wait_for(lambda: "Waiting" in idle(page), "the idle notice", page=page)
            next_codon(page, 1)
        finally:
            ui.terminate()
            ui.wait(timeout=10)


def test_sentinel_budget_and_error_events_are_shown_by_their_shape(
    page: Any, tmp_path: Path
) -> None:
    """Events of features the page does not know by name (sentinels, budgets)
    still reach the reader, from a finished execution's replay."""
    run_id = "1795255200000-abcde"
    events = [
        ("transition", "RunStarted", {"runId": run_id, "runFolder": "/r", "gitBranch": "b",
         "startingConditions": {"type": "fresh"}, "serverPid": 1,
         "startTime": "2026-11-21T10:00:00.000Z", "executionPlan": []}),
        ("transition", "CodonStarted", {"runId": run_id, "codonId": "plan",
         "startTime": "2026-11-21T10:00:00.000Z"}),
        ("transition", "CostsIncremented", {"runId": run_id, "codonId": "plan",
         "costDelta": 0.5, "tokensDelta": {"inputTokens": 1000}}),
        ("event", "budget.warning", {"limitUsd": 2.0, "spentUsd": 0.5, "scope": "run"}),
        ("event", "sentinel.output", {"sentinelId": "narrator", "codonId": "plan",
         "text": "The agent is planning the work."}),
        ("event", "error", {"message": "Codon plan failed: rate limited", "severity": "codon",
         "codon": "plan"}),
    ]  # fmt: skip
    with replayed(tmp_path, run_id, events) as url:
        page.get(url)
        wait_for(lambda: page.execute_script("return document.body.dataset.rendered"), "render")
        sentinels = page.find_element("id", "sentinels").text
        assert "sentinel.output" in sentinels
        assert "The agent is planning the work." in sentinels
        assert "narrator" in sentinels
        budget = page.find_elements("css selector", "#chart line.budget")
        assert len(budget) == 1
        assert "limitUsd 2" in page.find_element("id", "chart-legend").text
        assert "rate limited" in page.find_element("id", "errors").text
        assert stats(page)["lastSeq"] == len(events)
        page.save_screenshot(str(artifacts_dir() / "dashboard-sentinels-budget.png"))


def test_a_stopped_run_is_interrupted_and_a_failed_one_failed(page: Any, tmp_path: Path) -> None:
    """The state records both as failed (RunFailed); the page says what `weft run` said."""
    stopped, failed = "1795255200000-aaaaa", "1795255300000-bbbbb"

    def run(run_id: str, failure: str | None) -> list[tuple[str, str, dict[str, Any]]]:
        start = {
            "runId": run_id,
            "runFolder": "/r",
            "gitBranch": "b",
            "startingConditions": {"type": "fresh"},
            "serverPid": 1,
            "startTime": "2026-11-21T10:00:00.000Z",
            "executionPlan": [],
        }
        codon = {"runId": run_id, "codonId": "c", "startTime": "2026-11-21T10:00:00.000Z"}
        end: dict[str, Any] = {
            "runId": run_id,
            "codonId": "c",
            "from": "running",
            "to": "failed",
            "timestamp": "2026-11-21T10:00:01.000Z",
            "metadata": {"failureReason": {"kind": failure, "retriable": False, "message": "m"}},
        }
        return [("transition", "RunStarted", start), ("transition", "CodonStarted", codon),
                ("transition", "CodonTransitioned", end),
                ("transition", "RunFailed", {"runId": run_id, "endTime": "t"})]  # fmt: skip

    events = run(stopped, "interrupted") + run(failed, "error_result")
    with replayed(tmp_path, stopped, events) as url:
        page.get(url)
        wait_for(lambda: page.execute_script("return document.body.dataset.rendered"), "render")
        wait_for(lambda: stats(page)["lastSeq"] == len(events), "every event")
        statuses = page.execute_script(
            "const runs = window.weftDashboard.state.runs;"
            "return Object.fromEntries([...runs.values()].map((r) => [r.runId, r.status]));"
        )
        assert statuses == {stopped: "interrupted", failed: "failed"}


@contextlib.contextmanager
def replayed(
    tmp_path: Path, run_id: str, events: list[tuple[str, str, dict[str, Any]]]
) -> Iterator[str]:
    """A hand-written journal of ``events`` (kind, type, data) served read-only as a
    finished execution's replay (as ``weft ui`` serves one); yields the page's address."""
    import asyncio
    import threading

    import uvloop

    from weft.server import JournalHistory, ProtocolServer, ServerConfig
    from weft.store import Journal
    from weft.web import dashboard_url
    from weft.web.machine import FinishedJournal

    weft_dir = tmp_path / ".weft"
    weft_dir.mkdir()
    journal = Journal.open(weft_dir / "weft.db")
    journal.append(
        [
            (
                seq,
                f"1795255200000-{seq:09x}",
                f"2026-11-21T10:{seq // 60000 % 60:02d}:{seq // 1000 % 60:02d}.{seq % 1000:03d}Z",
                kind,
                name,
                run_id,
                None,
                json.dumps({"type": name, "data": data}),
            )
            for seq, (kind, name, data) in enumerate(events, 1)
        ]
    )
    journal.close()
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, loop).result(30)

    server = on_loop(
        ProtocolServer.start(
            FinishedJournal(len(events)),
            JournalHistory(weft_dir / "weft.db"),
            config=ServerConfig(ping_interval=None),
        )
    )
    try:
        yield dashboard_url(server, server.read_token)
    finally:
        on_loop(server.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_a_long_run_draws_the_rows_in_view_and_the_rest_on_request(
    page: Any, tmp_path: Path
) -> None:
    """1,000 codon records: the table draws the rows in view (and those scrolled
    to), the timeline and the checkpoints their newest entries (more on a click),
    and a transcript is built when opened, with the session supervisor's and the
    circuit breaker's events in it."""
    run_id = "1795255200000-longr"
    n = 1000
    events: list[tuple[str, str, dict[str, Any]]] = [
        ("transition", "RunStarted", {"runId": run_id, "runFolder": "/r", "gitBranch": "b",
         "startingConditions": {"type": "fresh"}, "serverPid": 1,
         "startTime": "2026-11-21T10:00:00.000Z", "executionPlan": []}),
    ]  # fmt: skip
    for i in range(n):
        c = f"c{i}"
        events += [
            ("transition", "CodonStarted", {"runId": run_id, "codonId": c,
             "startTime": "2026-11-21T10:00:00.000Z"}),
            ("transition", "CodonTransitioned", {"runId": run_id, "codonId": c,
             "from": "preparing", "to": "completed", "timestamp": "2026-11-21T10:00:01.000Z",
             "metadata": {"checkpointSha": f"{i:040x}"}}),
        ]  # fmt: skip
    events[-1:-1] = [
        ("event", "assistant.action", {"codonId": "c999", "action": "message",
         "content": "Starting."}),
        ("event", "session.cooldown", {"codonId": "c999", "session": 1, "durationMs": 2000,
         "backoffMs": 2000, "errorClass": "rate_limit", "consecutiveErrors": 1,
         "totalErrors": 1, "message": "429 Too Many Requests"}),
        ("event", "breaker.changed", {"provider": "anthropic", "state": "open",
         "previous": "closed", "reason": "failure", "consecutiveFailures": 3,
         "failureThreshold": 3, "cooldownMs": 60000, "codonId": "c999"}),
        ("event", "session.message", {"message": "Mind the tests.", "urgent": False,
         "codonId": "c999"}),
        ("event", "session.resumed", {"codonId": "c999", "session": 2, "reason": "retry",
         "resumeSessionId": "s-1"}),
    ]  # fmt: skip
    with replayed(tmp_path, run_id, events) as url:
        page.get(url)
        wait_for(lambda: page.execute_script("return document.body.dataset.rendered"), "render")
        assert stats(page)["lastSeq"] == len(events)
        drawn = rows(page)
        assert drawn[0] == ("c0", "completed")
        assert 20 < len(drawn) < 200, len(drawn)  # the rows in view, not a thousand
        assert ("c999", "completed") not in drawn
        page.execute_script(
            "const p = document.getElementById('codons-panel'); p.scrollTop = p.scrollHeight"
        )
        wait_for(lambda: ("c999", "completed") in rows(page), "the last row", page=page)
        assert ("c0", "completed") not in rows(page)
        # The timeline: the newest chips, the others behind a button.
        timeline = page.find_element("id", "timeline")
        assert len(timeline.find_elements("css selector", ".chip[data-key]")) < n
        timeline.find_element("css selector", "button.more").click()
        wait_for(
            lambda: len(timeline.find_elements("css selector", ".chip[data-key]")) == n,
            "every chip",
        )
        # The checkpoints: the newest first, the older ones on request.
        shown = page.find_elements("css selector", "#checkpoints tr[data-sha]")
        assert len(shown) < n
        page.find_element("css selector", "#checkpoints tr.more button").click()
        wait_for(
            lambda: (
                len(page.find_elements("css selector", "#checkpoints tr[data-sha]")) > len(shown)
            ),
            "older checkpoints",
        )
        # A transcript, built when opened.
        page.execute_script("window.scrollTo(0, 0)")  # from under the sticky header
        page.find_element("css selector", '#codons tr[data-codon="c999"]').click()
        transcript = page.find_element("id", "transcript")
        wait_for(lambda: "Starting." in transcript.text, "the transcript", page=page)
        text = transcript.text
        assert "session 1 failed (rate_limit: 429 Too Many Requests); resuming in 2.0 s" in text
        assert "anthropic circuit breaker closed → open (failure; 3 of 3 failures)" in text
        assert "queued message: Mind the tests." in text
        assert "session 2 resumes s-1 (after a failure)" in text
        errors = page.find_element("id", "errors").text
        assert "anthropic circuit breaker closed → open" in errors
        assert "c999: session 1 failed" in errors
        page.save_screenshot(str(artifacts_dir() / "dashboard-long-run.png"))
