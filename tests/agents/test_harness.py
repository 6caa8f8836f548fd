"""Routing a model id to a harness, and the log path convention."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from weft.agents.claude_parser import ClaudeParser
from weft.agents.codex import CodexParser
from weft.agents.events import AssistantText
from weft.agents.gemini import GeminiParser
from weft.agents.harness import Route, StreamParser, decode_lossy, route, session_log_path


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("sonnet", Route("claude", "sonnet")),
        ("claude-opus-4-5-20251101", Route("claude", "claude-opus-4-5-20251101")),
        ("anthropic/claude-haiku-4-5", Route("claude", "claude-haiku-4-5")),
        ("gpt-5", Route("codex", "gpt-5")),
        ("o3-mini", Route("codex", "o3-mini")),
        ("openai/gpt-5-codex", Route("codex", "gpt-5-codex")),
        ("gemini-2.5-pro", Route("gemini", "gemini-2.5-pro")),
        ("google/gemini-2.5-flash", Route("gemini", "gemini-2.5-flash")),
        ("fake/sonnet", Route("claude", "sonnet", fake=True)),
        ("fake/openai/gpt-5", Route("codex", "gpt-5", fake=True)),
    ],
)
def test_models_route_to_their_harness(model: str, expected: Route) -> None:
    assert route(model) == expected


@pytest.mark.parametrize("model", ["llama-3", "mistral/large", "anthropic/", "fake/llama"])
def test_a_model_no_harness_runs_is_refused_with_the_accepted_forms(model: str) -> None:
    with pytest.raises(ValueError, match="no harness runs model"):
        route(model)


def test_session_log_path_follows_the_run_folder_convention(tmp_path: Path) -> None:
    path = session_log_path(tmp_path / ".weft", "r1", "review#2", "claude")
    assert path == tmp_path / ".weft" / "runs" / "r1" / "review-2-claude.log"


BAD_UTF8 = b"ok \xca\xff"


@pytest.mark.parametrize(
    ("make", "line"),
    [
        pytest.param(
            ClaudeParser,
            b'{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"'
            + BAD_UTF8
            + b'"}]}}',
            id="claude",
        ),
        pytest.param(
            lambda: CodexParser(model="gpt-5"),
            b'{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"'
            + BAD_UTF8
            + b'"}}',
            id="codex",
        ),
        pytest.param(
            lambda: GeminiParser(model="gemini-2.5-pro"),
            b'{"type":"message","role":"assistant","content":"' + BAD_UTF8 + b'","delta":true}',
            id="gemini",
        ),
    ],
)
def test_a_line_that_is_not_utf8_is_read_with_replacement_characters(
    make: Callable[[], StreamParser], line: bytes
) -> None:
    """msgspec raises UnicodeDecodeError (not DecodeError) for such a line; an
    agent's stray bytes must cost neither the event nor the run."""
    (event,) = make().feed(line)
    assert isinstance(event, AssistantText)
    assert event.text == "ok \ufffd\ufffd"


def test_decode_lossy_passes_other_errors_through() -> None:
    with pytest.raises(ValueError, match="bad"):
        decode_lossy(lambda _: (_ for _ in ()).throw(ValueError("bad")), b"x")
