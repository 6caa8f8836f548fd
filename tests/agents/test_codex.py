"""The Codex adapter: the parser on golden streams (nothing spawned), then
the harness driving the fake Codex as a real subprocess."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.agents import pricing
from weft.agents.codex import CodexHarness, CodexParser
from weft.agents.codex_usage import ThreadTotal, ThreadUsageLedger, rollout_thread_total
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
from weft.agents.harness import ProcessEnd, SessionSpec, StopReason, Timeouts
from weft.agents.registry import fake_command

GOLDEN = Path(__file__).parent / "golden" / "codex"
FAKE = fake_command("codex").command
MODEL = "gpt-5"

# Prices of a made-up model, per million tokens: input, cached input, output.
IN, CACHED, OUT = 1.25, 0.125, 10.0


def fixed_pricer(model: str, tokens: Tokens) -> float | None:
    """A pricing table with one model, so the parser's arithmetic is checked
    apart from Weft's table."""
    if model != MODEL:
        return None
    return (tokens.input * IN + tokens.cache_read * CACHED + tokens.output * OUT) / 1e6


def end(
    code: int | None = 0,
    *,
    signal: int | None = None,
    stderr: str = "",
    stopped: StopReason | None = None,
) -> ProcessEnd:
    return ProcessEnd(exit_code=code, signal=signal, stderr_tail=stderr, stopped=stopped)


def parse(
    name: str | None,
    process_end: ProcessEnd,
    *,
    lines: list[bytes] | None = None,
    **kwargs: object,
) -> tuple[list[AgentEvent], CodexParser]:
    parser = CodexParser(model=MODEL, pricer=fixed_pricer, **kwargs)  # type: ignore[arg-type]
    if lines is None:
        assert name is not None
        lines = (GOLDEN / f"{name}.jsonl").read_bytes().split(b"\n")
    events: list[AgentEvent] = []
    for line in lines:
        events.extend(parser.feed(line))
    events.extend(parser.finish(process_end))
    return events, parser


def of(events: list[AgentEvent], kind: type[AgentEvent]) -> list[AgentEvent]:
    return [e for e in events if isinstance(e, kind)]


def exited(events: list[AgentEvent]) -> SessionExited:
    last = events[-1]
    assert isinstance(last, SessionExited)
    assert sum(isinstance(e, SessionExited) for e in events) == 1
    return last


# -- the golden streams ----------------------------------------------------------------------


def test_success_stream_maps_every_item_in_order() -> None:
    events, _ = parse("success", end(0))
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "SessionStarted",
        "Thinking",
        "ToolUse",
        "ToolResult",
        "AssistantText",
        "UsageDelta",
        "SessionResult",
        "SessionExited",
    ]
    started = events[0]
    assert isinstance(started, SessionStarted)
    assert started.session_id == "0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77"
    assert started.model == MODEL
    assert events[1] == Thinking(text="**Running the test suite**", message_id="item_0")
    assert events[2] == ToolUse(
        tool_use_id="item_1", name="command_execution", input={"command": "bash -lc 'pytest -q'"}
    )
    assert events[3] == ToolResult(tool_use_id="item_1", content="...\n3 passed in 0.41s\n")
    assert events[4] == AssistantText(text="All 3 tests pass; nothing to fix.", message_id="item_2")


def test_success_usage_moves_the_cached_subset_to_cache_read() -> None:
    events, _ = parse("success", end(0))
    # input_tokens 18234 includes the 17920 cached ones.
    expected = Tokens(input=18234 - 17920, cache_read=17920, output=211)
    (delta,) = of(events, UsageDelta)
    assert isinstance(delta, UsageDelta)
    assert delta.tokens == expected
    cost = (314 * 1.25 + 17920 * 0.125 + 211 * 10.0) / 1e6
    assert delta.cost_usd == pytest.approx(cost)
    (result,) = of(events, SessionResult)
    assert isinstance(result, SessionResult)
    assert result.ok
    assert result.text == "All 3 tests pass; nothing to fix."
    assert result.tokens == expected
    assert result.cost_usd == pytest.approx(cost)
    assert result.cost_source is CostSource.COMPUTED
    assert result.model_usage[MODEL].tokens == expected
    assert result.num_turns == 1
    verdict = exited(events)
    assert verdict.ok
    assert verdict.error_class is None
    assert verdict.result_seen
    assert verdict.session_id == "0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77"
    assert verdict.cost_usd == pytest.approx(cost)
    assert verdict.tokens == expected


