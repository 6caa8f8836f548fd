"""How the dashboard says a run and its codons ended, in a real headless Chromium.

Every journal here is built from Weft's own msgspec structs and written by a
real StateManager (the core validates each transition), or by a real run, then
replayed by the server ``weft ui`` starts for a finished execution: the page
gets exactly the bytes a run would have journaled, never a hand-written shape.
The figures it shows are the server's ``progress.snapshot``: each test checks
that they are the fold of the journal (:class:`weft.progress.RunProgress`) and
that the page shows what the message says (``assert_shows_the_figures``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.runtime.hanks import codon, journal, write_hank
from tests.web.browser import (
    artifacts_dir,
    assert_shows_the_figures,
    cells,
    child_environment,
    listed,
    replayed,
    rows,
    served,
    stats,
    text,
    wait_for,
)

from weft.events.stream import (
    AssistantActionEvent,
    BudgetExceededEvent,
    ErrorEvent,
    SentinelOutput,
    SentinelTokens,
)
from weft.events.transitions import (
    BudgetStop,
    CodonStarted,
    CodonTransitioned,
    CostsIncremented,
    FailureReason,
    Fresh,
    PlanEntry,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunStarted,
    RunStopped,
    TokenUsage,
    Transition,
    TransitionMetadata,
)

UNPRICED = "fake/openai/gpt-5.2"
"""A model the fake agent runs and Weft's pricing table does not know."""

T0 = "2026-11-21T10:00:00.000Z"
T1 = "2026-11-21T10:00:05.000Z"


def started(run: str, *codons: str) -> RunStarted:
    """A fresh run whose plan is ``codons``."""
    plan = [PlanEntry(codon={"name": c.title()}, codon_id=c) for c in codons]
    return RunStarted(
        run_id=run,
        run_folder=f"/x/.weft/runs/{run}",
        git_branch=f"run-{run}",
        starting_conditions=Fresh(),
        server_pid=1,
        start_time=T0,
        execution_plan=plan or None,
    )


def moved(run: str, codon: str, frm: str, to: str, **meta: Any) -> CodonTransitioned:
    return CodonTransitioned(
        run_id=run,
        codon_id=codon,
        from_status=frm,  # type: ignore[arg-type]
        to_status=to,  # type: ignore[arg-type]
        timestamp=T1,
        metadata=TransitionMetadata(**meta) if meta else None,
    )


def running(run: str, codon: str) -> list[Transition]:
    """A codon from CodonStarted to running."""
    return [
        CodonStarted(run_id=run, codon_id=codon, start_time=T0),
        moved(run, codon, "preparing", "starting"),
        moved(run, codon, "starting", "initializing", claude_pid=7, claude_log_path="l"),
        moved(run, codon, "initializing", "running", claude_session_id="s"),
    ]


def failed(run: str, codon: str, kind: str, message: str) -> list[Transition]:
    """A codon that runs and fails with a FailureReason (wire key ``type``)."""
    reason = FailureReason(kind=kind, retriable=False, message=message)
    return [
        *running(run, codon),
        moved(
            run,
            codon,
            "running",
            "failed",
            failure_reason=reason,
            failed_during="running",
            exit_code=1,
        ),
    ]


def completed(run: str, codon: str) -> list[Transition]:
    sha = f"{codon:0>40}"[-40:]
    return [*running(run, codon), moved(run, codon, "running", "completed", checkpoint_sha=sha)]


def open_replay(page: Any, url: str, events: int) -> None:
    """Opens a replay and waits until every event and the figures are drawn."""
    page.get(url)
    wait_for(lambda: page.execute_script("return document.body.dataset.rendered"), "render")
    wait_for(lambda: stats(page)["lastSeq"] == events, f"the page to reach seq {events}")


def is_to_do(page: Any, codon: str) -> bool:
    """Whether the page marks a codon's row as still to do."""
    found: bool = page.execute_script(
        "const tr = document.querySelector(`#codons tr[data-codon='${arguments[0]}']`);"
        "return !!tr && tr.dataset.todo === '1';",
        codon,
    )
    return found


