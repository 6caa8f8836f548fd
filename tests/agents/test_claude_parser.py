"""The Claude parser's Python path (``core=False``) against the path it
replaced. (The Rust core is compared with the Python path in
``test_claude_parser_core.py``.)

:class:`OldPath` is :class:`ClaudeParser` with the per-line code it had
before the speed work (a chain of type tests after ``decode_lossy``, the
usage merge calling ``PricingTable.cost_nanos`` every time, the repeated
snapshot tested inside the merge), copied verbatim. Both parsers read the
golden streams and hypothesis-made streams (usage snapshots that repeat,
grow, shrink or go negative, on priced, tiered, unpriced, missing and
synthetic models, mixed with every other line kind, junk and bad UTF-8);
they must give exactly the same events, verdict and counters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from weft.agents.claude_parser import SYNTHETIC_MODEL, ClaudeParser
from weft.agents.claude_wire import (
    Assistant,
    Result,
    StreamEvent,
    System,
    Usage,
    User,
    as_dict,
    decode_line,
    result_text,
)
from weft.agents.events import (
    AgentEvent,
    AssistantText,
    CostSource,
    Thinking,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
)
from weft.agents.harness import ProcessEnd, decode_lossy

GOLDEN = Path(__file__).parent / "golden" / "claude"
SID = "e75a5c8f-4cac-4402-a219-8278ea351740"


class _OldMessageUsage:
    __slots__ = ("cost_nanos", "last", "model", "tokens")

    def __init__(self, model: str | None) -> None:
        self.model = model
        self.tokens = Tokens()
        self.cost_nanos: int | None = 0
        self.last: Usage | None = None


class OldPath(ClaudeParser):
    """The per-line code before the speed work (verbatim, for comparison)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(core=False, **kwargs)
        self._old_usage: dict[str, _OldMessageUsage] = {}
        self._estimate_tokens = Tokens()

    def feed(self, line: bytes) -> list[AgentEvent]:
        if line[:1] != b"{":
            line = line.strip()
            if line[:1] != b"{":
                return []
        try:
            msg = decode_lossy(decode_line, line)
        except msgspec.ValidationError as e:
            return self._odd_line(line, e)
        except msgspec.DecodeError:
            self.malformed += 1
            return []
        kind = type(msg)
        if kind is Assistant:
            return self._old_assistant(msg)
        if kind is User:
            return self._old_user(msg)
        if kind is StreamEvent:
            return self._stream_event(msg)
        if kind is System:
            return self._system(msg)
        if kind is Result:
            return self._on_result(msg)
        return []

    def _old_assistant(self, msg: Assistant) -> list[AgentEvent]:
        message = msg.message
        mid = message.id
        sub = msg.parent_tool_use_id is not None
        events: list[AgentEvent] = []
        if message.model == SYNTHETIC_MODEL:
            self._synthetic(msg)
        content = message.content
        if isinstance(content, list):
            for block in content:
                kind = block.type
                if kind == "text":
                    if block.text is not None:
                        events.append(AssistantText(text=block.text, message_id=mid, subagent=sub))
                elif kind == "tool_use":
                    events.append(
                        ToolUse(
                            tool_use_id=block.id or "",
                            name=block.name or "",
                            input=as_dict(block.input),
                            message_id=mid,
                            subagent=sub,
                        )
                    )
                elif kind == "thinking" and block.thinking:
                    events.append(Thinking(text=block.thinking, message_id=mid, subagent=sub))
        if message.usage is not None and mid is not None:
            delta = self._old_usage_delta(mid, message.model, message.usage)
            if delta is not None:
                events.append(delta)
        return events

    def _old_user(self, msg: User) -> list[AgentEvent]:
        content = msg.message.content
        if not isinstance(content, list):
            return []  # a replayed prompt
        sub = msg.parent_tool_use_id is not None
        return [
            ToolResult(
                tool_use_id=block.tool_use_id or "",
                content=result_text(block.content),
                is_error=bool(block.is_error),
                subagent=sub,
            )
            for block in content
            if block.type == "tool_result"
        ]

    def _estimate(self) -> tuple[float | None, CostSource, Tokens]:
        if self._estimate_nanos is None:
            return None, CostSource.UNPRICED, self._estimate_tokens
        return self._estimate_nanos / 1e9, CostSource.ESTIMATE, self._estimate_tokens

    def _old_usage_delta(self, mid: str, model: str | None, usage: Usage) -> UsageDelta | None:
        entry = self._old_usage.get(mid)
        if entry is None:
            if len(self._old_usage) >= 1024:
                del self._old_usage[next(iter(self._old_usage))]
            entry = self._old_usage[mid] = _OldMessageUsage(model)
            if model and model != SYNTHETIC_MODEL:
                self._priced_model = model
            new = tokens = usage.tokens()
            if tokens.total == 0 and tokens.cache_creation_1h == 0:
                entry.last = usage
                return None
            old_cost: int | None = 0
        else:
            if usage == entry.last:
                return None
            old = entry.tokens
            split = usage.cache_creation
            new = Tokens(
                input=max(old.input, usage.input_tokens),
                output=max(old.output, usage.output_tokens),
                cache_creation=max(old.cache_creation, usage.cache_creation_input_tokens),
                cache_read=max(old.cache_read, usage.cache_read_input_tokens),
                cache_creation_1h=max(
                    old.cache_creation_1h, split.ephemeral_1h_input_tokens if split else 0
                ),
            )
            entry.last = usage
            if new == old:
                return None
            tokens = Tokens(
                input=new.input - old.input,
                output=new.output - old.output,
                cache_creation=new.cache_creation - old.cache_creation,
                cache_read=new.cache_read - old.cache_read,
                cache_creation_1h=new.cache_creation_1h - old.cache_creation_1h,
            )
            old_cost = entry.cost_nanos
        entry.last = usage
        entry.tokens = new
        if model is None:
            entry.cost_nanos = None
        else:
            entry.cost_nanos = self._table.cost_nanos(model, new, self._at, per_request=True)
        if entry.cost_nanos is None or old_cost is None:
            delta_cost = None
            self._estimate_nanos = None
        else:
            delta_nanos = entry.cost_nanos - old_cost
            delta_cost = delta_nanos / 1e9
            if self._estimate_nanos is not None:
                self._estimate_nanos += delta_nanos
        self._estimate_tokens = self._estimate_tokens + tokens
        return UsageDelta(model=model, tokens=tokens, cost_usd=delta_cost, message_id=mid)