@pytest.mark.parametrize(("code", "signal"), [(1, None), (2, None), (None, 9)])
def test_a_completed_turn_wins_over_a_failing_exit(code: int | None, signal: int | None) -> None:
    events, _ = parse("success", end(code, signal=signal, stderr="TLS close_notify error"))
    verdict = exited(events)
    assert verdict.ok
    assert verdict.exit_code == code
    assert verdict.signal == signal


def test_an_unknown_model_is_unpriced_not_free() -> None:
    parser = CodexParser(model="gpt-99-unknown", pricer=fixed_pricer)
    for line in (GOLDEN / "success.jsonl").read_bytes().splitlines():
        parser.feed(line)
    verdict = exited(parser.finish(end(0)))
    assert verdict.ok
    assert verdict.cost_usd is None
    assert verdict.cost_source is CostSource.UNPRICED
    assert verdict.tokens.cache_read == 17920


@pytest.mark.parametrize("code", [1, 0])
def test_turn_failed_is_a_failure_whatever_the_exit_code(code: int) -> None:
    events, _ = parse("turn_failed", end(code))
    (result,) = of(events, SessionResult)
    assert isinstance(result, SessionResult)
    assert not result.ok
    assert result.is_error
    assert result.error_class is ErrorClass.RATE_LIMIT
    assert result.errors == [
        "stream disconnected before completion: rate limit reached for gpt-5 in organization "
        "org-x on tokens per min. Please try again in 1.5s."
    ]
    verdict = exited(events)
    assert not verdict.ok
    assert verdict.error_class is ErrorClass.RATE_LIMIT
    assert verdict.retriable
    assert verdict.retry_after_ms == 1500
    assert verdict.result_seen
    assert verdict.session_id == "0199c3a1-7f00-7a11-8b22-3c4d5e6f7a8b"
    # No usage was reported: the cost is not known, not zero.
    assert verdict.cost_usd is None


def test_a_bare_error_event_is_a_failure_reported_at_exit() -> None:
    events, _ = parse("error_only", end(1))
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["SessionStarted", "SessionResult", "SessionExited"]
    verdict = exited(events)
    assert verdict.error_class is ErrorClass.AUTH
    assert not verdict.retriable
    assert verdict.message == "unexpected status 401 Unauthorized: Incorrect API key provided"


def test_capacity_failure_with_exit_0_is_overloaded_and_retriable() -> None:
    events, _ = parse("capacity_exit0", end(0))
    verdict = exited(events)
    assert not verdict.ok
    assert verdict.exit_code == 0
    assert verdict.error_class is ErrorClass.OVERLOADED
    assert verdict.retriable


def test_reconnect_errors_are_retry_notices_and_a_later_completion_succeeds() -> None:
    events, _ = parse("reconnect_then_ok", end(0))
    notices = of(events, RetryNotice)
    assert [(n.attempt, n.max_retries) for n in notices if isinstance(n, RetryNotice)] == [
        (1, 5),
        (2, 5),
    ]
    assert exited(events).ok


def test_an_error_followed_by_turn_completed_is_success() -> None:
    lines = [
        b'{"type":"thread.started","thread_id":"t-1"}',
        b'{"type":"error","message":"stream error: 500 Internal Server Error"}',
        b'{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"ok"}}',
        b'{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,'
        b'"output_tokens":1}}',
    ]
    events, _ = parse(None, end(0), lines=lines)
    assert exited(events).ok


def test_turn_completed_after_turn_failed_succeeds() -> None:
    lines = [
        b'{"type":"thread.started","thread_id":"t-2"}',
        b'{"type":"turn.failed","error":{"message":"overloaded"}}',
        b'{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,'
        b'"output_tokens":1}}',
    ]
    events, _ = parse(None, end(1), lines=lines)
    results = of(events, SessionResult)
    assert [r.ok for r in results if isinstance(r, SessionResult)] == [False, True]
    assert exited(events).ok


def test_legacy_item_type_and_assistant_message_names() -> None:
    events, _ = parse("legacy_item_type", end(0))
    assert of(events, Thinking) == [Thinking(text="thinking about it", message_id="item_0")]
    assert of(events, ToolUse) == [
        ToolUse(tool_use_id="item_1", name="command_execution", input={"command": "ls"})
    ]
    assert of(events, ToolResult) == [ToolResult(tool_use_id="item_1", content="README.md\n")]
    assert of(events, AssistantText) == [
        AssistantText(text="The folder holds a README.", message_id="item_2")
    ]
    verdict = exited(events)
    assert verdict.unknown_types == 0
    assert verdict.tokens == Tokens(input=4000, cache_read=1000, output=120)


