"""Sentinel calls to Anthropic's Messages API through the official SDK.

The SDK is imported when the first provider is made, not when Weft starts
(``import anthropic`` costs 0.3-1 s of start-up that a run without Anthropic
sentinels should not pay). Structured output is a forced tool call whose
``input_schema`` is the sentinel's JSON Schema: the model must answer with
the tool's input, which the SDK hands back as a decoded object.
"""

from __future__ import annotations

from typing import Any

import orjson

from weft.agents.events import Tokens
from weft.sentinels.providers.base import LlmRequest, LlmResponse, ProviderError

__all__ = ["AnthropicProvider"]


class AnthropicProvider:
    """``anthropic/<model>`` on the Messages API."""

    name = "anthropic"

    def __init__(self, api_key: str, base_url: str | None = None, timeout: float = 120.0) -> None:
        import anthropic  # lazily: see the module docstring

        self._sdk = anthropic
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
        )

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """One Messages call (the SDK retries transient errors ``max_retries`` times)."""
        kwargs: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens,
            # The Messages API takes a temperature; this SDK's create() no
            # longer has the parameter, so it travels in the body as is.
            "extra_body": {"temperature": request.temperature},
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            **request.options,
        }
        if request.system:
            kwargs["system"] = request.system
        if request.schema is not None:
            tool: dict[str, Any] = {
                "name": request.schema_name,
                "input_schema": _object_schema(request.schema),
            }
            if request.schema_description:
                tool["description"] = request.schema_description
            kwargs["tools"] = [tool]
            kwargs["tool_choice"] = {"type": "tool", "name": request.schema_name}
        client = self._client.with_options(max_retries=request.max_retries)
        try:
            message = await client.messages.create(**kwargs)
        except self._sdk.APIError as e:
            raise _error(self._sdk, e) from None
        usage = message.usage
        tokens = Tokens(
            input=usage.input_tokens or 0,
            output=usage.output_tokens or 0,
            cache_creation=getattr(usage, "cache_creation_input_tokens", None) or 0,
            cache_read=getattr(usage, "cache_read_input_tokens", None) or 0,
        )
        if request.schema is not None:
            for block in message.content:
                if block.type == "tool_use":
                    value = block.input
                    if _wrapped(request.schema):
                        value = value.get("value") if isinstance(value, dict) else value
                    return LlmResponse(
                        orjson.dumps(value).decode(), tokens, message.model, value=value
                    )
            raise ProviderError(
                "bad-output", "the model answered without the structured output tool"
            )
        text = "".join(block.text for block in message.content if block.type == "text")
        return LlmResponse(text, tokens, message.model)

    async def aclose(self) -> None:
        """Closes the HTTP client."""
        await self._client.close()


def _wrapped(schema: Any) -> bool:
    return not (isinstance(schema, dict) and schema.get("type") == "object")


def _object_schema(schema: Any) -> dict[str, Any]:
    """A tool's input must be an object: other schemas (an array, an enum)
    are wrapped in ``{"value": ...}`` and unwrapped from the answer."""
    if not _wrapped(schema):
        return dict(schema)
    return {"type": "object", "properties": {"value": schema}, "required": ["value"]}


def _error(sdk: Any, e: Exception) -> ProviderError:
    """The SDK's exception as a :class:`ProviderError` (after its retries)."""
    if isinstance(e, sdk.APITimeoutError):
        return ProviderError("timeout", f"Anthropic API timed out: {e}", retriable=True)
    if isinstance(e, sdk.APIConnectionError):
        return ProviderError("connection", f"cannot reach the Anthropic API: {e}", retriable=True)
    if isinstance(e, sdk.AuthenticationError | sdk.PermissionDeniedError):
        return ProviderError("auth", f"Anthropic API refused the key: {_message(e)}")
    if isinstance(e, sdk.RateLimitError):
        return ProviderError(
            "rate-limit", f"Anthropic API rate limit: {_message(e)}", retriable=True
        )
    status = getattr(e, "status_code", None)
    retriable = isinstance(status, int) and status >= 500
    return ProviderError(
        "api-error", f"Anthropic API error {status}: {_message(e)}", retriable=retriable
    )


def _message(e: Exception) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return str(e)
