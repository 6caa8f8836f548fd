"""The Gemini adapter: the parser on golden streams (nothing spawned), then
the harness driving the fake Gemini as a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.agents import pricing
from weft.agents.events import (
    AgentEvent,
    AssistantText,
    CostSource,
    ErrorClass,
    SessionExited,
    SessionResult,
    SessionStarted,
    StderrLine,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
)
from weft.agents.gemini import ARGV_PROMPT_LIMIT, GeminiHarness, GeminiParser
from weft.agents.harness import ProcessEnd, SessionSpec, StopReason, Timeouts
from weft.agents.registry import fake_command

GOLDEN = Path(__file__).parent / "golden" / "gemini"
FAKE = fake_command("gemini").command
MODEL = "gemini-2.5-pro"

# A made-up table, per million tokens: input, cached input, output.
PRICES = {"gemini-2.5-pro": (1.25, 0.31, 10.0), "gemini-2.5-flash": (0.30, 0.075, 2.50)}


def fixed_pricer(model: str, tokens: Tokens) -> float | None:
    """Prices two models, so the parser's arithmetic is checked apart from
    Weft's table."""
    if model not in PRICES:
        return None
    p_in, p_cached, p_out = PRICES[model]
    return (tokens.input * p_in + tokens.cache_read * p_cached + tokens.output * p_out) / 1e6


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
    resume: str | None = None,
) -> list[AgentEvent]:
    parser = GeminiParser(model=MODEL, pricer=fixed_pricer, resume_session_id=resume)
    if lines is None:
        assert name is not None
        lines = (GOLDEN / f"{name}.jsonl").read_bytes().split(b"\n")
    events: list[AgentEvent] = []
    for line in lines:
        events.extend(parser.feed(line))
    events.extend(parser.finish(process_end))
    return events


def of(events: list[AgentEvent], kind: type[AgentEvent]) -> list[AgentEvent]:
    return [e for e in events if isinstance(e, kind)]


def exited(events: list[AgentEvent]) -> SessionExited:
    last = events[-1]
    assert isinstance(last, SessionExited)
    assert sum(isinstance(e, SessionExited) for e in events) == 1
    return last


def result(events: list[AgentEvent]) -> SessionResult:
    (found,) = of(events, SessionResult)
    assert isinstance(found, SessionResult)
    return found


# -- the golden streams ----------------------------------------------------------------------


def test_success_stream_maps_chunks_tools_and_result_in_order() -> None:
    events = parse("success", end(0))
    started = events[0]
    assert isinstance(started, SessionStarted)
    assert started.session_id == "c4e1f0a2-7b3d-4e59-8a61-2f0d9b7c3e18"
    assert started.model == MODEL
    texts = [(e.text, e.partial) for e in events if isinstance(e, AssistantText)]
    # Each chunk is a partial; the joined message follows when the run of chunks ends.
    assert texts == [
        ("I'll run the test suite.", True),
        ("I'll run the test suite.", False),
        ("All 3 tests", True),
        (" pass.", True),
        ("All 3 tests pass.", False),
    ]
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ToolUse") == kinds.index("AssistantText") + 2
    assert of(events, ToolUse) == [
        ToolUse(
            tool_use_id="run_shell_command-1768903202010-1",
            name="run_shell_command",
            input={"command": "pytest -q"},
        )
    ]
    assert of(events, ToolResult) == [
        ToolResult(tool_use_id="run_shell_command-1768903202010-1", content="3 passed in 0.41s")
    ]
    assert kinds[-3:] == ["UsageDelta", "SessionResult", "SessionExited"]