def test_tool_items_pair_by_id_and_carry_their_errors() -> None:
    events, _ = parse("tools", end(0))
    uses = {e.tool_use_id: e for e in events if isinstance(e, ToolUse)}
    results = {e.tool_use_id: e for e in events if isinstance(e, ToolResult)}
    assert set(uses) == set(results) == {"item_1", "item_2", "item_3", "item_4", "item_5"}
    # Each result comes after its call.
    order = [e.tool_use_id for e in events if isinstance(e, ToolUse | ToolResult)]
    for tool_id in uses:
        assert order.index(tool_id) < len(order) - 1 - order[::-1].index(tool_id)
    assert uses["item_1"].name == "file_change"
    assert uses["item_1"].input["changes"][1] == {"path": "src/new.py", "kind": "add"}
    assert results["item_1"].content == "update src/app.py\nadd src/new.py"
    assert not results["item_1"].is_error
    assert uses["item_2"].name == "mcp__docs__search"
    assert uses["item_2"].input == {"q": "retry"}
    assert results["item_2"].content == "found 2 pages"
    assert results["item_3"].is_error  # declined
    assert results["item_4"].is_error  # exit code 1
    assert results["item_4"].content == "1 failed"
    assert uses["item_5"].input == {"query": "python retry library"}
    verdict = exited(events)
    assert verdict.ok
    assert verdict.unknown_types == 0  # todo_list and error items are known
    assert verdict.malformed_lines == 0


def test_malformed_lines_are_counted_and_never_fatal() -> None:
    events, _ = parse("malformed", end(0))
    verdict = exited(events)
    assert verdict.ok
    assert verdict.malformed_lines == 2  # the truncated line and the item that is a string
    assert verdict.unknown_types == 2  # future.event and the hologram item
    assert verdict.session_id == "0199c3a1-cf00-7077-a188-9c0d1e2f3041"  # despite its \r
    assert of(events, AssistantText) == [AssistantText(text="ok \U0001f680", message_id="item_2")]


def test_crash_mid_run_keeps_the_thread_id_and_is_retriable() -> None:
    events, _ = parse("crash_mid_run", end(1, stderr="thread 'main' panicked at src/x.rs\n"))
    assert of(events, SessionResult) == []
    assert len(of(events, ToolUse)) == 1
    assert of(events, ToolResult) == []
    verdict = exited(events)
    assert not verdict.ok
    assert not verdict.result_seen
    assert verdict.error_class is ErrorClass.CRASH_MID_RUN
    assert verdict.retriable
    assert verdict.session_id == "0199c3a1-d000-7188-b299-0d1e2f304152"
    assert verdict.message is not None
    assert "panicked" in verdict.message


def test_exit_0_without_a_terminal_event_is_not_success() -> None:
    verdict = exited(parse("crash_mid_run", end(0))[0])
    assert not verdict.ok
    assert verdict.error_class is ErrorClass.NO_RESULT


def test_death_by_signal_is_a_crash() -> None:
    verdict = exited(parse("crash_mid_run", end(None, signal=9))[0])
    assert verdict.error_class is ErrorClass.CRASH_MID_RUN
    assert verdict.signal == 9
    assert verdict.message is not None
    assert "signal 9" in verdict.message


@pytest.mark.parametrize(
    ("reason", "cls", "retriable"),
    [
        (StopReason.IDLE_TIMEOUT, ErrorClass.TIMEOUT, True),
        (StopReason.FIRST_OUTPUT_TIMEOUT, ErrorClass.TIMEOUT, True),
        (StopReason.WALL_TIMEOUT, ErrorClass.TIMEOUT, True),
        (StopReason.OPERATOR, ErrorClass.STOPPED, False),
    ],
)
def test_a_session_weft_stopped_is_classed_by_the_reason(
    reason: StopReason, cls: ErrorClass, retriable: bool
) -> None:
    verdict = exited(parse("crash_mid_run", end(None, signal=15, stopped=reason))[0])
    assert verdict.error_class is cls
    assert verdict.retriable is retriable


@pytest.mark.parametrize(
    ("code", "stderr", "cls"),
    [
        (1, "Error: no rollout found for thread id 0199-missing\n", ErrorClass.CANNOT_RESUME),
        (2, "error: unexpected argument '--frobnicate' found\n", ErrorClass.INPUT_ERROR),
        (1, "Error: OPENAI_API_KEY is not set; authentication required\n", ErrorClass.AUTH),
        (1, "Segmentation fault\n", ErrorClass.CRASH_BEFORE_INIT),
    ],
)
def test_death_before_the_thread_started_is_classed_from_stderr(
    code: int, stderr: str, cls: ErrorClass
) -> None:
    verdict = exited(parse(None, end(code, stderr=stderr), lines=[])[0])
    assert verdict.error_class is cls
    assert verdict.session_id is None
    assert verdict.stderr_tail == stderr
    assert verdict.message is not None
    assert stderr.strip() in verdict.message


