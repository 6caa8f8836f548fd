"""Parsing a 200 MB Claude Code stream-json transcript: :class:`ClaudeParser`
(its common lines parsed by the Rust core, the rest by msgspec Structs)
against a parser built on the standard ``json`` module that does the same
work: it decodes each line, dispatches on its type and builds the same
normalised events, with the same per-message usage merge and the same
pricing calls. A test here checks that both produce equal events on the
transcript, so the ratio compares like with like.

:class:`ClaudeParser` is fed as the process layer feeds it: the lines of
each pipe read (asyncio reads 256 KiB at a time) in one
:meth:`~ClaudeParser.feed_many` call. The baseline takes the same lines one
by one (a ``json.loads`` per line is all it can do with them).

The transcript is generated once per session into a temporary directory.
Its mix follows real sessions: tool results dominate the bytes (a Read
result is carried twice, as ``content`` and as ``tool_use_result``),
assistant lines repeat their usage per content block, and partial-message
deltas make many small lines.

The figure to quote is the paired one (:func:`test_claude_parser_paired`):
both parsers in every round, in alternating order, so load from other work
on the shared machine falls on both alike; its ratio is the median of the
rounds' ratios. The decode floor (:func:`test_claude_line_decode_floor`)
decodes every line into the Python path's Structs and drops it: no parser
built on one msgspec decode per line can beat its ratio.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from typing import Any

import pytest

from weft.agents.claude_parser import SYNTHETIC_MODEL, ClaudeParser
from weft.agents.claude_wire import decode_line
from weft.agents.events import (
    AgentEvent,
    AssistantText,
    RetryNotice,
    SessionResult,
    SessionStarted,
    Thinking,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
)
from weft.agents.pricing import PricingTable, default_table

TARGET_BYTES = 200 * 1024 * 1024
TARGET_RATIO = 5.0
"""Issue 20: the parser at least 5x the standard ``json`` module."""
PAIRED_ROUNDS = 9
PIPE_READ = 256 * 1024
"""Bytes asyncio reads from a subprocess pipe at a time: the process layer
hands the parser the lines of one read at once."""
SESSION = "e75a5c8f-4cac-4402-a219-8278ea351740"
MODEL = "claude-sonnet-4-5-20250929"


# -- the transcript -------------------------------------------------------------------------


def _source_file(rng: random.Random, lines: int) -> str:
    """Mostly ASCII code with quotes, some accented text and, rarely, an emoji,
    like the files agents read."""
    words = ["def", "return", "self.value", "if", "else:", "for", "in", "None", "x", "(y)"]
    out = []
    for i in range(lines):
        indent = " " * (4 * rng.randint(0, 3))
        body = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        roll = rng.random()
        if roll < 0.2:
            body += '  # "quoted"'
        elif roll < 0.23:
            body += "  # café, naïve"
        elif roll < 0.231:
            body += "  # \U0001f680 path\\to\\file"
        out.append(f"{i + 1:>6}\t{indent}{body}")
    return "\n".join(out)


def _turn(rng: random.Random, n: int) -> list[dict[str, Any]]:
    def line(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, **fields, "session_id": SESSION, "uuid": f"u-{n}-{rng.random()}"}

    def usage(out: int) -> dict[str, Any]:
        return {
            "input_tokens": rng.randint(1, 50),
            "cache_creation_input_tokens": rng.randint(0, 5000),
            "cache_read_input_tokens": rng.randint(10_000, 150_000),
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": out,
            "service_tier": "standard",
        }

    def assistant(mid: str, block: dict[str, Any], u: dict[str, Any]) -> dict[str, Any]:
        message = {
            "model": MODEL,
            "id": mid,
            "type": "message",
            "role": "assistant",
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": u,
            "context_management": None,
        }
        return line("assistant", message=message, parent_tool_use_id=None)

    mid_a, mid_b = f"msg_01A{n:021d}", f"msg_01B{n:021d}"
    read_id, bash_id = f"toolu_01R{n:020d}", f"toolu_01B{n:020d}"
    path = f"/home/dev/repo/src/module_{n % 97}.py"
    content = _source_file(rng, rng.randint(40, 160))
    bash_out = _source_file(rng, rng.randint(5, 30))
    text = "I'll read the module and run the tests. " * rng.randint(1, 4)
    u_a, u_b = usage(rng.randint(5, 40)), usage(rng.randint(5, 40))
    lines = [
        line(
            "stream_event",
            event={"type": "message_start", "message": {"id": mid_a, "usage": {}}},
            parent_tool_use_id=None,
        )
    ]
    for piece in text.split(". "):
        delta = {"type": "text_delta", "text": piece + ". "}
        lines.append(
            line(
                "stream_event",
                event={"type": "content_block_delta", "index": 0, "delta": delta},
                parent_tool_use_id=None,
            )
        )
    lines += [
        assistant(
            mid_a, {"type": "thinking", "thinking": "Plan: read, test.", "signature": "x"}, u_a
        ),
        assistant(mid_a, {"type": "text", "text": text}, u_a),
        assistant(
            mid_a,
            {"type": "tool_use", "id": read_id, "name": "Read", "input": {"file_path": path}},
            u_a,
        ),
        line(
            "user",
            message={
                "role": "user",
                "content": [{"tool_use_id": read_id, "type": "tool_result", "content": content}],
            },
            parent_tool_use_id=None,
            tool_use_result={
                "type": "text",
                "file": {"filePath": path, "content": content, "numLines": 100, "startLine": 1},
            },
        ),
        assistant(
            mid_b,
            {
                "type": "tool_use",
                "id": bash_id,
                "name": "Bash",
                "input": {"command": "pytest -q", "description": "Run the tests"},
            },
            u_b,
        ),
        line(
            "user",
            message={
                "role": "user",
                "content": [
                    {
                        "tool_use_id": bash_id,
                        "type": "tool_result",
                        "content": [{"type": "text", "text": bash_out}],
                        "is_error": n % 7 == 0,
                    }
                ],
            },
            parent_tool_use_id=None,
            tool_use_result={"stdout": bash_out, "stderr": "", "interrupted": False},
        ),
    ]
    if n % 50 == 0:
        lines.append(
            line(
                "system",
                subtype="api_retry",
                attempt=1,
                max_retries=10,
                retry_delay_ms=600,
                error_status=529,
                error="overloaded",
            )
        )
    return lines


@pytest.fixture(scope="session")
def transcript(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """About 200 MB of stream-json lines (written to disk once, read back)."""
    rng = random.Random(2026)
    init = {
        "type": "system",
        "subtype": "init",
        "cwd": "/home/dev/repo",
        "session_id": SESSION,
        "tools": ["Task", "Bash", "Read", "Edit"],
        "model": MODEL,
        "permissionMode": "bypassPermissions",
        "apiKeySource": "none",
        "claude_code_version": "2.1.30",
    }
    # 40 distinct turns repeated (with fresh message ids) keep generation fast.
    templates = [
        [json.dumps(obj, ensure_ascii=False, separators=(",", ":")) for obj in _turn(rng, n)]
        for n in range(40)
    ]
    path = tmp_path_factory.mktemp("agents-bench") / "transcript.jsonl"
    size = 0
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(init) + "\n")
        n = 0
        while size < TARGET_BYTES:
            template = templates[n % len(templates)]
            tag = f"{n:021d}"
            chunk = "\n".join(template).replace(f"{n % len(templates):021d}", tag) + "\n"
            f.write(chunk)
            size += len(chunk)
            n += 1
        f.write(json.dumps({"type": "result", "subtype": "success", "session_id": SESSION}) + "\n")
    return path.read_bytes().split(b"\n")


# -- the stdlib baseline --------------------------------------------------------------------


class StdlibClaudeParser:
    """The same parsing work with ``json.loads`` and dict access."""

    def __init__(self, table: PricingTable) -> None:
        self.table = table
        self.session_id: str | None = None
        self.usage: dict[str, tuple[Tokens, int | None]] = {}
        self.last_usage: dict[str, dict[str, Any]] = {}
        self.sse_message_id: str | None = None
        self.malformed = 0

    def feed(self, line: bytes) -> list[AgentEvent]:
        if line[:1] != b"{":
            line = line.strip()
            if line[:1] != b"{":
                return []
        try:
            obj = json.loads(line)
        except ValueError:
            self.malformed += 1
            return []
        kind = obj.get("type")
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "user":
            return self._user(obj)
        if kind == "stream_event":
            return self._stream_event(obj)
        if kind == "system":
            return self._system(obj)
        if kind == "result":
            return [SessionResult(ok=obj.get("subtype") == "success" and not obj.get("is_error"))]
        return []

    def _system(self, obj: dict[str, Any]) -> list[AgentEvent]:
        sub = obj.get("subtype")
        if sub == "init" and self.session_id is None:
            self.session_id = obj["session_id"]
            return [
                SessionStarted(
                    session_id=obj["session_id"],
                    model=obj.get("model"),
                    cwd=obj.get("cwd"),
                    tools=[str(t) for t in obj.get("tools", [])],
                    agent_version=obj.get("claude_code_version"),
                )
            ]
        if sub == "api_retry":
            delay = obj.get("retry_delay_ms")
            return [
                RetryNotice(
                    attempt=obj.get("attempt") or 0,
                    max_retries=obj.get("max_retries"),
                    delay_ms=int(delay) if delay is not None else None,
                    error=obj.get("error") if isinstance(obj.get("error"), str) else None,
                    status=obj.get("error_status"),
                )
            ]
        return []

    def _assistant(self, obj: dict[str, Any]) -> list[AgentEvent]:
        message = obj.get("message") or {}
        mid = message.get("id")
        model = message.get("model")
        sub = obj.get("parent_tool_use_id") is not None
        events: list[AgentEvent] = []
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                kind = block.get("type")
                if kind == "text" and block.get("text") is not None:
                    events.append(AssistantText(text=block["text"], message_id=mid, subagent=sub))
                elif kind == "tool_use":
                    value = block.get("input")
                    events.append(
                        ToolUse(
                            tool_use_id=block.get("id") or "",
                            name=block.get("name") or "",
                            input=value if isinstance(value, dict) else {},
                            message_id=mid,
                            subagent=sub,
                        )
                    )
                elif kind == "thinking" and block.get("thinking"):
                    events.append(Thinking(text=block["thinking"], message_id=mid, subagent=sub))
        usage = message.get("usage")
        # The snapshot repeated for the next content block is settled by one
        # comparison, as in ClaudeParser.
        if (
            usage is not None
            and mid is not None
            and model != SYNTHETIC_MODEL
            and self.last_usage.get(mid) != usage
        ):
            self.last_usage[mid] = usage
            delta = self._usage_delta(mid, model, usage)
            if delta is not None:
                events.append(delta)
        return events

    def _usage_delta(self, mid: str, model: str, usage: dict[str, Any]) -> UsageDelta | None:
        old, old_cost = self.usage.get(mid, (Tokens(), 0))
        split = usage.get("cache_creation") or {}
        new = Tokens(
            input=max(old.input, usage.get("input_tokens", 0)),
            output=max(old.output, usage.get("output_tokens", 0)),
            cache_creation=max(old.cache_creation, usage.get("cache_creation_input_tokens", 0)),
            cache_read=max(old.cache_read, usage.get("cache_read_input_tokens", 0)),
            cache_creation_1h=max(old.cache_creation_1h, split.get("ephemeral_1h_input_tokens", 0)),
        )
        if new == old:
            return None
        cost = self.table.cost_nanos(model, new, per_request=True)
        self.usage[mid] = (new, cost)
        return UsageDelta(
            model=model,
            tokens=Tokens(
                input=new.input - old.input,
                output=new.output - old.output,
                cache_creation=new.cache_creation - old.cache_creation,
                cache_read=new.cache_read - old.cache_read,
                cache_creation_1h=new.cache_creation_1h - old.cache_creation_1h,
            ),
            cost_usd=None if cost is None or old_cost is None else (cost - old_cost) / 1e9,
            message_id=mid,
        )

    def _user(self, obj: dict[str, Any]) -> list[AgentEvent]:
        content = (obj.get("message") or {}).get("content")
        if not isinstance(content, list):
            return []
        sub = obj.get("parent_tool_use_id") is not None
        out: list[AgentEvent] = []
        for block in content:
            if block.get("type") != "tool_result":
                continue
            value = block.get("content")
            if isinstance(value, list):
                value = "\n".join(
                    str(p.get("text", "")) if p.get("type") == "text" else f"[{p.get('type')}]"
                    for p in value
                )
            out.append(
                ToolResult(
                    tool_use_id=block.get("tool_use_id") or "",
                    content=value if isinstance(value, str) else "",
                    is_error=bool(block.get("is_error")),
                    subagent=sub,
                )
            )
        return out

    def _stream_event(self, obj: dict[str, Any]) -> list[AgentEvent]:
        event = obj.get("event") or {}
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                return [
                    AssistantText(
                        text=delta["text"],
                        message_id=self.sse_message_id,
                        partial=True,
                        subagent=obj.get("parent_tool_use_id") is not None,
                    )
                ]
        elif kind == "message_start" and event.get("message") is not None:
            self.sse_message_id = event["message"].get("id")
        return []


# -- the benchmarks ---------------------------------------------------------------------------


def parse_all(parser: Any, lines: list[bytes]) -> int:
    count = 0
    for line in lines:
        count += len(parser.feed(line))
    return count


def pipe_reads(lines: list[bytes]) -> list[list[bytes]]:
    """``lines`` grouped as the pipe reads would deliver them."""
    reads: list[list[bytes]] = [[]]
    size = 0
    for line in lines:
        reads[-1].append(line)
        size += len(line) + 1
        if size >= PIPE_READ:
            reads.append([])
            size = 0
    return reads


def parse_reads(parser: ClaudeParser, reads: list[list[bytes]]) -> int:
    count = 0
    for lines in reads:
        count += len(parser.feed_many(lines))
    return count


@pytest.fixture(scope="session")
def reads(transcript: list[bytes]) -> list[list[bytes]]:
    return pipe_reads(transcript)


def test_both_parsers_give_the_same_events(transcript: list[bytes]) -> None:
    sample = transcript[:3000]
    ours, theirs = ClaudeParser(), StdlibClaudeParser(default_table())
    for line in sample:
        mine = [e for e in ours.feed(line) if not isinstance(e, SessionResult)]
        other = [e for e in theirs.feed(line) if not isinstance(e, SessionResult)]
        assert mine == other, line[:200]
    assert ours.malformed == theirs.malformed == 0
    batched, stdlib = ClaudeParser(), StdlibClaudeParser(default_table())
    mine = [e for lines in pipe_reads(sample) for e in batched.feed_many(lines)]
    assert mine == [e for line in sample for e in stdlib.feed(line)]


# CPU time, not wall time: both parsers are single-threaded, and the CI machine
# (2 cores) is shared, so wall time would mostly measure the neighbours.
@pytest.mark.benchmark(group="agents: parse 200 MB stream-json", timer=time.process_time)
def test_claude_parser(benchmark: Any, transcript: list[bytes], reads: list[list[bytes]]) -> None:
    count = benchmark.pedantic(lambda: parse_reads(ClaudeParser(), reads), rounds=3, iterations=1)
    benchmark.extra_info["items"] = len(transcript)
    benchmark.extra_info["summary"] = f"{sum(map(len, transcript)) / 2**20:.0f} MiB, {count} events"


@pytest.mark.benchmark(group="agents: parse 200 MB stream-json", timer=time.process_time)
def test_claude_parser_stdlib_json_baseline(
    benchmark: Any, transcript: list[bytes], reads: list[list[bytes]]
) -> None:
    table = default_table()
    count = benchmark.pedantic(
        lambda: parse_all(StdlibClaudeParser(table), transcript), rounds=3, iterations=1
    )
    benchmark.extra_info["items"] = len(transcript)
    assert count == parse_reads(ClaudeParser(), reads)  # the same events, the same work


def decode_all(lines: list[bytes]) -> int:
    """The decode floor: every line decoded into the Python path's Structs
    and dropped, without a single event built."""
    count = 0
    for line in lines:
        if line[:1] == b"{":
            decode_line(line)
            count += 1
    return count


@pytest.mark.benchmark(group="agents: parse 200 MB stream-json", timer=time.process_time)
def test_claude_line_decode_floor(benchmark: Any, transcript: list[bytes]) -> None:
    count = benchmark.pedantic(lambda: decode_all(transcript), rounds=3, iterations=1)
    benchmark.extra_info["items"] = len(transcript)
    benchmark.extra_info["summary"] = f"{count} lines decoded, no events (the ceiling)"


@pytest.mark.benchmark(group="agents: parse 200 MB stream-json, paired", timer=time.process_time)
def test_claude_parser_paired(
    benchmark: Any, transcript: list[bytes], reads: list[list[bytes]]
) -> None:
    """Each round parses the transcript with both parsers and runs the decode
    floor, in an order that rotates, timing each in CPU time; the figures are
    the medians of the rounds' stdlib / weft and stdlib / floor ratios."""
    table = default_table()
    names = ("weft", "stdlib", "floor")
    rounds = iter(range(1000))
    took: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {"weft": [], "floor": []}

    def run(name: str) -> None:
        if name == "floor":
            decode_all(transcript)
        elif name == "weft":
            parse_reads(ClaudeParser(), reads)
        else:
            parse_all(StdlibClaudeParser(table), transcript)

    def rotation() -> None:
        n = next(rounds)
        this: dict[str, float] = {}
        for name in names[n % 3 :] + names[: n % 3]:
            started = time.process_time()
            run(name)
            this[name] = time.process_time() - started
            took[name].append(this[name])
        for name, values in ratios.items():
            values.append(this["stdlib"] / this[name])

    benchmark.pedantic(rotation, rounds=PAIRED_ROUNDS, iterations=1)
    ratio = statistics.median(ratios["weft"])
    floor = statistics.median(ratios["floor"])
    ms = {name: statistics.median(times) * 1000 for name, times in took.items()}
    benchmark.extra_info["ratio"] = ratio
    benchmark.extra_info["floor_ratio"] = floor
    benchmark.extra_info.update({f"{name}_ms": value for name, value in ms.items()})
    met = "met" if ratio >= TARGET_RATIO else "NOT met"
    spread = ", ".join(f"{r:.2f}" for r in sorted(ratios["weft"]))
    benchmark.extra_info["summary"] = (
        f"weft {ms['weft']:,.0f} ms, stdlib json {ms['stdlib']:,.0f} ms (CPU, medians): "
        f"{ratio:.2f}x, median of {len(ratios['weft'])} paired rounds ({spread}); "
        f"target >= {TARGET_RATIO:.0f}x: {met}; the decode floor ({ms['floor']:,.0f} ms) "
        f"{floor:.2f}x"
    )
    assert ratio >= TARGET_RATIO, benchmark.extra_info["summary"]
