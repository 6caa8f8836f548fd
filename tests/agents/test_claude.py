"""The Claude Code adapter: the parser on golden streams (nothing spawned),
the error text rules, the harness's argv and environment, and the harness
driving a child that prints a golden stream.

Expected costs are worked out by hand from the reference's price table
(Sonnet 4.5 $3 / $3.75 / $0.30 / $15, Haiku 4.5 $1 / $5, Opus 4.5 $5 / $6.25 /
$25 per million tokens), never read back from the parser.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.agents.claude import ClaudeHarness
from weft.agents.claude_parser import ClaudeParser
from weft.agents.claude_transcripts import sanitize_project_dir
from weft.agents.events import (
    AgentEvent,
    AssistantText,
    CostSource,
    ErrorClass,
    RetryNotice,
    SessionExited,
    SessionResult,
    SessionStarted,
    StderrLine,
    Thinking,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
)
from weft.agents.harness import ProcessEnd, SessionSpec, StopReason, Timeouts, route
from weft.agents.pricing import default_table
from weft.agents.registry import fake_command, harness_for
from weft.agents.vendor_errors import classify_api_error as classify_error_text
from weft.agents.vendor_errors import parse_retry_after

GOLDEN = Path(__file__).parent / "golden" / "claude"
SID = "e75a5c8f-4cac-4402-a219-8278ea351740"
SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"
FAKE_SONNET = "claude-sonnet-5-5"
"""What the fake (as Claude Code 2.1.330) resolves ``sonnet`` to; the goldens are older."""


def usd(micro: float) -> float:
    """Micro-dollars (what price-per-MTok times tokens gives) to dollars."""
    return round(micro) / 1e6


def end(
    code: int | None = 0,
    *,
    signal: int | None = None,
    stderr: str = "",
    stopped: StopReason | None = None,
) -> ProcessEnd:
    return ProcessEnd(exit_code=code, signal=signal, stderr_tail=stderr, stopped=stopped)


def lines_of(name: str) -> list[bytes]:
    return (GOLDEN / name).read_bytes().split(b"\n")


def parse(
    source: str | list[bytes],
    process_end: ProcessEnd | None = None,
    *,
    stderr: list[str] = (),  # type: ignore[assignment]
    **parser_args: Any,
) -> list[AgentEvent]:
    parser = ClaudeParser(**parser_args)
    lines = lines_of(source) if isinstance(source, str) else source
    events: list[AgentEvent] = []
    for line in lines:
        events += parser.feed(line)
    for line in stderr:
        events += parser.stderr(line)
    events += parser.finish(process_end or end())
    return events


def of(events: list[AgentEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def verdict(events: list[AgentEvent]) -> SessionExited:
    last = events[-1]
    assert isinstance(last, SessionExited)
    assert sum(isinstance(e, SessionExited) for e in events) == 1
    return last


def edit(name: str, index: int, **changes: Any) -> list[bytes]:
    """A golden stream with line ``index``'s top-level fields changed."""
    lines = [line for line in lines_of(name) if line]
    obj = json.loads(lines[index])
    for key, value in changes.items():
        if value is None:
            obj.pop(key, None)
        else:
            obj[key] = value
    lines[index] = json.dumps(obj).encode()
    return lines


# -- the §1.4 example ------------------------------------------------------------------------