# -- resume and thread totals ------------------------------------------------------------------


def test_resume_reports_the_delta_against_the_previous_thread_total() -> None:
    thread = "0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77"
    baseline = ThreadTotal(input_tokens=18234, cached_input_tokens=17920, output_tokens=211)
    events, parser = parse("resume", end(0), resume_session_id=thread, baseline=baseline)
    # The resumed total (40000 / 35000 cached / 500) includes the first session.
    expected = Tokens(input=(40000 - 18234) - (35000 - 17920), cache_read=35000 - 17920, output=289)
    verdict = exited(events)
    assert verdict.ok
    assert verdict.tokens == expected
    assert verdict.session_id == thread
    assert verdict.session_aliases == [thread]
    assert parser.thread_total == ThreadTotal(40000, 35000, 500)


def test_resume_without_a_known_total_counts_the_whole_total() -> None:
    events, _ = parse("resume", end(0), resume_session_id="0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77")
    assert exited(events).tokens == Tokens(input=5000, cache_read=35000, output=500)


def test_a_total_below_the_baseline_is_taken_as_the_turn_own_usage() -> None:
    baseline = ThreadTotal(input_tokens=10**6, cached_input_tokens=0, output_tokens=10**5)
    events, _ = parse("resume", end(0), baseline=baseline)
    assert exited(events).tokens == Tokens(input=5000, cache_read=35000, output=500)


def test_a_different_thread_id_on_resume_is_kept_as_an_alias() -> None:
    events, _ = parse("success", end(0), resume_session_id="0199c3a1-old")
    verdict = exited(events)
    assert verdict.session_id == "0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77"
    assert verdict.session_aliases == ["0199c3a1-old", "0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77"]


totals = st.lists(
    st.tuples(
        st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**5)
    ),  # increments: input, cached (clamped below), output
    min_size=1,
    max_size=6,
)


@given(increments=totals)
def test_deltas_of_monotonic_totals_add_up_to_the_last_total(
    increments: list[tuple[int, int, int]],
) -> None:
    parser = CodexParser(model=MODEL, pricer=fixed_pricer)
    parser.feed(b'{"type":"thread.started","thread_id":"t"}')
    total_in = total_cached = total_out = 0
    deltas: list[Tokens] = []
    for add_in, add_cached, add_out in increments:
        total_in += add_in
        total_cached += min(add_cached, add_in)
        total_out += add_out
        usage = {
            "input_tokens": total_in,
            "cached_input_tokens": total_cached,
            "output_tokens": total_out,
        }
        line = json.dumps({"type": "turn.completed", "usage": usage}).encode()
        deltas.extend(e.tokens for e in parser.feed(line) if isinstance(e, UsageDelta))
    assert all(min(d.input, d.cache_read, d.output) >= 0 for d in deltas)
    summed = sum(deltas, Tokens())
    assert summed == Tokens(
        input=total_in - total_cached, cache_read=total_cached, output=total_out
    )
    assert exited(parser.finish(end(0))).tokens == summed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
event_types = st.sampled_from(
    [
        "thread.started",
        "turn.started",
        "item.started",
        "item.updated",
        "item.completed",
        "turn.completed",
        "turn.failed",
        "error",
        "x.unknown",
    ]
)


@given(
    lines=st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.builds(
                lambda t, body: msgspec.json.encode({**body, "type": t}),
                event_types,
                st.dictionaries(
                    st.sampled_from(["thread_id", "item", "usage", "error", "message"]),
                    json_values,
                    max_size=3,
                ),
            ),
        ),
        max_size=12,
    ),
    code=st.one_of(st.none(), st.integers(0, 255)),
)
def test_the_parser_never_raises_and_always_ends_with_a_verdict(
    lines: list[bytes], code: int | None
) -> None:
    parser = CodexParser(model=MODEL, pricer=fixed_pricer)
    for line in lines:
        parser.feed(line)
    closing = parser.finish(end(code, signal=None if code is not None else 9))
    verdict = closing[-1]
    assert isinstance(verdict, SessionExited)
    assert verdict.ok == (verdict.error_class is None)


# -- classification helpers ------------------------------------------------------------------


# -- the harness: argv, environment, thread totals --------------------------------------------


def spec(tmp_path: Path, **fields: Any) -> SessionSpec:
    base: dict[str, Any] = {"prompt": "Fix the tests.", "model": "gpt-5-codex", "cwd": tmp_path}
    return SessionSpec(**{**base, **fields})


