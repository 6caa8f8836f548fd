"""The Rust core's fast path against the pure-Python path of the Claude parser.

:class:`ClaudeParser` hands the common lines to ``weft._core.ClaudeLineParser``
a batch at a time and reads the rest itself; ``ClaudeParser(core=False)``
reads every line in Python. Fed the same lines (the golden streams, then
hypothesis-made streams cut into random batches: usage snapshots repeated,
grown and interleaved across message ids, tool results of every shape,
partial messages, junk, bad UTF-8, unknown types, JSON that msgspec refuses
or reads in its own way, and random byte-level damage), both must give the
same events in the same order, the same verdict and the same counters.
"""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.agents.test_claude_parser import (
    SID,
    _assistant,
    _assistant_lines,
    _other_lines,
    _user_lines,
    evicting_stream,
)

from weft.agents.claude_parser import SYNTHETIC_MODEL, ClaudeParser
from weft.agents.claude_wire import System
from weft.agents.events import AgentEvent, ToolResult, ToolUse, UsageDelta
from weft.agents.harness import ProcessEnd

GOLDEN = Path(__file__).parent / "golden" / "claude"
END = ProcessEnd(exit_code=0, signal=None, stderr_tail="", stopped=None)


def both_paths(lines: list[bytes], cuts: list[int] | None = None) -> list[AgentEvent]:
    """Feeds ``lines`` to the core in batches (cut at ``cuts``; one by one
    through ``feed`` when ``None``) and to the Python path line by line;
    returns the events after checking that everything matches."""
    fast, slow = ClaudeParser(), ClaudeParser(core=False)
    expected = [event for line in lines for event in slow.feed(line)]
    if cuts is None:
        got = [event for line in lines for event in fast.feed(line)]
    else:
        got = []
        start = 0
        for cut in [*sorted(cuts), len(lines)]:
            got += fast.feed_many(lines[start:cut])
            start = max(start, cut)
    assert got == expected
    assert fast.finish(END) == slow.finish(END)
    for field in ("malformed", "unknown_types", "session_id", "reported_ids", "model"):
        assert getattr(fast, field) == getattr(slow, field), field
    return got


def test_the_golden_streams_give_the_same_events() -> None:
    files = sorted(GOLDEN.glob("*.jsonl"))
    assert len(files) >= 10
    for path in files:
        lines = path.read_bytes().split(b"\n")
        both_paths(lines)
        both_paths(lines, [])
        both_paths(lines, list(range(0, len(lines), 3)))


def test_the_core_builds_the_same_typed_events() -> None:
    """Tool inputs decoded as msgspec decodes them, results joined, costs
    rounded to the same nano-dollar."""
    lines = (GOLDEN / "tool_result_shapes.jsonl").read_bytes().split(b"\n")
    events = both_paths(lines, [])
    assert any(isinstance(e, ToolUse) and e.input == {"input": "pytest -q"} for e in events)
    assert any(isinstance(e, ToolResult) and e.content == "3 passed\n[image]" for e in events)
    assert [e.cost_usd for e in events if isinstance(e, UsageDelta)] == [
        0.012723,
        0.00057,
        0.003348,
    ]


# -- made-up streams ----------------------------------------------------------------------------


def _stream(kind: str, mid: str | None, text: str, parent: bool) -> bytes:
    if kind == "start":
        event: dict[str, Any] = {"type": "message_start", "message": {"id": mid, "usage": {}}}
    elif kind == "delta":
        event = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": text}}
    else:
        event = {"type": kind}
    line: dict[str, Any] = {"type": "stream_event", "event": event, "session_id": SID}
    if parent:
        line["parent_tool_use_id"] = "toolu_parent"
    return json.dumps(line, ensure_ascii=False).encode()


_stream_lines = st.builds(
    _stream,
    st.sampled_from(["start", "delta", "delta", "message_stop", "content_block_start"]),
    st.one_of(st.none(), st.sampled_from(["msg_a", "msg_b"])),
    st.text(max_size=8),
    st.booleans(),
)

# Real sessions write UTF-8 as it is; these escape everything, so some lines
# carry \\u escapes (surrogate pairs too) and some non-ASCII text.
_escaped = st.one_of(_assistant_lines, _user_lines).map(
    lambda line: json.dumps(json.loads(line), ensure_ascii=True).encode()
)

