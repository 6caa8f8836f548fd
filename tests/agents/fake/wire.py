"""Wire-format checkers, one per flavour, written from the reference's field
lists (agent-cli-protocols.md §1.3, §1.5, §2.2, §3.2, §5, §7.2) rather than
from the fake's code: they assert required fields and types, id formats,
ordering, the usage-snapshot rules and the cost arithmetic."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
UUID_ANY = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MSG_ID = re.compile(r"^msg_01[0-9A-Za-z]{22}$")
TOOL_ID = re.compile(r"^toolu_01[0-9A-Za-z]{22}$")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

# §5, per million tokens: input, 5m write, 1h write, cache read, output.
PRICES: dict[str, tuple[str, str, str, str, str]] = {
    "claude-opus-4-5": ("5", "6.25", "10", "0.50", "25"),
    # The 5.5 rows reproduce what Claude Code 2.1.330 billed against the test mock.
    "claude-opus-5-5": ("4", "5", "8", "0.20", "20"),
    "claude-sonnet-5-5": ("2", "2.50", "4", "0.10", "10"),
    "claude-haiku-5-5": ("0.10", "0.125", "0.20", "0.01", "0.50"),
    "claude-opus-4-1": ("15", "18.75", "30", "1.50", "75"),
    "claude-sonnet-4": ("3", "3.75", "6", "0.30", "15"),
    "claude-haiku-4-5": ("1", "1.25", "2", "0.10", "5"),
    "claude-3-5-haiku": ("0.80", "1.00", "1.60", "0.08", "4"),
    "claude-3-haiku": ("0.25", "0.30", "0.50", "0.03", "1.25"),
}


def price(model: str) -> tuple[Decimal, ...]:
    """The §5 row of ``model`` (longest prefix)."""
    best = max((p for p in PRICES if model.startswith(p)), key=len)
    return tuple(Decimal(x) for x in PRICES[best])


def formula(model: str, entry: dict[str, Any]) -> Decimal:
    """§5 applied to one ``modelUsage`` entry (all cache writes 5-minute)."""
    inp, w5, _w1h, read, out = price(model)
    total = (
        entry["inputTokens"] * inp
        + entry["cacheCreationInputTokens"] * w5
        + entry["cacheReadInputTokens"] * read
        + entry["outputTokens"] * out
    )
    return total / Decimal(1_000_000)


def exact(value: float) -> Decimal:
    """The decimal a JSON float was printed as."""
    return Decimal(repr(value))


def _ints(obj: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert isinstance(obj.get(key), int), (key, obj)
        assert not isinstance(obj[key], bool), (key, obj)
        assert obj[key] >= 0, (key, obj)


@dataclass
class ClaudeRun:
    """What a Claude stream said."""

    session_id: str = ""
    init: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    assistants: list[dict[str, Any]] = field(default_factory=list)
    users: list[dict[str, Any]] = field(default_factory=list)
    tool_uses: dict[str, dict[str, Any]] = field(default_factory=dict)
    tool_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Usage snapshot per message id (main thread only)."""
    message_models: dict[str, str] = field(default_factory=dict)
    types: list[str] = field(default_factory=list)

    @property
    def final_text(self) -> str:
        """The text of the last main-thread assistant text block."""
        texts = [
            block["text"]
            for line in self.assistants
            if line["parent_tool_use_id"] is None
            for block in line["message"]["content"]
            if block["type"] == "text"
        ]
        return texts[-1] if texts else ""


def check_init(line: dict[str, Any]) -> None:
    """§1.3.1 fields and types."""
    assert line["type"] == "system"
    assert line["subtype"] == "init"
    assert UUID4.match(line["session_id"])
    assert line["cwd"].startswith("/")
    assert isinstance(line["model"], str)
    assert line["model"]
    assert isinstance(line["tools"], list)
    assert all(isinstance(t, str) for t in line["tools"])
    for server in line["mcp_servers"]:
        assert isinstance(server["name"], str)
        assert isinstance(server["status"], str)
    for key in ("permissionMode", "apiKeySource", "claude_code_version", "output_style"):
        assert isinstance(line[key], str), key
    assert isinstance(line["slash_commands"], list)
    assert UUID4.match(line["uuid"])


def _check_usage(usage: dict[str, Any], synthetic: bool) -> None:
    _ints(
        usage,
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    )
    if not synthetic:
        split = usage["cache_creation"]
        _ints(split, "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")
        assert (
            split["ephemeral_5m_input_tokens"] + split["ephemeral_1h_input_tokens"]
            == usage["cache_creation_input_tokens"]
        )