def test_tool_round_gives_the_normalised_events_in_order() -> None:
    events = [e for e in parse("tool_round.jsonl") if not isinstance(e, UsageDelta)]
    kinds = [type(e) for e in events]
    assert kinds == [
        SessionStarted,
        AssistantText,
        ToolUse,
        ToolResult,
        AssistantText,
        SessionResult,
        SessionExited,
    ]
    started, first, use, result, final, res, _ = events
    assert started == SessionStarted(
        session_id=SID,
        model=SONNET,
        cwd="/home/dev/repo",
        tools=["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "TodoWrite"],
        agent_version="2.1.30",
    )
    assert first.text == "I'll run the test suite first."
    assert first.message_id == use.message_id == "msg_01Hq7ZkR2vXo9fTn4WbLcY3a"
    assert use.name == "Bash"
    assert use.input == {"command": "pytest -q", "description": "Run the test suite"}
    assert result.tool_use_id == use.tool_use_id == "toolu_01Xb4mQ8rT2nV6cJ9kL3pW5e"
    assert result.content == "...\n3 passed in 0.41s"
    assert not result.is_error
    assert final.text == res.text == "All 3 tests pass; no changes needed."
    assert res.ok
    assert res.num_turns == 2
    assert res.duration_ms == 9412


def test_result_cost_is_the_reported_total_and_per_model_costs_are_kept() -> None:
    events = parse("tool_round.jsonl")
    res = of(events, SessionResult)[0]
    assert res.cost_usd == 0.031971
    assert res.cost_source is CostSource.REPORTED
    assert res.model_usage[SONNET].cost_usd == usd(10 * 3 + 5460 * 3.75 + 29120 * 0.30 + 154 * 15)
    assert res.model_usage[HAIKU].cost_usd == usd(310 * 1 + 22 * 5)
    # Tokens cover every model (modelUsage), not only the main one.
    assert res.tokens == Tokens(input=320, output=176, cache_creation=5460, cache_read=29120)
    exited = verdict(events)
    assert exited.ok
    assert exited.error_class is None
    assert exited.result_seen
    assert (exited.cost_usd, exited.cost_source, exited.tokens) == (
        res.cost_usd,
        res.cost_source,
        res.tokens,
    )
    assert exited.session_id == SID
    assert exited.session_aliases == [SID]


def test_usage_repeated_per_block_is_counted_once_per_message() -> None:
    deltas = of(parse("tool_round.jsonl"), UsageDelta)
    # Three assistant lines, two API messages: the repeated snapshot is not a delta.
    assert [d.message_id for d in deltas] == [
        "msg_01Hq7ZkR2vXo9fTn4WbLcY3a",
        "msg_01Pz3kW9sYq2LmT7vB8nR4cD",
    ]
    assert deltas[0].tokens == Tokens(input=4, output=8, cache_creation=5120, cache_read=12000)
    assert deltas[0].cost_usd == usd(4 * 3 + 5120 * 3.75 + 12000 * 0.30 + 8 * 15)
    assert deltas[1].cost_usd == usd(6 * 3 + 340 * 3.75 + 17120 * 0.30 + 58 * 15)
    assert all(d.model == SONNET for d in deltas)


def test_a_growing_snapshot_reports_only_the_growth() -> None:
    lines = [line for line in lines_of("tool_round.jsonl") if line]
    later = json.loads(lines[2])
    later["message"]["usage"]["output_tokens"] = 96
    lines[2] = json.dumps(later).encode()
    deltas = of(parse(lines), UsageDelta)
    assert [d.tokens.output for d in deltas] == [8, 88, 58]
    assert deltas[1].tokens == Tokens(output=88)
    assert deltas[1].cost_usd == usd(88 * 15)


# -- cost fallbacks (§6 rule 5) --------------------------------------------------------------


def test_cost_is_computed_from_the_table_when_the_cli_reports_none() -> None:
    res = of(parse("cost_omitted.jsonl"), SessionResult)[0]
    assert res.cost_source is CostSource.COMPUTED
    sonnet = 10 * 3 + 5460 * 3.75 + 29120 * 0.30 + 154 * 15
    haiku = 310 * 1 + 22 * 5
    assert res.cost_usd == usd(sonnet + haiku) == 0.031971
    assert res.model_usage[HAIKU].cost_usd == usd(haiku)


def test_cost_is_the_sum_of_model_costs_without_a_total() -> None:
    lines = edit("tool_round.jsonl", 5, total_cost_usd=None)
    res = of(parse(lines), SessionResult)[0]
    assert res.cost_source is CostSource.MODEL_USAGE
    assert res.cost_usd == 0.031971


def test_legacy_cost_usd_field_is_the_reported_total() -> None:
    lines = edit("tool_round.jsonl", 5, total_cost_usd=None, cost_usd=0.5)
    res = of(parse(lines), SessionResult)[0]
    assert (res.cost_usd, res.cost_source) == (0.5, CostSource.REPORTED)


def test_multi_model_cost_sums_every_model_not_main_usage_times_its_price() -> None:
    res = of(parse("multi_model_cost.jsonl"), SessionResult)[0]
    opus = 1200 * 5 + 2000 * 6.25 + 800 * 25
    sonnet = 10 * 3 + 5460 * 3.75 + 29120 * 0.30 + 154 * 15
    assert set(res.model_usage) == {SONNET, HAIKU, "claude-opus-4-5-20251101"}
    assert res.cost_usd == usd(opus + sonnet + 310 + 22 * 5)
    assert res.cost_usd != usd(sonnet)
    # Computed the same way when nothing is reported.
    lines = [line for line in lines_of("multi_model_cost.jsonl") if line]
    obj = json.loads(lines[-1])
    del obj["total_cost_usd"]
    for mu in obj["modelUsage"].values():
        del mu["costUSD"]
    lines[-1] = json.dumps(obj).encode()
    computed = of(parse(lines), SessionResult)[0]
    assert computed.cost_source is CostSource.COMPUTED
    assert computed.cost_usd == res.cost_usd


def test_one_hour_cache_writes_of_the_main_model_are_priced_at_twice_input() -> None:
    lines = [line for line in lines_of("cost_omitted.jsonl") if line]
    obj = json.loads(lines[-1])
    obj["usage"]["cache_creation"] = {
        "ephemeral_5m_input_tokens": 460,
        "ephemeral_1h_input_tokens": 5000,
    }
    lines[-1] = json.dumps(obj).encode()
    res = of(parse(lines), SessionResult)[0]
    sonnet = 10 * 3 + 460 * 3.75 + 5000 * 6 + 29120 * 0.30 + 154 * 15
    assert res.model_usage[SONNET].tokens.cache_creation_1h == 5000
    assert res.cost_usd == usd(sonnet + 310 + 22 * 5)


def test_an_unknown_model_is_unpriced_not_free() -> None:
    lines = [line for line in lines_of("cost_omitted.jsonl") if line]
    obj = json.loads(lines[-1])
    obj["modelUsage"]["claude-nonexistent-9"] = {"inputTokens": 5, "outputTokens": 5}
    lines[-1] = json.dumps(obj).encode()
    res = of(parse(lines), SessionResult)[0]
    assert res.cost_usd is None
    assert res.cost_source is CostSource.UNPRICED
    assert res.model_usage["claude-nonexistent-9"].cost_usd is None


def test_without_model_usage_the_main_usage_is_priced_at_the_init_model() -> None:
    lines = edit("cost_omitted.jsonl", 5, modelUsage={})
    res = of(parse(lines), SessionResult)[0]
    assert res.cost_source is CostSource.COMPUTED
    assert res.cost_usd == usd(10 * 3 + 5460 * 3.75 + 29120 * 0.30 + 154 * 15)


# -- verdicts (§1.7) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("golden", "exit_code", "error_class", "retriable", "message"),
    [
        ("max_turns.jsonl", 1, ErrorClass.MAX_TURNS, False, "Reached maximum number of turns (3)"),
        (
            "max_turns_legacy.jsonl",
            0,
            ErrorClass.MAX_TURNS,
            False,
            "Reached maximum number of turns (3)",
        ),
        (
            "max_budget.jsonl",
            1,
            ErrorClass.BUDGET,
            False,
            "claude reached its spending cap (--max-budget-usd)",
        ),
        (
            "api_error_429.jsonl",
            1,
            ErrorClass.RATE_LIMIT,
            True,
            "API Error: 429 rate limit exceeded",
        ),
        (
            "auth_error.jsonl",
            1,
            ErrorClass.AUTH,
            False,
            "Invalid API key · Please run /login",
        ),
        ("error_result.jsonl", 1, ErrorClass.ERROR_RESULT, True, "Tool execution crashed"),
        ("prompt_too_long.jsonl", 1, ErrorClass.CONTEXT_EXCEEDED, False, "Prompt is too long"),
    ],
)
def test_error_results_are_classified(
    golden: str, exit_code: int, error_class: ErrorClass, retriable: bool, message: str
) -> None:
    events = parse(golden, end(exit_code))
    res = of(events, SessionResult)[0]
    exited = verdict(events)
    assert not res.ok
    assert not exited.ok
    assert res.error_class is exited.error_class is error_class
    assert exited.retriable is retriable
    assert exited.message == message
    assert exited.result_seen
    assert exited.exit_code == exit_code


def test_error_subtypes_carry_no_result_text() -> None:
    res = of(parse("max_turns.jsonl", end(1)), SessionResult)[0]
    assert res.text is None
    assert res.subtype == "error_max_turns"
    assert res.errors == ["Reached maximum number of turns (3)"]


def test_overloaded_after_retries_is_retriable_and_the_retries_are_reported() -> None:
    events = parse("overloaded.jsonl", end(1))
    retries = of(events, RetryNotice)
    assert [(r.attempt, r.max_retries, r.status, r.error) for r in retries] == [
        (1, 10, 529, "overloaded"),
        (2, 10, 529, "overloaded"),
        (3, 10, 529, "overloaded"),
    ]
    exited = verdict(events)
    assert exited.error_class is ErrorClass.OVERLOADED
    assert exited.retriable


def test_rate_limit_retries_carry_their_delay() -> None:
    retries = of(parse("api_error_429.jsonl", end(1)), RetryNotice)
    assert [(r.attempt, r.delay_ms, r.status) for r in retries] == [(1, 600, 429), (2, 1200, 429)]


