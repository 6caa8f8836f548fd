"""Sentinel calls to OpenAI's Chat Completions or Responses API (official SDK).

Also serves ``google/<model>`` through Gemini's OpenAI-compatible endpoint.
The SDK is imported when the first provider is made, not when Weft starts.
Chat Completions is the default (every OpenAI-compatible server speaks it);
``llmParams.providerOptions.openai.api = "responses"`` selects the Responses
API. Structured output is ``json_schema`` response format in both; the
answer's JSON text is decoded here and validated by the caller.
"""

from __future__ import annotations

from typing import Any

import orjson

from weft.agents.events import Tokens
from weft.sentinels.providers.base import LlmRequest, LlmResponse, ProviderError

__all__ = ["OpenAIProvider"]


class OpenAIProvider:
    """``openai/<model>`` (or ``google/<model>``) on an OpenAI-style API."""

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        *,
        name: str = "openai",
        timeout: float = 120.0,
    ) -> None:
        import openai  # lazily: see the module docstring

        self.name = name
        self._sdk = openai
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
        )

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """One call (the SDK retries transient errors ``max_retries`` times)."""
        options = dict(request.options)
        api = options.pop("api", "chat")
        client = self._client.with_options(max_retries=request.max_retries)
        try:
            if api == "responses":
                text, tokens, model = await _responses(client, request, options)
            else:
                text, tokens, model = await _chat(client, request, options)
        except self._sdk.APIError as e:
            raise _error(self._sdk, self.name, e) from None
        if request.schema is None:
            return LlmResponse(text, tokens, model)
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise ProviderError(
                "bad-output", f"the model's structured output is not JSON: {text[:200]!r}"
            ) from None
        if _wrapped(request.schema):
            value = value.get("value") if isinstance(value, dict) else value
        return LlmResponse(orjson.dumps(value).decode(), tokens, model, value=value)

    async def aclose(self) -> None:
        """Closes the HTTP client."""
        await self._client.close()


def _wrapped(schema: Any) -> bool:
    return not (isinstance(schema, dict) and schema.get("type") == "object")


def _schema(request: LlmRequest) -> dict[str, Any]:
    schema = request.schema
    if _wrapped(schema):  # the response format's root must be an object
        schema = {"type": "object", "properties": {"value": schema}, "required": ["value"]}
    out: dict[str, Any] = {"name": request.schema_name, "schema": dict(schema or {})}
    if request.schema_description:
        out["description"] = request.schema_description
    return out


async def _chat(
    client: Any, request: LlmRequest, options: dict[str, Any]
) -> tuple[str, Tokens, str]:
    messages: list[dict[str, str]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend({"role": m.role, "content": m.content} for m in request.messages)
    kwargs: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "temperature": request.temperature,
        "max_tokens": request.max_output_tokens,
        **options,
    }
    if request.schema is not None:
        kwargs["response_format"] = {"type": "json_schema", "json_schema": _schema(request)}
    completion = await client.chat.completions.create(**kwargs)
    if not completion.choices:
        raise ProviderError("bad-output", "the model returned no choices")
    text = completion.choices[0].message.content or ""
    usage = completion.usage
    cached = 0
    if usage is not None and usage.prompt_tokens_details is not None:
        cached = usage.prompt_tokens_details.cached_tokens or 0
    tokens = Tokens(
        input=(usage.prompt_tokens - cached) if usage else 0,
        output=usage.completion_tokens if usage else 0,
        cache_read=cached,
    )
    return text, tokens, completion.model or request.model


async def _responses(
    client: Any, request: LlmRequest, options: dict[str, Any]
) -> tuple[str, Tokens, str]:
    kwargs: dict[str, Any] = {
        "model": request.model,
        "input": [{"role": m.role, "content": m.content} for m in request.messages],
        "temperature": request.temperature,
        "max_output_tokens": request.max_output_tokens,
        **options,
    }
    if request.system:
        kwargs["instructions"] = request.system
    if request.schema is not None:
        kwargs["text"] = {"format": {"type": "json_schema", **_schema(request)}}
    response = await client.responses.create(**kwargs)
    usage = response.usage
    cached = 0
    if usage is not None and usage.input_tokens_details is not None:
        cached = usage.input_tokens_details.cached_tokens or 0
    tokens = Tokens(
        input=(usage.input_tokens - cached) if usage else 0,
        output=usage.output_tokens if usage else 0,
        cache_read=cached,
    )
    return response.output_text, tokens, response.model or request.model


def _error(sdk: Any, name: str, e: Exception) -> ProviderError:
    what = "Gemini API" if name == "google" else "OpenAI API"
    if isinstance(e, sdk.APITimeoutError):
        return ProviderError("timeout", f"{what} timed out: {e}", retriable=True)
    if isinstance(e, sdk.APIConnectionError):
        return ProviderError("connection", f"cannot reach the {what}: {e}", retriable=True)
    if isinstance(e, sdk.AuthenticationError | sdk.PermissionDeniedError):
        return ProviderError("auth", f"{what} refused the key: {_message(e)}")
    if isinstance(e, sdk.RateLimitError):
        return ProviderError("rate-limit", f"{what} rate limit: {_message(e)}", retriable=True)
    status = getattr(e, "status_code", None)
    retriable = isinstance(status, int) and status >= 500
    return ProviderError("api-error", f"{what} error {status}: {_message(e)}", retriable=retriable)


def _message(e: Exception) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return str(getattr(e, "message", e))