def test_argv_is_exec_json_with_the_prompt_on_stdin(tmp_path: Path) -> None:
    argv = CodexHarness(["codex"]).argv(spec(tmp_path))
    assert argv == [
        "codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-m",
        "gpt-5-codex",
        "-C",
        str(tmp_path),
        "--sandbox",
        "workspace-write",
        "-",
    ]


def test_resume_argv_puts_resume_after_the_exec_flags(tmp_path: Path) -> None:
    argv = CodexHarness(["codex"]).argv(
        spec(tmp_path, resume_session_id="0199-thread", extra_args=("-c", "model_reasoning=high"))
    )
    assert argv[-5:] == ["-c", "model_reasoning=high", "resume", "0199-thread", "-"]
    assert argv[:4] == ["codex", "exec", "--json", "--skip-git-repo-check"]


async def test_limits_codex_cannot_enforce_are_logged_not_passed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    harness = CodexHarness(FAKE, fake=True, ledger=ThreadUsageLedger())
    limited = spec(tmp_path, max_turns=3, max_budget_usd=1.5)
    assert harness.argv(limited) == harness.argv(spec(tmp_path))
    with caplog.at_level(logging.WARNING, logger="weft.agents.codex"):
        session = await harness.start(
            spec(
                tmp_path,
                max_turns=3,
                max_budget_usd=1.5,
                env={"CODEX_HOME": str(tmp_path / "h"), "FAKE_AGENT_LINE_DELAY_MS": "0"},
            )
        )
        assert (await session.wait()).ok
    assert "max_turns=3 is not enforced" in caplog.text
    assert "max_budget_usd=1.5" in caplog.text


def test_environment_passes_codex_and_openai_variables_only(tmp_path: Path) -> None:
    parent = {
        "PATH": "/bin",
        "OPENAI_API_KEY": "sk-x",
        "CODEX_HOME": "/h",
        "ANTHROPIC_API_KEY": "no",
        "FAKE_AGENT_SCENARIO": "x",
        "WEFT_EXTRA": "1",
    }
    env = CodexHarness().env(spec(tmp_path, env={"CODEX_HOME": "/codon"}), parent)
    assert env == {"PATH": "/bin", "OPENAI_API_KEY": "sk-x", "CODEX_HOME": "/codon", "EXTRA": "1"}
    fake_env = CodexHarness(fake=True).env(spec(tmp_path), parent)
    assert fake_env["FAKE_AGENT_SCENARIO"] == "x"


def write_rollout(home: Path, thread: str, totals: list[tuple[int, int, int]]) -> Path:
    path = home / "sessions" / "2026" / "01" / "20" / f"rollout-2026-01-20T10-00-00-{thread}.jsonl"
    path.parent.mkdir(parents=True)
    rows: list[dict[str, Any]] = [{"type": "session_meta", "payload": {"id": thread}}]
    rows.append({"type": "event_msg", "payload": {"type": "token_count", "info": None}})
    for i, c, o in totals:
        usage = {"input_tokens": i, "cached_input_tokens": c, "output_tokens": o}
        info = {"total_token_usage": usage, "last_token_usage": usage}
        rows.append({"type": "event_msg", "payload": {"type": "token_count", "info": info}})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"type":"event_msg","pay')
    return path


def test_the_rollout_gives_the_last_thread_total(tmp_path: Path) -> None:
    write_rollout(tmp_path, "t-1", [(100, 40, 10), (900, 500, 70)])
    write_rollout(tmp_path / "other", "t-2", [(5, 0, 1)])
    assert rollout_thread_total(tmp_path, "t-1") == ThreadTotal(900, 500, 70)
    assert rollout_thread_total(tmp_path, "t-3") is None


async def test_the_baseline_comes_from_the_rollout_else_the_ledger(tmp_path: Path) -> None:
    ledger = ThreadUsageLedger()
    ledger.record("t-1", ThreadTotal(1, 1, 1))
    ledger.record("t-2", ThreadTotal(7, 3, 2))
    write_rollout(tmp_path, "t-1", [(900, 500, 70)])
    harness = CodexHarness(ledger=ledger)
    env = {"CODEX_HOME": str(tmp_path)}
    assert await harness.baseline(spec(tmp_path, resume_session_id="t-1"), env) == ThreadTotal(
        900, 500, 70
    )
    assert await harness.baseline(spec(tmp_path, resume_session_id="t-2"), env) == ThreadTotal(
        7, 3, 2
    )
    assert await harness.baseline(spec(tmp_path), env) is None


def test_the_parser_records_each_thread_total_in_the_ledger() -> None:
    ledger = ThreadUsageLedger()
    parse("success", end(0), ledger=ledger)
    assert ledger.get("0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77") == ThreadTotal(18234, 17920, 211)