def test_success_subtype_with_is_error_is_a_disguised_error() -> None:
    # No error code, status or telling text: still not a success.
    lines = edit("tool_round.jsonl", 5, is_error=True)
    exited = verdict(parse(lines))
    assert not exited.ok
    assert exited.error_class is ErrorClass.API_ERROR


def test_api_error_status_classifies_when_no_error_code_is_given() -> None:
    lines = edit("tool_round.jsonl", 5, is_error=True, api_error_status=401, result="x")
    assert verdict(parse(lines)).error_class is ErrorClass.AUTH
    lines = edit("tool_round.jsonl", 5, is_error=True, api_error_status=500, result="x")
    exited = verdict(parse(lines))
    assert exited.error_class is ErrorClass.OVERLOADED
    assert exited.retriable


def test_a_result_wins_over_a_nonzero_exit() -> None:
    exited = verdict(parse("tool_round.jsonl", end(2)))
    assert exited.ok
    assert exited.exit_code == 2
    assert exited.error_class is None


def test_resume_of_a_missing_session_cannot_resume() -> None:
    missing = "380b1ed3-03fa-476a-aba1-561bb73eeb75"
    events = parse(
        "resume_missing.jsonl",
        end(1, stderr=f"No conversation found with session ID: {missing}\n"),
        resume_session_id=missing,
    )
    exited = verdict(events)
    assert exited.error_class is ErrorClass.CANNOT_RESUME
    assert not exited.retriable
    assert exited.message == f"No conversation found with session ID: {missing}"
    assert exited.session_id == missing


def test_legacy_resume_error_on_stderr_only_cannot_resume() -> None:
    missing = "380b1ed3-03fa-476a-aba1-561bb73eeb75"
    line = f"No conversation found with session ID: {missing}"
    exited = verdict(parse([], end(1, stderr=line + "\n"), stderr=[line]))
    assert exited.error_class is ErrorClass.CANNOT_RESUME
    assert exited.message == line
    assert not exited.result_seen


@pytest.mark.parametrize(
    "stderr",
    [
        "Error: Session ID 0b9c8d7e-1f2a-4b3c-8d4e-5f6a7b8c9d0e is already in use.",
        "Error: Input must be provided either through stdin or as a prompt argument when "
        "using --print",
        "Error: When using --print, --output-format=stream-json requires --verbose",
    ],
)
def test_refused_arguments_are_input_errors(stderr: str) -> None:
    exited = verdict(parse([], end(1, stderr=stderr), stderr=[stderr]))
    assert exited.error_class is ErrorClass.INPUT_ERROR
    assert not exited.retriable
    assert exited.message == stderr


def test_crash_before_init_is_retriable_and_quotes_stderr() -> None:
    # Seed 002: an error while spawning cools down like one while running.
    exited = verdict(parse([], end(1, stderr="Traceback...\nError: boom\n")))
    assert exited.error_class is ErrorClass.CRASH_BEFORE_INIT
    assert exited.retriable
    assert exited.session_id is None
    assert exited.message is not None
    assert exited.message.endswith("Error: boom")
    assert exited.cost_usd == 0.0
    assert exited.cost_source is CostSource.ESTIMATE


@pytest.mark.parametrize("process_end", [end(1), end(None, signal=9)])
def test_crash_mid_run_keeps_the_session_and_the_live_estimate(process_end: ProcessEnd) -> None:
    events = parse("crash_mid_run.jsonl", process_end)
    assert [type(e) for e in events if not isinstance(e, UsageDelta)][:3] == [
        SessionStarted,
        AssistantText,
        ToolUse,
    ]
    exited = verdict(events)
    assert exited.error_class is ErrorClass.CRASH_MID_RUN
    assert exited.retriable
    assert exited.session_id == SID
    assert not exited.result_seen
    assert exited.cost_source is CostSource.ESTIMATE
    assert exited.cost_usd == usd(4 * 3 + 5120 * 3.75 + 12000 * 0.30 + 8 * 15)
    assert exited.tokens == Tokens(input=4, output=8, cache_creation=5120, cache_read=12000)
    assert exited.signal == process_end.signal


def test_exit_zero_without_a_result_is_not_success() -> None:
    exited = verdict(parse("crash_mid_run.jsonl", end(0)))
    assert not exited.ok
    assert exited.error_class is ErrorClass.NO_RESULT


@pytest.mark.parametrize(
    ("reason", "error_class", "retriable"),
    [
        (StopReason.IDLE_TIMEOUT, ErrorClass.TIMEOUT, True),
        (StopReason.FIRST_OUTPUT_TIMEOUT, ErrorClass.TIMEOUT, True),
        (StopReason.WALL_TIMEOUT, ErrorClass.TIMEOUT, True),
        (StopReason.OPERATOR, ErrorClass.STOPPED, False),
        (StopReason.SHUTDOWN, ErrorClass.STOPPED, False),
    ],
)
def test_a_session_weft_stopped_is_a_timeout_or_stopped(
    reason: StopReason, error_class: ErrorClass, retriable: bool
) -> None:
    exited = verdict(parse("crash_mid_run.jsonl", end(None, signal=15, stopped=reason)))
    assert (exited.error_class, exited.retriable) == (error_class, retriable)
    # An aborted result written on SIGTERM does not change that.
    aborted = edit(
        "max_turns.jsonl",
        2,
        subtype="error_during_execution",
        terminal_reason="aborted_streaming",
        errors=[],
    )
    exited = verdict(parse(aborted, end(143, stopped=reason)))
    assert (exited.error_class, exited.retriable) == (error_class, retriable)


def test_a_success_result_before_a_stop_is_still_success() -> None:
    exited = verdict(parse("tool_round.jsonl", end(None, signal=15, stopped=StopReason.OPERATOR)))
    assert exited.ok


# -- tolerance ---------------------------------------------------------------------------------


def test_malformed_lines_are_counted_and_skipped() -> None:
    events = parse("malformed.jsonl")
    exited = verdict(events)
    assert exited.ok
    assert exited.malformed_lines == 1  # the truncated {"type":"assistant","mess
    assert exited.unknown_types == 1  # future_event
    assert of(events, SessionStarted)[0].session_id == SID  # the \r\n line
    assert [e.text for e in of(events, AssistantText)] == ["Still fine."]
    assert not of(events, ToolUse)  # server_tool_use is not a tool Weft runs


def test_thinking_blocks_are_reported_and_redacted_ones_ignored() -> None:
    events = parse("thinking.jsonl")
    assert [e.text for e in of(events, Thinking)] == ["The user wants a summary."]
    assert [e.text for e in of(events, AssistantText)] == ["Here is the summary."]
    assert verdict(events).ok


