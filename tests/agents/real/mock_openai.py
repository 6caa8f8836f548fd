"""A local OpenAI Responses API for the real Codex CLI.

``POST /v1/responses`` answers with SSE: ``response.created``, output items
(``message`` text, ``function_call`` ``exec_command``, ``custom_tool_call``
``apply_patch``), ``response.completed`` with usage, or ``response.failed``.
Errors are OpenAI's shape (``{"error":{"message", "type", "code"}}``).

The scenario comes from ``MOCK[...]`` in the turn's prompt (the last user
``input_text`` that is not Codex's ``<environment_context>``); tool rounds are
the tool outputs after it:

``cmd=N``       N rounds of one ``exec_command`` (``echo round r``), then text
``patch=FILE``  an ``apply_patch`` adding ``FILE``, then text
``err=S[,times=K]``  HTTP status S (first K attempts; all by default)
``failed``      ``response.failed`` (server_error)
``ctx``         ``response.failed`` (context_length_exceeded)
``cut``         the connection dropped mid-response
``slow=S``      the text streamed over S seconds
``hang``        headers, then nothing

Usage per answer: input 1000 + 20 per input item, 800 of them cached, output a
quarter of the characters plus 30 reasoning tokens.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from tests.agents.real.mock_http import Billed, Handler, MockServer, Request

_ERRORS = {
    400: ("invalid_request_error", "Invalid 'input': bad request.", None),
    401: ("invalid_request_error", "Incorrect API key provided: sk-test.", "invalid_api_key"),
    404: (
        "invalid_request_error",
        "The model `{model}` does not exist or you do not have access to it.",
        "model_not_found",
    ),
    429: ("requests", "Rate limit reached for requests", "rate_limit_exceeded"),
    500: ("server_error", "The server had an error while processing your request.", None),
}
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _texts(item: dict[str, Any]) -> list[str]:
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    return [c.get("text", "") for c in content or [] if isinstance(c, dict)]


def turn(items: list[dict[str, Any]]) -> tuple[str, int, list[str]]:
    """The turn's prompt, the tool rounds after it, and the earlier prompts."""
    prompts: list[tuple[int, str]] = []
    for i, item in enumerate(items):
        if item.get("type", "message") != "message" or item.get("role") != "user":
            continue
        texts = [
            t
            for t in _texts(item)
            if not t.lstrip().startswith(
                ("<environment_context>", "<user_instructions>", "# AGENTS")
            )
        ]
        if texts:
            prompts.append((i, texts[-1]))
    if not prompts:
        return "", 0, []
    at, prompt = prompts[-1]
    rounds = sum(1 for item in items[at + 1 :] if item.get("type") in _OUTPUTS)
    return prompt, rounds, [p for _, p in prompts[:-1]]


