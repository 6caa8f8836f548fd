"""The wire format of ``claude -p --output-format stream-json`` (reference
agent-cli-protocols §1.3), as msgspec Structs :mod:`weft.agents.claude_parser`
decodes each stdout line into.

Every field has a default: a CLI that drops a field must not lose the line.
Fields that vary in shape between versions are typed Any. gc=False: the
Structs live for one line and hold no cycles, and untracked objects make
decoding measurably faster.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

from weft.agents.events import Tokens


class CacheCreation(msgspec.Struct, gc=False):
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class Usage(msgspec.Struct, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation: CacheCreation | None = None

    def tokens(self) -> Tokens:
        split = self.cache_creation
        return Tokens(
            input=self.input_tokens,
            output=self.output_tokens,
            cache_creation=self.cache_creation_input_tokens,
            cache_read=self.cache_read_input_tokens,
            cache_creation_1h=split.ephemeral_1h_input_tokens if split is not None else 0,
        )


class Block(msgspec.Struct, gc=False):
    """A content block of any type (text, tool_use, thinking, tool_result,
    and whatever future versions add)."""

    type: str = ""
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    content: Any = None
    is_error: bool | None = None


class Message(msgspec.Struct, gc=False):
    id: str | None = None
    model: str | None = None
    content: str | list[Block] = ""
    usage: Usage | None = None


class CompactMetadata(msgspec.Struct, gc=False):
    trigger: str | None = None


class Line(msgspec.Struct, tag_field="type", gc=False):
    """Every line carries ``session_id``; only ``system`` and ``result`` lines
    declare it, so the decoder skips it everywhere else (and a nested or
    per-line id can never be taken for the session's)."""


class System(Line, tag="system"):
    session_id: str | None = None
    subtype: str = ""
    model: str | None = None
    cwd: str | None = None
    tools: list[Any] = []
    claude_code_version: str | None = None
    attempt: int | None = None
    max_retries: int | None = None
    retry_delay_ms: float | None = None
    error_status: int | None = None
    error: Any = None
    compact_metadata: CompactMetadata | None = None


class Assistant(Line, tag="assistant"):
    message: Message = msgspec.field(default_factory=Message)
    parent_tool_use_id: str | None = None
    error: str | None = None


class User(Line, tag="user"):
    message: Message = msgspec.field(default_factory=Message)
    parent_tool_use_id: str | None = None


class ModelUsageEntry(msgspec.Struct, gc=False):
    inputTokens: int = 0  # noqa: N815 - the wire's camelCase
    outputTokens: int = 0  # noqa: N815
    cacheReadInputTokens: int = 0  # noqa: N815
    cacheCreationInputTokens: int = 0  # noqa: N815
    costUSD: float | None = None  # noqa: N815


class Result(Line, tag="result"):
    session_id: str | None = None
    subtype: str = ""
    is_error: bool = False
    duration_ms: int | None = None
    num_turns: int | None = None
    result: str | None = None
    total_cost_usd: float | None = None
    cost_usd: float | None = None
    usage: Usage | None = None
    modelUsage: dict[str, ModelUsageEntry] = {}  # noqa: N815
    model_usage_since_last_result: dict[str, ModelUsageEntry] | None = None
    """This process's share (2.1.330+); ``total_cost_usd`` and ``modelUsage``
    then cover the whole session since its creation, earlier processes too."""
    errors: list[Any] = []
    terminal_reason: str | None = None
    api_error_status: int | None = None


class Delta(msgspec.Struct, gc=False):
    type: str = ""
    text: str | None = None


class SseMessage(msgspec.Struct, gc=False):
    id: str | None = None


class Sse(msgspec.Struct, gc=False):
    type: str = ""
    delta: Delta | None = None
    message: SseMessage | None = None


class StreamEvent(Line, tag="stream_event"):
    event: Sse = msgspec.field(default_factory=Sse)
    parent_tool_use_id: str | None = None


class WindowInfo(msgspec.Struct, gc=False):
    status: str | None = None
    resetsAt: float | None = None  # noqa: N815 (the CLI's own name)
    utilization: float | None = None


class RateLimitInfo(msgspec.Struct, gc=False):
    status: str | None = None
    resetsAt: float | None = None  # noqa: N815
    rateLimitType: str | None = None  # noqa: N815
    utilization: float | None = None
    unifiedWindows: dict[str, WindowInfo] | None = None  # noqa: N815


class RateLimitEvent(Line, tag="rate_limit_event"):
    rate_limit_info: RateLimitInfo | None = None


class ToolProgress(Line, tag="tool_progress"):
    pass


class ControlRequest(Line, tag="control_request"):
    pass


class ControlResponse(Line, tag="control_response"):
    pass


class AuthStatus(Line, tag="auth_status"):
    pass


AnyLine: TypeAlias = (
    System
    | Assistant
    | User
    | Result
    | StreamEvent
    | RateLimitEvent
    | ToolProgress
    | ControlRequest
    | ControlResponse
    | AuthStatus
)
KNOWN_TYPES = frozenset(
    {
        "system",
        "assistant",
        "user",
        "result",
        "stream_event",
        "rate_limit_event",
        "tool_progress",
        "control_request",
        "control_response",
        "auth_status",
    }
)


class Envelope(msgspec.Struct, gc=False):
    type: Any = None


decode_line = msgspec.json.Decoder(AnyLine).decode
decode_envelope = msgspec.json.Decoder(Envelope).decode
encode = msgspec.json.Encoder().encode


def as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    return {} if value is None else {"input": value}


def result_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
                else:
                    parts.append(f"[{part.get('type', 'block')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return encode(content).decode()