def test_subagent_lines_are_marked_and_priced_at_their_model() -> None:
    events = parse("subagent.jsonl")
    texts = of(events, AssistantText)
    assert [(t.text, t.subagent) for t in texts] == [
        ("Found 2 test files.", True),
        ("There are 2 test files.", False),
    ]
    uses = of(events, ToolUse)
    assert [(u.name, u.subagent) for u in uses] == [("Task", False), ("Glob", True)]
    results = of(events, ToolResult)
    assert [(r.tool_use_id, r.subagent) for r in results] == [
        ("toolu_01SubGlobAAAAAAAAAAAAAAA", True),
        ("toolu_01TaskAAAAAAAAAAAAAAAAAAA", False),
    ]
    assert results[1].content == "Found 2 test files."  # list content joined
    haiku = [d for d in of(events, UsageDelta) if d.model == HAIKU]
    assert [d.cost_usd for d in haiku] == [usd(1200 + 40 * 5)] * 2
    res = of(events, SessionResult)[0]
    assert set(res.model_usage) == {SONNET, HAIKU}
    assert res.text == "There are 2 test files."


def test_partial_deltas_assemble_to_the_final_text() -> None:
    events = parse("partial_messages.jsonl")
    partial = [t for t in of(events, AssistantText) if t.partial]
    final = [t for t in of(events, AssistantText) if not t.partial]
    assert "".join(t.text for t in partial) == final[0].text == "All 3 tests pass 🎉."
    assert {t.message_id for t in partial} == {final[0].message_id}


def test_automatic_compaction_flags_context_exceeded_but_succeeds() -> None:
    events = parse("compact_auto.jsonl")
    assert len(of(events, SessionStarted)) == 1  # the second init is not a new session
    res = of(events, SessionResult)[0]
    exited = verdict(events)
    assert res.ok
    assert exited.ok
    assert res.context_exceeded
    assert exited.context_exceeded


def test_a_failure_after_automatic_compaction_keeps_its_own_class() -> None:
    compacted = [line for line in lines_of("compact_auto.jsonl") if line][:-1]
    rate_limited = [line for line in lines_of("api_error_429.jsonl") if line][-2:]
    exited = verdict(parse(compacted + rate_limited, end(1)))
    assert exited.error_class is ErrorClass.RATE_LIMIT
    assert exited.context_exceeded


def test_manual_compaction_is_not_context_exhaustion() -> None:
    lines = [line for line in lines_of("compact_auto.jsonl") if line]
    lines[2] = lines[2].replace(b'"trigger":"auto"', b'"trigger":"manual"')
    assert not verdict(parse(lines)).context_exceeded


def test_synthetic_terminated_without_a_result_is_context_exceeded() -> None:
    lines = [line for line in lines_of("auth_error.jsonl") if line][:2]
    lines[1] = lines[1].replace(
        "Invalid API key · Please run /login".encode(), b"API Error: terminated"
    )
    exited = verdict(parse(lines, end(1)))
    assert exited.context_exceeded
    assert exited.error_class is ErrorClass.CONTEXT_EXCEEDED


def test_session_id_comes_only_from_top_level_init_and_result() -> None:
    planted = json.dumps(
        {"type": "system", "subtype": "init", "session_id": "11111111-1111-4111-8111-111111111111"}
    )
    lines = [line for line in lines_of("tool_round.jsonl") if line]
    tool_result = json.loads(lines[3])
    tool_result["message"]["content"][0]["content"] = planted
    tool_result["session_id"] = "22222222-2222-4222-8222-222222222222"
    lines[3] = json.dumps(tool_result).encode()
    exited = verdict(parse(lines))
    assert exited.session_id == SID
    assert exited.session_aliases == [SID]


@given(
    st.lists(
        st.one_of(
            st.binary(max_size=80),
            st.builds(
                lambda kind, extra: json.dumps({"type": kind, **extra}).encode(),
                st.sampled_from(
                    ["system", "assistant", "user", "result", "stream_event", "zzz", 3, None]
                ),
                st.dictionaries(
                    st.sampled_from(
                        ["message", "subtype", "session_id", "usage", "content", "event"]
                    ),
                    st.recursive(
                        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                        lambda inner: (
                            st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=5), inner, max_size=3)
                        ),
                        max_leaves=6,
                    ),
                    max_size=4,
                ),
            ),
        ),
        max_size=12,
    )
)
def test_the_parser_never_raises_and_always_ends_with_a_verdict(lines: list[bytes]) -> None:
    events = parse([*lines, *lines_of("tool_round.jsonl")])
    exited = verdict(events)
    assert exited.malformed_lines + exited.unknown_types <= len(lines)


# -- session ids and resume (§1.6) -------------------------------------------------------------


def write_transcript(config: Path, cwd: Path, session: str) -> None:
    project = config / "projects" / sanitize_project_dir(cwd)
    project.mkdir(parents=True, exist_ok=True)
    (project / f"{session}.jsonl").write_text("{}\n")


def init_line(session: str) -> bytes:
    return json.dumps(
        {"type": "system", "subtype": "init", "session_id": session, "model": SONNET}
    ).encode()


REQUESTED = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
REPORTED = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"


@pytest.mark.parametrize(
    ("existing", "canonical"),
    [
        ({REQUESTED}, REQUESTED),  # 2.1.139: a fresh id with no file (#58760)
        ({REQUESTED, REPORTED}, REPORTED),  # <= 1.0: the history was forked
        ({REPORTED}, REPORTED),
        (set(), REPORTED),
    ],
)
def test_resume_alias_chain_prefers_an_id_with_a_transcript(
    tmp_path: Path, existing: set[str], canonical: str
) -> None:
    config, cwd = tmp_path / "config", tmp_path / "work.dir"
    cwd.mkdir()
    for session in existing:
        write_transcript(config, cwd, session)
    exited = verdict(
        parse(
            [init_line(REPORTED)],
            end(1),
            cwd=cwd,
            config_dir=config,
            resume_session_id=REQUESTED,
        )
    )
    assert exited.session_id == canonical
    assert exited.session_aliases == [REQUESTED, REPORTED]


def test_resume_that_keeps_the_id_has_one_alias(tmp_path: Path) -> None:
    exited = verdict(
        parse([init_line(REQUESTED)], end(1), cwd=tmp_path, resume_session_id=REQUESTED)
    )
    assert exited.session_id == REQUESTED
    assert exited.session_aliases == [REQUESTED]


def test_sanitized_project_dir_replaces_every_non_alphanumeric(tmp_path: Path) -> None:
    odd = tmp_path / "my.proj_x y"
    odd.mkdir()
    name = sanitize_project_dir(odd)
    assert name.endswith("-my-proj-x-y")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


