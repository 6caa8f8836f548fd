"""Error texts of the free-text CLIs (Codex, Gemini): their class, retriability and wait."""

from __future__ import annotations

import pytest

from weft.agents.events import ErrorClass
from weft.agents.vendor_errors import classify_error_text, error_lines, retry_after_ms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "exceeded retry limit, last status: 429 Too Many Requests",
            (ErrorClass.RATE_LIMIT, True),
        ),
        ("You exceeded your current quota: insufficient_quota", (ErrorClass.BILLING, False)),
        ("Your credit balance is too low", (ErrorClass.BILLING, False)),
        ("unexpected status 503 Service Unavailable", (ErrorClass.OVERLOADED, True)),
        (
            "Selected model is at capacity. Please try a different model.",
            (ErrorClass.OVERLOADED, True),
        ),
        ("[API Error: 429 RESOURCE_EXHAUSTED (check quota)]", (ErrorClass.RATE_LIMIT, True)),
        (
            "Codex ran out of room in the model's context window",
            (ErrorClass.CONTEXT_EXCEEDED, False),
        ),
        ("Invalid API key", (ErrorClass.AUTH, False)),
        ("API key not valid. Please pass a valid API key.", (ErrorClass.AUTH, False)),
        ("Error: no rollout found for thread id 0199", (ErrorClass.CANNOT_RESUME, False)),
        ("Reached max session turns for this session", (ErrorClass.MAX_TURNS, False)),
        (
            "stream disconnected before completion: error sending request",
            (ErrorClass.API_ERROR, True),
        ),
        (
            "stream disconnected before completion: rate limit reached",
            (ErrorClass.RATE_LIMIT, True),
        ),
        ("something odd happened", None),
        ("wrote 4290 lines", None),
    ],
)
def test_error_text_classification(text: str, expected: tuple[ErrorClass, bool] | None) -> None:
    assert classify_error_text(text) == expected


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("Please try again in 1.5s.", 1500),
        ("Please try again in 250ms.", 250),
        ('"retryDelay": "27s"', 27000),
        ("Your quota will reset after 2h36m24s.", (2 * 3600 + 36 * 60 + 24) * 1000),
        ("try again in 3 minutes", 180_000),
        ("retry-after-ms: 900", 900),
        ("rate limited", None),
    ],
)
def test_retry_after_is_read_from_the_message(text: str, ms: int | None) -> None:
    assert retry_after_ms(text) == ms


def test_only_error_like_lines_of_a_stderr_tail_are_classified() -> None:
    tail = (
        "Traceback (most recent call last):\n  at timeout.rs line 503\nError: 429 Too Many Requests"
    )
    assert error_lines(tail) == "Error: 429 Too Many Requests"
    assert classify_error_text(error_lines(tail)) == (ErrorClass.RATE_LIMIT, True)
