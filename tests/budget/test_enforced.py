"""Budgets enforced on real ``weft run`` processes and the fake agents: the run
ceiling, codon caps (money and time), loop budgets, both ``onExceeded``
values, and a SIGKILLed run whose budget survives into the next one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    codon,
    codon_records,
    journal,
    loop,
    pid_running,
    read_state,
    runs_oldest_first,
    scenario,
    subprocess_environment,
    wait_for,
    weft_cli,
    weft_run_argv,
    write_hank,
)

from weft.errors import StoreError

TIMEOUT = 60.0
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


def weft(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return weft_cli(*args, env=env, timeout=TIMEOUT)


def events(execution: Path, kind: str) -> list[dict[str, Any]]:
    return [data for t, data in journal(execution) if t == kind]


def message_deltas(execution: Path, codon_id: str) -> list[float]:
    """The live per-message costs the agent reported for ``codon_id``."""
    return [
        e["totalCost"]
        for e in events(execution, "token.usage")
        if e["codonId"] == codon_id and not e.get("final") and e["totalCost"] is not None
    ]


# --------------------------------------------------------------------------- the run ceiling


def test_max_cost_stops_hello_when_crossed_says_so_and_status_shows_the_spend(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = tmp_path / "hello"
    shutil.copytree(EXAMPLES / "hello", hank)
    execution = tmp_path / "x"
    first = weft("run", hank, "-e", execution, "--headless", "--max-cost", "0.02", env=env)
    assert first.returncode == 3, first.stdout  # stopped by the budget
    assert "Budget exceeded: the run used $" in first.stdout
    assert "of its $0.0200 cap (--max-cost)" in first.stdout
    (crossed,) = events(execution, "budget.exceeded")
    assert (crossed["scope"], crossed["limitKind"], crossed["onExceeded"]) == (
        "run", "dollars", "complete",
    )  # fmt: skip
    state = read_state(execution)
    records = codon_records(state)
    stopped = records[crossed["codonId"]]
    run = runs_oldest_first(state)[0]
    assert (run["status"], run["stop"]["by"], run["stop"]["budget"]["limit"]) == (
        "stopped", "budget", 0.02,
    )  # fmt: skip
    # The ceiling is a safety stop: the codon it cut stays to do (unless its agent
    # had already given its result), and the rest of the run does not start.
    assert stopped["budgetExceeded"]["limit"] == 0.02
    if stopped["status"] == "failed":
        assert stopped["failureReason"]["type"] == "interrupted"
        assert run["stop"]["codonId"] == crossed["codonId"]
    else:
        assert stopped["status"] == "completed"
    assert "review" not in records
    assert "Run stopped by its budget (exit 3)" in first.stdout
    assert "All codons completed" not in first.stdout
    # Tripped by the message that crossed it (live estimates); what is billed is the
    # agents' own totals, never less (the live lines undercount output tokens).
    assert 0.02 < crossed["used"] <= 0.02 + max(message_deltas(execution, crossed["codonId"]))
    # What was spent is the fold's (weft status --json): the records' final costs, a
    # cut codon's partialCost, and what the journal holds beyond the records (an
    # agent's last total reported after its record was sealed).
    as_json = json.loads(weft("status", execution, "--json", env=env).stdout)
    spent = as_json["spent"]
    on_records = sum(
        r["finalCost"] if r.get("finalCost") is not None else r.get("partialCost", 0.0)
        for r in records.values()
    )
    assert spent >= on_records - 1e-9
    assert spent >= crossed["used"]
    (summary,) = events(execution, "budget.summary")
    assert summary["ceiling"] == {"maxDollars": 0.02}
    assert summary["actualDollars"] == pytest.approx(spent)
    assert as_json["budget"]["summary"]["ceiling"] == {"maxDollars": 0.02}

    status = weft("status", execution, env=env)
    assert f"total cost: ${spent:.4f}" in status.stdout
    assert "Budget exceeded: the run used" in status.stdout

    # Resumed under the same cap, nothing more starts: earlier runs' spend counts.
    again = weft("run", hank, "-e", execution, "--headless", "--max-cost", "0.02", env=env)
    assert again.returncode == 3
    assert "is not started" in again.stdout
    assert len(events(execution, "CodonStarted")) == len(records)
    # Without the flag the cap kept with the execution still holds; a higher one lets
    # the rest run, from where it stopped.
    kept = weft("run", hank, "-e", execution, "--headless", env=env)
    assert kept.returncode == 3, kept.stdout
    rest = weft("run", hank, "-e", execution, "--headless", "--max-cost", "1", env=env)
    assert rest.returncode == 0, rest.stdout
    assert "review" in codon_records(read_state(execution), run_index=3)


def test_a_runtime_config_ceiling_is_enforced_like_the_flag(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a"), codon("b"), codon("c"))
    env["WEFT_RUNTIME_BUDGET_MAX_DOLLARS"] = "0.001"
    result = weft("run", hank, "-e", tmp_path / "x", "--headless", env=env)
    assert result.returncode == 3
    assert "(WEFT_RUNTIME_BUDGET_MAX_DOLLARS)" in result.stdout
    assert set(codon_records(read_state(tmp_path / "x"))) == {"a"}


# --------------------------------------------------------------------------- codon caps


@pytest.mark.parametrize("on_exceeded", ["complete", "fail"])
def test_a_codon_cap_stops_the_agent_mid_session(
    tmp_path: Path, env: dict[str, str], on_exceeded: str
) -> None:
    # max_budget with usd=5: tool rounds that would go on to $5 unless stopped.
    spender = codon(
        "a",
        scenario("max_budget,usd=5"),
        budget={"maxDollars": 0.05, "onExceeded": on_exceeded},
    )
    hank = write_hank(tmp_path / "hank", spender, codon("b"))
    execution = tmp_path / "x"
    # Lines paced as a real agent's are (not all in the pipe at once), so what
    # follows the stop is what was in flight, not a backlog already written.
    env["FAKE_AGENT_LINE_DELAY_MS"] = "10"
    result = weft("run", hank, "-e", execution, "--headless", env=env)
    records = codon_records(read_state(execution))
    a = records["a"]
    (crossed,) = events(execution, "budget.exceeded")
    assert (crossed["scope"], crossed["scopeId"], crossed["codonId"]) == ("codon", "a", "a")
    spent = a.get("finalCost", a.get("partialCost"))
    assert spent is not None
    # It trips on the message that crosses the cap (live estimates, not the codon's end)...
    assert 0.05 < crossed["used"] <= 0.05 + max(message_deltas(execution, "a"))
    assert a["budgetExceeded"]["used"] > 0.05
    # ...and the agent is stopped at once: at most the message in flight follows.
    kinds = [
        (t, d.get("final", False))
        for t, d in journal(execution)
        if t in ("budget.exceeded", "token.usage") and d.get("codonId") == "a"
    ]
    after = kinds[kinds.index(("budget.exceeded", False)) + 1 :]
    # The crossing message's own token.usage, at most one in flight, the final total.
    assert len(after) <= 3
    # The agent's own total is what is billed, never less than the estimate: the
    # live lines undercount output tokens (Claude 2.1.330 reports output_tokens: 1).
    assert spent >= crossed["used"]
    assert spent < 0.5  # nowhere near the $5 the scenario would have spent
    if on_exceeded == "fail":
        assert result.returncode == 1
        assert a["status"] == "failed"
        assert a["failureReason"]["type"] == "budget"
        assert a["failureReason"]["message"].startswith("Budget exceeded: codon a used $")
        assert "b" not in records
    else:
        assert result.returncode == 0, result.stdout
        assert a["status"] == "completed"
        assert records["b"]["status"] == "completed"


def test_a_codon_time_cap_stops_a_silent_agent(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", scenario("hang_after_init"), budget={"maxTimeSeconds": 1}),
        codon("b"),
    )
    execution = tmp_path / "x"
    started = time.monotonic()
    result = weft("run", hank, "-e", execution, "--headless", env=env)
    assert result.returncode == 0, result.stdout
    assert time.monotonic() - started < 20
    (crossed,) = events(execution, "budget.exceeded")
    assert crossed["limitKind"] == "timeSeconds"
    assert 1.0 <= crossed["used"] < 3.0  # the watchdog ticks once a second
    assert codon_records(read_state(execution))["b"]["status"] == "completed"


# --------------------------------------------------------------------------- loops


def test_a_loop_budget_ends_the_loop_early_and_the_run_goes_on(
    tmp_path: Path, env: dict[str, str]
) -> None:
    drafts = loop("drafts", codon("d"), limit=6)
    drafts["budget"] = {"maxDollars": 0.02, "onExceeded": "complete"}
    hank = write_hank(tmp_path / "hank", drafts, codon("after"))
    execution = tmp_path / "x"
    result = weft("run", hank, "-e", execution, "--headless", env=env)
    assert result.returncode == 0, result.stdout
    records = codon_records(read_state(execution))
    iterations = [c for c in records if c.startswith("d#")]
    assert 1 <= len(iterations) < 6
    (crossed,) = events(execution, "budget.exceeded")
    assert (crossed["scope"], crossed["scopeId"]) == ("loop", "drafts")
    final = [e for e in events(execution, "loop.iteration.completed") if e["isFinal"]]
    assert len(final) == 1
    assert records["after"]["status"] == "completed"
    loop_spent = sum(records[c]["finalCost"] for c in iterations)
    assert loop_spent > 0.02


# --------------------------------------------------------------------------- SIGKILL


def running(execution: Path, codon_id: str) -> dict[str, Any] | None:
    """The record of ``codon_id`` once it runs (None before, or before the store exists)."""
    try:
        record = codon_records(read_state(execution)).get(codon_id)
    except (StoreError, IndexError):  # no store, or no run yet
        return None
    return record if record is not None and record["status"] == "running" else None


def test_a_sigkilled_run_keeps_its_budget_when_resumed(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a"),
        codon("b", prompt_file="prompts/b.md"),
        files={"prompts/b.md": scenario("hang_after_init")},
    )
    execution = tmp_path / "x"
    proc = subprocess.Popen(
        weft_run_argv(hank, execution, "--max-cost", "5"),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        record = wait_for(lambda: running(execution, "b"), timeout=TIMEOUT, what="b running")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    agent = record.get("claudePid")
    if agent and pid_running(agent):
        os.killpg(agent, signal.SIGKILL)
    a_cost = codon_records(read_state(execution))["a"]["finalCost"]
    (hank.parent / "prompts" / "b.md").write_text("Work on b.\n")
    # A cap below what the killed run already spent: nothing may start.
    below = weft(
        "run", hank, "-e", execution, "--headless", "--max-cost", f"{a_cost * 0.9}", env=env
    )
    assert below.returncode == 3
    assert "is not started" in below.stdout
    # A cap above it: b runs, and the summary counts the killed run's money too.
    above = weft("run", hank, "-e", execution, "--headless", "--max-cost", "5", env=env)
    assert above.returncode == 0, above.stdout
    summary = events(execution, "budget.summary")[-1]
    runs = runs_oldest_first(read_state(execution))
    b_cost = codon_records(read_state(execution), len(runs) - 1)["b"]["finalCost"]
    assert summary["actualDollars"] >= a_cost + b_cost - 1e-9


@pytest.mark.parametrize("flag", ["--max-cost", "--max-time"])
@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf"])
def test_a_bad_ceiling_is_a_usage_error(
    tmp_path: Path, env: dict[str, str], flag: str, value: str
) -> None:
    result = weft("run", EXAMPLES / "hello", "-e", tmp_path / "x", flag, value, env=env)
    assert result.returncode == 2
    assert f"argument {flag}: '{value}' is not a positive number" in result.stderr
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize("on_exceeded", ["complete", "fail"])
@pytest.mark.parametrize("level", ["run", "share", "loop"])
def test_dollar_budgets_at_every_level(
    tmp_path: Path, env: dict[str, str], level: str, on_exceeded: str
) -> None:
    """A loop of up to 4 iterations then ``after``; $0.02 allowed to the loop by the
    run ceiling, by its proportional-strict share of the run, or by its own budget."""
    drafts = loop("l", codon("d"), limit=4)
    budget: dict[str, Any] = {"onExceeded": on_exceeded}
    flags: list[str] = []
    if level == "run":
        flags = ["--max-cost", "0.02"]
        overrides = budget
    elif level == "share":
        overrides = budget | {
            "maxDollars": 1.0, "allocation": "proportional-strict", "shares": {"l": 0.02},
        }  # fmt: skip
    else:
        overrides = {}
        drafts["budget"] = budget | {"maxDollars": 0.02}
    hank = write_hank(tmp_path / "hank", drafts, codon("after"))
    doc = json.loads(hank.read_text())
    if overrides:
        doc["overrides"] = {"budget": overrides}
    hank.write_text(json.dumps(doc))
    execution = tmp_path / "x"
    result = weft("run", hank, "-e", execution, "--headless", *flags, env=env)
    (crossed,) = events(execution, "budget.exceeded")
    assert crossed["scope"] == level
    assert crossed["onExceeded"] == on_exceeded
    assert "Budget exceeded" in result.stdout
    records = codon_records(read_state(execution))
    stopped = records[crossed["codonId"]]
    assert stopped["budgetExceeded"]["used"] > 0.02
    assert 1 <= len([c for c in records if c.startswith("d#")]) < 4
    if level == "run":
        # The run's ceiling is a safety stop whatever onExceeded says: the codon
        # it cut stays to do (unless its agent had given its result), nothing
        # more starts, the run is stopped by its budget (exit 3).
        assert result.returncode == 3, result.stdout
        if stopped["status"] == "failed":
            assert stopped["failureReason"]["type"] == "interrupted"
        else:
            assert stopped["status"] == "completed"
        assert "after" not in records
        run = runs_oldest_first(read_state(execution))[0]
        assert (run["status"], run["stop"]["by"]) == ("stopped", "budget")
        return
    assert stopped["status"] == ("completed" if on_exceeded == "complete" else "failed")
    if on_exceeded == "complete":
        # The loop ends early; the run goes on.
        assert result.returncode == 0, result.stdout
        assert records["after"]["status"] == "completed"
    else:
        # A codon failed under abort: the run fails.
        assert result.returncode == 1, result.stdout
        assert "after" not in records


def test_max_time_stops_a_silent_agent_and_the_run(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", scenario("hang_after_init")), codon("b"))
    execution = tmp_path / "x"
    result = weft("run", hank, "-e", execution, "--headless", "--max-time", "1.5", env=env)
    assert result.returncode == 3, result.stdout
    assert "of its 1.5s cap (--max-time)" in result.stdout
    (crossed,) = events(execution, "budget.exceeded")
    assert (crossed["scope"], crossed["limitKind"]) == ("run", "timeSeconds")
    state = read_state(execution)
    records = codon_records(state)
    # Stopped mid-work, not completed: a stays to do.
    assert records["a"]["status"] == "failed"
    assert records["a"]["failureReason"]["type"] == "interrupted"
    assert runs_oldest_first(state)[0]["stop"]["codonId"] == "a"
    assert "b" not in records


# --------------------------------------------------------------------------- every session counts


def agent_results(execution: Path, codon_id: str) -> list[dict[str, Any]]:
    """The result lines the agent printed for ``codon_id``, oldest first."""
    (log,) = (execution / ".weft" / "runs").rglob(f"{codon_id}-claude.log")
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    return [line for line in lines if line.get("type") == "result"]


def test_extension_spend_counts_against_the_run_ceiling(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # Each exhaustWithPrompt session bills its own process (fake haiku: well
    # under $0.002 a session), so $0.003 is crossed a few sessions in, never
    # by one session alone: the ceiling holds only when every session counts.
    grind = codon("b", model="fake/haiku", exhaustWithPrompt="Keep going.", maxExtensions=8)
    hank = write_hank(tmp_path / "hank", grind, codon("c"))
    execution = tmp_path / "x"
    result = weft("run", hank, "-e", execution, "--headless", "--max-cost", "0.003", env=env)
    assert result.returncode == 3, result.stdout
    (crossed,) = events(execution, "budget.exceeded")
    assert (crossed["scope"], crossed["codonId"]) == ("run", "b")
    extended = events(execution, "codon.extended")
    assert 1 <= len(extended) < 8
    records = codon_records(read_state(execution))
    b = records["b"]
    # Stopped mid-extension, b stays to do (billed what its sessions spent); or, when
    # its agent gave its result before the stop landed, b keeps its work.
    if b["status"] == "failed":
        assert b["failureReason"]["type"] == "interrupted"
        spent = b["partialCost"]
    else:
        assert b["status"] == "completed"
        spent = b["finalCost"]
    # Honoured to within the one message that crossed it (plus the output tokens
    # its live line undercounts, which the session's result adds).
    finals = [e["totalCost"] for e in events(execution, "token.usage") if e.get("final")]
    last_session = finals[-1] - (extended[-1]["cumulativeCost"] or 0.0)
    assert 0.003 < crossed["used"] <= spent <= 0.003 + last_session
    assert spent == pytest.approx(finals[-1])
    (summary,) = events(execution, "budget.summary")
    assert summary["actualDollars"] == pytest.approx(spent)
    assert f"budget: spent ${spent:.4f} of $0.0030" in result.stdout
    assert "c" not in records


def test_a_budget_stopped_codon_is_billed_what_it_spent_and_the_cap_holds_on_resume(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a"), codon("b"))
    execution = tmp_path / "x"
    # Lines paced slowly: the first message crosses the cap and the stop lands
    # before the success result's line is out (the agent then prints its
    # aborted result, as Claude Code 2.1.330 answers SIGINT).
    env["FAKE_AGENT_LINE_DELAY_MS"] = "300"
    first = weft("run", hank, "-e", execution, "--headless", "--max-cost", "0.001", env=env)
    assert first.returncode == 3, first.stdout
    (crossed,) = events(execution, "budget.exceeded")
    a = codon_records(read_state(execution))["a"]
    # Cut mid-work by the ceiling: a stays to do (not completed, not failed for good).
    assert a["status"] == "failed"
    assert a["failureReason"]["type"] == "interrupted"
    (aborted,) = agent_results(execution, "a")
    assert aborted["terminal_reason"] == "aborted_streaming"
    # Golden: the codon costs what the stopped agent reported for its process,
    # which is at least what its message was seen to spend live; never $0.
    assert a["partialCost"] == pytest.approx(aborted["total_cost_usd"], abs=1e-9)
    assert a["partialCost"] >= crossed["used"] > 0.001
    (done,) = [line for line in first.stdout.splitlines() if "a: stopped during" in line]
    assert f"(${a['partialCost']:.4f}, " in done
    assert "it stays to do" in done
    (summary,) = events(execution, "budget.summary")
    assert summary["actualDollars"] == pytest.approx(a["partialCost"])
    status = weft("status", execution, env=env)
    assert f"total cost: ${a['partialCost']:.4f}" in status.stdout
    # Resumed under the same cap: the spend counts, nothing more starts, not even a.
    again = weft("run", hank, "-e", execution, "--headless", "--max-cost", "0.001", env=env)
    assert again.returncode == 3, again.stdout
    assert "a is not started" in again.stdout
    assert "a" not in codon_records(read_state(execution), run_index=-1)


def test_a_run_ceiling_crossed_by_the_last_codon_stops_it_and_a_higher_cap_finishes_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # The last codon cut mid-work is not completed: the run is stopped by its budget.
    hank = write_hank(tmp_path / "hank", codon("only"))
    execution = tmp_path / "x"
    # Lines paced slowly: the stop lands before the success result's line is out.
    env["FAKE_AGENT_LINE_DELAY_MS"] = "300"
    result = weft("run", hank, "-e", execution, "--headless", "--max-cost", "0.001", env=env)
    assert result.returncode == 3, result.stdout
    assert "Budget exceeded: the run used $" in result.stdout
    assert "All codons completed" not in result.stdout
    assert codon_records(read_state(execution))["only"]["status"] == "failed"
    del env["FAKE_AGENT_LINE_DELAY_MS"]
    again = weft("run", hank, "-e", execution, "--headless", "--max-cost", "1", env=env)
    assert again.returncode == 0, again.stdout
    assert "All codons completed" in again.stdout
    assert codon_records(read_state(execution), run_index=-1)["only"]["status"] == "completed"