# -- error text ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("API Error: 429 rate limit exceeded", (ErrorClass.RATE_LIMIT, True)),
        ("Your credit balance is too low", (ErrorClass.BILLING, False)),
        ("Claude AI usage limit reached", (ErrorClass.BILLING, False)),
        ("AccessDeniedException: not authorized", (ErrorClass.AUTH, False)),
        ("API Error: Request timed out.", (ErrorClass.API_ERROR, True)),
        ("API Error: 401 invalid x-api-key", (ErrorClass.AUTH, False)),
        ("Prompt is too long", (ErrorClass.CONTEXT_EXCEEDED, False)),
        ("invalid_request_error: messages: bad", (ErrorClass.API_ERROR, False)),
        ("status 429", (ErrorClass.RATE_LIMIT, True)),
        ("fetch failed: ECONNRESET", (ErrorClass.API_ERROR, True)),
        ("API Error: 529 Overloaded", (ErrorClass.OVERLOADED, True)),
        ("something odd happened", None),
    ],
)
def test_error_text_is_classified_first_match_wins(
    text: str, expected: tuple[ErrorClass, bool] | None
) -> None:
    assert classify_error_text(text) == expected


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("retry-after-ms: 1500", 1500),
        ("Retry-After: 30", 30_000),
        ("please retry after 2.5 s", 2500),
        ("Try again in 3 minutes", 180_000),
        ("rate limited, wait 250ms", 250),
        ("API Error: 429 rate limit exceeded", None),
    ],
)
def test_retry_after_is_read_from_error_text(text: str, ms: int | None) -> None:
    assert parse_retry_after(text) == ms


def test_the_verdict_carries_a_retry_after_hint() -> None:
    lines = [line for line in lines_of("api_error_429.jsonl") if line]
    lines[3] = lines[3].replace(b"rate limit exceeded", b"rate limit exceeded, retry after 20s")
    assert verdict(parse(lines, end(1))).retry_after_ms == 20_000


# -- the harness: argv and environment ----------------------------------------------------


def spec(tmp_path: Path, **fields: Any) -> SessionSpec:
    return SessionSpec(prompt="Fix the bug.", model="sonnet", cwd=tmp_path, **fields)


def test_argv_is_exactly_the_headless_stream_json_command(tmp_path: Path) -> None:
    harness = ClaudeHarness(["claude"])
    assert harness.argv(spec(tmp_path)) == [
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "sonnet",
        "--permission-mode",
        "bypassPermissions",
    ]


def test_argv_with_every_option_resumes_with_the_equals_form(tmp_path: Path) -> None:
    argv = ClaudeHarness(["/opt/claude"]).argv(
        spec(
            tmp_path,
            resume_session_id="-abc",
            append_system_prompt="Be brief.",
            max_turns=4,
            max_budget_usd=1.5,
            extra_args=("--fallback-model", "haiku"),
        )
    )
    assert argv[0] == "/opt/claude"
    assert argv[argv.index("--append-system-prompt") + 1] == "Be brief."
    assert argv[argv.index("--max-turns") + 1] == "4"
    assert argv[argv.index("--max-budget-usd") + 1] == "1.5"
    assert "--resume=-abc" in argv
    assert "--resume" not in argv
    assert argv[-2:] == ["--fallback-model", "haiku"]
    assert "Fix the bug." not in argv  # the prompt goes on stdin


def test_environment_filters_maps_and_deletes(tmp_path: Path) -> None:
    parent = {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LC_ALL": "C.UTF-8",
        "ANTHROPIC_API_KEY": "sk-x",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8000",
        "CLAUDE_CONFIG_DIR": "/cfg",
        "CLAUDECODE": "1",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "OPENAI_API_KEY": "sk-o",
        "RANDOM_SECRET": "s",
        "FAKE_AGENT_SCENARIO": "success",
        "WEFT_FOO": "bar",
        "WEFT_LC_ALL": "unset",
        "WEFT_CLAUDE_BIN": "/x/claude",
        "WEFT_RUNTIME_PORT": "1",
        "WEFT_CLAUDECODE": "1",
    }
    env = ClaudeHarness().env(spec(tmp_path, env={"CODON": "1", "HOME": "unset"}), parent)
    assert env == {
        "PATH": "/bin",
        "ANTHROPIC_API_KEY": "sk-x",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8000",
        "CLAUDE_CONFIG_DIR": "/cfg",
        "FOO": "bar",
        "CODON": "1",
    }


def test_bedrock_mode_passes_aws_credentials_and_the_fake_gets_its_knobs(tmp_path: Path) -> None:
    parent = {
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "AWS_REGION": "eu-west-1",
        "FAKE_AGENT_SCENARIO": "x",
    }
    env = ClaudeHarness().env(spec(tmp_path), parent)
    assert env["AWS_REGION"] == "eu-west-1"
    assert "FAKE_AGENT_SCENARIO" not in env
    fake_env = ClaudeHarness(fake=True).env(spec(tmp_path), {"FAKE_AGENT_SCENARIO": "x"})
    assert fake_env == {"FAKE_AGENT_SCENARIO": "x"}


# -- the harness through a real process ------------------------------------------------------


def printer(golden: str, exit_code: int = 0, stderr: str = "") -> list[str]:
    """A command that prints a golden stream in small pieces and exits."""
    code = (
        "import sys,time\n"
        f"data=open({str(GOLDEN / golden)!r},'rb').read()\n"
        "for i in range(0,len(data),97):\n"
        "    sys.stdout.buffer.write(data[i:i+97]); sys.stdout.flush()\n"
        f"sys.stderr.write({stderr!r}); sys.exit({exit_code})\n"
    )
    return [sys.executable, "-c", code]


async def test_harness_runs_a_process_and_tees_the_raw_stream(tmp_path: Path) -> None:
    log_path = tmp_path / ".weft" / "runs" / "r1" / "build-claude.log"
    harness = ClaudeHarness(printer("tool_round.jsonl", exit_code=2, stderr="warn\n"))
    session = await harness.start(
        spec(tmp_path, log_path=log_path, timeouts=Timeouts(first_output=10, idle=10))
    )
    events = [e async for e in session.events()]
    exited = verdict(events)
    assert exited.ok
    assert exited.exit_code == 2
    assert exited.cost_usd == 0.031971
    assert [e.line for e in of(events, StderrLine)] == ["warn"]
    assert log_path.read_bytes() == (GOLDEN / "tool_round.jsonl").read_bytes()
    assert (tmp_path / ".weft" / "runs" / "r1" / "build-claude.log.stderr").read_text() == "warn\n"
    assert exited == msgspec.json.decode(msgspec.json.encode(exited), type=SessionExited)


# -- every §7.3 scenario through the harness and the real fake agent ------------------------

SCENARIO_TIMEOUTS = Timeouts(first_output=10, idle=10, wall=60, stop_grace=2, flush_grace=2)


class FakeRun:
    """One session of the fake Claude through :class:`ClaudeHarness`."""

    def __init__(self, events: list[AgentEvent], record: dict[str, Any], log: Path) -> None:
        self.events = events
        self.record = record
        self.log = log

    @property
    def exited(self) -> SessionExited:
        return verdict(self.events)

    @property
    def result(self) -> SessionResult:
        (res,) = of(self.events, SessionResult)
        return res


