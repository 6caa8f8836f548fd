"""Sentinel model providers: ``provider/model`` ids to API calls.

* :mod:`.base`: the request, response and error every provider shares;
* :mod:`.anthropic_api`: Anthropic's Messages API (official ``anthropic`` SDK);
* :mod:`.openai_api`: OpenAI's Chat Completions and Responses APIs (official
  ``openai`` SDK), also Google's Gemini through its OpenAI-compatible endpoint;
* :mod:`.fake`: ``fake/<model>``, deterministic and scripted, for offline runs.

:class:`ProviderRegistry` makes one provider per provider name and run, with
keys and base URLs from the environment, and prices usage from Weft's table
(:mod:`weft.agents.pricing`). The SDKs are imported by the first provider
that needs them, never at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from weft.agents.events import Tokens
from weft.agents.pricing import cost_usd
from weft.sentinels.providers.base import (
    ErrorKind,
    LlmRequest,
    LlmResponse,
    Message,
    Provider,
    ProviderError,
)
from weft.sentinels.providers.fake import PRICED_AS, FakeProvider

__all__ = [
    "PROVIDERS",
    "ErrorKind",
    "FakeProvider",
    "LlmRequest",
    "LlmResponse",
    "Message",
    "Provider",
    "ProviderError",
    "ProviderRegistry",
    "price",
    "split_model",
]


@dataclass(frozen=True, slots=True)
class _Spec:
    keys: tuple[str, ...]
    """Environment variables holding the API key, first found wins."""
    base_url: tuple[str, ...]
    default_base_url: str | None = None


PROVIDERS: Final[dict[str, _Spec]] = {
    "anthropic": _Spec(("ANTHROPIC_API_KEY",), ("ANTHROPIC_BASE_URL",)),
    "openai": _Spec(("OPENAI_API_KEY",), ("OPENAI_BASE_URL",)),
    "google": _Spec(
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        ("GEMINI_BASE_URL", "GOOGLE_BASE_URL"),
        "https://generativelanguage.googleapis.com/v1beta/openai/",
    ),
    "fake": _Spec((), ()),
}
"""The providers a sentinel model id may name, with their environment."""
SENTINEL_PREFIXES: Final = ("WEFT_SENTINEL_", "HANKWEAVE_SENTINEL_")
"""A variable under one of these prefixes wins for sentinels only
(``WEFT_SENTINEL_ANTHROPIC_API_KEY``), so sentinels can use another key than
the agents."""


def split_model(model_id: str) -> tuple[str, str]:
    """``"anthropic/claude-haiku-4-5"`` -> ``("anthropic", "claude-haiku-4-5")``.

    Raises :class:`ProviderError` (``configuration``) for an id without a
    provider or with one Weft does not know."""
    provider, sep, model = model_id.partition("/")
    if not sep or not provider or not model:
        raise ProviderError(
            "configuration",
            f'sentinel model "{model_id}" is not a provider/model id '
            '(write "anthropic/claude-...", "openai/gpt-...", "google/gemini-..." or "fake/...")',
        )
    if provider not in PROVIDERS:
        known = ", ".join(sorted(PROVIDERS))
        raise ProviderError(
            "configuration",
            f'sentinel model "{model_id}" names an unknown provider "{provider}" (known: {known})',
        )
    return provider, model


class ProviderRegistry:
    """One provider per name for a run; keys and URLs from ``env``."""

    def __init__(self, env: Mapping[str, str], *, call_timeout: float = 60.0) -> None:
        self._env = env
        self._made: dict[str, Provider] = {}
        self.call_timeout = call_timeout
        """Seconds one model call may take in all (the SDKs' own timeouts are
        per read, so an endpoint trickling bytes would never trip them)."""

    def _lookup(self, names: tuple[str, ...]) -> str | None:
        for name in names:
            for prefix in (*SENTINEL_PREFIXES, ""):
                value = self._env.get(prefix + name)
                if value:
                    return value
        return None

    def missing_key(self, model_id: str) -> str | None:
        """Why ``model_id``'s provider has no API key here (``None``: it has
        one, or needs none), without making a client. Raises
        :class:`ProviderError` for an id that names no known provider."""
        name, _ = split_model(model_id)
        spec = PROVIDERS[name]
        if name == "fake" or name in self._made or self._lookup(spec.keys) is not None:
            return None
        return f'sentinel model "{model_id}" needs an API key: set {" or ".join(spec.keys)}'

    def get(self, model_id: str) -> tuple[Provider, str]:
        """The provider of ``model_id`` and the model's own id.

        Raises :class:`ProviderError` (``configuration``) for an unknown
        provider or a missing API key: the sentinel cannot load."""
        name, model = split_model(model_id)
        made = self._made.get(name)
        if made is not None:
            return made, model
        spec = PROVIDERS[name]
        provider: Provider
        if name == "fake":
            provider = FakeProvider()
        else:
            key = self._lookup(spec.keys)
            if key is None:
                raise ProviderError("configuration", self.missing_key(model_id) or model_id)
            base_url = self._lookup(spec.base_url) or spec.default_base_url
            if name == "anthropic":
                from weft.sentinels.providers.anthropic_api import AnthropicProvider

                provider = AnthropicProvider(key, base_url, timeout=self.call_timeout)
            else:
                from weft.sentinels.providers.openai_api import OpenAIProvider

                provider = OpenAIProvider(key, base_url, name=name, timeout=self.call_timeout)
        self._made[name] = provider
        return provider, model

    async def aclose(self) -> None:
        """Closes every provider made."""
        for provider in self._made.values():
            await provider.aclose()
        self._made.clear()


def price(model_id: str, reported_model: str, tokens: Tokens) -> float | None:
    """The cost of one call in US dollars from Weft's table (``None``: unpriced).

    The fake provider's ``fake/haiku`` costs what ``claude-haiku-4-5`` does."""
    provider, model = model_id.partition("/")[::2]
    if provider == "fake":
        model = PRICED_AS.get(model, model)
        return cost_usd(model, tokens, per_request=True)
    return cost_usd(reported_model or model, tokens, per_request=True) or cost_usd(
        model, tokens, per_request=True
    )