def check_claude(
    lines: list[dict[str, Any]],
    *,
    expect_result: bool = True,
    dangling_ok: bool = False,
    unknown_ok: bool = False,
) -> ClaudeRun:
    """Check a whole Claude stream and return what it said."""
    run = ClaudeRun()
    seen_uuids: set[str] = set()
    last_message_id: str | None = None
    closed_messages: set[str] = set()
    for index, line in enumerate(lines):
        kind = line["type"]
        run.types.append(kind)
        if run.result is not None and kind != "result":
            raise AssertionError(f"line {index} ({kind}) after the result")
        if kind not in (
            "system",
            "assistant",
            "user",
            "result",
            "stream_event",
            "rate_limit_event",
        ):
            assert unknown_ok, f"unexpected type {kind}"
            continue
        if "uuid" in line:
            assert UUID4.match(line["uuid"]), line["uuid"]
            assert line["uuid"] not in seen_uuids, "uuid repeated"
            seen_uuids.add(line["uuid"])
        if kind == "system" and line["subtype"] == "init":
            check_init(line)
            assert not run.init, "two init lines"
            run.init = line
            run.session_id = line["session_id"]
            continue
        if kind == "system":
            subtypes = ("hook_started", "hook_response", "api_retry", "thinking_tokens")
            assert line["subtype"] in subtypes, line
            if line["subtype"] == "api_retry":
                _ints(line, "attempt", "max_retries", "retry_delay_ms", "error_status")
                assert isinstance(line["error"], str)
            if run.init:
                assert line["session_id"] == run.session_id
            else:
                assert line["subtype"].startswith("hook_"), "only hook lines may precede init"
            continue
        assert run.init, f"{kind} before system/init"
        assert line.get("session_id") == run.session_id, "session id changed"
        if kind == "stream_event":
            assert isinstance(line["event"]["type"], str)
            assert line["parent_tool_use_id"] is None or TOOL_ID.match(line["parent_tool_use_id"])
            continue
        if kind == "rate_limit_event":
            assert isinstance(line["rate_limit_info"]["status"], str)
            continue
        if kind == "assistant":
            message = line["message"]
            synthetic = message["model"] == "<synthetic>"
            assert (UUID_ANY if synthetic else MSG_ID).match(message["id"]), message["id"]
            assert message["type"] == "message"
            assert message["role"] == "assistant"
            assert len(message["content"]) == 1, "one content block per line"
            block = message["content"][0]
            assert isinstance(block["type"], str)
            parent = line["parent_tool_use_id"]
            assert parent is None or (TOOL_ID.match(parent) and parent in run.tool_uses)
            _check_usage(message["usage"], synthetic)
            msg_id = message["id"]
            if msg_id != last_message_id:
                assert msg_id not in closed_messages, "blocks of one message are not contiguous"
                if last_message_id is not None:
                    closed_messages.add(last_message_id)
                last_message_id = msg_id
            if msg_id in run.snapshots:
                assert run.snapshots[msg_id] == message["usage"], "usage differs within a message"
            elif parent is None and not synthetic:
                run.snapshots[msg_id] = message["usage"]
            run.message_models[msg_id] = message["model"]
            if block["type"] == "tool_use":
                assert TOOL_ID.match(block["id"])
                assert isinstance(block["name"], str)
                assert isinstance(block["input"], dict)
                assert block["id"] not in run.tool_uses
                run.tool_uses[block["id"]] = block
            run.assistants.append(line)
            continue
        if kind == "user":
            if last_message_id is not None:
                closed_messages.add(last_message_id)
                last_message_id = None
            message = line["message"]
            assert message["role"] == "user"
            if message["content"] == [{"type": "text", "text": "[Request interrupted by user]"}]:
                continue  # SIGINT (2.1.330): the interruption line before the result
            if line.get("isSynthetic"):
                run.users.append(line)
                continue  # 2.1.330's own prompt after a max_tokens stop
            assert "tool_use_result" in line
            for block in message["content"]:
                assert block["type"] == "tool_result"
                tool_id = block["tool_use_id"]
                assert tool_id in run.tool_uses, "tool_result before its tool_use"
                assert tool_id not in run.tool_results, "two results for one tool_use"
                assert isinstance(block["is_error"], bool)
                assert isinstance(block["content"], str | list)
                run.tool_results[tool_id] = block
            run.users.append(line)
            continue
        run.result = check_result(line, run)
    if expect_result:
        assert run.result is not None, "no result line"
        assert lines[-1] is run.result, "the result is not last"
    if not dangling_ok:
        assert set(run.tool_results) == set(run.tool_uses), "a tool_use has no result"
    return run