async def fake_run(
    tmp_path: Path,
    scenario: str | None,
    *,
    prompt: str = "Fix the failing test.",
    env: dict[str, str] | None = None,
    timeouts: Timeouts = SCENARIO_TIMEOUTS,
    resume: str | None = None,
    extra_args: tuple[str, ...] = (),
    harness: ClaudeHarness | None = None,
    stop_on: type[Any] | None = None,
) -> FakeRun:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    runs = sorted(tmp_path.glob("record-*.json"))
    record = tmp_path / f"record-{len(runs)}.json"
    log = tmp_path / f"run-{len(runs)}" / "codon-claude.log"
    directive = f"@@fake:scenario={scenario}@@ " if scenario else ""
    spec = SessionSpec(
        prompt=directive + prompt,
        model="sonnet",
        cwd=work,
        resume_session_id=resume,
        env={
            "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
            "FAKE_AGENT_LINE_DELAY_MS": "0",
            "FAKE_AGENT_RECORD": str(record),
            **(env or {}),
        },
        log_path=log,
        timeouts=timeouts,
        extra_args=extra_args,
    )
    if harness is None:
        resolved = harness_for(route("fake/sonnet"))
        assert isinstance(resolved, ClaudeHarness)
        harness = resolved
    session = await harness.start(spec)
    events: list[AgentEvent] = []
    async for event in session.events():
        events.append(event)
        if stop_on is not None and isinstance(event, stop_on):
            stop_on = None
            await session.stop()
    recorded = json.loads(record.read_text()) if record.exists() else {}
    return FakeRun(events, recorded, log)


def table_cost(res: SessionResult) -> float:
    """The session's cost by Weft's table, from the per-model tokens the fake
    reported (its own figure comes from its own table)."""
    nanos = 0
    for model, usage in res.model_usage.items():
        cost = default_table().cost_nanos(model, usage.tokens)
        assert cost is not None, f"{model} is unpriced"
        nanos += cost
    return nanos / 1e9


def assert_billed_to_the_table(run: FakeRun) -> None:
    res = run.result
    assert res.cost_source is CostSource.REPORTED
    assert res.cost_usd == table_cost(res)
    assert run.exited.cost_usd == res.cost_usd
    for model, usage in res.model_usage.items():
        assert usage.cost_usd == default_table().cost_usd(model, usage.tokens), model


async def test_success_argv_stdin_session_and_cost(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, "success", env={"CLAUDECODE": "1", "WEFT_X": "unused"})
    exited = run.exited
    assert exited.ok
    assert exited.exit_code == 0
    (started,) = of(run.events, SessionStarted)
    assert started.model == FAKE_SONNET  # the alias resolved by the CLI
    assert exited.session_id == started.session_id == run.result.session_id
    assert of(run.events, AssistantText)
    assert_billed_to_the_table(run)
    # What the CLI got: the §1.1 argv, the prompt on stdin and nowhere else.
    argv = run.record["argv"]
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert {"-p", "--verbose"} <= set(argv)
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    assert run.record["stdin"] == "@@fake:scenario=success@@ Fix the failing test."
    assert not any("Fix the failing test" in a for a in argv)
    assert "CLAUDECODE" not in run.record["env"]
    # The raw stream is in the log, line for line.
    logged = [line for line in run.log.read_bytes().split(b"\n") if line]
    assert len(logged) == len([e for e in run.events if not isinstance(e, UsageDelta)]) - 1


@pytest.mark.parametrize(
    "scenario",
    ["tool_use", "parallel_tools", "tool_error", "thinking", "subagent", "multi_model_cost"],
)
async def test_tool_scenarios_pair_results_with_calls_and_bill_every_model(
    tmp_path: Path, scenario: str
) -> None:
    run = await fake_run(tmp_path, scenario)
    assert run.exited.ok
    assert_billed_to_the_table(run)
    uses = {u.tool_use_id: u for u in of(run.events, ToolUse)}
    results = of(run.events, ToolResult)
    assert {r.tool_use_id for r in results} == set(uses)
    for r in results:  # every result comes after its call
        assert run.events.index(uses[r.tool_use_id]) < run.events.index(r)
    if scenario == "parallel_tools":
        order = [u.tool_use_id for u in of(run.events, ToolUse)]
        assert [r.tool_use_id for r in results] == order[::-1]  # paired by id, not order
    if scenario == "tool_error":
        assert [r.is_error for r in results] == [True]
        assert results[0].content  # the error text reaches the runner
    if scenario == "thinking":
        assert of(run.events, Thinking)
    if scenario == "subagent":
        assert any(t.subagent for t in of(run.events, AssistantText))
        assert not run.result.text or run.result.text == of(run.events, AssistantText)[-1].text
        assert len(run.result.model_usage) >= 2
    if scenario == "multi_model_cost":
        # Sonnet and the subagent's Opus (2.1.330 makes no background Haiku call).
        assert len(run.result.model_usage) == 2
        main = run.result.model_usage[FAKE_SONNET].tokens
        main_only = default_table().cost_usd(FAKE_SONNET, main)
        assert run.result.cost_usd != main_only


async def test_tool_use_usage_is_deduplicated_per_message(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, "tool_use")
    deltas = of(run.events, UsageDelta)
    per_message: dict[str | None, Tokens] = {}
    for d in deltas:
        per_message[d.message_id] = per_message.get(d.message_id, Tokens()) + d.tokens
    raw = [json.loads(line) for line in run.log.read_bytes().splitlines()]
    snapshots: dict[str, dict[str, int]] = {}
    for line in raw:
        if line["type"] == "assistant":
            snapshots[line["message"]["id"]] = line["message"]["usage"]
    assert set(per_message) == set(snapshots)
    for mid, usage in snapshots.items():
        assert per_message[mid].input == usage["input_tokens"]
        assert per_message[mid].cache_read == usage["cache_read_input_tokens"]


async def test_partial_messages_assemble_to_the_final_text(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, "partial_messages", extra_args=("--include-partial-messages",))
    assert run.exited.ok
    texts = of(run.events, AssistantText)
    finals = [t for t in texts if not t.partial]
    assert finals
    for final in finals:
        deltas = [t.text for t in texts if t.partial and t.message_id == final.message_id]
        assert "".join(deltas) == final.text
    assert "--include-partial-messages" in run.record["argv"]


