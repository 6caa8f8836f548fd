"""Codon fields that reach the run: what the agent and the events see of them.

Behavioural tests named by the schema walk (tests/config/test_schema_walk.py)
for fields no other test shows at work.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest
from tests.runtime.hanks import (
    Seen,
    codon,
    codon_records,
    fake_environment,
    read_state,
    run_hank,
    scenario,
    write_hank,
)

from weft.config import load_hank
from weft.config.runtime import RuntimeSessionSettings
from weft.runtime.execution.prepare import prepare_execution
from weft.runtime.run.runtime import RunOutcome, Runtime, RuntimeOptions


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


async def run(
    hank: Path, execution: Path, options: RuntimeOptions | None = None
) -> tuple[RunOutcome, Seen]:
    return await run_hank(hank, execution, options or RuntimeOptions(serve=False))


async def test_a_codons_name_and_description_reach_codon_started(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", description="Why this codon exists"))
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.exit_code == 0
    (started,) = seen.of("codon.started")
    assert (started["codonName"], started["codonDescription"]) == (
        "Codon a",
        "Why this codon exists",
    )


async def test_a_codons_shim_idle_timeout_ends_a_silent_agent(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", scenario("hang_after_init"), shimIdleTimeout=1))
    began = time.monotonic()
    # The session supervisor hands the first timeout over (no cool-down, no resume).
    once = RuntimeOptions(serve=False, sessions=RuntimeSessionSettings(max_total_errors=1))
    outcome, _ = await run(hank, tmp_path / "x", once)
    # Well under the default (180 s): the codon's own setting ended it.
    assert time.monotonic() - began < 30
    assert outcome.codons == {"a": "failed"}
    reason = codon_records(read_state(tmp_path / "x"))["a"]["failureReason"]
    assert reason["type"] == "timeout", reason


async def test_anthropic_base_url_reaches_claude_unless_the_codon_sets_its_own(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    hank = write_hank(
        tmp_path / "hank",
        codon("a", record=first),
        codon("b", record=second, env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/codon"}),
    )
    prepared = await asyncio.to_thread(
        prepare_execution,
        hank,
        None,
        execution_dir=tmp_path / "x",
        interactive=False,
        base_dir=tmp_path / "managed",
    )
    options = RuntimeOptions(serve=False, anthropic_base_url="http://127.0.0.1:9/proxy")
    outcome = await Runtime(prepared, load_hank(hank), options).run()
    assert outcome.exit_code == 0
    assert orjson.loads(first.read_bytes())["env"]["ANTHROPIC_BASE_URL"] == (
        "http://127.0.0.1:9/proxy"
    )
    assert orjson.loads(second.read_bytes())["env"]["ANTHROPIC_BASE_URL"] == (
        "http://127.0.0.1:9/codon"
    )