def test_success_tokens_split_cached_input_and_cost_is_computed() -> None:
    events = parse("success", end(0))
    # input_tokens 8790 includes cached 4096; the uncached part is `input` (4694).
    expected = Tokens(input=4694, cache_read=4096, output=231)
    cost = (4694 * 1.25 + 4096 * 0.31 + 231 * 10.0) / 1e6
    found = result(events)
    assert found.ok
    assert found.text == "All 3 tests pass."
    assert found.tokens == expected
    assert found.cost_usd == pytest.approx(cost)
    assert found.cost_source is CostSource.COMPUTED
    assert found.duration_ms == 4500
    verdict = exited(events)
    assert verdict.ok
    assert verdict.result_seen
    assert verdict.tokens == expected
    assert verdict.cost_usd == pytest.approx(cost)
    assert verdict.session_id == "c4e1f0a2-7b3d-4e59-8a61-2f0d9b7c3e18"


def test_a_success_result_wins_over_a_failing_exit() -> None:
    verdict = exited(parse("success", end(1, stderr="unhandled promise rejection")))
    assert verdict.ok


def test_tool_error_is_propagated_and_the_run_still_succeeds() -> None:
    events = parse("tool_error", end(0))
    (failed,) = of(events, ToolResult)
    assert failed == ToolResult(
        tool_use_id="read_file-1768906800900-1",
        content="File not found: /repo/missing.toml",
        is_error=True,
    )
    assert result(events).text == "There is no config file."
    assert exited(events).ok


def test_turn_limit_is_max_turns_and_bills_thinking_at_the_output_rate() -> None:
    events = parse("turn_limit", end(53))
    found = result(events)
    assert not found.ok
    assert found.error_class is ErrorClass.MAX_TURNS
    assert found.subtype == "MaxSessionTurnsError"
    assert found.errors[0].startswith("Reached max session turns")
    # total 30500 = input 30000 + output 400 + 100 thinking tokens.
    assert found.tokens == Tokens(input=20000, cache_read=10000, output=500)
    verdict = exited(events)
    assert verdict.error_class is ErrorClass.MAX_TURNS
    assert not verdict.retriable
    assert verdict.cost_usd == pytest.approx((20000 * 1.25 + 10000 * 0.31 + 500 * 10.0) / 1e6)


def test_api_error_result_is_classified_from_its_message() -> None:
    events = parse("api_error", end(1))
    verdict = exited(events)
    assert not verdict.ok
    assert verdict.error_class is ErrorClass.RATE_LIMIT
    assert verdict.retriable
    assert verdict.retry_after_ms == 27000
    assert verdict.cost_usd == 0.0
    assert verdict.cost_source is CostSource.COMPUTED


def test_an_exit_code_classes_an_untyped_error_result() -> None:
    lines = [
        b'{"type":"init","session_id":"s-1","model":"gemini-2.5-pro"}',
        b'{"type":"result","status":"error","error":{"type":"unknown","message":"failed"}}',
    ]
    assert exited(parse(None, end(42), lines=lines)).error_class is ErrorClass.INPUT_ERROR
    assert exited(parse(None, end(1), lines=lines)).error_class is ErrorClass.ERROR_RESULT


def test_the_result_event_is_classified_from_its_own_error_message() -> None:
    lines = [
        b'{"type":"init","session_id":"s-1","model":"gemini-2.5-pro"}',
        b'{"type":"result","status":"error","error":{"type":"ApiError",'
        b'"message":"[API Error: got status 503. The model is overloaded.]"}}',
    ]
    events = parse(None, end(1), lines=lines)
    assert result(events).error_class is ErrorClass.OVERLOADED
    assert exited(events).error_class is ErrorClass.OVERLOADED


def test_per_model_stats_price_each_model() -> None:
    events = parse("per_model_stats", end(0))
    started = events[0]
    assert isinstance(started, SessionStarted)
    assert started.model == "auto"  # init echoes the request; stats name the real models
    pro = Tokens(input=14000, cache_read=16000, output=32200 - 30000)
    flash = Tokens(input=2000, output=2100 - 2000)
    found = result(events)
    assert found.model_usage["gemini-2.5-pro"].tokens == pro
    assert found.model_usage["gemini-2.5-flash"].tokens == flash
    assert found.tokens == pro + flash
    cost = (14000 * 1.25 + 16000 * 0.31 + 2200 * 10.0) / 1e6 + (2000 * 0.30 + 100 * 2.50) / 1e6
    assert found.cost_usd == pytest.approx(cost)
    deltas = {e.model: e.tokens for e in events if isinstance(e, UsageDelta)}
    assert deltas == {"gemini-2.5-pro": pro, "gemini-2.5-flash": flash}