@pytest.mark.parametrize(
    ("scenario", "env", "error_class", "retriable"),
    [
        ("api_error", {}, ErrorClass.RATE_LIMIT, True),
        ("auth_error", {}, ErrorClass.AUTH, False),
        ("max_turns", {}, ErrorClass.MAX_TURNS, False),
        ("max_turns_legacy", {}, ErrorClass.MAX_TURNS, False),
        ("max_budget", {}, ErrorClass.BUDGET, False),
        ("error_result", {}, ErrorClass.ERROR_RESULT, True),
        ("resume_missing", {}, ErrorClass.CANNOT_RESUME, False),
        ("resume_missing", {"FAKE_AGENT_LEGACY_ERRORS": "1"}, ErrorClass.CANNOT_RESUME, False),
        ("session_in_use", {}, ErrorClass.INPUT_ERROR, False),
        ("crash_before_init", {}, ErrorClass.CRASH_BEFORE_INIT, True),
        ("crash_mid_run", {}, ErrorClass.CRASH_MID_RUN, True),
        ("exit0_no_result", {}, ErrorClass.NO_RESULT, True),
    ],
)
async def test_failure_scenarios_are_classified(
    tmp_path: Path, scenario: str, env: dict[str, str], error_class: ErrorClass, retriable: bool
) -> None:
    run = await fake_run(tmp_path, scenario, env=env)
    exited = run.exited
    assert not exited.ok
    assert exited.error_class is error_class
    assert exited.retriable is retriable
    assert exited.message
    if scenario == "api_error":
        assert len(of(run.events, RetryNotice)) == 2
        assert exited.cost_usd == 0.0
    if scenario == "max_turns_legacy":
        assert exited.exit_code == 0  # the subtype overrides exit 0 and is_error false
    if scenario in ("crash_mid_run", "exit0_no_result"):
        assert exited.session_id == of(run.events, SessionStarted)[0].session_id
        assert exited.cost_source is CostSource.ESTIMATE
    if scenario == "crash_before_init":
        assert exited.session_id is None
        assert "TypeError" in exited.message


async def test_max_turns_flag_is_passed_and_enforced(tmp_path: Path) -> None:
    harness = harness_for(route("fake/sonnet"))
    assert isinstance(harness, ClaudeHarness)
    run = await fake_run(tmp_path, "tool_use", extra_args=("--max-turns", "1"))
    assert run.exited.error_class is ErrorClass.MAX_TURNS
    assert run.record["argv"][run.record["argv"].index("--max-turns") + 1] == "1"


async def test_a_crash_by_signal_before_init(tmp_path: Path) -> None:
    run = await fake_run(
        tmp_path, None, env={"FAKE_AGENT_SCENARIO": "crash_before_init,signal=SIGKILL"}
    )
    assert run.exited.signal == 9
    assert run.exited.error_class is ErrorClass.CRASH_BEFORE_INIT


async def test_result_then_nonzero_keeps_the_result_verdict(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, "result_then_nonzero")
    assert run.exited.ok
    assert run.exited.exit_code == 2
    assert_billed_to_the_table(run)


async def test_malformed_lines_are_survived_and_counted(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, "malformed_lines")
    assert run.exited.ok
    assert run.exited.malformed_lines == 1
    assert run.exited.unknown_types == 1


async def test_chunked_writes_split_inside_characters_decode_right(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, "chunked_writes")
    assert run.exited.ok
    assert any("\U0001f680" in t.text for t in of(run.events, AssistantText))
    assert run.exited.malformed_lines == 0


async def test_empty_prompt_is_an_input_error(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, None, prompt="   ")
    assert run.exited.error_class is ErrorClass.INPUT_ERROR
    assert "Input must be provided" in (run.exited.message or "")


async def test_multi_turn_scenario_in_single_prompt_mode_is_one_turn(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, "multi_turn_stdin")
    assert run.exited.ok
    assert len(of(run.events, SessionResult)) == 1


# -- cost fallback ---------------------------------------------------------------------------


async def test_cost_omitted_is_computed_to_what_the_cli_would_report(tmp_path: Path) -> None:
    seeded = {"FAKE_AGENT_SEED": "7"}
    reported = await fake_run(tmp_path, "success", env=seeded)
    omitted = await fake_run(tmp_path, "success", env={**seeded, "FAKE_AGENT_OMIT_COST": "1"})
    assert omitted.result.cost_source is CostSource.COMPUTED
    assert omitted.result.cost_usd == reported.result.cost_usd
    scenario = await fake_run(tmp_path, "cost_omitted")
    assert scenario.exited.cost_source is CostSource.COMPUTED
    assert scenario.exited.cost_usd == table_cost(scenario.result)


# -- timeouts and stopping -------------------------------------------------------------------


async def test_hang_before_init_trips_the_first_output_deadline(tmp_path: Path) -> None:
    run = await fake_run(
        tmp_path, "hang_before_init", timeouts=Timeouts(first_output=0.5, idle=None, stop_grace=1)
    )
    assert run.exited.error_class is ErrorClass.TIMEOUT
    assert run.exited.retriable
    assert run.exited.session_id is None


async def test_slow_start_below_the_deadline_finds_init_after_hooks(tmp_path: Path) -> None:
    run = await fake_run(
        tmp_path,
        None,
        env={"FAKE_AGENT_SCENARIO": "slow_start,delay_ms=400"},
        timeouts=Timeouts(first_output=3, idle=3),
    )
    assert run.exited.ok
    raw = [json.loads(line) for line in run.log.read_bytes().splitlines()]
    assert raw[0]["subtype"] != "init"  # hooks came first
    assert of(run.events, SessionStarted)


async def test_hang_after_init_trips_idle_and_keeps_partial_state(tmp_path: Path) -> None:
    run = await fake_run(
        tmp_path, "hang_after_init", timeouts=Timeouts(first_output=5, idle=0.5, stop_grace=1)
    )
    exited = run.exited
    assert exited.error_class is ErrorClass.TIMEOUT
    assert exited.session_id == of(run.events, SessionStarted)[0].session_id
    assert of(run.events, AssistantText)
    # Weft's stop is a SIGINT: the CLI's aborted result carries the spend so far.
    assert exited.result_seen
    assert exited.cost_source is CostSource.REPORTED
    assert exited.cost_usd is not None
    assert exited.cost_usd > 0


async def test_retries_extend_the_idle_deadline(tmp_path: Path) -> None:
    # Delays of 0.25, 0.5 and 1 s against an idle deadline of 0.4 s.
    run = await fake_run(
        tmp_path,
        None,
        env={"FAKE_AGENT_SCENARIO": "retry_then_ok,delay_ms=250"},
        timeouts=Timeouts(first_output=5, idle=0.4, stop_grace=1),
    )
    assert run.exited.ok
    retries = of(run.events, RetryNotice)
    assert [(r.attempt, r.status, r.delay_ms) for r in retries] == [
        (1, 529, 250),
        (2, 529, 500),
        (3, 529, 1000),
    ]


