"""What every sentinel model provider takes and returns.

A provider turns one :class:`LlmRequest` into one :class:`LlmResponse`, or
raises :class:`ProviderError` whose ``kind`` says what went wrong and whether
trying again may help. Retries of transient failures (connection, 429, 5xx)
happen inside the SDKs (``llmParams.maxRetries``), so an error that reaches
the manager is final for that trigger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from weft.agents.events import Tokens
from weft.errors import WeftError

__all__ = ["ErrorKind", "LlmRequest", "LlmResponse", "Message", "Provider", "ProviderError"]

ErrorKind = Literal[
    "auth", "rate-limit", "api-error", "connection", "timeout", "bad-output", "configuration"
]


@dataclass(frozen=True, slots=True)
class Message:
    """One turn of the conversation."""

    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class LlmRequest:
    """One model call."""

    model: str
    """The provider's own model id (``claude-haiku-4-5``, without ``anthropic/``)."""
    messages: tuple[Message, ...]
    system: str | None = None
    temperature: float = 0.0
    max_output_tokens: int = 8192
    max_retries: int = 2
    schema: Mapping[str, Any] | None = None
    """A JSON Schema the answer must meet (structured output), or ``None`` for text."""
    schema_name: str = "output"
    schema_description: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    """``llmParams.providerOptions[<provider>]``."""


@dataclass(frozen=True, slots=True)
class LlmResponse:
    """One model answer."""

    text: str
    """The text, or for structured output the JSON text of the value."""
    tokens: Tokens
    model: str
    """The model that answered, as the API reported it."""
    value: Any = None
    """Structured output, already decoded (``None`` for text)."""


class ProviderError(WeftError):
    """A model call failed. ``retriable``: the same call may succeed later."""

    def __init__(self, kind: ErrorKind, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.retriable = retriable


class Provider(Protocol):
    """A model API behind the sentinels of one run."""

    name: str
    """``anthropic``, ``openai``, ``google`` or ``fake``."""

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Calls the model once (with the SDK's retries)."""
        ...

    async def aclose(self) -> None:
        """Closes connections."""
        ...