def weft_status(execution: Path, tmp_path: Path) -> dict[str, Any]:
    """``weft status --json`` of an execution."""
    argv = [sys.executable, "-m", "weft", "status", str(execution), "--json"]
    done = subprocess.run(
        argv, env=child_environment(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def assert_agrees_with_weft_status(snap: dict[str, Any], execution: Path, tmp_path: Path) -> None:
    """A one-run execution: the snapshot's cost, outcome and codon states are
    what ``weft status --json`` says (a stopped codon is its record's ``failed``)."""
    status = weft_status(execution, tmp_path)
    (run,) = status["runs"]
    assert snap["runId"] == run["runId"]
    assert snap["totals"]["cost"] == status["totalCost"]
    assert snap["totals"]["unpricedCodons"] == status["unpricedCodons"]
    assert snap["ending"]["word"] == run["status"]
    if run["ending"] is not None:
        for key in ("kind", "codonId", "reason", "forced", "budget"):
            assert snap["ending"][key] == run["ending"][key], key
    records = {c["codonId"]: c for c in run["codons"]}
    for c in snap["codons"]:
        record = records.get(c["codonId"])
        if record is None:
            assert c["status"] == "pending"
            continue
        assert {"stopped": "failed"}.get(c["status"], c["status"]) == record["status"]
        assert c["cost"] == record["cost"]
        assert c["unpriced"] == record["unpriced"]


def run_titles(page: Any) -> list[str]:
    """The timeline's line of each run."""
    found: list[str] = page.execute_script(
        "return [...document.querySelectorAll('#timeline > li > div:first-child')]"
        ".map(d => d.textContent);"
    )
    return found


def test_a_failed_codon_says_its_failure_type_and_message_and_the_run_which_codon(
    page: Any, tmp_path: Path
) -> None:
    """FailureReason's wire key is ``type``: the row reads ``<type>: <message>``
    (never ``[object Object]``), and the run's outcome names the codon and why."""
    events = [
        started("r1", "plan", "build"),
        *completed("r1", "plan"),
        *failed("r1", "build", "error_result", "the tests do not pass"),
        RunFailed(run_id="r1", end_time=T1, codon_id="build",
                  reason="error_result: the tests do not pass"),
    ]  # fmt: skip
    with replayed(tmp_path, events) as url:
        open_replay(page, url, len(events))
        assert_shows_the_figures(page, tmp_path / "execution")
        assert rows(page) == [("plan", "completed"), ("build", "failed")]
        assert cells(page, "build")[5] == "error_result: the tests do not pass"
        outcome = page.find_element("id", "outcome")
        assert outcome.get_attribute("data-outcome") == "failed"
        assert outcome.text == "failed"
        assert text(page, "outcome-detail") == "build: error_result: the tests do not pass"
        assert "failed: build: error_result: the tests do not pass" in run_titles(page)[0]
        page.save_screenshot(str(artifacts_dir() / "dashboard-failed-run.png"))


def test_a_run_stopped_in_an_older_journal_is_stopped_not_failed(page: Any, tmp_path: Path) -> None:
    """Before RunStopped, a stop was journaled as RunFailed after the codon it
    ended failed as ``interrupted``: nothing failed, the page says stopped. A
    RunFailed after a real failure (and nothing saying which) stays failed."""
    events = [
        started("r1", "work"),
        *failed("r1", "work", "interrupted", "Stopped by the user"),
        RunFailed(run_id="r1", end_time=T1),
        started("r2", "work"),
        *failed("r2", "work", "process_error", "exit 1"),
        RunFailed(run_id="r2", end_time=T1),
    ]
    with replayed(tmp_path, events) as url:
        open_replay(page, url, len(events))
        snap = assert_shows_the_figures(page, tmp_path / "execution")
        assert [(r["runId"], r["kind"]) for r in snap["runs"]] == [
            ("r1", "stopped"),
            ("r2", "failed"),
        ]
        titles = run_titles(page)
        assert "· stopped: stopped ·" in titles[0], titles
        assert "· failed ·" in titles[1], titles
        assert cells(page, "work")[5] == "process_error: exit 1"


def test_a_crash_fails_the_codon_it_was_running(page: Any, tmp_path: Path) -> None:
    """RunCrashed fails the crashed run's active codon ("Server crashed"), as the core does."""
    events = [
        started("r1", "plan", "build"),
        *completed("r1", "plan"),
        *running("r1", "build"),
        RunCrashed(run_id="r1", detected_at=T1, last_codon_status="running"),
    ]
    with replayed(tmp_path, events) as url:
        open_replay(page, url, len(events))
        snap = assert_shows_the_figures(page, tmp_path / "execution")
        assert rows(page, pending=False) == [("plan", "completed"), ("build", "failed")]
        assert cells(page, "build")[5] == "crash: Server crashed"
        # Ended when the crash was journaled: its time no longer moves.
        assert snap["codons"][1]["endedAt"] is not None
        timed = cells(page, "build")[2]
        time.sleep(1.2)
        assert cells(page, "build")[2] == timed
        outcome = page.find_element("id", "outcome")
        assert outcome.get_attribute("data-outcome") == "crashed"
        assert "crashed" in outcome.text
        assert "Run r1 crashed" in text(page, "errors")


def test_a_user_stop_and_a_budget_stop_are_said_as_such(page: Any, tmp_path: Path) -> None:
    """RunStopped: by the user (graceful or forced) is "stopped", by a budget
    "budget-stopped" with its reason; the stopped codon stays to do."""
    budget = BudgetStop(scope="run", kind="dollars", limit=0.05, used=0.0512, source="--max-cost")
    events: list[Any] = [
        started("r1", "plan", "build"),
        *completed("r1", "plan"),
        *failed("r1", "build", "interrupted", "Stopped by the user"),
        RunStopped(run_id="r1", end_time=T1, by="user", reason="SIGINT", forced=True,
                   codon_id="build"),
        started("r2", "plan", "build"),
        *running("r2", "build"),
        CostsIncremented(run_id="r2", codon_id="build", cost_delta=0.0512,
                         tokens_delta=TokenUsage(input_tokens=1000)),
        BudgetExceededEvent(scope="run", scope_id="run", limit_kind="dollars", limit=0.05,
                            used=0.0512, on_exceeded="fail", message="run budget $0.05 reached"),
        *failed("r2", "build", "interrupted", "Stopped by its budget")[-1:],
        RunStopped(run_id="r2", end_time=T1, by="budget", codon_id="build", budget=budget,
                   reason="the run's --max-cost $0.05 was reached ($0.0512 spent)"),
    ]  # fmt: skip
    with replayed(tmp_path, events) as url:
        open_replay(page, url, len(events))
        snap = assert_shows_the_figures(page, tmp_path / "execution")
        assert [(r["runId"], r["word"]) for r in snap["runs"]] == [
            ("r1", "stopped"),
            ("r2", "budget-stopped"),
        ]
        titles = run_titles(page)
        assert "stopped: build: SIGINT (the agent was killed)" in titles[0], titles
        # The codon the stop cut short is stopped, not failed, and to do again;
        # plan was completed by the first run.
        assert rows(page) == [("plan", "pending"), ("build", "stopped")]
        assert cells(page, "plan")[1] == "completed earlier"
        assert is_to_do(page, "build")
        assert not is_to_do(page, "plan")
        outcome = page.find_element("id", "outcome")
        assert outcome.get_attribute("data-outcome") == "budget"
        assert outcome.text == "budget-stopped"
        assert text(page, "outcome-detail") == (
            "build: the run's --max-cost $0.05 was reached ($0.0512 spent)"
        )
        assert cells(page, "build")[4] == "$0.0512"
        page.save_screenshot(str(artifacts_dir() / "dashboard-budget-stopped.png"))


def test_a_finished_execution_is_a_replay_not_live(page: Any, tmp_path: Path) -> None:
    """The server weft ui starts for a finished execution says so; the page
    shows a neutral "finished · replay", never a green "live"."""
    events = [
        started("r1", "plan"),
        *completed("r1", "plan"),
        RunCompleted(run_id="r1", end_time=T1),
    ]
    with replayed(tmp_path, events) as url:
        open_replay(page, url, len(events))
        assert_shows_the_figures(page, tmp_path / "execution")
        connection = page.find_element("id", "connection")
        assert connection.text == "finished · replay"
        assert "good" not in (connection.get_attribute("class") or "")
        assert page.find_element("id", "outcome").text == "completed"


def test_the_plan_shows_the_codons_still_to_do(page: Any, tmp_path: Path) -> None:
    """A fresh run's plan is shown before its codons start: pending rows under
    "to do", which leave as each codon starts."""
    events = [started("r1", "plan", "build", "ship"), *completed("r1", "plan")]
    with replayed(tmp_path, events) as url:
        open_replay(page, url, len(events))
        assert_shows_the_figures(page, tmp_path / "execution")
        assert rows(page) == [("plan", "completed"), ("build", "pending"), ("ship", "pending")]
        assert "to do: 2 codons" in text(page, "codons")
        assert [is_to_do(page, c) for c in ("plan", "build", "ship")] == [False, True, True]
        assert cells(page, "build")[0] == "build · Build"


def test_sentinel_budget_and_error_events_are_shown_by_their_shape(
    page: Any, tmp_path: Path
) -> None:
    """Events of features the page does not know by name (sentinels, budgets)
    still reach the reader, from a finished execution's replay."""
    events = [
        started("r1", "plan"),
        *running("r1", "plan"),
        CostsIncremented(run_id="r1", codon_id="plan", cost_delta=0.5,
                         tokens_delta=TokenUsage(input_tokens=1000)),
        AssistantActionEvent(codon_id="plan", action="message", content="Planning."),
        BudgetExceededEvent(scope="codon", scope_id="plan", limit_kind="dollars", limit=2.0,
                            used=2.1, on_exceeded="fail", message="codon budget $2 reached"),
        SentinelOutput(sentinel_id="narrator", codon_id="plan", trigger_number=1,
                       output_type="text", content="The agent is planning the work.", cost=0.001,
                       tokens=SentinelTokens(input=10, output=5), event_count=3),
        ErrorEvent(message="Codon plan failed: rate limited", severity="codon", codon="plan"),
    ]  # fmt: skip
    with replayed(tmp_path, events) as url:
        open_replay(page, url, len(events))
        sentinels = text(page, "sentinels")
        assert "sentinel.output" in sentinels
        assert "The agent is planning the work." in sentinels
        assert "narrator" in sentinels
        assert len(page.find_elements("css selector", "#chart line.budget")) == 1
        assert "budget.exceeded limit 2" in text(page, "chart-legend")
        assert "rate limited" in text(page, "errors")
        assert cells(page, "plan")[5] == "Planning."
        page.save_screenshot(str(artifacts_dir() / "dashboard-sentinels-budget.png"))


def test_a_real_run_stopped_by_its_budget_reads_budget_stopped(page: Any, tmp_path: Path) -> None:
    """A real ``weft run --max-cost`` that crosses its cap in the first codon (exit 3),
    replayed as ``weft ui`` would: budget-stopped with the cap, nothing failed,
    the codon that stays to do pending."""
    hank = write_hank(tmp_path / "hank", codon("a"), codon("b"))
    execution = tmp_path / "executions" / "x"
    argv = [sys.executable, "-m", "weft", "run", str(hank), "--execution", str(execution)]
    done = subprocess.run(
        [*argv, "--headless", "--max-cost", "0.001"],
        env=child_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    stopped = [data for kind, data in journal(execution) if kind == "RunStopped"]
    assert [s["by"] for s in stopped] == ["budget"]
    with served(execution) as url:
        page.get(url)
        wait_for(lambda: page.execute_script("return document.body.dataset.rendered"), "render")
        snap = assert_shows_the_figures(page, execution)
        outcome = page.find_element("id", "outcome")
        assert outcome.get_attribute("data-outcome") == "budget"
        assert outcome.text == "budget-stopped"
        # Where the cap is crossed depends on when the fake's spend is reported
        # (usually at a's end: b stays to do); whichever it is stays to do, and
        # nothing is called failed.
        detail = text(page, "outcome-detail")
        assert "--max-cost" in detail
        stays = snap["ending"]["codonId"]
        assert detail.startswith(f"{stays}: "), detail
        assert is_to_do(page, stays)
        assert is_to_do(page, "b")
        drawn = rows(page)
        assert not [r for r in drawn if r[1] == "failed"], drawn
        assert_agrees_with_weft_status(snap, execution, tmp_path)
        assert page.find_element("id", "connection").text == "finished · replay"
        page.save_screenshot(str(artifacts_dir() / "dashboard-budget-stopped-run.png"))


def test_an_unpriced_codon_reads_unpriced_never_zero(page: Any, tmp_path: Path) -> None:
    """A model without a price (tokens, no cost): the codon's cost and the
    totals read ``unpriced``, as weft status says, never ``$0.0000``; a priced
    codon beside it makes the total a lower bound (``≥ $X``)."""
    from weft.events.stream import TokenUsageEvent

    events: list[Any] = [
        started("r1", "free", "paid"),
        *running("r1", "free"),
        TokenUsageEvent(codon_id="free", input_tokens=900, output_tokens=40,
                        cache_creation_tokens=0, cache_read_tokens=0, total_cost=None),
        moved("r1", "free", "running", "completed", checkpoint_sha="f" * 40),
    ]  # fmt: skip
    with replayed(tmp_path / "one", events) as url:
        open_replay(page, url, len(events))
        snap = assert_shows_the_figures(page, tmp_path / "one" / "execution")
        assert cells(page, "free")[4] == "unpriced"
        assert snap["totals"]["cost"] is None
        assert text(page, "totals").startswith("unpriced · ")
    events += [
        *running("r1", "paid"),
        CostsIncremented(run_id="r1", codon_id="paid", cost_delta=0.032,
                         tokens_delta=TokenUsage(input_tokens=1000)),
        moved("r1", "paid", "running", "completed", checkpoint_sha="e" * 40),
        RunCompleted(run_id="r1", end_time=T1),
    ]  # fmt: skip
    with replayed(tmp_path / "two", events) as url:
        open_replay(page, url, len(events))
        assert_shows_the_figures(page, tmp_path / "two" / "execution")
        assert cells(page, "free")[4] == "unpriced"
        assert cells(page, "paid")[4] == "$0.0320"
        assert text(page, "totals").startswith("≥ $0.0320 (1 codon unpriced) · ")
        assert page.find_element("id", "outcome").text == "completed"
        page.save_screenshot(str(artifacts_dir() / "dashboard-unpriced.png"))


def test_a_real_run_on_an_unpriced_model_reads_as_weft_status_says(
    page: Any, tmp_path: Path
) -> None:
    """A real ``weft run`` whose model has no price, replayed: the page shows
    ``unpriced`` where ``weft status --json`` says null, and the same outcome."""
    hank = write_hank(tmp_path / "hank", codon("a", model=UNPRICED), codon("b", model=UNPRICED))
    execution = tmp_path / "executions" / "x"
    argv = [sys.executable, "-m", "weft", "run", str(hank), "--execution", str(execution)]
    done = subprocess.run(
        [*argv, "--headless"],
        env=child_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with served(execution) as url:
        page.get(url)
        wait_for(lambda: page.execute_script("return document.body.dataset.rendered"), "render")
        snap = assert_shows_the_figures(page, execution)
        assert [(c["codonId"], c["status"], c["costText"]) for c in snap["codons"]] == [
            ("a", "completed", "unpriced"),
            ("b", "completed", "unpriced"),
        ]
        assert cells(page, "a")[4] == "unpriced"
        assert page.find_element("id", "outcome").text == "completed"
        assert_agrees_with_weft_status(snap, execution, tmp_path)
    # The list page (weft ui) says it too, where it once threw on the null cost.
    with listed(execution.parent) as address:
        page.get(address)
        cost = wait_for(
            lambda: page.execute_script(
                "const tr = document.querySelector('#executions tr[data-id=\"x\"]');"
                "return tr && tr.querySelector('td.cost').textContent;"
            ),
            "the execution's row",
            page=page,
        )
        assert cost == "unpriced"
        assert (
            page.find_element("css selector", '#executions tr[data-id="x"]').get_attribute(
                "data-state"
            )
            == "completed"
        )
        errors = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        page.save_screenshot(str(artifacts_dir() / "ui-list-unpriced.png"))


def test_a_rollback_puts_the_codons_it_undid_back_to_do(page: Any, tmp_path: Path) -> None:
    from weft.events.stream import RollbackStartedEvent
    from weft.events.transitions import Continuation, ContinuationSource

    events: list[Any] = [
        started("r1", "plan", "build", "ship"),
        *completed("r1", "plan"),
        *completed("r1", "build"),
        RollbackStartedEvent(from_run="r1", to_run="r2", to_codon="plan",
                             to_checkpoint="plan".rjust(40, "0"), checkpoint_type="completed",
                             codons_to_process=["build"]),
        RunStopped(run_id="r1", end_time=T1, by="user", reason="rolled back"),
        RunStarted(run_id="r2", run_folder="/x/.weft/runs/r2", git_branch="run-r2",
                   starting_conditions=Continuation(
                       source=ContinuationSource(run_id="r1", after_codon="plan",
                                                 checkpoint_sha="plan".rjust(40, "0")),
                       reason="rollback"),
                   server_pid=1, start_time=T1),
    ]  # fmt: skip
    with replayed(tmp_path, events) as url:
        open_replay(page, url, len(events))
        snap = assert_shows_the_figures(page, tmp_path / "execution")
        to_do = {c["codonId"]: c["toDo"] for c in snap["codons"]}
        assert to_do == {"plan": False, "build": True, "ship": True}