async def test_partial_line_stall_waits_for_the_rest_of_the_line(tmp_path: Path) -> None:
    env = {"FAKE_AGENT_SCENARIO": "partial_line_stall,stall_ms=600"}
    run = await fake_run(tmp_path, None, env=env, timeouts=Timeouts(first_output=5, idle=2))
    assert run.exited.ok
    assert run.exited.malformed_lines == 0
    # The same stall past the idle deadline is a timeout, not a parse error.
    stalled = await fake_run(tmp_path, None, env=env, timeouts=Timeouts(first_output=5, idle=0.3))
    assert stalled.exited.error_class is ErrorClass.TIMEOUT


# Weft stops Claude with SIGINT, which Claude Code 2.1.330 (and the fake)
# answers with an aborted_streaming result and exit 0 whatever the SIGTERM policy.
@pytest.mark.parametrize(
    ("mode", "signal_or_code"),
    [("graceful", ("exit", 0)), ("exit", ("exit", 0)), ("ignore", ("signal", 9))],
)
async def test_sigterm_modes_end_as_stopped(
    tmp_path: Path, mode: str, signal_or_code: tuple[str, int]
) -> None:
    run = await fake_run(
        tmp_path,
        None,
        env={"FAKE_AGENT_SCENARIO": "sigterm,interval_ms=50", "FAKE_AGENT_SIGTERM": mode},
        timeouts=Timeouts(first_output=5, idle=5, stop_grace=0.5, flush_grace=0.5),
        stop_on=AssistantText,
    )
    exited = run.exited
    assert exited.error_class is ErrorClass.STOPPED
    assert not exited.retriable
    kind, value = signal_or_code
    assert (exited.exit_code if kind == "exit" else exited.signal) == value
    assert exited.result_seen is (mode != "ignore")


# -- volume ------------------------------------------------------------------------------


async def test_stderr_flood_does_not_deadlock(tmp_path: Path) -> None:
    run = await fake_run(tmp_path, "stderr_flood")
    assert run.exited.ok
    assert len(run.exited.stderr_tail) <= 64 * 1024
    assert of(run.events, StderrLine)
    assert Path(str(run.log) + ".stderr").stat().st_size >= 4 * 1024 * 1024


async def test_huge_output_streams_with_bounded_memory(tmp_path: Path) -> None:
    import resource

    huge = 16 * 1024 * 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    run = await fake_run(tmp_path, "huge_output,spill=0", env={"FAKE_AGENT_HUGE_BYTES": str(huge)})
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert run.exited.ok
    longest = max(map(len, run.log.read_bytes().split(b"\n")))
    assert longest >= huge - 1024  # one line of about HUGE_BYTES went through whole
    assert max(len(r.content) for r in of(run.events, ToolResult)) > huge // 3
    assert sum(t.partial for t in of(run.events, AssistantText)) >= 50_000
    # The line exists as bytes, str and JSON once each; the stream is never held whole.
    assert grown < 12 * huge


async def test_lines_over_the_cap_are_skipped_and_the_session_survives(tmp_path: Path) -> None:
    small = ClaudeHarness(fake_command("claude").command, fake=True, max_line_bytes=1024 * 1024)
    run = await fake_run(
        tmp_path,
        None,
        env={
            "FAKE_AGENT_SCENARIO": "huge_output,events=10,spill=0",
            "FAKE_AGENT_HUGE_BYTES": "4000000",
        },
        harness=small,
    )
    assert run.exited.ok
    assert run.exited.oversized_lines == 1
    assert run.log.stat().st_size > 4_000_000


# -- resume and session-id continuity (§1.6) -------------------------------------------------


async def test_resume_carries_context_and_keeps_the_id(tmp_path: Path) -> None:
    first = await fake_run(tmp_path, "success", prompt="Remember the word PELICAN.")
    sid = first.exited.session_id
    assert sid is not None
    second = await fake_run(tmp_path, "resume", prompt="What was the word?", resume=sid)
    assert second.exited.ok
    assert f"--resume={sid}" in second.record["argv"]
    assert of(second.events, SessionStarted)[0].session_id == sid
    assert second.exited.session_id == sid
    assert second.exited.session_aliases == [sid]
    assert any("PELICAN" in t.text for t in of(second.events, AssistantText))


async def test_a_resumed_session_is_billed_its_own_spend_not_the_running_total(
    tmp_path: Path,
) -> None:
    """Like Claude Code 2.1.330, the fake reports a resumed session's cost and
    modelUsage cumulatively and this process's share in
    model_usage_since_last_result; Weft bills the share."""
    first = await fake_run(tmp_path, "success", prompt="Remember the word PELICAN.")
    sid = first.exited.session_id
    second = await fake_run(tmp_path, "resume", prompt="What was the word?", resume=sid)
    raw = json.loads(second.log.read_bytes().splitlines()[-1])
    own = sum(m["costUSD"] for m in raw["model_usage_since_last_result"].values())
    assert raw["total_cost_usd"] > own  # the running total includes the first process
    assert second.exited.cost_usd == pytest.approx(own, abs=1e-9)
    assert second.exited.cost_source is CostSource.REPORTED
    assert second.exited.tokens.input == sum(
        m["inputTokens"] for m in raw["model_usage_since_last_result"].values()
    )


@pytest.mark.parametrize(("mode", "keeps_old"), [("new", False), ("tag", True)])
async def test_resume_id_drift_follows_the_transcript(
    tmp_path: Path, mode: str, keeps_old: bool
) -> None:
    first = await fake_run(tmp_path, "success", prompt="Remember the word HERON.")
    old = first.exited.session_id
    assert old is not None
    second = await fake_run(
        tmp_path,
        "resume",
        prompt="Now remember OSPREY.",
        resume=old,
        env={"FAKE_AGENT_RESUME_MODE": mode},
    )
    assert any("HERON" in t.text for t in of(second.events, AssistantText))
    reported = of(second.events, SessionStarted)[0].session_id
    assert reported != old
    assert second.exited.session_aliases == [old, reported]
    canonical = second.exited.session_id
    assert canonical == (old if keeps_old else reported)
    # The canonical id holds the latest turn: resuming it continues the chain.
    third = await fake_run(tmp_path, "resume", prompt="And now?", resume=canonical)
    assert third.exited.ok
    assert any("OSPREY" in t.text for t in of(third.events, AssistantText))


async def test_the_real_claude_cli_if_installed(tmp_path: Path) -> None:
    binary = shutil.which("claude")
    if binary is None:
        pytest.skip("claude is not on PATH")
    spec = SessionSpec(
        prompt="Reply with the single word: ok",
        model="haiku",
        cwd=tmp_path,
        max_turns=2,
        timeouts=Timeouts(first_output=60, idle=120, wall=300),
    )
    session = await ClaudeHarness([binary]).start(spec)
    events = [e async for e in session.events()]
    exited = verdict(events)
    assert exited.malformed_lines == 0
    if exited.ok:
        assert exited.session_id == of(events, SessionStarted)[0].session_id
        assert exited.cost_source is CostSource.REPORTED
    else:  # no credentials or no network where this runs: still a clean verdict
        assert exited.error_class is not None
        assert exited.message
