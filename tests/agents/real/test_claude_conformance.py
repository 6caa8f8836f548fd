"""Claude Code 2.1.330 and ``fake-claude`` through ``ClaudeHarness``, scenario
by scenario, against the local Messages API mock.

Each case runs the real CLI (the mock chooses the scenario from ``MOCK[...]``)
and, where the fake has the behaviour, the fake (``@@fake:...@@``). Both must
give the same verdict (ok, error class, retriable) and the same kinds of event;
the real session's cost must equal what the mock billed, priced by Weft's table.
Beyond Weft's events, the raw lines Weft reads must say the same things on both
sides (:func:`_stream_facts`: the init model and tools, ``num_turns``,
``terminal_reason``, ``api_error_status``, the ``modelUsage`` models, the retries,
a spilled tool output, the CLI's own continuation prompt).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from tests.agents.real.conftest import FAKE_ENV, Homes, claude_env
from tests.agents.real.drive import Outcome, billed_usd, drive
from tests.agents.real.mock_anthropic import AnthropicMock, Window

from weft.agents.claude import ClaudeHarness
from weft.agents.events import AssistantText, CostSource, ErrorClass, ToolUse
from weft.agents.harness import SessionSpec, Timeouts
from weft.agents.registry import fake_command

MODEL = "claude-sonnet-5-5"
"""What the alias ``sonnet`` means in 2.1.330 (the mock sees it in every request)."""
TEXT = {"SessionStarted", "AssistantText", "SessionResult"}
TOOLS = TEXT | {"ToolUse", "ToolResult"}
FAILED = {"SessionStarted", "SessionResult"}
SESSION_HEADER = "x-claude-code-session-id"


@dataclass(frozen=True)
class Case:
    name: str
    mock: str
    """The ``MOCK[...]`` keys for the real CLI."""
    fake: str | None
    """The fake's directive (``None``: the fake has no such behaviour)."""
    ok: bool = True
    error_class: ErrorClass | None = None
    retriable: bool = False
    kinds: frozenset[str] = frozenset(TEXT)
    max_turns: int | None = None
    max_budget_usd: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    paired: bool = True
    """Every tool call has its result (a budget stop leaves the last one open)."""
    same_turns: bool = True
    """``num_turns`` agrees (a budget stop depends on what each side's calls cost)."""


def _fail(
    name: str, mock: str, fake: str | None, cls: ErrorClass, retriable: bool, **kw: object
) -> Case:
    kw.setdefault("kinds", frozenset(FAILED))
    return Case(name, mock, fake, ok=False, error_class=cls, retriable=retriable, **kw)  # type: ignore[arg-type]


CASES = [
    Case("text", "", "@@fake:scenario=success@@"),
    Case("tools", "tools=1", "@@fake:scenario=tool_use@@", kinds=frozenset(TOOLS)),
    Case(
        "parallel tools", "parallel=2", "@@fake:scenario=parallel_tools@@", kinds=frozenset(TOOLS)
    ),
    Case(
        "text and a tool in one message",
        "multi",
        "@@fake:scenario=tool_use@@",
        kinds=frozenset(TOOLS),
    ),
    Case(
        "thinking", "thinking", "@@fake:scenario=thinking@@", kinds=frozenset(TEXT | {"Thinking"})
    ),
    Case("long output", "long=40000", "@@fake:say " + "lorem ipsum " * 3000 + "@@"),
    Case(
        "huge tool output",
        "bigtool=3000000",
        "@@fake:scenario=huge_output,bytes=3000000,events=20@@",
        kinds=frozenset(TOOLS),
    ),
    Case("max_tokens continues by itself", "maxtok", "@@fake:scenario=max_tokens@@"),
    _fail(
        "429",
        "err=429",
        "@@fake:scenario=api_error,status=429,count=0@@",
        ErrorClass.RATE_LIMIT,
        True,
    ),
    _fail(
        "529",
        "err=529",
        "@@fake:scenario=api_error,status=529,count=0@@",
        ErrorClass.OVERLOADED,
        True,
    ),
    _fail(
        "500",
        "err=500",
        "@@fake:scenario=api_error,status=500,count=0@@",
        ErrorClass.OVERLOADED,
        True,
    ),
    _fail("401", "err=401", "@@fake:scenario=api_error,status=401@@", ErrorClass.AUTH, False),
    _fail(
        "401 retried",
        "err=401",
        "@@fake:scenario=api_error,status=401,delay_ms=1@@",
        ErrorClass.AUTH,
        False,
        env={"CLAUDE_CODE_MAX_RETRIES": "2"},
    ),
    _fail("403", "err=403", "@@fake:scenario=api_error,status=403@@", ErrorClass.AUTH, False),
    _fail("402", "err=402", "@@fake:scenario=api_error,status=402@@", ErrorClass.BILLING, False),
    _fail("404", "err=404", "@@fake:scenario=api_error,status=404@@", ErrorClass.API_ERROR, False),
    _fail("413", "err=413", "@@fake:scenario=api_error,status=413@@", ErrorClass.API_ERROR, False),
    _fail("prompt too long", "ptl", None, ErrorClass.CONTEXT_EXCEEDED, False),
    Case("SSE error then the non-streaming fallback", "sse_err", None),
    Case("cut connection then the fallback", "cut", None),
    _fail(
        "cut connection, the fallback 529", "cut,fallback=529", None, ErrorClass.OVERLOADED, True
    ),
    _fail(
        "max turns",
        "tools=5",
        "@@fake:scenario=max_turns@@",
        ErrorClass.MAX_TURNS,
        False,
        max_turns=2,
        kinds=frozenset(FAILED | {"ToolUse", "ToolResult"}),
    ),
    _fail(
        "max budget",
        "tools=5",
        "@@fake:scenario=max_budget@@",
        ErrorClass.BUDGET,
        False,
        max_budget_usd=0.005,
        paired=False,
        same_turns=False,
        kinds=frozenset(FAILED | {"ToolUse"}),
    ),
    _fail(
        "missing API key",
        "",
        "@@fake:scenario=auth_error@@",
        ErrorClass.AUTH,
        False,
        env={"ANTHROPIC_API_KEY": "unset"},
    ),
    Case(
        "partial messages",
        "multi",
        "@@fake:scenario=partial_messages@@",
        kinds=frozenset(TOOLS),
        extra_args=("--include-partial-messages",),
    ),
]