# JSON that msgspec refuses, or reads in a way of its own.
_odd_lines = st.sampled_from(
    [
        b'{"type":"user","type":"user","message":{"content":[]}}',
        b'{"type":"user","message":{"content":[{"type":"tool_result","content":"a",'
        b'"content":"b"}]}}',
        b'{"type":"assistant","message":["msg_a","m"]}',
        b'{"type":"assistant","message":null}',
        b'{"type":"assistant","message":{"id":"msg_a","usage":{"input_tokens":1.0}}}',
        b'{"type":"assistant","message":{"content":[{"type":"tool_use","input":{"n":1e400}}]}}',
        b'{"type":"assistant","message":{"content":[{"type":"tool_use","input":'
        b'{"n":123456789012345678901234567890,"f":0.1,"k":1,"k":2}}]}}',
        b'{"type":"user","message":{"content":"a"},"tool_use_result":"\\ud800"}',
        b'{"type":"user","message":{"content":"a"},"tool_use_result":"\x01"}',
        b'{"type":"user","message":{"content":"a"},"tool_use_result":"caf\xe9"}',
        b'{"type":"user","message":{"content":"a"},"tool_use_result":1e400}',
        b'{"type":"user","message":{"content":"a"},"x":' + b"[" * 200 + b"]" * 200 + b"}",
        b'{"typ\\u0065":"user","message":{"content":[]}}',
        b'{"type":"user","message":{"content":[{"type":"tool_result","content":'
        b'[{"type":"text","text":"a","text":"b"},{"type":null},{"type":"text","text":null}]}]}}',
        b'{"type":"user","message":{"content":[{"type":"tool_result","content":{"a":[1,2.5]}}]}}',
        b'{"type":"user","message":{"content":[{"type":"tool_result","content":7}]}}',
        b'{"type":"stream_event","event":{"type":"content_block_delta",'
        b'"delta":{"type":"text_delta","text":"\\ud83d\\ude80"}}}',
        b'{"type":"assistant","message":{"id":"msg_s","model":"' + SYNTHETIC_MODEL.encode() + b'",'
        b'"content":[{"type":"text","text":"API Error: terminated"}],'
        b'"usage":{"input_tokens":5}},"error":"unknown"}',
        b'  {"type":"user","message":{"content":[]}}  \r',
        b'{"type":"user","message":{"content":[]}}\r',
        b'{"type":"user","message":{"content":[]}}\x0b',
        b'{"type":"user","message":{"content":[]}} x',
        b'{"type":"rate_limit_event","rate_limit_info":{"status":"allowed"}}',
        b'{"type":"system","subtype":"api_retry","attempt":2,"retry_delay_ms":500.5}',
        b'{"type":"result","subtype":"success","session_id":"' + SID.encode() + b'",'
        b'"usage":{"input_tokens":3,"output_tokens":4}}',
    ]
)


def _damaged(line: bytes, where: float, byte: int, how: int) -> bytes:
    """One byte changed, removed or added somewhere in ``line``."""
    at = int(where * len(line))
    if how == 0:
        return line[:at] + bytes([byte]) + line[at + 1 :]
    if how == 1:
        return line[:at] + line[at + 1 :]
    return line[:at] + bytes([byte]) + line[at:]


_damaged_lines = st.builds(
    _damaged,
    st.one_of(_assistant_lines, _user_lines, _stream_lines),
    st.floats(0, 1, exclude_max=True),
    st.sampled_from(list(b'{}[]",:\\0123456789 tfnu\x00\x1f\xe9\xff')),
    st.integers(0, 2),
)

