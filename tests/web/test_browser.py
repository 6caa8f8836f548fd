"""The dashboard in a real headless Chromium, on real ``weft run`` processes
(the fake agent, manual mode, so each codon waits for a command)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.web.browser import (
    LiveRun,
    artifacts_dir,
    assert_shows_the_figures,
    cells,
    journal_end,
    live_run,
    replayed,
    rows,
    stats,
    text,
    wait_for,
)
from websockets.sync.client import connect

from weft.events.stream import (
    AssistantActionEvent,
    BreakerChangedEvent,
    SessionCooldownEvent,
    SessionMessageEvent,
    SessionResumedEvent,
)
from weft.events.transitions import (
    CodonStarted,
    CodonTransitioned,
    Fresh,
    RunStarted,
    TransitionMetadata,
)

HELLO_PLAN = ["greet", "polish", "draft#0", "review"]
"""The codons of examples/hello planned before any starts (the loop's first iteration)."""


def idle(page: Any) -> str:
    text: str = page.find_element("id", "idle").text
    return text


def click_command(page: Any, command: str) -> None:
    page.find_element("css selector", f'button[data-command="{command}"]').click()


def next_codon(page: Any, done: int) -> None:
    """Clicks "Next codon" and waits until ``done`` codons are completed and the run idles."""
    click_command(page, "codon.next")
    wait_for(
        lambda: (
            sum(s == "completed" for _, s in rows(page)) == done
            and ("Waiting" in idle(page) or page.find_element("id", "outcome").text != "running")
        ),
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
        assert page.find_element("id", "connection").text == "live"
        # Nothing started yet: the plan, every codon pending (--no-autostart).
        plan = wait_for(lambda: rows(page), "the plan", page=page)
        assert plan == [(c, "pending") for c in HELLO_PLAN], plan
        assert "to do" in page.find_element("id", "codons").text
        page.save_screenshot(str(artifacts_dir() / "dashboard-plan.png"))
        next_codon(page, 1)
        assert rows(page, pending=False) == [("greet", "completed")]
        assert rows(page)[1] == ("polish", "pending")
        next_codon(page, 2)
        next_codon(page, 3)
        assert [c for c, _ in rows(page, pending=False)] == ["greet", "polish", "draft#0"]
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
        # A second run continues after greet: the timeline says why.
        wait_for(lambda: "rollback" in text(page, "timeline"), "the rollback's run", page=page)
        assert_exact(page, run)
        snap = assert_shows_the_figures(page, run.execution)
        # The rolled-back run was stopped by it; the new one runs, after greet.
        assert [r["word"] for r in snap["runs"]] == ["stopped", "running"]
        assert snap["runs"][0]["reason"] == "rolled back"
        assert "stopped: draft#0: rolled back" in text(page, "timeline")
        assert cells(page, "greet")[1] == "completed earlier"
        assert ("draft#0", "pending") in rows(page)
        # (Which codons the rollback undid is not in the fold yet: see
        # test_outcomes.py's test_a_rollback_puts_the_codons_it_undid_back_to_do.)


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
        wait_for(lambda: rows(page, pending=False) == [("greet", "completed")], "greet", page=page)
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
        assert rows(page, pending=False) == [("greet", "completed")]
        assert journal_end(run.execution) == before
        page.save_screenshot(str(artifacts_dir() / "dashboard-readonly.png"))


def test_a_run_that_ends_says_so_and_does_not_call_it_a_disconnection(
    page: Any, tmp_path: Path
) -> None:
    """The server closes after the run's last event: the page says the run
    ended (neutral, not a red ``disconnected``), shows its outcome and stops
    trying to reconnect."""
    from tests.runtime.hanks import codon, scenario, write_hank

    slow = codon("work", scenario("sigterm,lines=60,interval_ms=50") + "Work slowly.")
    hank = write_hank(tmp_path / "hank", slow, codon("after", "Then this."))
    with live_run(tmp_path, "x", hank, autostart=True) as run:
        open_dashboard(page, run, run.token)
        connection = page.find_element("id", "connection")
        wait_for(lambda: connection.text == "live", "live", page=page)
        wait_for(lambda: connection.text == "run ended", "the run's end", timeout=60, page=page)
        assert run.process.wait(timeout=30) == 0
        assert page.find_element("id", "outcome").text == "completed"
        assert rows(page) == [("work", "completed"), ("after", "completed")]
        assert_shows_the_figures(page, run.execution)
        connects = stats(page)["connects"]
        time.sleep(1.5)  # a reconnect would be tried within 250 ms
        assert connection.text == "run ended"
        assert "bad" not in (connection.get_attribute("class") or "")
        assert stats(page)["connects"] == connects
        page.save_screenshot(str(artifacts_dir() / "dashboard-run-ended.png"))


def test_stopping_the_run_from_the_page_shows_it_stopped_not_failed(
    page: Any, tmp_path: Path
) -> None:
    """ "Stop run" (server.shutdown) while a codon works: the run is stopped by
    you, the codon stays to do, and nothing is called failed."""
    from tests.runtime.hanks import codon, scenario, write_hank

    slow = codon("work", scenario("sigterm,lines=400,interval_ms=50") + "Work slowly.")
    hank = write_hank(tmp_path / "hank", slow, codon("after", "Then this."))
    with live_run(tmp_path, "x", hank) as run:
        open_dashboard(page, run, run.token)
        wait_for(lambda: "Waiting" in idle(page), "the idle notice", page=page)
        click_command(page, "codon.next")
        wait_for(lambda: ("work", "running") in rows(page), "the codon at work", page=page)
        click_command(page, "server.shutdown")
        page.find_element("id", "confirm-ok").click()
        outcome = page.find_element("id", "outcome")
        wait_for(lambda: outcome.text != "running", "the run's end", timeout=60, page=page)
        assert outcome.get_attribute("data-outcome") == "stopped", outcome.text
        assert outcome.text == "stopped", outcome.text
        wait_for(
            lambda: page.find_element("id", "connection").text == "run ended", "closed", page=page
        )
        snap = assert_shows_the_figures(page, run.execution)
        assert snap["ending"]["codonId"] == "work"
        assert text(page, "outcome-detail").startswith("work: "), text(page, "outcome-detail")
        # The codon the stop cut short did not fail: it is stopped, and to do
        # again, as is the one after it.
        assert rows(page) == [("work", "stopped"), ("after", "pending")]
        assert [c["toDo"] for c in snap["codons"]] == [True, True]
        page.save_screenshot(str(artifacts_dir() / "dashboard-stopped.png"))
    from tests.runtime.hanks import journal

    ends = [
        (kind, data.get("by")) for kind, data in journal(run.execution) if kind.startswith("Run")
    ]
    assert ends[-1] == ("RunStopped", "user"), ends


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
        assert rows(page, pending=False) == [("greet", "completed"), ("polish", "completed")]


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
            # A finished execution: nothing follows, and the page does not say live.
            assert page.find_element("id", "connection").text == "finished · replay"
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


def test_a_long_run_draws_the_rows_in_view_and_the_rest_on_request(
    page: Any, tmp_path: Path
) -> None:
    """1,000 codon records: the table draws the rows in view (and those scrolled
    to), the timeline and the checkpoints their newest entries (more on a click),
    and a transcript is built when opened, with the session supervisor's and the
    circuit breaker's events in it."""
    run_id = "1795255200000-longr"
    n = 1000
    t0, t1 = "2026-11-21T10:00:00.000Z", "2026-11-21T10:00:01.000Z"
    start = RunStarted(
        run_id=run_id,
        run_folder="/r",
        git_branch="b",
        starting_conditions=Fresh(),
        server_pid=1,
        start_time=t0,
    )
    events: list[Any] = [start]
    for i in range(n):
        c = f"c{i}"

        def move(frm: str, to: str, c: str = c, **meta: Any) -> CodonTransitioned:
            return CodonTransitioned(
                run_id=run_id,
                codon_id=c,
                from_status=frm,  # type: ignore[arg-type]
                to_status=to,
                timestamp=t1,  # type: ignore[arg-type]
                metadata=TransitionMetadata(**meta) if meta else None,
            )

        events += [
            CodonStarted(run_id=run_id, codon_id=c, start_time=t0),
            move("preparing", "skipped", checkpoint_sha=f"{i:040x}", skipped_during="preparing"),
        ]
    events[-1:-1] = [
        AssistantActionEvent(codon_id="c999", action="message", content="Starting."),
        SessionCooldownEvent(codon_id="c999", session=1, duration_ms=2000, backoff_ms=2000,
                             error_class="rate_limit", consecutive_errors=1, total_errors=1,
                             message="429 Too Many Requests"),
        BreakerChangedEvent(provider="anthropic", state="open", previous="closed",
                            reason="failure", consecutive_failures=3, failure_threshold=3,
                            cooldown_ms=60000, codon_id="c999"),
        SessionMessageEvent(message="Mind the tests.", urgent=False, codon_id="c999"),
        SessionResumedEvent(codon_id="c999", session=2, reason="retry", resume_session_id="s-1"),
    ]  # fmt: skip
    with replayed(tmp_path, events) as url:
        page.get(url)
        wait_for(lambda: page.execute_script("return document.body.dataset.rendered"), "render")
        assert stats(page)["lastSeq"] == len(events)
        drawn = rows(page)
        assert drawn[0] == ("c0", "skipped")
        assert 20 < len(drawn) < 200, len(drawn)  # the rows in view, not a thousand
        assert ("c999", "skipped") not in drawn
        page.execute_script(
            "const p = document.getElementById('codons-panel'); p.scrollTop = p.scrollHeight"
        )
        wait_for(lambda: ("c999", "skipped") in rows(page), "the last row", page=page)
        assert ("c0", "skipped") not in rows(page)
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