def both(lines: list[bytes], end: ProcessEnd | None = None) -> None:
    """Feeds ``lines`` to both parsers; every line's events, the verdict and
    the counters must match."""
    new, old = ClaudeParser(core=False), OldPath()
    for line in lines:
        assert new.feed(line) == old.feed(line), line[:300]
    process_end = end or ProcessEnd(exit_code=0, signal=None, stderr_tail="", stopped=None)
    assert new.finish(process_end) == old.finish(process_end)
    assert (new.malformed, new.unknown_types) == (old.malformed, old.unknown_types)


def test_the_golden_streams_give_the_same_events() -> None:
    files = sorted(GOLDEN.glob("*.jsonl"))
    assert len(files) >= 10
    for path in files:
        both(path.read_bytes().split(b"\n"))


def test_tool_results_of_every_shape_become_the_same_events() -> None:
    """One string kept as it is, parts joined, a missing id and a null
    ``is_error`` defaulted; the growth of a snapshot priced alone (Sonnet 4.5:
    3 + 1,024 x 3.75 + 1,024 x 6 + 9,000 x 0.3 + 2 x 15 micro-dollars, then
    38 output tokens x 15)."""
    lines = (GOLDEN / "tool_result_shapes.jsonl").read_bytes().split(b"\n")
    parser = ClaudeParser()
    events = [e for line in lines for e in parser.feed(line)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert results == [
        ToolResult(
            tool_use_id="toolu_01ReadAAAAAAAAAAAAAAAAAA",
            content='     1\t[metadata]\n     2\tname = "caf\u00e9" \U0001f680',
        ),
        ToolResult(tool_use_id="toolu_01BashAAAAAAAAAAAAAAAAAA", content="3 passed\n[image]"),
        ToolResult(
            tool_use_id="toolu_01TaskAAAAAAAAAAAAAAAAAA", content="Exit code 1", is_error=True
        ),
        ToolResult(tool_use_id="", content="", subagent=True),
    ]
    deltas = [(e.tokens, e.cost_usd) for e in events if isinstance(e, UsageDelta)]
    assert deltas == [
        (
            Tokens(input=3, output=2, cache_creation=2048, cache_read=9000, cache_creation_1h=1024),
            0.012723,
        ),
        (Tokens(output=38), 0.00057),
        (Tokens(input=1, output=3, cache_read=11000), 0.003348),
    ]
    bash = next(e for e in events if isinstance(e, ToolUse) and e.name == "Bash")
    assert bash.input == {"input": "pytest -q"}
    assert parser.malformed == parser.unknown_types == 0
    both(lines)


# -- made-up streams ----------------------------------------------------------------------------

_models = st.sampled_from(
    [
        "claude-sonnet-4-5-20250929",  # tiered: a prompt over 200k tokens costs more
        "claude-haiku-4-5-20251001",
        "claude-nonexistent-9",  # unpriced
        SYNTHETIC_MODEL,
        None,
    ]
)
# Around the 200k-token tier of a single request, and a few odd negatives.
_counts = st.one_of(
    st.sampled_from([0, 1, 99_999, 100_001, 200_001, 350_000]),
    st.integers(0, 400_000),
    st.integers(-5, 5),
)
_usage = st.fixed_dictionaries(
    {
        "input_tokens": _counts,
        "output_tokens": _counts,
        "cache_creation_input_tokens": _counts,
        "cache_read_input_tokens": _counts,
    },
    optional={
        "cache_creation": st.fixed_dictionaries(
            {"ephemeral_5m_input_tokens": _counts, "ephemeral_1h_input_tokens": _counts}
        ),
        "service_tier": st.sampled_from(["standard", "priority"]),
    },
)
_blocks = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=20)),
        st.builds(lambda t: {"type": "thinking", "thinking": t}, st.text(max_size=20)),
        st.builds(
            lambda i, v: {"type": "tool_use", "id": i, "name": "Bash", "input": v},
            st.text(max_size=5),
            st.one_of(st.none(), st.dictionaries(st.text(max_size=4), st.integers()), st.text()),
        ),
    ),
    max_size=3,
)