def test_one_unpriced_model_makes_the_run_unpriced() -> None:
    line = (
        b'{"type":"result","status":"success","stats":{"total_tokens":30,"input_tokens":20,'
        b'"output_tokens":10,"cached":0,"input":20,"models":{"gemini-2.5-pro":{"total_tokens":15,'
        b'"input_tokens":10,"output_tokens":5,"cached":0,"input":10},"gemini-9-secret":'
        b'{"total_tokens":15,"input_tokens":10,"output_tokens":5,"cached":0,"input":10}}}}'
    )
    events = parse(None, end(0), lines=[b'{"type":"init","session_id":"s","model":"auto"}', line])
    verdict = exited(events)
    assert verdict.ok
    assert verdict.cost_usd is None
    assert verdict.cost_source is CostSource.UNPRICED
    assert result(events).model_usage["gemini-2.5-pro"].cost_usd is not None


def test_malformed_lines_are_counted_and_the_banner_skipped() -> None:
    events = parse("malformed", end(0))
    verdict = exited(events)
    assert verdict.ok
    assert verdict.malformed_lines == 2  # the truncated message and the tool_use without fields
    assert verdict.unknown_types == 1  # "thought"
    assert verdict.session_id == "9e0f1a2b-3c4d-4e5f-8a6b-7c8d9e0f1a2b"
    assert result(events).text == "Hello \U0001f680 there"


def test_crash_mid_run_flushes_the_partial_text_and_is_retriable() -> None:
    events = parse("crash_mid_run", end(1, stderr="FATAL ERROR: heap out of memory\n"))
    texts = [(e.text, e.partial) for e in events if isinstance(e, AssistantText)]
    assert texts == [("Starting the ref", True), ("Starting the ref", False)]
    verdict = exited(events)
    assert not verdict.result_seen
    assert verdict.error_class is ErrorClass.CRASH_MID_RUN
    assert verdict.retriable
    assert verdict.session_id == "8d9e0f1a-2b3c-4d4e-9f5a-6b7c8d9e0f1a"
    assert verdict.message is not None
    assert "heap out of memory" in verdict.message


def test_exit_0_without_a_result_is_not_success() -> None:
    assert exited(parse("crash_mid_run", end(0))).error_class is ErrorClass.NO_RESULT


@pytest.mark.parametrize(
    ("reason", "cls"),
    [(StopReason.IDLE_TIMEOUT, ErrorClass.TIMEOUT), (StopReason.SHUTDOWN, ErrorClass.STOPPED)],
)
def test_a_session_weft_stopped_is_classed_by_the_reason(
    reason: StopReason, cls: ErrorClass
) -> None:
    verdict = exited(parse("crash_mid_run", end(None, signal=15, stopped=reason)))
    assert verdict.error_class is cls


@pytest.mark.parametrize(
    ("code", "stderr", "cls", "hint"),
    [
        (42, "No input provided via stdin.\n", ErrorClass.INPUT_ERROR, "refused its input"),
        (41, "Please set an Auth method\n", ErrorClass.AUTH, "GEMINI_API_KEY"),
        (53, "Reached max session turns\n", ErrorClass.MAX_TURNS, "maxSessionTurns"),
        (55, "not running in a trusted directory\n", ErrorClass.INPUT_ERROR, "TRUST_WORKSPACE"),
        (1, "API key not valid. Please pass a valid API key.\n", ErrorClass.AUTH, "API key"),
        (1, "Error resuming session: Invalid session identifier\n", ErrorClass.CANNOT_RESUME, ""),
        (
            42,
            'Error resuming session: Invalid session identifier "x".\n',
            ErrorClass.CANNOT_RESUME,
            "cannot resume",
        ),
        (1, "TypeError: x is undefined\n", ErrorClass.CRASH_BEFORE_INIT, "TypeError"),
    ],
)
def test_fatal_errors_before_the_session_are_classed_by_exit_code_then_stderr(
    code: int, stderr: str, cls: ErrorClass, hint: str
) -> None:
    verdict = exited(parse(None, end(code, stderr=stderr), lines=[]))
    assert verdict.error_class is cls
    assert verdict.session_id is None
    assert verdict.message is not None
    assert hint in verdict.message


