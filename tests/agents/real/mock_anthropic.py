"""A local Anthropic Messages API for the real Claude Code CLI.

Answers ``HEAD /api/hello`` (the CLI's start-up probe), streaming and
non-streaming ``POST /v1/messages`` (the CLI falls back to one non-streaming call
after failed streams) and errors in Anthropic's shape
(``{"type":"error","error":{"type":..., "message":...}}``) with ``retry-after``.

The scenario comes from ``MOCK[...]`` in the turn's prompt (the last user text
that is not a ``<system-reminder>``); tool rounds are the ``tool_result``
messages after it:

``tools=N``     N rounds of one ``Bash`` call (``echo round r``), then text
``parallel=N``  one message with N ``Bash`` calls, then text
``multi``       text and a tool call in one message, then text
``thinking``    a thinking block before the text
``long=N``      an N-character reply
``bigtool=N``   a ``Bash`` call printing N bytes, then text
``write=FILE``  a ``Write`` of ``FILE`` (relative to the cwd), then text
``err=S[,times=K][,after=R]``  HTTP status S (first K attempts; all by default;
                from tool round R on), e.g. 429, 529, 500, 401, 403, 402, 404, 413
``ptl``         400 "prompt is too long"
``sse_err``     an SSE ``error`` event after the first text delta (streaming only)
``cut``         the connection dropped mid-message (streaming only)
``fallback=S``  the non-streaming fallback answers status S
``slow=S``      the text streamed over S seconds
``hang``        headers, then nothing
``maxtok``      the first answer stops at ``max_tokens``

A subscription's usage window (``AnthropicMock.window``, a :class:`Window`):
every answer carries the ``anthropic-ratelimit-unified-*`` headers Claude Code
reads when it holds an OAuth token (reference real-agent-clis §1.10); while
the window is closed every call is a 429 with status ``rejected``.

Usage per answer: input 1000 + 10 per message, cache read 2000, cache write 500,
output a quarter of the characters (at least 1): like the mock the reference was
recorded with, so figures can be compared with its transcripts.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any

from tests.agents.real.mock_http import Billed, Handler, MockServer, Request

_ERRORS = {
    400: ("invalid_request_error", "Invalid request"),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low to access the Anthropic API."),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "model: {model}"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}
PTL = "prompt is too long: 215893 tokens > 200000 maximum"


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or [] if b.get("type") == "text"]


def turn(messages: list[dict[str, Any]]) -> tuple[str, int, list[str]]:
    """The turn's prompt, the tool rounds after it, and the earlier prompts."""
    prompts: list[tuple[int, str]] = []
    for i, m in enumerate(messages):
        if m.get("role") != "user":
            continue
        texts = [t for t in _texts(m.get("content")) if not t.startswith("<system-reminder>")]
        if texts:
            prompts.append((i, texts[-1]))
    if not prompts:
        return "", 0, []
    at, prompt = prompts[-1]
    rounds = sum(
        1
        for m in messages[at + 1 :]
        if m.get("role") == "user"
        and any(
            b.get("type") == "tool_result" for b in m.get("content") or [] if isinstance(b, dict)
        )
    )
    return prompt, rounds, [p for _, p in prompts[:-1]]


@dataclasses.dataclass
class Window:
    """The account's five-hour window: closed until ``closed_until`` (epoch
    seconds), ``utilization`` used (a warning from 0.9)."""

    closed_until: float = 0.0
    utilization: float = 0.5
    resets_at: float = 0.0
    """When an open window resets (epoch seconds; 0: five hours from now)."""

    def headers(self, now: float) -> dict[str, str]:
        closed = now < self.closed_until
        reset = int(self.closed_until if closed else self.resets_at or now + 5 * 3600)
        status = "rejected" if closed else "allowed"
        window = status if closed or self.utilization < 0.9 else "allowed_warning"
        used = 1.0 if closed else self.utilization
        return {
            "anthropic-ratelimit-unified-status": status,
            "anthropic-ratelimit-unified-reset": str(reset),
            "anthropic-ratelimit-unified-representative-claim": "five_hour",
            "anthropic-ratelimit-unified-5h-status": window,
            "anthropic-ratelimit-unified-5h-reset": str(reset),
            "anthropic-ratelimit-unified-5h-utilization": f"{used:.2f}",
        }


