"""Ids, settings and the clock shared by the flavours."""

from __future__ import annotations

import random
import re

import pytest

from weft.agents.fake.common import Clock, FakeConfigError, Ids, Settings, env_subset, split_words

from .wire import MSG_ID, TOOL_ID, UUID4


def test_id_formats() -> None:
    ids = Ids(random.Random(1))
    for _ in range(200):
        assert UUID4.match(ids.uuid4())
        assert MSG_ID.match(ids.message())
        assert TOOL_ID.match(ids.tool())
    v7 = ids.uuid7(1_768_903_200_000)
    assert re.match(
        r"^019bd[0-9a-f]{3}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", v7
    )


def test_ids_repeat_under_the_same_seed() -> None:
    a, b = Ids(random.Random("s")), Ids(random.Random("s"))
    assert [a.uuid4(), a.message()] == [b.uuid4(), b.message()]


def test_virtual_clock_moves_only_when_told() -> None:
    clock = Clock(virtual=True)
    assert clock.iso() == "2026-01-20T10:00:00.000Z"
    clock.advance(1500)
    clock.simulate(250)
    assert clock.elapsed_ms() == 1750
    assert clock.iso() == "2026-01-20T10:00:01.750Z"


def test_real_clock_counts_simulated_latency_in_durations() -> None:
    clock = Clock(virtual=False)
    clock.simulate(5000)
    assert clock.elapsed_ms() >= 5000


def test_settings_defaults_and_checks() -> None:
    settings = Settings({}, "claude")
    assert settings.line_delay_ms == 5
    assert settings.version == "2.1.330"
    assert settings.resume_mode == "same"
    assert settings.sigterm == "exit"
    assert settings.huge_bytes == 16 * 1024 * 1024
    assert Settings({}, "codex").version != settings.version
    assert Settings({"FAKE_AGENT_VERSION": "2.0.77"}, "claude").version_at_least(2, 0, 77)
    assert not Settings({"FAKE_AGENT_VERSION": "2.0.77"}, "claude").version_at_least(2, 1)
    with pytest.raises(FakeConfigError, match="FAKE_AGENT_HUGE_BYTES"):
        Settings({"FAKE_AGENT_HUGE_BYTES": "-3"}, "claude")


def test_env_subset_redacts_secrets() -> None:
    env = {
        "ANTHROPIC_API_KEY": "abc",
        "CLAUDE_CONFIG_DIR": "/x",
        "PATH": "/bin",
        "FAKE_AGENT_SEED": "1",
    }
    assert env_subset(env) == {
        "ANTHROPIC_API_KEY": "<redacted: 3 chars>",
        "CLAUDE_CONFIG_DIR": "/x",
        "FAKE_AGENT_SEED": "1",
    }


def test_split_words_keeps_the_text() -> None:
    rng = random.Random(3)
    for pieces in range(1, 7):
        parts = split_words("one two three four five six seven", rng, pieces)
        assert "".join(parts) == "one two three four five six seven"
        assert len(parts) <= pieces