def test_a_different_session_id_on_resume_is_kept_as_an_alias() -> None:
    verdict = exited(parse("success", end(0), resume="old-id"))
    assert verdict.session_id == "c4e1f0a2-7b3d-4e59-8a61-2f0d9b7c3e18"
    assert verdict.session_aliases == ["old-id", "c4e1f0a2-7b3d-4e59-8a61-2f0d9b7c3e18"]


def test_the_same_session_id_on_resume_is_its_only_alias() -> None:
    verdict = exited(parse("success", end(0), resume="c4e1f0a2-7b3d-4e59-8a61-2f0d9b7c3e18"))
    assert verdict.session_aliases == ["c4e1f0a2-7b3d-4e59-8a61-2f0d9b7c3e18"]


@given(chunks=st.lists(st.text(max_size=12), min_size=1, max_size=8))
def test_delta_chunks_join_into_the_final_text(chunks: list[str]) -> None:
    lines = [b'{"type":"init","session_id":"s","model":"gemini-2.5-pro"}']
    lines += [
        msgspec.json.encode({"type": "message", "role": "assistant", "content": c, "delta": True})
        for c in chunks
    ]
    lines.append(b'{"type":"result","status":"success"}')
    events = parse(None, end(0), lines=lines)
    partial = [e.text for e in events if isinstance(e, AssistantText) and e.partial]
    whole = [e.text for e in events if isinstance(e, AssistantText) and not e.partial]
    assert partial == chunks
    assert whole == ["".join(chunks)]
    assert result(events).text == "".join(chunks)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    lines=st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.builds(
                lambda t, body: msgspec.json.encode({**body, "type": t}),
                st.sampled_from(
                    ["init", "message", "tool_use", "tool_result", "error", "result", "x"]
                ),
                st.dictionaries(
                    st.sampled_from(
                        ["session_id", "role", "content", "delta", "tool_id", "status", "stats"]
                    ),
                    json_values,
                    max_size=4,
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
    parser = GeminiParser(model=MODEL, pricer=fixed_pricer)
    for line in lines:
        parser.feed(line)
    verdict = parser.finish(end(code, signal=None if code is not None else 9))[-1]
    assert isinstance(verdict, SessionExited)
    assert verdict.ok == (verdict.error_class is None)


# -- the harness: argv, prompt passing, environment --------------------------------------------


def spec(tmp_path: Path, **fields: Any) -> SessionSpec:
    base: dict[str, Any] = {"prompt": "Fix the tests.", "model": "gemini-2.5-pro", "cwd": tmp_path}
    return SessionSpec(**{**base, **fields})


def test_argv_is_headless_stream_json_with_the_prompt_in_p(tmp_path: Path) -> None:
    harness = GeminiHarness(["gemini"])
    assert harness.argv(spec(tmp_path)) == [
        "gemini",
        "-p",
        "Fix the tests.",
        "--output-format",
        "stream-json",
        "-m",
        "gemini-2.5-pro",
        "-y",
    ]
    assert harness.stdin(spec(tmp_path)) is None


def test_resume_argv_names_the_session(tmp_path: Path) -> None:
    argv = GeminiHarness(["gemini"]).argv(spec(tmp_path, resume_session_id="c4e1"))
    assert argv[-2:] == ["--resume", "c4e1"]


@pytest.mark.parametrize(
    "prompt", ["x" * (ARGV_PROMPT_LIMIT + 1), "é" * (ARGV_PROMPT_LIMIT // 2 + 1), "-v is a flag"]
)
def test_long_or_dash_prompts_go_on_stdin(tmp_path: Path, prompt: str) -> None:
    harness = GeminiHarness(["gemini"])
    argv = harness.argv(spec(tmp_path, prompt=prompt))
    assert argv[1:3] == ["-p", ""]
    assert prompt not in argv
    assert harness.stdin(spec(tmp_path, prompt=prompt)) == prompt.encode("utf-8")


def test_a_prompt_at_the_limit_stays_in_argv(tmp_path: Path) -> None:
    prompt = "x" * ARGV_PROMPT_LIMIT
    assert GeminiHarness(["gemini"]).argv(spec(tmp_path, prompt=prompt))[2] == prompt


def test_environment_passes_gemini_and_google_variables_only(tmp_path: Path) -> None:
    parent = {
        "HOME": "/root",
        "GEMINI_API_KEY": "k",
        "GOOGLE_CLOUD_PROJECT": "p",
        "OPENAI_API_KEY": "no",
        "FAKE_AGENT_SCENARIO": "x",
    }
    env = GeminiHarness().env(spec(tmp_path), parent)
    assert env == {"HOME": "/root", "GEMINI_API_KEY": "k", "GOOGLE_CLOUD_PROJECT": "p"}
    assert GeminiHarness(fake=True).env(spec(tmp_path), parent)["FAKE_AGENT_SCENARIO"] == "x"


# -- every scenario through the fake Gemini ----------------------------------------------------

FAST = Timeouts(first_output=10, idle=10, wall=60, stop_grace=2, flush_grace=0.5)


class Run:
    """One fake-gemini session, run to the end."""

    def __init__(self, events: list[AgentEvent], record: dict[str, Any], log: bytes) -> None:
        self.events = events
        self.verdict = exited(events)
        self.record = record
        self.log = log

    def stats(self) -> dict[str, int]:
        """``result.stats`` in the raw stream."""
        (line,) = [x for x in self.log.splitlines() if b'"type":"result"' in x]
        stats: dict[str, int] = json.loads(line)["stats"]
        return stats


async def run_fake(
    tmp_path: Path,
    scenario: str | None = None,
    *,
    prompt: str = "Fix the tests.",
    timeouts: Timeouts = FAST,
    env: dict[str, str] | None = None,
    stop_after_start: StopReason | None = None,
    **fields: Any,
) -> Run:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    record = tmp_path / "record.json"
    record.unlink(missing_ok=True)
    log = tmp_path / f"gemini-{len(list(tmp_path.glob('gemini-*.log')))}.log"
    fake_env = {
        "GEMINI_HOME": str(tmp_path / "gemini-home"),
        "FAKE_AGENT_RECORD": str(record),
        "FAKE_AGENT_LINE_DELAY_MS": "0",
        "FAKE_AGENT_STRICT_FLAGS": "1",
        **({"FAKE_AGENT_SCENARIO": scenario} if scenario else {}),
        **(env or {}),
    }
    session = await GeminiHarness(FAKE, fake=True).start(
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


async def test_fake_success_events_argv_and_cost(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, prompt="Say hello.")
    assert run.record["argv"] == [
        "-p",
        "Say hello.",
        "--output-format",
        "stream-json",
        "-m",
        "gemini-2.5-pro",
        "-y",
    ]
    assert run.record["prompt"] == "Say hello."
    assert run.log.startswith(b"YOLO mode is enabled.")
    assert run.verdict.ok
    assert run.verdict.malformed_lines == 0  # the banner is not JSON, so it is skipped
    partial = [e.text for e in run.events if isinstance(e, AssistantText) and e.partial]
    whole = [e.text for e in run.events if isinstance(e, AssistantText) and not e.partial]
    assert len(partial) >= 2
    assert whole == ["".join(partial)] == ['Done. You asked: "Say hello.".']
    stats = run.stats()
    tokens = Tokens(
        input=stats["input_tokens"] - stats["cached"],
        cache_read=stats["cached"],
        output=stats["total_tokens"] - stats["input_tokens"],
    )
    assert run.verdict.tokens == tokens
    assert run.verdict.cost_source is CostSource.COMPUTED
    assert run.verdict.cost_usd is not None
    assert abs(run.verdict.cost_usd - table_cost("gemini-2.5-pro", tokens)) < 1e-9
    assert round(run.verdict.cost_usd, 2) == round(table_cost("gemini-2.5-pro", tokens), 2)


@pytest.mark.parametrize("prompt", ["-p looks like a flag", "long " * 25_000 + "end."])
async def test_fake_prompts_on_stdin_reach_the_cli_whole(tmp_path: Path, prompt: str) -> None:
    run = await run_fake(tmp_path, prompt=prompt)
    assert run.record["argv"][:2] == ["-p", ""]
    assert run.record["stdin"] == prompt
    # Gemini puts stdin before the (empty) -p text: the model gets the prompt.
    assert run.record["prompt"].strip() == prompt.strip()
    assert run.verdict.ok


async def test_fake_tool_pairs_use_and_result(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "tool")
    (use,) = of(run.events, ToolUse)
    (result,) = of(run.events, ToolResult)
    assert isinstance(use, ToolUse)
    assert isinstance(result, ToolResult)
    assert use.name == "list_directory"
    assert use.input == {"path": str(tmp_path / "work")}
    assert result.tool_use_id == use.tool_use_id
    assert not result.is_error
    whole = [e.text for e in run.events if isinstance(e, AssistantText) and not e.partial]
    assert whole[0] == "I'll look at the directory first."
    assert run.verdict.ok


async def test_fake_tool_error_is_an_error_result_in_a_successful_run(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "tool_error")
    (result,) = of(run.events, ToolResult)
    assert isinstance(result, ToolResult)
    assert result.is_error
    assert result.content.startswith("File not found: ")
    assert run.verdict.ok


async def test_fake_writes_files_with_yolo_approval(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, prompt="@@fake:write path=out.txt@@hi@@end@@ Write it.")
    assert run.verdict.ok
    (use,) = of(run.events, ToolUse)
    assert isinstance(use, ToolUse)
    assert use.name == "write_file"
    assert (tmp_path / "work" / "out.txt").read_text() == "hi"


async def test_fake_turn_limit_is_max_turns_with_exit_53(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "turn_limit")
    assert run.verdict.exit_code == 53
    assert run.verdict.error_class is ErrorClass.MAX_TURNS
    assert not run.verdict.retriable
    assert run.verdict.result_seen
    assert run.verdict.message is not None
    assert run.verdict.message.startswith("Reached max session turns")
    assert run.verdict.cost_usd is not None  # the turns it did run are billed


async def test_fake_bad_input_is_an_input_error_with_exit_42(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "bad_input")
    assert run.verdict.exit_code == 42
    assert run.verdict.error_class is ErrorClass.INPUT_ERROR
    assert not run.verdict.retriable
    assert not run.verdict.result_seen
    assert run.verdict.message is not None
    assert "invalid input" in run.verdict.message


@pytest.mark.parametrize(
    ("status", "cls", "retriable"),
    [(429, ErrorClass.RATE_LIMIT, True), (503, ErrorClass.OVERLOADED, True)],
)
async def test_fake_api_error_is_classified_from_the_status(
    tmp_path: Path, status: int, cls: ErrorClass, retriable: bool
) -> None:
    message = f"[API Error: got status {status}.]" if status != 429 else ""
    scenario = f"api_error,status={status}" + (f",message={message}" if message else "")
    run = await run_fake(tmp_path, scenario)
    assert run.verdict.exit_code == 1
    assert run.verdict.error_class is cls
    assert run.verdict.retriable is retriable


async def test_fake_warning_does_not_fail_the_run(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "warning")
    assert run.verdict.ok
    assert b"Loop detected" in run.log


async def test_fake_resume_continues_the_session(tmp_path: Path) -> None:
    first = await run_fake(tmp_path, prompt="Remember the word kumquat.")
    session = first.verdict.session_id
    assert session is not None
    second = await run_fake(
        tmp_path, "resume", prompt="What was the word?", resume_session_id=session
    )
    assert second.record["argv"][-2:] == ["--resume", session]
    started = second.events[0]
    assert isinstance(started, SessionStarted)
    assert started.session_id == session
    assert second.verdict.session_id == session
    assert second.verdict.session_aliases == [session]
    whole = [e.text for e in second.events if isinstance(e, AssistantText) and not e.partial]
    assert "kumquat" in whole[-1]
    assert second.verdict.ok


async def test_fake_resume_of_an_unknown_session_cannot_resume(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, resume_session_id="9f9f9f9f-0000-4000-8000-000000000000")
    assert run.verdict.exit_code == 42
    assert run.verdict.error_class is ErrorClass.CANNOT_RESUME
    assert not run.verdict.retriable


async def test_fake_empty_prompt_is_an_input_error(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, prompt=" ")
    assert run.verdict.exit_code == 42
    assert run.verdict.error_class is ErrorClass.INPUT_ERROR


async def test_fake_crash_before_init_is_retriable(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "crash_before_init")
    assert run.verdict.error_class is ErrorClass.CRASH_BEFORE_INIT
    assert run.verdict.retriable
    assert "TypeError" in run.verdict.stderr_tail


async def test_fake_crash_mid_run_keeps_the_session_and_is_retriable(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "crash_mid_run")
    assert run.verdict.error_class is ErrorClass.CRASH_MID_RUN
    assert run.verdict.retriable
    assert run.verdict.session_id is not None
    assert len(of(run.events, ToolUse)) == 1
    assert of(run.events, ToolResult) == []


async def test_fake_exit0_without_a_result_is_no_result(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "exit0_no_result")
    assert run.verdict.error_class is ErrorClass.NO_RESULT
    whole = [e.text for e in run.events if isinstance(e, AssistantText) and not e.partial]
    assert whole == ["Let me look into this. "]  # the partial text is flushed at exit


async def test_fake_result_then_nonzero_is_success(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "result_then_nonzero")
    assert run.verdict.exit_code == 2
    assert run.verdict.ok
    assert any("EPIPE" in e.line for e in run.events if isinstance(e, StderrLine))


async def test_fake_hang_before_init_times_out(tmp_path: Path) -> None:
    timeouts = Timeouts(first_output=0.5, idle=30, stop_grace=1, flush_grace=0)
    run = await run_fake(tmp_path, "hang_before_init", timeouts=timeouts)
    assert run.verdict.error_class is ErrorClass.TIMEOUT
    assert run.verdict.retriable


async def test_fake_hang_after_init_times_out_idle(tmp_path: Path) -> None:
    timeouts = Timeouts(first_output=10, idle=0.5, stop_grace=1, flush_grace=0)
    run = await run_fake(tmp_path, "hang_after_init", timeouts=timeouts)
    assert run.verdict.error_class is ErrorClass.TIMEOUT
    assert run.verdict.session_id is not None


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
    if sigterm == "graceful":
        assert b"FatalCancellationError" in run.log
        assert run.verdict.result_seen
    if sigterm == "ignore":
        assert run.verdict.signal == 9


async def test_fake_malformed_lines_are_counted(tmp_path: Path) -> None:
    run = await run_fake(tmp_path, "malformed_lines")
    assert run.verdict.ok
    assert run.verdict.malformed_lines == 1
    assert run.verdict.unknown_types == 1


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
    result = [e for e in run.events if isinstance(e, SessionResult)]
    assert len(result) == 1
    text = result[0].text if isinstance(result[0], SessionResult) else None
    assert text is not None
    if scenario == "chunked_writes":
        assert "\U0001f680" in text