class OpenAIHandler(Handler):
    mock: OpenAIMock

    def do_GET(self) -> None:  # noqa: N802 - http.server dispatches on this name
        self.send_json(404, {"error": {"message": "not here", "type": "invalid_request_error"}})

    def do_POST(self) -> None:  # noqa: N802 - http.server dispatches on this name
        body = self.read_json() or {}
        items = body.get("input") or []
        prompt, rounds, earlier = turn(items)
        req = self.mock.log(
            Request("POST", self.path, self.headers_dict(), body, prompt, rounds), stream=True
        )
        keys, model = req.keys, str(body.get("model") or "gpt-5.5")
        if "err" in keys and req.attempt <= int(keys.get("times") or 10**6):
            self._error(req, int(keys["err"]), model)
            return
        if "hang" in keys:
            req.outcome = "hang"
            self.hang()
            return
        output = self._answer(req, earlier, len(items))
        chars = sum(len(json.dumps(o)) for o in output)
        billed = Billed(input=1000 + 20 * len(items), output=chars // 4 + 30, cache_read=800)
        self._stream(req, model, output, billed)

    def _error(self, req: Request, status: int, model: str) -> None:
        kind, message, code = _ERRORS.get(status, ("server_error", f"status {status}", None))
        req.outcome = f"error {status}"
        headers = {"retry-after": "1"} if status == 429 else {}
        body = {
            "error": {
                "message": message.format(model=model),
                "type": kind,
                "param": None,
                "code": code,
            }
        }
        self.send_json(status, body, headers)

    def _answer(self, req: Request, earlier: list[str], n_items: int) -> list[dict[str, Any]]:
        keys, r = req.keys, req.rounds
        if "cmd" in keys and r < int(keys["cmd"] or 1):
            args = json.dumps({"cmd": f"echo round {r + 1}"})
            return [
                {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex[:16]}",
                    "call_id": f"call_{uuid.uuid4().hex[:16]}",
                    "name": "exec_command",
                    "arguments": args,
                    "status": "completed",
                }
            ]
        if "patch" in keys and r == 0:
            patch = (
                f"*** Begin Patch\n*** Add File: {keys['patch']}\n"
                "+hello from the mock model\n*** End Patch\n"
            )
            return [
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{uuid.uuid4().hex[:16]}",
                    "call_id": f"call_{uuid.uuid4().hex[:16]}",
                    "name": "apply_patch",
                    "input": patch,
                    "status": "completed",
                }
            ]
        reply = (
            f"[mock] turn prompt: {req.prompt!r}; earlier prompts seen: {len(earlier)} "
            f"{earlier!r}; input items: {n_items}; tool rounds: {r}"
        )
        return [
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:16]}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply, "annotations": []}],
            }
        ]

    def _stream(
        self, req: Request, model: str, output: list[dict[str, Any]], billed: Billed
    ) -> None:
        keys = req.keys
        rid = f"resp_{uuid.uuid4().hex[:16]}"
        response: dict[str, Any] = {
            "id": rid,
            "object": "response",
            "model": model,
            "status": "in_progress",
            "output": [],
        }
        self.start_sse()
        self.sse("response.created", {"type": "response.created", "response": response})
        self.sse("response.in_progress", {"type": "response.in_progress", "response": response})
        pause = float(keys.get("slow") or 0) / 10
        for i, item in enumerate(output):
            self.sse(
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item": {**item, "status": "in_progress"},
                },
            )
            if item["type"] == "message":
                text = item["content"][0]["text"]
                step = max(1, len(text) // 10)
                for at in range(0, len(text), step):
                    self.sse(
                        "response.output_text.delta",
                        {
                            "type": "response.output_text.delta",
                            "item_id": item["id"],
                            "output_index": i,
                            "content_index": 0,
                            "delta": text[at : at + step],
                        },
                    )
                    if "cut" in keys:
                        req.outcome = "cut"
                        self.cut()
                        return
                    if pause:
                        time.sleep(pause)
            self.sse(
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": i, "item": item},
            )
        if "failed" in keys or "ctx" in keys:
            code = "context_length_exceeded" if "ctx" in keys else "server_error"
            message = (
                "Your input exceeds the context window of this model."
                if "ctx" in keys
                else "The server had an error processing your request."
            )
            failed = {**response, "status": "failed", "error": {"code": code, "message": message}}
            self.sse("response.failed", {"type": "response.failed", "response": failed})
            req.outcome = "failed"
            self.end_sse()
            return
        usage = {
            "input_tokens": billed.input,
            "input_tokens_details": {"cached_tokens": billed.cache_read},
            "output_tokens": billed.output,
            "output_tokens_details": {"reasoning_tokens": 30},
            "total_tokens": billed.input + billed.output,
        }
        done = {**response, "status": "completed", "output": output, "usage": usage}
        self.sse("response.completed", {"type": "response.completed", "response": done})
        self.end_sse()
        req.billed, req.outcome = billed, "stream"


class OpenAIMock(MockServer):
    """The Responses API on a local port (use as a context manager)."""

    handler = OpenAIHandler


def codex_config(url: str, *, retries: int = 1) -> str:
    """A ``$CODEX_HOME/config.toml`` pointing Codex at the mock (no WebSockets)."""
    return (
        'model_provider = "mock"\n'
        'model = "gpt-5.5"\n'
        "[model_providers.mock]\n"
        'name = "mock"\n'
        f'base_url = "{url}/v1"\n'
        'env_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\n'
        "supports_websockets = false\n"
        f"request_max_retries = {retries}\n"
        f"stream_max_retries = {retries}\n"
        "stream_idle_timeout_ms = 20000\n"
    )