def _assistant(mid: str | None, model: str | None, usage: Any, blocks: Any) -> bytes:
    message: dict[str, Any] = {"content": blocks}
    if mid is not None:
        message["id"] = mid
    if model is not None:
        message["model"] = model
    if usage is not None:
        message["usage"] = usage
    return json.dumps({"type": "assistant", "message": message, "session_id": SID}).encode()


_assistant_lines = st.builds(
    _assistant,
    st.one_of(st.none(), st.sampled_from(["msg_a", "msg_b", "msg_c"])),
    _models,
    st.one_of(st.none(), _usage, st.just("not a usage")),
    st.one_of(_blocks, st.text(max_size=10)),
)
_other_lines = st.sampled_from(
    [
        json.dumps({"type": "system", "subtype": "init", "session_id": SID, "model": "m"}),
        json.dumps({"type": "stream_event", "event": {"type": "message_start", "message": {}}}),
        json.dumps(
            {
                "type": "stream_event",
                "event": {
                    "type": "content_block_delta",
                    "delta": {"type": "text_delta", "text": "x"},
                },
            }
        ),
        json.dumps(
            {
                "type": "user",
                "message": {
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]
                },
            }
        ),
        json.dumps({"type": "rate_limit_event"}),
        json.dumps({"type": "brand_new_kind"}),
        json.dumps({"type": "result", "subtype": "success", "session_id": SID}),
        "[SandboxDebug] not json",
        "{not json",
        "",
    ]
).map(str.encode) | st.just(b'{"type":"assistant","message":{"content":"caf\xe9"}}')


_result_content = st.one_of(
    st.text(max_size=10),
    st.none(),
    st.integers(),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(
        st.one_of(
            st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=8)),
            st.just({"type": "image", "source": {}}),
            st.just({"text": "no type"}),
            st.text(max_size=4),
        ),
        max_size=3,
    ),
)
_user_blocks = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("tool_result"), "content": _result_content},
            optional={
                "tool_use_id": st.one_of(st.none(), st.text(max_size=4)),
                "is_error": st.one_of(st.none(), st.booleans()),
            },
        ),
        st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=8)),
    ),
    max_size=3,
)


def _user(content: Any, parent: str | None) -> bytes:
    line = {"type": "user", "message": {"role": "user", "content": content}}
    if parent is not None:
        line["parent_tool_use_id"] = parent
    line["tool_use_result"] = {"stdout": "x", "stderr": ""}
    return json.dumps(line).encode()


_user_lines = st.builds(
    _user,
    st.one_of(_user_blocks, st.text(max_size=10)),
    st.one_of(st.none(), st.just("toolu_parent")),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_assistant_lines, _assistant_lines, _user_lines, _other_lines), max_size=40)
)
@example(
    # Found by hypothesis: a first snapshot whose counts sum to zero (a negative
    # one cancelling a positive one), then the same message at zero.
    lines=[
        _assistant(
            "msg_b",
            "claude-sonnet-4-5-20250929",
            {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 1,
                "cache_read_input_tokens": -1,
            },
            [],
        ),
        _assistant(
            "msg_b",
            "claude-sonnet-4-5-20250929",
            {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            [],
        ),
    ],
).via("discovered failure")
def test_made_up_streams_give_the_same_events(lines: list[bytes]) -> None:
    both(lines)


def evicting_stream() -> list[bytes]:
    """More messages than the usage window keeps (1024), each seen twice; then
    an evicted one comes back (it counts again)."""
    lines = []
    for i in range(1500):
        usage = {"input_tokens": i, "output_tokens": 1, "cache_read_input_tokens": 7}
        line = _assistant(f"msg_{i}", "claude-sonnet-4-5-20250929", usage, [])
        lines += [line, line]
    lines.append(lines[0])
    return lines


def test_a_long_stream_evicts_old_messages_alike() -> None:
    both(evicting_stream())
