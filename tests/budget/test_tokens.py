"""Budgets in tokens, for subscriptions that are never charged dollars: the run's
``--max-tokens`` / ``budget.maxTokens`` / ``WEFT_RUNTIME_BUDGET_MAX_TOKENS`` /
``overrides.budget.maxTokens`` ceiling and a loop's ``maxTokens``, enforced on real
``weft run`` processes and the fake agents (whose sessions report cache writes and
reads, as Claude Code does), and the ledger counting every token of every attempt."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.runtime.hanks import (
    codon,
    codon_records,
    journal,
    loop,
    read_state,
    runs_oldest_first,
    subprocess_environment,
    weft_cli,
    write_hank,
)

from weft.budget import BudgetBook, EarlierSpend, Ledger, Slot
from weft.budget.limits import Caps, Container
from weft.budget.table import budget_table, render_table
from weft.config import Hank

TIMEOUT = 60.0
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOKEN_KEYS = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


def weft(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return weft_cli(*args, env=env, timeout=TIMEOUT)


def events(execution: Path, kind: str) -> list[dict[str, Any]]:
    return [data for t, data in journal(execution) if t == kind]


def tokens_of(usage: dict[str, Any]) -> int:
    """Every token of one ``token.usage`` (what ``maxTokens`` counts)."""
    return sum(int(usage.get(k, 0)) for k in TOKEN_KEYS)


def crossing(execution: Path, limit: int) -> tuple[int, int]:
    """The run's token total, as the journal tells it, at the first message that took
    it over ``limit``, and that message's own tokens.

    Each codon counts its live messages, then its agent's own total (``final``) when
    larger: as the ledger does."""
    live: dict[str, int] = {}
    final: dict[str, int] = {}
    for usage in events(execution, "token.usage"):
        codon_id, n = usage["codonId"], tokens_of(usage)
        if usage.get("final"):
            final[codon_id] = n
        else:
            live[codon_id] = live.get(codon_id, 0) + n
        total = sum(max(live.get(c, 0), final.get(c, 0)) for c in live.keys() | final.keys())
        if total > limit:
            return total, n
    raise AssertionError(f"the journal never went over {limit} tokens")


def with_overrides(hank: Path, budget: dict[str, Any]) -> Path:
    doc = json.loads(hank.read_text())
    doc["overrides"] = {"budget": budget}
    hank.write_text(json.dumps(doc))
    return hank


def three_codons(tmp_path: Path) -> Path:
    return write_hank(tmp_path / "hank", codon("a"), codon("b"), codon("c"))


# --------------------------------------------------------------------------- the run ceiling


def test_max_tokens_stops_the_run_on_the_message_that_crosses_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = tmp_path / "hello"
    shutil.copytree(EXAMPLES / "hello", hank)
    execution = tmp_path / "x"
    # Each of hello's codons uses about 40,000 tokens (mostly cache reads): the
    # ceiling is crossed by the second one, mid-session.
    limit = 60_000
    first = weft("run", hank, "-e", execution, "--headless", "--max-tokens", str(limit), env=env)
    assert first.returncode == 3, first.stdout  # stopped by the budget
    assert "Budget: the run may use 60,000 tokens" in first.stdout
    assert "of 60,000 tokens (--max-tokens)" in first.stdout
    assert "Run stopped by its budget (exit 3)" in first.stdout
    (crossed,) = events(execution, "budget.exceeded")
    assert (crossed["scope"], crossed["limitKind"], crossed["limit"]) == ("run", "tokens", limit)
    # Counted as every token (cache reads included) and tripped by the message that
    # crossed it: over the ceiling by at most that one message.
    at_stop, message = crossing(execution, limit)
    assert crossed["used"] == at_stop
    assert limit < at_stop <= limit + message
    assert f"the run used {at_stop:,} of 60,000 tokens" in first.stdout
    run = runs_oldest_first(read_state(execution))[0]
    assert (run["status"], run["stop"]["by"]) == ("stopped", "budget")
    assert run["stop"]["budget"] == {
        "scope": "run", "kind": "tokens", "limit": limit, "used": at_stop, "source": "--max-tokens",
    }  # fmt: skip
    records = codon_records(read_state(execution))
    assert set(records) == {"greet", "polish"}  # nothing after the stop started
    (summary,) = events(execution, "budget.summary")
    assert summary["ceiling"] == {"maxTokens": limit}
    assert summary["actualTokens"] >= at_stop
    assert sum(row["tokens"] for row in summary["rows"]) == summary["actualTokens"]

    status = weft("status", execution, env=env)
    assert f"budget: maxTokens {limit}" in status.stdout
    assert f"{summary['actualTokens']:,} tokens)" in status.stdout
    said = f"Budget exceeded: the run used {at_stop:,} of 60,000 tokens (--max-tokens)"
    assert any(
        line.strip().startswith("budget-stopped: ") and said in line
        for line in status.stdout.splitlines()
    ), status.stdout
    (ending,) = [
        r["ending"] for r in json.loads(weft("status", execution, "--json", env=env).stdout)["runs"]
    ]
    assert (ending["word"], ending["budget"]["kind"], ending["reason"]) == (
        "budget-stopped", "tokens", said,
    )  # fmt: skip

    # The continue command raises the cap it reached; the cap is kept with the
    # execution, and the earlier run's tokens count: nothing more starts under it.
    assert f"weft run --execution {execution} --max-tokens 120000" in first.stdout
    again = weft("run", hank, "-e", execution, "--headless", env=env)
    assert again.returncode == 3, again.stdout
    assert "--max-tokens 60,000 tokens is kept with execution" in again.stdout
    assert "is not started" in again.stdout
    rest = weft("run", hank, "-e", execution, "--headless", "--max-tokens", "10000000", env=env)
    assert rest.returncode == 0, rest.stdout
    assert "replaces the 60,000 tokens kept with execution" in rest.stdout


def test_a_hank_token_ceiling_is_enforced(tmp_path: Path, env: dict[str, str]) -> None:
    hank = with_overrides(three_codons(tmp_path), {"maxTokens": 1000})
    result = weft("run", hank, "-e", tmp_path / "x", "--headless", env=env)
    assert result.returncode == 3, result.stdout
    assert "of 1,000 tokens (overrides.budget)" in result.stdout
    assert set(codon_records(read_state(tmp_path / "x"))) == {"a"}


def test_the_environment_token_ceiling_is_enforced(tmp_path: Path, env: dict[str, str]) -> None:
    env["WEFT_RUNTIME_BUDGET_MAX_TOKENS"] = "1000"
    result = weft("run", three_codons(tmp_path), "-e", tmp_path / "x", "--headless", env=env)
    assert result.returncode == 3, result.stdout
    assert "of 1,000 tokens (WEFT_RUNTIME_BUDGET_MAX_TOKENS)" in result.stdout
    (crossed,) = events(tmp_path / "x", "budget.exceeded")
    assert crossed["limitKind"] == "tokens"


def test_the_smaller_token_ceiling_wins_unless_the_flag_sets_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = with_overrides(three_codons(tmp_path), {"maxTokens": 1000})
    # The environment's is larger: the hank's stricter one holds.
    env["WEFT_RUNTIME_BUDGET_MAX_TOKENS"] = "10000000"
    held = weft("run", hank, "-e", tmp_path / "x", "--headless", env=env)
    assert held.returncode == 3, held.stdout
    assert "of 1,000 tokens (overrides.budget)" in held.stdout
    # The environment's is smaller: it is the ceiling.
    env["WEFT_RUNTIME_BUDGET_MAX_TOKENS"] = "500"
    lower = weft("run", hank, "-e", tmp_path / "y", "--headless", env=env)
    assert lower.returncode == 3, lower.stdout
    assert "of 500 tokens (WEFT_RUNTIME_BUDGET_MAX_TOKENS)" in lower.stdout
    # Only the flag raises the hank's.
    raised = weft(
        "run", hank, "-e", tmp_path / "z", "--headless", "--max-tokens", "10000000", env=env
    )
    assert raised.returncode == 0, raised.stdout
    assert set(codon_records(read_state(tmp_path / "z"))) == {"a", "b", "c"}


def test_a_loop_budget_in_tokens_ends_the_loop_early_and_the_run_goes_on(
    tmp_path: Path, env: dict[str, str]
) -> None:
    drafts = loop("drafts", codon("d"), limit=6)
    drafts["budget"] = {"maxTokens": 30_000}
    hank = write_hank(tmp_path / "hank", drafts, codon("after"))
    execution = tmp_path / "x"
    result = weft("run", hank, "-e", execution, "--headless", env=env)
    assert result.returncode == 0, result.stdout
    (crossed,) = events(execution, "budget.exceeded")
    assert (crossed["scope"], crossed["scopeId"], crossed["limitKind"]) == (
        "loop", "drafts", "tokens",
    )  # fmt: skip
    assert "Budget exceeded: loop drafts used" in crossed["message"]
    assert crossed["message"].endswith("of 30,000 tokens (loop drafts budget)")
    records = codon_records(read_state(execution))
    iterations = [c for c in records if c.startswith("d#")]
    assert 1 <= len(iterations) < 6
    assert records["after"]["status"] == "completed"
    spent = sum(tokens_of(records[c]["finalTokens"]) for c in iterations)
    assert spent > 30_000


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", "inf"])
def test_a_bad_max_tokens_is_a_usage_error(tmp_path: Path, env: dict[str, str], value: str) -> None:
    result = weft("run", EXAMPLES / "hello", "-e", tmp_path / "x", "--max-tokens", value, env=env)
    assert result.returncode == 2
    assert (
        f"argument --max-tokens: '{value}' is not a positive whole number of tokens"
        in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0, "must be greater than 0, got 0"),
        (-5, "must be greater than 0, got -5"),
        ("100000", 'expected an integer, got "100000"'),
        (1.5, "expected an integer, got 1.5"),
    ],
)
def test_a_bad_hank_max_tokens_is_refused(
    tmp_path: Path, env: dict[str, str], value: Any, why: str
) -> None:
    hank = with_overrides(three_codons(tmp_path), {"maxTokens": value})
    for command in (("validate", hank), ("run", hank, "-e", tmp_path / "x", "--headless")):
        result = weft(*command, env=env)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        said = result.stdout + result.stderr
        assert f"overrides.budget.maxTokens: {why}" in said
        assert "Traceback" not in said
    assert not (tmp_path / "x" / ".weft" / "weft.db").exists()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "(environment): budget.maxTokens: must be greater than 0, got 0"),
        ("-5", "(environment): budget.maxTokens: must be greater than 0, got -5"),
        ("abc", "WEFT_RUNTIME_BUDGET_MAX_TOKENS: expected an integer, got 'abc'"),
        ("1.5", "WEFT_RUNTIME_BUDGET_MAX_TOKENS: expected an integer, got '1.5'"),
    ],
)
def test_a_bad_environment_max_tokens_is_refused(
    tmp_path: Path, env: dict[str, str], value: str, why: str
) -> None:
    env["WEFT_RUNTIME_BUDGET_MAX_TOKENS"] = value
    result = weft("run", three_codons(tmp_path), "-e", tmp_path / "x", "--headless", env=env)
    assert result.returncode == 2, result.stdout
    assert why in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- the table


def test_validate_shows_the_token_ceiling(tmp_path: Path, env: dict[str, str]) -> None:
    drafts = loop("drafts", codon("d"), limit=2)
    drafts["budget"] = {"maxTokens": 30_000}
    hank = with_overrides(write_hank(tmp_path / "hank", drafts), {"maxTokens": 2_000_000})
    result = weft("validate", hank, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    header = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["budget"])
    assert "tokens" in header.split()
    run_row = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["run"])
    assert "2,000,000" in run_row
    loop_row = next(
        line for line in result.stdout.splitlines() if line.split()[:2] == ["loop", "drafts"]
    )
    assert "30,000" in loop_row
    as_json = json.loads(weft("validate", hank, "--json", env=env).stdout)
    table = json.dumps(as_json)
    assert '"maxTokens": 2000000' in table
    assert '"maxTokens": 30000' in table


# --------------------------------------------------------------------------- the ledger


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_book(tokens: int) -> BudgetBook:
    return BudgetBook(run=Container("run", "run", Caps(tokens=tokens), children=("a", "b")))


def test_the_ledger_counts_every_token_and_trips_above_the_cap() -> None:
    ledger = Ledger(run_book(1000), Clock())
    assert ledger.begin(Slot("a", "a")) is None
    # Cache reads and writes count: 600 tokens of which 10 are output.
    assert ledger.add(None, output_tokens=10, context_tokens=590, tokens=600) is None
    assert (
        ledger.add(None, output_tokens=10, context_tokens=390, tokens=400) is None
    )  # exactly 1000
    verdict = ledger.add(None, output_tokens=1, context_tokens=0, tokens=1)
    assert verdict is not None
    assert (verdict.scope, verdict.kind, verdict.limit, verdict.used) == (
        "run",
        "tokens",
        1000,
        1001,
    )
    assert verdict.stops_run
    assert verdict.message == "Budget exceeded: the run used 1,001 of 1,000 tokens (hank)"
    # The agent's own total replaces the estimates only when larger.
    assert ledger.set_total(0.0, 5, tokens=900) is not None
    assert ledger.spent_tokens == 1001
    ledger.end("completed")
    assert ledger.rows[0].tokens == 1001
    # Used up: the next codon is not started.
    refused = ledger.check_run_left(Slot("b", "b"))
    assert refused is not None
    assert refused.kind == "tokens"


def test_earlier_runs_tokens_count_against_the_ceiling() -> None:
    ledger = Ledger(run_book(1000), Clock())
    ledger.restore([EarlierSpend(slot=Slot("a", "a"), dollars=0.0, tokens=800)])
    assert ledger.spent_tokens == 800
    ledger.begin(Slot("b", "b"))
    assert ledger.add(None, tokens=200) is None
    verdict = ledger.add(None, tokens=1)
    assert verdict is not None
    assert verdict.used == 1001


def test_a_loop_token_budget_is_shared_by_its_iterations() -> None:
    loop_budget = Container("loop", "l", Caps(tokens=500), children=("d",))
    book = BudgetBook(
        run=Container("run", "run", Caps(), children=("l",)), loops={"l": loop_budget}
    )
    ledger = Ledger(book, Clock())
    for i in range(2):
        ledger.begin(Slot(f"d#{i}", "d", "l"))
        assert ledger.add(None, tokens=200) is None
        ledger.end("completed")
    ledger.begin(Slot("d#2", "d", "l"))
    verdict = ledger.add(None, tokens=101)
    assert verdict is not None
    assert (verdict.scope, verdict.scope_id, verdict.kind, verdict.used) == (
        "loop",
        "l",
        "tokens",
        501,
    )
    assert not verdict.stops_run


def test_the_table_has_a_tokens_column() -> None:
    book = run_book(2_000_000)
    doc = {
        "hank": [
            {"type": "codon", "id": "a", "name": "A", "model": "m", "continuationMode": "fresh"}
        ]
    }
    rows = budget_table(book, msgspec.convert(doc, Hank))
    text = render_table(rows)
    assert "tokens" in text.splitlines()[0].split()
    assert "2,000,000" in text.splitlines()[1]
