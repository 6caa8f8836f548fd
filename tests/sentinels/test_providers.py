"""Providers: the real SDKs on the wire against local model APIs, and the fake."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.sentinels.httpapi import ModelApi

from weft.agents.events import Tokens
from weft.sentinels.providers import (
    FakeProvider,
    LlmRequest,
    Message,
    ProviderError,
    ProviderRegistry,
    price,
    split_model,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "severity": {"type": "string", "enum": ["low", "high"]},
        "n": {"type": "integer"},
    },
    "required": ["severity", "n"],
}
FAST_RETRY = {"retry-after-ms": "5"}


def _request(**kw: Any) -> LlmRequest:
    base: dict[str, Any] = {
        "model": "claude-haiku-4-5",
        "messages": (Message("user", "What happened?"),),
        "system": "You watch an agent.",
        "temperature": 0.3,
        "max_output_tokens": 300,
        "max_retries": 2,
    }
    base.update(kw)
    return LlmRequest(**base)


def _message(
    content: list[dict[str, Any]], model: str = "claude-haiku-4-5-20251001"
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 120,
            "output_tokens": 30,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 10,
        },
    }


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-5-mini-2025-08-07",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 40},
        },
    }


def _key(headers: dict[str, str]) -> str:
    """The API key as sent (this SDK sends a bearer token; older ones x-api-key)."""
    return headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")


async def _registry(api: ModelApi, **env: str) -> ProviderRegistry:
    await api.start()
    return ProviderRegistry(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "ANTHROPIC_BASE_URL": api.url,
            "OPENAI_API_KEY": "sk-openai-test",
            "OPENAI_BASE_URL": api.url + "/v1",
            **env,
        }
    )


async def test_anthropic_text_call_sends_the_request_and_reads_usage() -> None:
    api = ModelApi()
    registry = await _registry(api)
    try:
        api.answer(200, _message([{"type": "text", "text": "All quiet."}]))
        provider, model = registry.get("anthropic/claude-haiku-4-5")
        response = await provider.complete(_request(model=model))
        assert response.text == "All quiet."
        assert response.tokens == Tokens(input=120, output=30, cache_read=10)
        assert response.model == "claude-haiku-4-5-20251001"
        (seen,) = api.seen
        assert (seen.method, seen.path) == ("POST", "/v1/messages")
        assert _key(seen.headers) == "sk-ant-test"
        assert seen.body["model"] == "claude-haiku-4-5"
        assert seen.body["max_tokens"] == 300
        assert seen.body["temperature"] == 0.3
        assert seen.body["system"] == "You watch an agent."
        assert seen.body["messages"] == [{"role": "user", "content": "What happened?"}]
        cost = price("anthropic/claude-haiku-4-5", response.model, response.tokens)
        assert cost == pytest.approx((120 * 1 + 10 * 0.1 + 30 * 5) / 1e6)
    finally:
        await registry.aclose()
        await api.stop()


async def test_anthropic_structured_output_is_a_forced_tool_call() -> None:
    api = ModelApi()
    registry = await _registry(api)
    try:
        api.answer(
            200,
            _message(
                [
                    {
                        "type": "tool_use",
                        "id": "tu_1",
                        "name": "verdict",
                        "input": {"severity": "high", "n": 2},
                    }
                ]
            ),
        )
        provider, model = registry.get("anthropic/claude-haiku-4-5")
        response = await provider.complete(
            _request(model=model, schema=SCHEMA, schema_name="verdict")
        )
        assert response.value == {"severity": "high", "n": 2}
        body = api.seen[0].body
        assert body["tools"] == [{"name": "verdict", "input_schema": SCHEMA}]
        assert body["tool_choice"] == {"type": "tool", "name": "verdict"}
    finally:
        await registry.aclose()
        await api.stop()


async def test_anthropic_retries_overload_then_succeeds() -> None:
    api = ModelApi()
    registry = await _registry(api)
    try:
        overloaded = {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }
        api.answer(529, overloaded, **FAST_RETRY)
        api.answer(529, overloaded, **FAST_RETRY)
        api.answer(200, _message([{"type": "text", "text": "ok"}]))
        provider, model = registry.get("anthropic/claude-haiku-4-5")
        response = await provider.complete(_request(model=model, max_retries=2))
        assert response.text == "ok"
        assert len(api.seen) == 3
    finally:
        await registry.aclose()
        await api.stop()


@pytest.mark.parametrize(
    ("status", "kind", "retriable", "text"),
    [
        (429, "rate-limit", True, "Slow down"),
        (401, "auth", False, "invalid x-api-key"),
        (400, "api-error", False, "max_tokens: too large"),
        (500, "api-error", True, "Internal"),
    ],
)
async def test_anthropic_errors_after_retries_are_classified(
    status: int, kind: str, retriable: bool, text: str
) -> None:
    api = ModelApi()
    registry = await _registry(api)
    try:
        body = {"type": "error", "error": {"type": "x", "message": text}}
        for _ in range(2):
            api.answer(status, body, **FAST_RETRY)
        provider, model = registry.get("anthropic/claude-haiku-4-5")
        with pytest.raises(ProviderError) as caught:
            await provider.complete(_request(model=model, max_retries=1))
        assert (caught.value.kind, caught.value.retriable) == (kind, retriable)
        assert text in str(caught.value)
        retried = status in (429, 500)
        assert len(api.seen) == (2 if retried else 1)
    finally:
        await registry.aclose()
        await api.stop()


async def test_openai_chat_text_and_structured() -> None:
    api = ModelApi()
    registry = await _registry(api)
    try:
        api.answer(200, _completion("Two tools failed."))
        api.answer(200, _completion('{"severity": "low", "n": 0}'))
        provider, model = registry.get("openai/gpt-5-mini")
        text = await provider.complete(_request(model=model))
        assert text.text == "Two tools failed."
        assert text.tokens == Tokens(input=60, output=20, cache_read=40)
        structured = await provider.complete(
            _request(model=model, schema=SCHEMA, schema_name="verdict")
        )
        assert structured.value == {"severity": "low", "n": 0}
        first, second = api.seen
        assert first.path == "/v1/chat/completions"
        assert first.headers["authorization"] == "Bearer sk-openai-test"
        assert first.body["messages"][0] == {"role": "system", "content": "You watch an agent."}
        assert first.body["max_tokens"] == 300
        assert second.body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": SCHEMA},
        }
    finally:
        await registry.aclose()
        await api.stop()


async def test_openai_responses_api_with_an_array_schema() -> None:
    api = ModelApi()
    registry = await _registry(api)
    try:
        api.answer(
            200,
            {
                "id": "resp_1",
                "object": "response",
                "created_at": 1,
                "model": "gpt-5-mini",
                "status": "completed",
                "output": [
                    {
                        "type": "message",
                        "id": "m1",
                        "role": "assistant",
                        "status": "completed",
                        "content": [
                            {
                                "type": "output_text",
                                "text": '{"value": ["a", "b"]}',
                                "annotations": [],
                            }
                        ],
                    }
                ],
                "parallel_tool_calls": False,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": 50,
                    "output_tokens": 5,
                    "total_tokens": 55,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            },
        )
        provider, model = registry.get("openai/gpt-5-mini")
        schema = {"type": "array", "items": {"type": "string"}}
        response = await provider.complete(
            _request(model=model, schema=schema, options={"api": "responses"})
        )
        assert response.value == ["a", "b"]
        seen = api.seen[0]
        assert seen.path == "/v1/responses"
        assert seen.body["instructions"] == "You watch an agent."
        assert seen.body["max_output_tokens"] == 300
        fmt = seen.body["text"]["format"]
        assert fmt["type"] == "json_schema"
        assert fmt["schema"]["properties"]["value"] == schema
    finally:
        await registry.aclose()
        await api.stop()


async def test_openai_malformed_structured_output_and_server_errors() -> None:
    api = ModelApi()
    registry = await _registry(api)
    try:
        api.answer(200, _completion("not json"))
        api.answer(503, {"error": {"message": "busy"}}, **FAST_RETRY)
        api.answer(200, _completion("fine"))
        provider, model = registry.get("openai/gpt-5-mini")
        with pytest.raises(ProviderError, match="not JSON") as caught:
            await provider.complete(_request(model=model, schema=SCHEMA))
        assert caught.value.kind == "bad-output"
        assert (await provider.complete(_request(model=model, max_retries=1))).text == "fine"
        assert len(api.seen) == 3
    finally:
        await registry.aclose()
        await api.stop()


async def test_unreachable_api_is_a_retriable_connection_error() -> None:
    api = ModelApi()
    await api.start()
    await api.stop()  # the port is closed now
    registry = ProviderRegistry({"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": api.url + "/v1"})
    provider, model = registry.get("openai/gpt-5-mini")
    with pytest.raises(ProviderError) as caught:
        await provider.complete(_request(model=model, max_retries=0))
    assert (caught.value.kind, caught.value.retriable) == ("connection", True)
    await registry.aclose()


def test_registry_refuses_unknown_providers_and_missing_keys() -> None:
    registry = ProviderRegistry({})
    for model_id, message in [
        ("claude-haiku", "not a provider/model id"),
        ("mistral/large", 'unknown provider "mistral"'),
        ("anthropic/claude-haiku-4-5", "set ANTHROPIC_API_KEY"),
        ("google/gemini-2.5-flash", "set GEMINI_API_KEY or GOOGLE_API_KEY"),
    ]:
        with pytest.raises(ProviderError, match=message) as caught:
            registry.get(model_id)
        assert caught.value.kind == "configuration"
    assert split_model("fake/haiku") == ("fake", "haiku")


async def test_sentinel_prefixed_key_wins() -> None:
    api = ModelApi()
    registry = await _registry(api, WEFT_SENTINEL_ANTHROPIC_API_KEY="sk-sentinel")
    try:
        api.answer(200, _message([{"type": "text", "text": "x"}]))
        provider, model = registry.get("anthropic/claude-haiku-4-5")
        await provider.complete(_request(model=model))
        assert _key(api.seen[0].headers) == "sk-sentinel"
    finally:
        await registry.aclose()
        await api.stop()


async def test_fake_provider_is_deterministic_and_scripted() -> None:
    fake = FakeProvider()
    plain = _request(model="haiku")
    first, again = await fake.complete(plain), await fake.complete(plain)
    assert first == again
    assert first.text.startswith("[fake/haiku] read a prompt of")
    assert price("fake/haiku", first.model, first.tokens) == pytest.approx(
        (first.tokens.input * 1 + first.tokens.output * 5) / 1e6
    )
    said = await fake.complete(
        _request(messages=(Message("user", "@@sentinel:say Hello there.@@"),))
    )
    assert said.text == "Hello there."
    structured = await fake.complete(_request(schema=SCHEMA))
    assert structured.value == {"severity": "low", "n": 0}

    flaky = _request(messages=(Message("user", "@@sentinel:fail kind=rate-limit times=2@@"),))
    for _ in range(2):
        with pytest.raises(ProviderError) as caught:
            await fake.complete(flaky)
        assert (caught.value.kind, caught.value.retriable) == ("rate-limit", True)
    assert (await fake.complete(flaky)).text

    broken = _request(messages=(Message("user", "@@sentinel:malformed@@"),), schema=SCHEMA)
    assert (await fake.complete(broken)).value == {"unexpected": [1, 2, 3]}
    with pytest.raises(ProviderError, match="not JSON"):
        await fake.complete(
            _request(messages=(Message("user", "@@sentinel:malformed kind=json@@"),), schema=SCHEMA)
        )
    start = time.monotonic()
    await fake.complete(_request(messages=(Message("user", "@@sentinel:sleep ms=200@@"),)))
    assert time.monotonic() - start >= 0.19  # uvloop timers have millisecond resolution