def check_result(line: dict[str, Any], run: ClaudeRun) -> dict[str, Any]:
    """§1.3.5 fields, types and arithmetic."""
    assert isinstance(line["subtype"], str)
    assert isinstance(line["is_error"], bool)
    _ints(line, "duration_ms", "duration_api_ms", "num_turns")
    assert line["session_id"] == run.session_id
    assert UUID4.match(line["uuid"])
    if line["subtype"] == "success":
        assert isinstance(line["result"], str)
    else:
        assert "result" not in line, "error results carry no result text"
        assert all(isinstance(e, str) for e in line.get("errors", []))
    usage = line["usage"]
    _ints(usage, "input_tokens", "output_tokens", "cache_read_input_tokens")
    _ints(usage, "cache_creation_input_tokens")
    assert isinstance(line["permission_denials"], list)
    model_usage = line["modelUsage"]
    costs: list[Decimal] = []
    for entry in model_usage.values():
        _ints(entry, "inputTokens", "outputTokens", "cacheReadInputTokens")
        _ints(entry, "cacheCreationInputTokens", "webSearchRequests")
        _ints(entry, "contextWindow", "maxOutputTokens")
        if "costUSD" in entry:
            assert isinstance(entry["costUSD"], float | int)
            costs.append(exact(entry["costUSD"]))
    if "total_cost_usd" in line:
        assert len(costs) == len(model_usage), "some modelUsage entries lack costUSD"
        assert exact(line["total_cost_usd"]) == sum(costs, Decimal(0))
    else:
        assert not costs, "costUSD without total_cost_usd"
    # result.usage is the sum of the main model's final per-call usage: the
    # input and cache counts equal the de-duplicated snapshots (they do not
    # change during a call), the output is above the snapshots' sum.
    if run.snapshots:
        main = [u for m, u in run.snapshots.items() if run.message_models[m] == run.init["model"]]
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            assert usage[key] == sum(u[key] for u in main), key
        assert usage["output_tokens"] > sum(u["output_tokens"] for u in main)
        # modelUsage of the main model also holds other calls on that model
        # (the background call when the main model is Haiku).
        entry = model_usage[run.init["model"]]
        assert entry["inputTokens"] >= usage["input_tokens"]
        assert entry["outputTokens"] >= usage["output_tokens"]
        assert entry["cacheReadInputTokens"] >= usage["cache_read_input_tokens"]
    return line


def check_costs(result: dict[str, Any]) -> None:
    """Every ``costUSD`` equals the §5 formula exactly."""
    for model, entry in result["modelUsage"].items():
        assert exact(entry["costUSD"]) == formula(model, entry), model


ITEM_ID = re.compile(r"^item_\d+$")
CODEX_TYPES = frozenset(
    {
        "thread.started",
        "turn.started",
        "item.started",
        "item.updated",
        "item.completed",
        "turn.completed",
        "turn.failed",
        "error",
    }
)


@dataclass
class CodexRun:
    """What a Codex stream said."""

    thread_id: str = ""
    items: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    usage: dict[str, int] | None = None
    failed: str | None = None

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        """The final state of every item of ``kind``."""
        out = []
        for states in self.items.values():
            item = states[-1]
            if item.get("type", item.get("item_type")) == kind:
                out.append(item)
        return out

    @property
    def final_text(self) -> str:
        """The last agent message."""
        texts = self.kinds("agent_message") or self.kinds("assistant_message")
        return texts[-1]["text"] if texts else ""