_lines = st.lists(
    st.one_of(
        _assistant_lines,
        _assistant_lines,
        _user_lines,
        _stream_lines,
        _other_lines,
        _escaped,
        _odd_lines,
        _damaged_lines,
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(_lines, st.lists(st.integers(0, 40), max_size=6))
def test_made_up_streams_give_the_same_events(lines: list[bytes], cuts: list[int]) -> None:
    both_paths(lines, cuts)


@settings(max_examples=50, deadline=None)
@given(_lines)
def test_line_by_line_feeding_gives_the_same_events(lines: list[bytes]) -> None:
    both_paths(lines)


def test_a_long_stream_evicts_old_messages_alike() -> None:
    """More messages than the usage window keeps (1024), each seen twice, in
    one large batch (decoded without the interpreter's lock)."""
    lines = evicting_stream()
    lines.append(b'{"type":"user","message":{"content":"x"},"pad":"' + b"y" * 100_000 + b'"}')
    both_paths(lines, [])


def test_token_counts_past_64_bits_are_malformed_on_the_core() -> None:
    """The one difference: the core's counts are 64-bit, msgspec takes any
    integer. Such a usage is counted malformed and ignored, never priced."""
    usage = {"input_tokens": 2**64, "output_tokens": 1}
    line = _assistant("msg_a", "claude-sonnet-4-5-20250929", usage, [{"type": "text", "text": "x"}])
    parser = ClaudeParser()
    assert [type(e).__name__ for e in parser.feed(line)] == ["AssistantText"]
    assert parser.malformed == 1


def test_the_core_is_the_default_and_feed_many_takes_any_sequence() -> None:
    parser = ClaudeParser()
    assert parser._core is not None
    line = _stream("delta", None, "hi", False)
    assert parser.feed_many((line, line)) == ClaudeParser(core=False).feed_many([line, line])


def test_a_finished_parser_is_freed() -> None:
    """The core object calls back into its parser (prices): a cycle the garbage
    collector must be able to break, or every session's parser would leak."""
    parser = ClaudeParser()
    parser.feed_many(
        [
            b'{"type":"assistant","message":{"id":"m","model":"claude-sonnet-4-5",'
            b'"content":[{"type":"text","text":"hi"}],'
            b'"usage":{"input_tokens":3,"output_tokens":1}}}'
        ]
    )
    ref = weakref.ref(parser)
    del parser
    gc.collect()
    assert ref() is None


def test_a_line_the_python_path_fails_on_loses_only_itself(monkeypatch: Any) -> None:
    """The process hands whole reads to ``feed_many``; a bug on one odd line
    (read by the Python path: here every ``system`` line) used to drop every
    event of that read."""
    lines = [line for line in (GOLDEN / "compact_auto.jsonl").read_bytes().splitlines() if line]

    def events_with(handler: Any, *, core: bool) -> list[AgentEvent]:
        parser = ClaudeParser(core=core)
        monkeypatch.setitem(parser._handlers, System, handler)
        return parser.feed_many(lines)

    def broken(msg: object) -> list[AgentEvent]:
        raise RuntimeError("a parser bug")

    for core in (True, False):
        got = events_with(broken, core=core)
        assert got == events_with(lambda msg: [], core=core)
        assert any(isinstance(event, UsageDelta) for event in got)


def test_a_first_snapshot_whose_counts_sum_to_zero_spends_nothing_on_both_paths() -> None:
    # A broken stream: a negative count cancels a positive one. The message spent
    # nothing so far (its maxima stay at zero), on both paths, and a later
    # snapshot of zeros is no change.
    def line(usage: dict[str, int]) -> bytes:
        model = "claude-sonnet-4-5-20250929"
        message = {"id": "msg_b", "model": model, "content": [], "usage": usage}
        return json.dumps({"type": "assistant", "message": message, "session_id": "s"}).encode()

    zero = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0}
    lines = [
        line({**zero, "cache_creation_input_tokens": 1, "cache_read_input_tokens": -1}),
        line({**zero, "cache_read_input_tokens": 0}),
    ]
    assert both_paths(lines) == []
    assert both_paths(lines, cuts=[1]) == []


def test_a_type_with_invalid_utf8_is_an_unknown_type_on_both_paths() -> None:
    # Found by hypothesis: the refused line's type was read again without the
    # U+FFFD replacement, and its UnicodeDecodeError escaped the parser.
    bad = b'{"type": "use\xe9", "message": {"role": "user", "content": ""}}'
    good = json.dumps({"type": "system", "subtype": "init", "session_id": "s"}).encode()
    assert both_paths([bad, good, bad]) == both_paths([good])
    for core in (True, False):
        parser = ClaudeParser(core=core)
        assert parser.feed(bad) == []
        assert (parser.unknown_types, parser.malformed) == (1, 0)