# -- every scenario through the fake Codex -----------------------------------------------------

FAST = Timeouts(first_output=10, idle=10, wall=60, stop_grace=2, flush_grace=0.5)


class Run:
    """One fake-codex session, run to the end."""

    def __init__(self, events: list[AgentEvent], record: dict[str, Any], log: bytes) -> None:
        self.events = events
        self.verdict = exited(events)
        self.record = record
        self.log = log

    def usages(self) -> list[dict[str, int]]:
        """The ``turn.completed`` usage objects in the raw stream."""
        out = []
        for line in self.log.splitlines():
            if line.startswith(b"{") and b'"turn.completed"' in line:
                out.append(json.loads(line)["usage"])
        return out


async def run_fake(
    tmp_path: Path,
    scenario: str | None = None,
    *,
    prompt: str = "Fix the tests.",
    timeouts: Timeouts = FAST,
    env: dict[str, str] | None = None,
    harness: CodexHarness | None = None,
    stop_after_start: StopReason | None = None,
    **fields: Any,
) -> Run:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    record = tmp_path / "record.json"
    record.unlink(missing_ok=True)
    log = tmp_path / f"codex-{len(list(tmp_path.glob('codex-*.log')))}.log"
    fake_env = {
        "CODEX_HOME": str(tmp_path / "codex-home"),
        "FAKE_AGENT_RECORD": str(record),
        "FAKE_AGENT_LINE_DELAY_MS": "0",
        "FAKE_AGENT_STRICT_FLAGS": "1",
        **({"FAKE_AGENT_SCENARIO": scenario} if scenario else {}),
        **(env or {}),
    }
    harness = harness or CodexHarness(FAKE, fake=True, ledger=ThreadUsageLedger())
    session = await harness.start(
        spec(work, prompt=prompt, env=fake_env, timeouts=timeouts, log_path=log, **fields)
    )
    events: list[AgentEvent] = []
    async for event in session.events():
        events.append(event)
        if stop_after_start is not None and isinstance(event, SessionStarted):
            await session.stop(stop_after_start)
    recorded = json.loads(record.read_text()) if record.exists() else {}
    return Run(events, recorded, log.read_bytes() if log.exists() else b"")


def table_cost(model: str, tokens: Tokens) -> float:
    """Tokens times the table's prices for ``model``, summed here, apart
    from the adapter's own arithmetic."""
    row = pricing.default_table().lookup(model)
    assert row is not None
    p = row.prices
    pico = tokens.input * p.input + tokens.cache_read * p.cache_read + tokens.output * p.output
    return pico / 1e12