def _bash(command: str, what: str) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": f"toolu_{uuid.uuid4().hex[:24]}",
        "name": "Bash",
        "input": {"command": command, "description": what},
    }


class AnthropicHandler(Handler):
    mock: AnthropicMock

    def do_HEAD(self) -> None:  # noqa: N802 - http.server dispatches on this name
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 - http.server dispatches on this name
        self.send_json(200, {})

    def do_POST(self) -> None:  # noqa: N802 - http.server dispatches on this name
        body = self.read_json() or {}
        messages = body.get("messages") or []
        prompt, rounds, earlier = turn(messages)
        stream = bool(body.get("stream"))
        req = self.mock.log(
            Request("POST", self.path, self.headers_dict(), body, prompt, rounds), stream=stream
        )
        keys = req.keys
        model = str(body.get("model") or "claude-sonnet-5-5")
        window = self.mock.window
        if window is not None and time.time() < window.closed_until:
            self._error(req, 429, model)
            return
        status = self._error_status(req)
        if status is not None:
            self._error(req, status, model)
            return
        if not stream and "fallback" in keys:
            self._error(req, int(keys["fallback"]), model)
            return
        if stream and "hang" in keys:
            req.outcome = "hang"
            self.hang()
            return
        blocks, stop = self._answer(req, earlier, len(messages))
        text_chars = sum(len(b.get("text", "")) + len(b.get("thinking", "")) for b in blocks)
        billed = Billed(
            input=1000 + 10 * len(messages),
            output=max(1, text_chars // 4 + 20 * sum(b["type"] == "tool_use" for b in blocks)),
            cache_read=2000,
            cache_creation=500,
        )
        if not stream:
            req.billed, req.outcome = billed, "json"
            self.send_json(200, self._message(model, blocks, stop, billed), self._window_headers())
            return
        self._stream(req, model, blocks, stop, billed)

    # -- scenario --

    def _error_status(self, req: Request) -> int | None:
        keys = req.keys
        if "ptl" in keys:
            return 400
        if "err" not in keys or req.rounds < int(keys.get("after") or 0):
            return None
        times = int(keys.get("times") or 10**6)
        return int(keys["err"]) if req.attempt <= times else None

    def _error(self, req: Request, status: int, model: str) -> None:
        kind, message = _ERRORS.get(status, ("api_error", f"status {status}"))
        if "ptl" in req.keys:
            message = PTL
        req.outcome = f"error {status}"
        headers = {"request-id": f"req_{uuid.uuid4().hex[:20]}", **self._window_headers()}
        if status in (429, 529):
            headers["retry-after"] = "1"
        if headers.get("anthropic-ratelimit-unified-status") == "rejected":
            kind, message = (
                "rate_limit_error",
                "This request would exceed your account's rate limit.",
            )
            del headers["retry-after"]
        self.send_json(
            status,
            {"type": "error", "error": {"type": kind, "message": message.format(model=model)}},
            headers,
        )

    def _answer(
        self, req: Request, earlier: list[str], n_messages: int
    ) -> tuple[list[dict[str, Any]], str]:
        keys, r = req.keys, req.rounds
        reply = (
            f"[mock] turn prompt: {req.prompt!r}; earlier prompts seen: {len(earlier)} "
            f"{earlier!r}; messages in request: {n_messages}; tool rounds: {r}"
        )
        text = {"type": "text", "text": reply}
        if "tools" in keys and r < int(keys["tools"] or 1):
            return [_bash(f"echo round {r + 1}", "Echo a round")], "tool_use"
        if "parallel" in keys and r == 0:
            n = int(keys["parallel"] or 2)
            return [_bash(f"echo lane {i + 1}", "Echo a lane") for i in range(n)], "tool_use"
        if "multi" in keys and r == 0:
            return [text, _bash("echo multi", "Echo")], "tool_use"
        if "bigtool" in keys and r == 0:
            n = int(keys["bigtool"])
            return [_bash(f"head -c {n} /dev/zero | tr '\\0' x", "Big output")], "tool_use"
        if "write" in keys and r == 0:
            tool = {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:24]}",
                "name": "Write",
                "input": {"file_path": keys["write"], "content": "hello from the mock model\n"},
            }
            return [tool], "tool_use"
        if "long" in keys:
            n = int(keys["long"])
            words = ("lorem ipsum dolor sit amet " * (n // 27 + 1))[:n]
            return [{"type": "text", "text": words}], "end_turn"
        if "maxtok" in keys and req.attempt == 1 and r == 0:
            return [{"type": "text", "text": "This answer is cut at the tok"}], "max_tokens"
        if "thinking" in keys:
            thinking = {
                "type": "thinking",
                "thinking": "Considering the request carefully.",
                "signature": "EqQBCkgIBBABGAIiQ" + uuid.uuid4().hex,
            }
            return [thinking, text], "end_turn"
        return [text], "end_turn"

    # -- wire --

    def _window_headers(self) -> dict[str, str]:
        window = self.mock.window
        return {} if window is None else window.headers(time.time())

    @staticmethod
    def _usage(billed: Billed, *, output: int | None = None) -> dict[str, Any]:
        return {
            "input_tokens": billed.input,
            "cache_creation_input_tokens": billed.cache_creation,
            "cache_read_input_tokens": billed.cache_read,
            "output_tokens": billed.output if output is None else output,
            "cache_creation": {
                "ephemeral_5m_input_tokens": billed.cache_creation,
                "ephemeral_1h_input_tokens": 0,
            },
            "service_tier": "standard",
        }

    def _message(
        self, model: str, blocks: list[dict[str, Any]], stop: str, billed: Billed
    ) -> dict[str, Any]:
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": self._usage(billed),
        }

    def _stream(
        self, req: Request, model: str, blocks: list[dict[str, Any]], stop: str, billed: Billed
    ) -> None:
        keys = req.keys
        message = self._message(model, [], stop, billed)
        message["stop_reason"] = None
        message["usage"] = self._usage(billed, output=1)
        self.start_sse(self._window_headers())
        self.sse("message_start", {"type": "message_start", "message": message})
        self.sse("ping", {"type": "ping"})
        pieces = 10 if "slow" in keys else 1
        pause = float(keys.get("slow") or 0) / pieces
        for i, block in enumerate(blocks):
            kind = block["type"]
            start = dict(block)
            if kind == "text":
                start["text"] = ""
            elif kind == "thinking":
                start["thinking"], start["signature"] = "", ""
            elif kind == "tool_use":
                start["input"] = {}
            self.sse(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": start},
            )
            if kind == "text":
                text = block["text"]
                step = max(1, len(text) // pieces)
                for at in range(0, len(text), step):
                    delta = {"type": "text_delta", "text": text[at : at + step]}
                    self.sse(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": i, "delta": delta},
                    )
                    if "sse_err" in keys:
                        req.outcome = "sse_err"
                        err = {"type": "overloaded_error", "message": "Overloaded"}
                        self.sse("error", {"type": "error", "error": err})
                        self.end_sse()
                        return
                    if "cut" in keys:
                        req.outcome = "cut"
                        req.partial = dataclasses.replace(billed, output=1)
                        req.partial_full = billed
                        self.cut()
                        return
                    if pause:
                        time.sleep(pause)
            elif kind == "thinking":
                for delta in (
                    {"type": "thinking_delta", "thinking": block["thinking"]},
                    {"type": "signature_delta", "signature": block["signature"]},
                ):
                    self.sse(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": i, "delta": delta},
                    )
            else:
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                self.sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta},
                )
            self.sse("content_block_stop", {"type": "content_block_stop", "index": i})
        self.sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": self._usage(billed),
            },
        )
        self.sse("message_stop", {"type": "message_stop"})
        self.end_sse()
        req.billed, req.outcome = billed, "stream"


class AnthropicMock(MockServer):
    """The Messages API on a local port (use as a context manager)."""

    handler = AnthropicHandler
    window: Window | None = None
    """The subscription's usage window; ``None``: no unified headers (an API key)."""