def _spec(
    prompt: str,
    homes: Homes,
    env: dict[str, str],
    case: Case | None = None,
    *,
    log: str = "claude.log",
    **kw: object,
) -> SessionSpec:
    return SessionSpec(
        prompt=prompt,
        model="sonnet",
        cwd=homes.work,
        env=env,
        log_path=homes.root / log,
        max_turns=case.max_turns if case else None,
        max_budget_usd=case.max_budget_usd if case else None,
        extra_args=case.extra_args if case else (),
        timeouts=Timeouts(first_output=30, idle=30, stop_grace=5),
        **kw,  # type: ignore[arg-type]
    )


def _check(out: Outcome, case: Case, who: str) -> None:
    assert out.verdict == (case.ok, case.error_class, case.retriable), (who, out.exited)
    assert case.kinds <= out.kinds, (who, sorted(out.kinds))
    if case.paired:
        assert not out.unpaired_tools(), who
    assert out.exited.malformed_lines == 0, who


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_real_and_fake_agree(
    case: Case, claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    marker = uuid.uuid4().hex[:12]
    prompt = f"Case {case.name} {marker} MOCK[{case.mock}]"
    real = await drive(
        ClaudeHarness([str(claude_bin)]),
        _spec(prompt, homes, claude_env(anthropic, homes, **case.env), case),
    )
    _check(real, case, "real")
    calls = anthropic.posts(marker)
    assert {r.headers.get(SESSION_HEADER) for r in calls} <= {real.exited.session_id}
    # What Weft bills is what the mock's answers in this session cost (0 when
    # none was billed), the CLI's own continuation calls included.
    session = anthropic.session_calls(SESSION_HEADER, real.exited.session_id)
    billed = [r.billed for r in session if r.billed is not None]
    # A stream cut after its message_start: 2.1.330 counts that partial's usage
    # when it read the event before noticing the cut, and not otherwise; under
    # load it has read some of the text too and counts output tokens for it: its
    # own estimate from the text, not the message's declared usage (seen: 34
    # tokens for a message declaring 25), so up to twice the declared count is
    # allowed. Each is the CLI's own figure, which Weft passes through.
    partials = [r.partial for r in session if r.partial is not None]
    fulls = [
        replace(r.partial_full, output=2 * r.partial_full.output)
        for r in session
        if r.partial_full is not None
    ]
    cost = round(real.exited.cost_usd or 0.0, 9)
    low, high = billed_usd(MODEL, billed + partials), billed_usd(MODEL, billed + fulls)
    counted = round(low, 9) <= cost <= round(high, 9)
    assert cost == round(billed_usd(MODEL, billed), 9) or counted, (cost, low, high)
    if case.max_turns is not None:
        assert len(calls) == case.max_turns  # N turns are N API calls in 2.1.330
    if case.extra_args:
        _check_partials(real)
    if case.fake is None:
        return
    fake_dir = homes.root / "fake-work"
    fake_dir.mkdir()
    fake_homes = Homes(homes.root, fake_dir, homes.claude_config, homes.codex_home)
    fake = await drive(
        ClaudeHarness(fake_command("claude").command, fake=True),
        _spec(
            f"Case {case.name} {case.fake}",
            fake_homes,
            {
                "CLAUDE_CONFIG_DIR": str(homes.root / "fake-config"),
                "FAKE_AGENT_LINE_DELAY_MS": "0",
                "CLAUDE_CODE_MAX_RETRIES": claude_env(anthropic, homes, **case.env)[
                    "CLAUDE_CODE_MAX_RETRIES"
                ],
                **FAKE_ENV,
            },
            case,
            log="fake-claude.log",
        ),
    )
    _check(fake, case, "fake")
    if case.extra_args:
        _check_partials(fake)
    _check_keys(homes.root / "claude.log", fake_homes.root / "fake-claude.log")
    real_facts = _stream_facts(homes.root / "claude.log")
    fake_facts = _stream_facts(fake_homes.root / "fake-claude.log")
    if not case.same_turns:
        del real_facts["num_turns"], fake_facts["num_turns"]
    assert fake_facts == real_facts
    if case.max_turns is not None:
        assert len(fake.of(ToolUse)) == len(real.of(ToolUse)) == case.max_turns
    assert fake.exited.cost_source == real.exited.cost_source == CostSource.REPORTED


READS = {
    ("system", "init"): {"session_id", "model", "cwd", "tools", "claude_code_version"},
    ("system", "api_retry"): {"attempt", "max_retries", "retry_delay_ms", "error_status", "error"},
    ("assistant", None): {"message", "parent_tool_use_id", "error"},
    ("user", None): {"message", "parent_tool_use_id"},
    ("stream_event", None): {"event", "parent_tool_use_id"},
    ("result", None): {
        "session_id",
        "subtype",
        "is_error",
        "result",
        "errors",
        "total_cost_usd",
        "usage",
        "modelUsage",
        "model_usage_since_last_result",
        "num_turns",
        "duration_ms",
        "terminal_reason",
        "api_error_status",
    },
}
"""The top-level keys ``ClaudeParser`` reads, by line kind."""


def _raw_keys(log: Path) -> dict[tuple[str, str | None], set[str]]:
    keys: dict[tuple[str, str | None], set[str]] = {}
    for raw in log.read_bytes().splitlines():
        if not raw.startswith(b"{"):
            continue
        line = json.loads(raw)
        kind = (line.get("type"), line.get("subtype") if line.get("type") == "system" else None)
        keys.setdefault(kind, set()).update(line)
    return keys


def _check_keys(real_log: Path, fake_log: Path) -> None:
    """Every key Weft reads that the real CLI printed, the fake printed too
    (for the kinds of line both printed)."""
    real, fake = _raw_keys(real_log), _raw_keys(fake_log)
    for kind, reads in READS.items():
        if kind in real and kind in fake:
            missing = (real[kind] & reads) - fake[kind]
            assert not missing, (kind, missing)


def _stream_facts(log: Path) -> dict[str, object]:
    """What the raw stream says that Weft reads (or bills by), comparable
    between the real CLI and the fake."""
    facts: dict[str, object] = {"retries": [], "spilled": False, "nudges": 0, "thinking_tokens": 0}
    for raw in log.read_bytes().splitlines():
        if not raw.startswith(b"{"):
            continue
        line = json.loads(raw)
        kind, subtype = line.get("type"), line.get("subtype")
        if kind == "system" and subtype == "init":
            facts["model"], facts["tools"] = line["model"], sorted(line["tools"])
        elif kind == "system" and subtype == "api_retry":
            retry = (line["error"], line["error_status"], line["max_retries"])
            facts["retries"].append(retry)  # type: ignore[attr-defined]
        elif kind == "system" and subtype == "thinking_tokens":
            facts["thinking_tokens"] += 1  # type: ignore[operator]
        elif kind == "user" and line.get("isSynthetic"):
            facts["nudges"] += 1  # type: ignore[operator]
        elif kind == "user" and isinstance(line.get("tool_use_result"), dict):
            if "persistedOutputPath" in line["tool_use_result"]:
                facts["spilled"] = True
        elif kind == "result":
            for key in ("subtype", "is_error", "num_turns", "terminal_reason", "api_error_status"):
                facts[key] = line.get(key)
            facts["models"] = sorted(line.get("modelUsage") or {})
            facts["models_since"] = sorted(line.get("model_usage_since_last_result") or {})
    return facts


def _check_partials(out: Outcome) -> None:
    """The partial deltas of each message join up to its final text."""
    partial: dict[str | None, str] = {}
    final: dict[str | None, str] = {}
    for e in out.of(AssistantText):
        assert isinstance(e, AssistantText)
        into = partial if e.partial else final
        into[e.message_id] = into.get(e.message_id, "") + e.text
    assert partial, "no partial text"
    assert partial == {k: v for k, v in final.items() if k in partial}


async def test_resumed_sessions_bill_each_process_its_own_share(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    """Claude Code 2.1.330 reports cost and modelUsage cumulatively over a
    resumed session; Weft bills each process only what its own calls cost."""
    harness = ClaudeHarness([str(claude_bin)])
    env = claude_env(anthropic, homes)
    marker = uuid.uuid4().hex[:12]
    first = await drive(harness, _spec(f"Remember PAPAYA {marker} MOCK[tools=1]", homes, env))
    sid = first.exited.session_id
    assert first.exited.ok
    assert sid
    seen = len(anthropic.session_calls(SESSION_HEADER, sid))
    costs = [first.exited.cost_usd]
    for turn in ("What was the word?", "And again?"):
        out = await drive(
            harness, _spec(f"{turn} {marker} MOCK[]", homes, env, resume_session_id=sid)
        )
        assert out.exited.ok
        assert out.exited.session_id == sid
        calls = anthropic.session_calls(SESSION_HEADER, sid)
        mine = [r.billed for r in calls[seen:] if r.billed is not None]
        seen = len(calls)
        assert out.exited.cost_usd == pytest.approx(billed_usd(MODEL, mine), abs=1e-8)
        assert out.exited.tokens.input == sum(b.input for b in mine)
        assert "PAPAYA" in out.text  # the history was carried
        costs.append(out.exited.cost_usd)
    billed = [r.billed for r in anthropic.session_calls(SESSION_HEADER, sid) if r.billed]
    assert sum(c or 0 for c in costs) == pytest.approx(billed_usd(MODEL, billed), abs=1e-8)


async def test_unknown_resume_id_is_cannot_resume(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    for harness, env in (
        (ClaudeHarness([str(claude_bin)]), claude_env(anthropic, homes)),
        (
            ClaudeHarness(fake_command("claude").command, fake=True),
            {"CLAUDE_CONFIG_DIR": str(homes.claude_config), **FAKE_ENV},
        ),
    ):
        out = await drive(
            harness, _spec("Hello MOCK[]", homes, env, resume_session_id=str(uuid.uuid4()))
        )
        assert out.verdict == (False, ErrorClass.CANNOT_RESUME, False), out.exited


async def test_idle_timeout_stops_a_hung_api_call(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    spec = _spec(f"Wait {uuid.uuid4().hex} MOCK[hang]", homes, claude_env(anthropic, homes))
    spec = SessionSpec(
        **{**_fields(spec), "timeouts": Timeouts(first_output=30, idle=2, stop_grace=5)}
    )
    out = await drive(ClaudeHarness([str(claude_bin)]), spec)
    assert out.verdict == (False, ErrorClass.TIMEOUT, True), out.exited


async def test_stop_bills_the_partial_spend(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    """Weft stops Claude with SIGINT: the CLI prints an aborted_streaming
    result with the spend so far (with SIGTERM it printed nothing: $0)."""
    marker = uuid.uuid4().hex[:12]
    spec = _spec(f"Slowly {marker} MOCK[long=4000,slow=20]", homes, claude_env(anthropic, homes))
    seen = lambda: bool(anthropic.posts(marker))  # noqa: E731 - a one-line probe
    out = await drive(ClaudeHarness([str(claude_bin)]), spec, stop_after=1.0, once=seen)
    assert out.verdict == (False, ErrorClass.STOPPED, False), out.exited
    assert out.exited.result_seen
    assert out.exited.cost_usd is not None
    assert out.exited.cost_usd > 0
    assert out.exited.cost_source is CostSource.REPORTED
    # The fake, stopped the same way mid-run, says the same.
    fake_env = {"CLAUDE_CONFIG_DIR": str(homes.root / "fake-config"), **FAKE_ENV}
    fake_spec = _spec(
        "Slowly @@fake:scenario=sigterm,interval_ms=100@@", homes, fake_env, log="fake.log"
    )
    fake = await drive(
        ClaudeHarness(fake_command("claude").command, fake=True), fake_spec, stop_after=1.0
    )
    assert fake.verdict == out.verdict, fake.exited
    assert fake.exited.result_seen
    real_facts, fake_facts = (
        _stream_facts(homes.root / "claude.log"),
        _stream_facts(homes.root / "fake.log"),
    )
    for key in ("subtype", "is_error", "num_turns", "terminal_reason"):
        assert fake_facts[key] == real_facts[key], key
    assert (
        _last_result(homes.root / "fake.log")["errors"]
        == _last_result(homes.root / "claude.log")["errors"]
    )


async def test_kill_is_stopped(claude_bin: Path, anthropic: AnthropicMock, homes: Homes) -> None:
    marker = uuid.uuid4().hex
    spec = _spec(f"Slowly {marker} MOCK[long=4000,slow=20]", homes, claude_env(anthropic, homes))
    seen = lambda: bool(anthropic.posts(marker))  # noqa: E731 - a one-line probe
    out = await drive(ClaudeHarness([str(claude_bin)]), spec, kill_after=0.5, once=seen)
    assert out.verdict == (False, ErrorClass.STOPPED, False)
    assert out.exited.signal == 9


def _last_result(log: Path) -> dict[str, object]:
    lines = [json.loads(raw) for raw in log.read_bytes().splitlines() if raw.startswith(b"{")]
    result: dict[str, object] = [line for line in lines if line.get("type") == "result"][-1]
    return result


def _fields(spec: SessionSpec) -> dict[str, object]:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


def _window_lines(log: Path) -> list[dict[str, object]]:
    """The lines of a refused session after its init, each boiled down to what
    a parser reads: its type and the fields that say a usage window refused it."""
    keep = ("type", "subtype", "is_error", "error", "api_error", "api_error_status",
            "terminal_reason", "result", "rate_limit_info")  # fmt: skip
    out = []
    for raw in log.read_text().splitlines():
        line = json.loads(raw) if raw.startswith("{") else {}
        if line.get("type") in ("rate_limit_event", "assistant", "result"):
            info = line.get("rate_limit_info")
            if isinstance(info, dict):
                line["rate_limit_info"] = {k: info.get(k) for k in ("status", "resetsAt")}
            out.append({k: line[k] for k in keep if k in line})
    return out


async def test_a_closed_usage_window_reads_the_same_from_the_real_cli_and_the_fake(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    """Claude Code with a subscription token against a closed window, and
    fake-claude's ``usage_window`` scenario: the same lines, the same verdict
    (``usage_limit`` with the window's reset), and after the reset both resume
    the same session with an ``allowed`` window."""
    until = int(time.time()) + 5
    anthropic.window = Window(closed_until=until)
    env = claude_env(anthropic, homes)
    del env["ANTHROPIC_API_KEY"]
    env["CLAUDE_CODE_OAUTH_TOKEN"] = "sk-ant-oat01-" + "t" * 60
    fake_env = {"CLAUDE_CONFIG_DIR": str(homes.root / "fake-config"), **FAKE_ENV}
    agents = (
        (ClaudeHarness([str(claude_bin)]), env, "Hello MOCK[]", "claude.log"),
        (
            ClaudeHarness(fake_command("claude").command, fake=True),
            fake_env,
            f"Hello @@fake:scenario=usage_window,until={until}@@",
            "fake-claude.log",
        ),
    )
    try:
        refused = [
            await drive(harness, _spec(prompt, homes, agent_env, log=log))
            for harness, agent_env, prompt, log in agents
        ]
        for out in refused:
            assert out.verdict == (False, ErrorClass.USAGE_LIMIT, False), out.exited
            window = out.exited.window
            assert window is not None
            assert (window.status, window.window) == ("rejected", "five_hour")
            assert window.resets_at_ms == until * 1000
        real_lines, fake_lines = (_window_lines(homes.root / log) for *_, log in agents)
        assert real_lines == fake_lines
        await asyncio.sleep(max(0.0, until - time.time()) + 0.2)
        for (harness, agent_env, _, log), before in zip(agents, refused, strict=True):
            out = await drive(
                harness,
                _spec(
                    "Go on MOCK[]",
                    homes,
                    agent_env,
                    log=f"again-{log}",
                    resume_session_id=before.exited.session_id,
                ),
            )
            assert out.exited.ok, out.exited
            assert out.exited.session_id == before.exited.session_id
            window = out.exited.window
            assert window is not None
            assert window.status == "allowed"
    finally:
        anthropic.window = None