def expected_tokens(usage: dict[str, int], before: dict[str, int] | None = None) -> Tokens:
    b = before or {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    spent = usage["input_tokens"] - b["input_tokens"]
    cached = usage["cached_input_tokens"] - b["cached_input_tokens"]
    return Tokens(
        input=spent - cached,
        cache_read=cached,
        output=usage["output_tokens"] - b["output_tokens"],
    )


async def test_fake_success_events_argv_stdin_and_cost(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, prompt="Fix the tests, please.")
    kinds = [type(e).__name__ for e in run.events if not isinstance(e, StderrLine)]
    assert kinds == [
        "SessionStarted",
        "Thinking",
        "AssistantText",
        "UsageDelta",
        "SessionResult",
        "SessionExited",
    ]
    assert run.record["argv"] == [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-m",
        "gpt-5-codex",
        "-C",
        str(tmp_path / "work"),
        "--sandbox",
        "workspace-write",
        "-",
    ]
    assert run.record["stdin"] == "Fix the tests, please."
    assert run.record["cwd"] == str(tmp_path / "work")
    (usage,) = run.usages()
    tokens = expected_tokens(usage)
    assert run.verdict.ok
    assert run.verdict.tokens == tokens
    assert run.verdict.cost_source is CostSource.COMPUTED
    assert run.verdict.cost_usd is not None
    assert abs(run.verdict.cost_usd - table_cost("gpt-5-codex", tokens)) < 1e-9
    assert round(run.verdict.cost_usd, 2) == round(table_cost("gpt-5-codex", tokens), 2)
    started = run.events[0]
    assert isinstance(started, SessionStarted)
    assert run.verdict.session_id == started.session_id
    text = [e.text for e in run.events if isinstance(e, AssistantText)]
    assert text == ['Done. You asked: "Fix the tests, please.".']


async def test_fake_system_prompt_goes_before_the_prompt_on_stdin(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, prompt="Task.", append_system_prompt="Be terse.")
    assert run.record["stdin"] == "Be terse.\n\nTask."
    assert "--append-system-prompt" not in run.record["argv"]


async def test_fake_command_item_pairs_tool_use_and_result(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("x")
    run = await run_fake(tmp_path, "command")
    (use,) = of(run.events, ToolUse)
    (result,) = of(run.events, ToolResult)
    assert isinstance(use, ToolUse)
    assert isinstance(result, ToolResult)
    assert use.name == "command_execution"
    assert use.input == {"command": "bash -lc ls"}
    assert result.tool_use_id == use.tool_use_id
    assert "notes.txt" in result.content
    assert not result.is_error
    assert run.verdict.ok


async def test_fake_file_change_writes_in_the_workspace_write_sandbox(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "file_change")
    (use,) = of(run.events, ToolUse)
    assert isinstance(use, ToolUse)
    assert use.name == "file_change"
    assert use.input["changes"][0]["path"].endswith("CHANGES.md")
    (result,) = of(run.events, ToolResult)
    assert isinstance(result, ToolResult)
    assert not result.is_error
    assert (tmp_path / "work" / "CHANGES.md").read_text() == "- fake-codex was here\n"
    assert run.verdict.ok


async def test_fake_legacy_item_type_gives_the_same_events(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "legacy_item_type")
    assert b'"item_type":"assistant_message"' in run.log
    assert len(of(run.events, ToolUse)) == len(of(run.events, ToolResult)) == 1
    assert len(of(run.events, AssistantText)) == 1
    assert run.verdict.ok
    assert run.verdict.unknown_types == 0


@pytest.mark.parametrize(("variant", "code"), [("", 1), (",variant=exit0", 0)])
async def test_fake_turn_failed_is_a_rate_limit_whatever_the_exit(
    tmp_path: Path, variant: str, code: int
) -> None:
    run = await run_fake(tmp_path, "turn_failed" + variant)
    assert run.verdict.exit_code == code
    assert not run.verdict.ok
    assert run.verdict.result_seen
    assert run.verdict.error_class is ErrorClass.RATE_LIMIT
    assert run.verdict.retriable
    assert run.verdict.message == "exceeded retry limit, last status: 429 Too Many Requests"


async def test_fake_completed_then_nonzero_is_success(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "completed_then_nonzero")
    assert run.verdict.exit_code == 1
    assert run.verdict.ok
    assert [e.line for e in run.events if isinstance(e, StderrLine)] == [
        "ERROR codex_core::client: TLS close_notify not received"
    ]


async def test_fake_resume_continues_the_thread_and_bills_only_the_new_turn(
    tmp_path: Path,
) -> None:
    harness = CodexHarness(FAKE, fake=True, ledger=ThreadUsageLedger())
    first = await run_fake(tmp_path, prompt="Remember the word kumquat.", harness=harness)
    thread = first.verdict.session_id
    assert thread is not None
    second = await run_fake(
        tmp_path, "resume", prompt="What was the word?", harness=harness, resume_session_id=thread
    )
    assert second.record["argv"][-3:] == ["resume", thread, "-"]
    assert second.record["stdin"] == "What was the word?"
    started = second.events[0]
    assert isinstance(started, SessionStarted)
    assert started.session_id == thread
    assert second.verdict.session_id == thread
    assert second.verdict.session_aliases == [thread]
    (text,) = [e.text for e in second.events if isinstance(e, AssistantText)]
    assert "kumquat" in text
    (before,) = first.usages()
    (after,) = second.usages()
    # The resumed usage is the thread total; the session is billed its growth.
    assert after["input_tokens"] > before["input_tokens"]
    tokens = expected_tokens(after, before)
    assert second.verdict.tokens == tokens
    assert second.verdict.cost_usd is not None
    assert abs(second.verdict.cost_usd - table_cost("gpt-5-codex", tokens)) < 1e-9


async def test_fake_resume_in_a_new_process_reads_the_total_from_the_rollout(
    tmp_path: Path,
) -> None:
    first = await run_fake(tmp_path, prompt="One.")
    thread = first.verdict.session_id
    fresh = CodexHarness(FAKE, fake=True, ledger=ThreadUsageLedger())  # knows nothing
    second = await run_fake(
        tmp_path, "resume", prompt="Two.", harness=fresh, resume_session_id=thread
    )
    (before,) = first.usages()
    (after,) = second.usages()
    assert second.verdict.tokens == expected_tokens(after, before)


async def test_fake_resume_of_an_unknown_thread_cannot_resume(tmp_path: Path) -> None:
    missing = "0199c3a1-0000-7000-8000-000000000000"
    run = await run_fake(tmp_path, resume_session_id=missing)
    assert run.verdict.error_class is ErrorClass.CANNOT_RESUME
    assert not run.verdict.retriable
    assert run.verdict.exit_code == 1
    assert run.verdict.message is not None
    assert missing in run.verdict.message


async def test_fake_crash_before_init_is_retriable(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "crash_before_init")
    assert run.verdict.error_class is ErrorClass.CRASH_BEFORE_INIT
    assert run.verdict.retriable
    assert run.verdict.session_id is None
    assert "panicked" in run.verdict.stderr_tail


@pytest.mark.parametrize(("variant", "code", "signal"), [("", 1, None), (",signal=KILL", None, 9)])
async def test_fake_crash_mid_run_keeps_the_thread_and_is_retriable(
    tmp_path: Path, variant: str, code: int | None, signal: int | None
) -> None:
    run = await run_fake(tmp_path, "crash_mid_run" + variant)
    assert run.verdict.error_class is ErrorClass.CRASH_MID_RUN
    assert run.verdict.retriable
    assert run.verdict.exit_code == code
    assert run.verdict.signal == signal
    assert run.verdict.session_id is not None
    assert len(of(run.events, ToolUse)) == 1
    assert of(run.events, ToolResult) == []


async def test_fake_exit0_without_a_terminal_event_is_no_result(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "exit0_no_result")
    assert run.verdict.exit_code == 0
    assert run.verdict.error_class is ErrorClass.NO_RESULT


async def test_fake_hang_before_init_times_out_and_leaves_no_process(tmp_path: Path) -> None:
    timeouts = Timeouts(first_output=0.5, idle=30, stop_grace=1, flush_grace=0)
    run = await run_fake(tmp_path, "hang_before_init", timeouts=timeouts)
    assert run.verdict.error_class is ErrorClass.TIMEOUT
    assert run.verdict.retriable
    assert run.verdict.session_id is None
    assert run.verdict.message == "no session started before the first-output deadline"


async def test_fake_hang_after_init_times_out_idle_and_keeps_the_thread(tmp_path: Path) -> None:
    timeouts = Timeouts(first_output=10, idle=0.5, stop_grace=1, flush_grace=0)
    run = await run_fake(tmp_path, "hang_after_init", timeouts=timeouts)
    assert run.verdict.error_class is ErrorClass.TIMEOUT
    assert run.verdict.session_id is not None
    assert run.verdict.message == "the stream went idle past the idle deadline"


@pytest.mark.parametrize("sigterm", ["exit", "graceful", "ignore"])
async def test_fake_stopped_by_weft_is_stopped_however_it_dies(
    tmp_path: Path, sigterm: str
) -> None:
    timeouts = Timeouts(first_output=10, idle=10, stop_grace=0.5, flush_grace=0.2)
    run = await run_fake(
        tmp_path,
        "sigterm,interval_ms=50",
        timeouts=timeouts,
        env={"FAKE_AGENT_SIGTERM": sigterm},
        stop_after_start=StopReason.OPERATOR,
    )
    assert run.verdict.error_class is ErrorClass.STOPPED
    assert not run.verdict.retriable
    assert run.verdict.session_id is not None
    if sigterm == "graceful":
        assert b'"turn.failed"' in run.log
    if sigterm == "ignore":
        assert run.verdict.signal == 9


async def test_fake_malformed_lines_are_counted(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "malformed_lines")
    assert run.verdict.ok
    assert run.verdict.malformed_lines == 1
    assert run.verdict.unknown_types == 2  # future_event, future_item


@pytest.mark.parametrize(
    "scenario",
    [
        "chunked_writes",
        "slow_start,delay_ms=300",
        "partial_line_stall,stall_ms=300",
        "stderr_flood,bytes=1048576",
        "huge_output,bytes=2097152,events=2000",
    ],
)
async def test_fake_transport_scenarios_end_in_success(tmp_path: Path, scenario: str) -> None:
    run = await run_fake(tmp_path, scenario)
    assert run.verdict.ok, run.verdict.message
    (text,) = [e.text for e in run.events if isinstance(e, AssistantText)]
    assert text.startswith("Done.")
    if scenario == "chunked_writes":
        assert "\U0001f680" in text
    if scenario.startswith("huge_output"):
        (result,) = of(run.events, ToolResult)
        assert isinstance(result, ToolResult)
        assert len(result.content) >= 2_000_000


async def test_fake_empty_prompt_is_an_input_error(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, prompt="  ")
    assert run.verdict.error_class is ErrorClass.INPUT_ERROR
    assert not run.verdict.retriable
    assert run.verdict.message is not None
    assert "No prompt provided" in run.verdict.message