def check_codex(
    lines: list[dict[str, Any]],
    *,
    terminal: bool = True,
    unknown_ok: bool = False,
    legacy: bool = False,
) -> CodexRun:
    """Check a Codex stream (§2.2) and return what it said."""
    run = CodexRun()
    assert lines[0]["type"] == "thread.started", "thread.started must come first"
    assert UUID_ANY.match(lines[0]["thread_id"])
    run.thread_id = lines[0]["thread_id"]
    assert lines[1] == {"type": "turn.started"}
    completed: set[str] = set()
    for line in lines[2:]:
        kind = line["type"]
        if kind not in CODEX_TYPES:
            assert unknown_ok, kind
            continue
        assert run.usage is None, f"{kind} after turn.completed"
        if kind.startswith("item."):
            item = line["item"]
            assert ITEM_ID.match(item["id"])
            item_kind = item.get("item_type") if legacy else item.get("type")
            assert isinstance(item_kind, str), item
            if item["id"] not in run.items:
                assert kind != "item.updated" or unknown_ok
                expected = f"item_{len(run.order)}"
                assert item["id"] == expected, (item["id"], expected)
                run.items[item["id"]] = []
                run.order.append(item["id"])
            assert item["id"] not in completed, "event after item.completed"
            if item_kind == "command_execution":
                assert isinstance(item["command"], str)
                assert isinstance(item["aggregated_output"], str)
                status = item["status"]
                assert status in ("in_progress", "completed", "failed", "declined")
                assert (item["exit_code"] is None) == (status == "in_progress")
            if item_kind == "file_change":
                # 0.163.0: item.started (in_progress), then item.completed.
                done = kind == "item.completed"
                assert item["status"] in (("completed", "failed") if done else ("in_progress",))
                for change in item["changes"]:
                    assert change["kind"] in ("add", "delete", "update")
                    assert isinstance(change["path"], str)
            if item_kind in ("agent_message", "assistant_message", "reasoning"):
                assert isinstance(item["text"], str)
            run.items[item["id"]].append(item)
            if kind == "item.completed":
                completed.add(item["id"])
        elif kind == "turn.completed":
            usage = line["usage"]
            _ints(usage, "input_tokens", "cached_input_tokens", "output_tokens")
            assert usage["cached_input_tokens"] <= usage["input_tokens"]
            run.usage = usage
        elif kind == "turn.failed":
            assert isinstance(line["error"]["message"], str)
            run.failed = line["error"]["message"]
        else:
            assert isinstance(line["message"], str)
    if terminal:
        assert run.usage is not None or run.failed is not None, "no terminal event"
        assert set(run.order) == completed, "an item never completed"
    return run


@dataclass
class GeminiRun:
    """What a Gemini stream said."""

    session_id: str = ""
    model: str = ""
    text: str = ""
    deltas: int = 0
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def check_gemini(
    lines: list[dict[str, Any]], *, expect_result: bool = True, dangling_ok: bool = False
) -> GeminiRun:
    """Check a Gemini stream (§3.2) and return what it said."""
    run = GeminiRun()
    for line in lines:
        assert isinstance(line["type"], str), line
        assert ISO.match(line["timestamp"]), line
    init = lines[0]
    assert init["type"] == "init"
    assert UUID4.match(init["session_id"])
    assert isinstance(init["model"], str)
    run.session_id, run.model = init["session_id"], init["model"]
    assert lines[1]["type"] == "message"
    assert lines[1]["role"] == "user"
    assert "delta" not in lines[1]
    for line in lines[2:]:
        kind = line["type"]
        assert run.result is None, f"{kind} after result"
        if kind == "message":
            assert line["role"] == "assistant"
            assert line["delta"] is True
            assert isinstance(line["content"], str)
            run.text += line["content"]
            run.deltas += 1
        elif kind == "tool_use":
            assert isinstance(line["tool_name"], str)
            assert isinstance(line["parameters"], dict)
            assert line["tool_id"] not in run.tools
            run.tools[line["tool_id"]] = line
        elif kind == "tool_result":
            assert line["tool_id"] in run.tools, "tool_result before its tool_use"
            assert line["tool_id"] not in run.results
            assert line["status"] in ("success", "error")
            if line["status"] == "error":
                assert isinstance(line["error"]["type"], str)
                assert isinstance(line["error"]["message"], str)
            run.results[line["tool_id"]] = line
        elif kind == "error":
            assert line["severity"] in ("warning", "error")
            run.warnings.append(line["message"])
        elif kind == "result":
            assert line["status"] in ("success", "error")
            stats = line["stats"]
            _ints(stats, "total_tokens", "input_tokens", "output_tokens", "cached", "input")
            _ints(stats, "duration_ms", "tool_calls")
            assert stats["input"] == stats["input_tokens"] - stats["cached"]
            assert stats["total_tokens"] == stats["input_tokens"] + stats["output_tokens"]
            assert stats["tool_calls"] == len(run.tools)
            if line["status"] == "error":
                assert isinstance(line["error"]["type"], str)
            run.result = line
        else:
            raise AssertionError(f"unexpected event {kind}")
    if expect_result:
        assert run.result is not None
        assert lines[-1] is run.result
    if not dangling_ok:
        assert set(run.results) == set(run.tools)
    return run
