"""One truth about money (issue 32): the end summary (and ``weft run --json``),
the loop lines, ``weft status``, ``weft ls`` and ``weft ui``'s list say the same
figures, in the same words; a model without a price is ``null`` in JSON and
``unpriced`` (or ``≥ $X``) in text, never ``$0``; a retried codon's failure is
listed once; the summary of a session that ran several runs (manual mode's redo)
says which figure is this run's and which is every run's, as the budget line."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.builders import move, run_started
from tests.runtime.hanks import codon, loop, scenario, subprocess_environment, weft_cli, write_hank

from weft import core
from weft.cli.view.summary import RunSummary, summary_data, summary_rows
from weft.client import connect
from weft.money import known_cost, total_cost
from weft.progress import RunProgress
from weft.server import read_token
from weft.web.listing import read_execution

UNPRICED = "fake/openai/gpt-5.2"
"""A model the fake agent runs and Weft's pricing table does not know."""
TIMEOUT = 120


def weft(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return weft_cli(*args, env=env, timeout=TIMEOUT)


def run_json(hank: Path, env: dict[str, str], *extra: str) -> dict[str, Any]:
    """``weft run --json``'s summary (its last line)."""
    done = weft("run", hank, "--json", *extra, env=env)
    last = json.loads(done.stdout.splitlines()[-1])
    assert last["type"] == "run.summary", done.stdout[-2000:]
    data: dict[str, Any] = last["data"]
    return data


def status_json(execution: Path, env: dict[str, str]) -> dict[str, Any]:
    done = weft("status", execution, "--json", env=env)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def listed(execution: Path, env: dict[str, str]) -> dict[str, Any]:
    """``weft ls --json``'s entry of ``execution``."""
    done = weft("ls", "--json", env=env)
    (entry,) = [e for e in json.loads(done.stdout) if e["path"] == str(execution)]
    assert isinstance(entry, dict)
    return entry


def ls_line(execution: Path, env: dict[str, str]) -> str:
    """``weft ls``'s row of ``execution``."""
    rows = weft("ls", env=env).stdout.splitlines()
    return next(line for line in rows if line.startswith(execution.name))


def cents(usd: float | None) -> str:
    return known_cost(usd, False)


# --------------------------------------------------------------------------- unpriced


def test_an_unpriced_run_is_null_and_unpriced_on_every_surface(tmp_path: Path) -> None:
    env = subprocess_environment(tmp_path)
    hank = write_hank(
        tmp_path / "hank",
        codon("a", model=UNPRICED),
        loop("l", codon("b", model=UNPRICED), limit=2),
    )
    summary = run_json(hank, env)
    execution = Path(summary["execution"])
    assert summary["status"] == "completed"
    assert summary["unpricedCodons"] == 3
    assert summary["totalCost"] is None
    assert summary["spent"] is None

    status = status_json(execution, env)
    assert status["totalCost"] is None  # was 0.0
    assert status["spent"] is None
    assert status["unpricedCodons"] == 3
    (run,) = status["runs"]
    assert run["cost"] is None
    assert run["unpricedCodons"] == 3
    assert {c["cost"] for c in run["codons"]} == {None}

    entry = listed(execution, env)
    assert entry["cost"] is None  # was 0.0
    assert entry["unpricedCodons"] == 3
    page = read_execution(execution)
    assert page is not None
    shown = page.to_json(time.time())
    assert shown["cost"] is None
    assert shown["costText"] == "unpriced"
    assert shown["unpricedCodons"] == 3

    # The words: the same everywhere, never $0.
    status_text = weft("status", execution, env=env).stdout
    assert "  total cost: unpriced\n" in status_text
    assert f"run {run['runId']}  completed  started {run['startTime']}  unpriced" in status_text
    ls_row = ls_line(execution, env)
    assert ls_row.split()[6] == "unpriced"  # ID HANK DATA STATE LAST USED (2 words) COST
    assert "$0.0000" not in status_text + ls_row

    headless = weft("run", hank, "--headless", "--new", env=env).stdout
    assert "$0.0000" not in headless
    loops = [line for line in headless.splitlines() if " loop l iteration " in line]
    assert len(loops) == 2
    assert all("(unpriced, " in line for line in loops), loops
    assert "  cost         unpriced (" in headless
    assert re.search(r"run \S+ completed after \S+ \(unpriced\)", headless)
    assert "budget: spent unpriced in " in headless


def test_a_partly_priced_run_is_the_same_lower_bound_on_every_surface(tmp_path: Path) -> None:
    env = subprocess_environment(tmp_path)
    hank = write_hank(tmp_path / "hank", codon("a", model=UNPRICED), codon("b"))
    summary = run_json(hank, env)
    execution = Path(summary["execution"])
    total = summary["totalCost"]
    assert total is not None
    assert total > 0
    assert summary["unpricedCodons"] == 1

    status = status_json(execution, env)
    entry = listed(execution, env)
    page = read_execution(execution)
    assert page is not None
    shown = page.to_json(time.time())
    assert status["totalCost"] == pytest.approx(total)
    assert entry["cost"] == pytest.approx(total)
    assert shown["cost"] == pytest.approx(total)
    assert status["unpricedCodons"] == entry["unpricedCodons"] == shown["unpricedCodons"] == 1

    words = f"≥ {cents(total)} (1 codon unpriced)"
    assert ("cost", f"{words} ({_tokens(summary)} tokens)") in summary_rows(summary)
    assert f"  total cost: {words}\n" in weft("status", execution, env=env).stdout
    assert shown["costText"] == f"≥ {cents(total)}"
    ls_row = ls_line(execution, env)
    assert f"≥ {cents(total)}" in ls_row


def _tokens(summary: dict[str, Any]) -> str:
    from weft.cli.view.format import format_tokens

    return format_tokens(summary["tokens"])


# --------------------------------------------------------------------------- retries


def test_a_retried_codon_failure_is_listed_once_with_its_attempts(tmp_path: Path) -> None:
    env = subprocess_environment(tmp_path)
    # The supervisor gives up at the first failure, so the hank's retry acts.
    env["WEFT_RUNTIME_SESSION_MAX_TOTAL_ERRORS"] = "1"
    hank = write_hank(
        tmp_path / "hank",
        codon("a"),
        codon(
            "b",
            scenario("crash_mid_run"),
            onFailure="retry",
            retryConfig={"maxAttempts": 3, "delayMs": 10},
        ),
    )
    summary = run_json(hank, env)
    assert summary["exitCode"] != 0
    (failure,) = summary["failures"]  # was one entry per attempt
    assert failure["codonId"] == "b"
    assert (failure["failedAttempts"], failure["attempts"], failure["status"]) == (3, 3, "failed")
    rows = [text for label, text in summary_rows(summary) if label == "failed"]
    assert len(rows) == 1
    assert rows[0].startswith("b (3 attempts failed): crash_mid_run")

    # Every attempt's money counts, and every surface says the same total.
    execution = Path(summary["execution"])
    status = status_json(execution, env)
    assert status["totalCost"] == pytest.approx(summary["totalCost"])
    assert listed(execution, env)["cost"] == pytest.approx(summary["totalCost"])


def test_the_fold_lists_a_codon_once_however_often_it_failed() -> None:
    progress = RunProgress()
    failure = core.FailureReason(kind="rate_limit", retriable=True, message="429")
    events: list[core.Transition] = [run_started("r1")]
    for _ in range(2):
        events += [
            core.CodonStarted(run_id="r1", codon_id="a", start_time="t"),
            move("r1", "a", "preparing", "failed", failure_reason=failure, failed_during="x"),
        ]
    events += [
        core.CodonStarted(run_id="r1", codon_id="b", start_time="t"),
        move("r1", "b", "preparing", "failed", failure_reason=failure, failed_during="x"),
        core.CodonStarted(run_id="r1", codon_id="a", start_time="t"),
        move("r1", "a", "preparing", "starting"),
    ]
    for seq, event in enumerate(events, 1):
        progress.fold(event, seq, seq)
    assert progress.failures == [("a", "rate_limit: 429"), ("b", "rate_limit: 429")]
    assert progress.failed_attempts == {"a": 2, "b": 1}
    data = summary_data(progress, RunSummary("failed", 1), 0)
    assert [f["failedAttempts"] for f in data["failures"]] == [2, 1]
    said = [text for label, text in summary_rows(data) if label == "failed"]
    assert said == ["a (2 of 3 attempts failed): rate_limit: 429", "b: rate_limit: 429"]
    progress.fold(run_started("r2"), 99, 99)
    assert progress.failures == []
    assert progress.failed_attempts == {}


# --------------------------------------------------------------------------- words


def test_totals_are_worded_once() -> None:
    assert total_cost(0.5, 0) == "$0.5000"
    assert total_cost(None, 2) == "unpriced"
    assert total_cost(0.0, 2) == "unpriced"
    assert total_cost(0.5, 1) == "≥ $0.5000 (1 codon unpriced)"
    assert total_cost(0.5, 2, 0.75) == "≥ $0.5000 (2 codons unpriced), spent $0.7500"
    assert total_cost(0.5, 0, 0.5) == "$0.5000"
    assert total_cost(None, 1, None) == "unpriced"
    assert known_cost(None, True) == known_cost(0.0, 1) == "unpriced"
    assert known_cost(0.25, True) == "≥ $0.2500"
    assert known_cost(0.25, False) == "$0.2500"


# --------------------------------------------------------------------------- manual mode


async def test_a_manual_session_says_this_run_and_every_run_as_the_budget_line(
    tmp_path: Path,
) -> None:
    """Manual mode's redo starts a new run: the summary's cost is that run's,
    and its ``all runs`` row is what the budget line says every run spent."""
    env = subprocess_environment(tmp_path)
    hank = write_hank(tmp_path / "hank", codon("a"), codon("b"))
    execution = tmp_path / "x"
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "weft", "run", str(hank), "--no-autostart", "--headless"),
        *("--execution", str(execution)),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    head = b""
    try:
        async with asyncio.timeout(TIMEOUT):
            url = None
            while url is None:
                line = await child.stdout.readline()
                assert line, "weft run ended before it announced its server"
                head += line
                found = re.search(rb"WebSocket server on (ws://\S+)", line)
                url = found and found.group(1).decode()
            redone = False
            async with connect(url, token=read_token(execution / ".weft")) as c:
                async for event in c.events(replay=True):
                    if event.type != "server.idle":
                        continue
                    if redone:
                        await c.command("server.shutdown")
                        break
                    if event.data["reason"] == "all-codons-completed":
                        redone = True
                        await c.command("codon.redo")
                    else:
                        await c.command("codon.next")
            rest, stderr = await child.communicate()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    out = (head + rest).decode()
    assert child.returncode == 0, stderr.decode()[-800:] + out[-2000:]
    budget = re.findall(r"budget: spent (\$\d+\.\d{4}) in ", out)
    assert budget, out[-3000:]
    every = re.search(r"\n  all runs     (\$\d+\.\d{4}) spent by every run of the execution", out)
    assert every is not None, out[-2000:]
    assert every.group(1) == budget[-1]
    run_cost = re.search(r"\n  cost         (\$\d+\.\d{4}) \(\S+ tokens\) in this run\n", out)
    assert run_cost is not None, out[-2000:]
    assert run_cost.group(1) != every.group(1)
    # weft status: every run's money, skipped attempts and sentinels included.
    status = status_json(execution, env)
    assert len(status["runs"]) == 2  # the redo started a new run
    assert cents(status["spent"] + status["sentinelCost"]) == every.group(1)
