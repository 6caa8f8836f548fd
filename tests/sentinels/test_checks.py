"""What ``weft validate`` checks of sentinels: event types and condition paths
against the event schemas, whether each sentinel loads, ``--sentinel-model``;
and Hankweave's own public sentinel configs, when a folder of them is given."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.sentinels.offline import without_model_keys
from tests.sentinels.test_config import T0, _stream
from tests.sentinels.test_manager import Harness

from weft.cli import main
from weft.config.schema import SentinelConfig
from weft.config.walk import Sink
from weft.errors import ConfigError
from weft.sentinels import AttachedSentinel, load_sentinel_config
from weft.sentinels.checks import EVENT_FIELDS, check_trigger
from weft.sentinels.events import SentinelError, SentinelOutput

HANKWEAVE_CONFIGS = os.environ.get("WEFT_HANKWEAVE_SENTINEL_CONFIGS")
"""A folder holding Hankweave's ``tests/config/sentinel-triggers/*.json`` (they
are not copied into this repository); the last test runs them when it is set."""


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    without_model_keys(monkeypatch)
    monkeypatch.delenv("WEFT_RUNTIME_SENTINEL_MODEL", raising=False)


def problems(trigger: dict[str, Any]) -> list[tuple[str, str, str]]:
    sink = Sink("s.json")
    check_trigger(trigger, ("trigger",), sink)
    return [
        (p.path, p.severity, p.message + (f" / {p.hint}" if p.hint else "")) for p in sink.problems
    ]


def test_every_journaled_event_but_sentinel_ones_can_be_watched() -> None:
    assert {"tool.result", "assistant.action", "file.updated", "token.usage"} <= set(EVENT_FIELDS)
    assert "state.transition" in EVENT_FIELDS
    assert not any(t.startswith("sentinel.") for t in EVENT_FIELDS)
    assert "content" in EVENT_FIELDS["file.updated"][0]  # the virtual field
    assert "isError" in EVENT_FIELDS["tool.result"][0]


def test_condition_paths_are_checked_against_the_watched_events() -> None:
    found = problems(
        {
            "type": "event",
            "on": ["tool.result"],
            "conditions": [
                {"path": "isEror", "operator": "equals", "value": True},
                {"path": "result.length", "operator": "greaterThan", "value": 3},
                {"path": "isError", "operator": "equals", "value": True},
            ],
        }
    )
    assert [(p, s) for p, s, _ in found] == [
        ("trigger.conditions[0].path", "error"),
        ("trigger.conditions[1].path", "error"),
    ]
    assert 'did you mean "isError"?' in found[0][2]
    # Free-form fields may be looked into; every field of a "*" trigger may be tested.
    assert (
        problems(
            {
                "type": "event",
                "on": ["assistant.action"],
                "conditions": [
                    {"path": "toolInput.command", "operator": "contains", "value": "rm"}
                ],
            }
        )
        == []
    )
    assert (
        problems(
            {
                "type": "event",
                "on": ["*"],
                "conditions": [{"path": "x.y", "operator": "equals", "value": 1}],
            }
        )
        == []
    )


def test_events_a_sentinel_never_sees_are_warned_about() -> None:
    found = problems(
        {
            "type": "sequence",
            "interestFilter": {"on": ["sentinel.output", "codon.teleported"]},
            "pattern": [
                {
                    "type": "tool.result",
                    "conditions": [{"path": "nope", "operator": "equals", "value": 1}],
                }
            ],
        }
    )
    assert [(p, s) for p, s, _ in found] == [
        ("trigger.interestFilter.on[0]", "warning"),
        ("trigger.interestFilter.on[1]", "warning"),
        ("trigger.pattern[0].conditions[0].path", "error"),
    ]
    assert "never fed sentinel events" in found[0][2]


def _hank(tmp_path: Path, model: str, required: bool) -> Path:
    entry: dict[str, Any] = {
        "sentinelConfig": {
            "id": "watch",
            "name": "Watch",
            "model": model,
            "trigger": {"type": "event", "on": ["tool.result"]},
            "execution": {"strategy": "immediate"},
            "userPromptText": "hi",
        }
    }
    if required:
        entry["settings"] = {"failCodonIfNotLoaded": True}
    doc = {
        "meta": {"name": "h", "version": "1.0.0"},
        "hank": [
            {
                "id": "a",
                "name": "A",
                "model": "fake/sonnet",
                "continuationMode": "fresh",
                "promptText": "x",
                "sentinels": [entry],
            }
        ],
    }
    path = tmp_path / "hank.json"
    path.write_text(json.dumps(doc))
    return path


def test_validate_says_which_sentinels_will_not_load_and_sentinel_model_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hank = _hank(tmp_path, "anthropic/claude-haiku-4-5", required=True)
    assert main(["validate", str(hank)]) == 2
    out = capsys.readouterr().out
    assert 'sentinel "watch" will not load' in out
    assert "ANTHROPIC_API_KEY" in out
    assert "--sentinel-model fake/haiku" in out
    assert main(["validate", str(hank), "--sentinel-model", "fake/haiku"]) == 0
    assert "valid: 1 codon" in capsys.readouterr().out
    # Not required: the codon runs without it, so only a warning.
    optional = _hank(tmp_path, "openai/gpt-5-mini", required=False)
    assert main(["validate", str(optional), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert [w["code"] for w in report["warnings"]] == ["sentinel_unloadable"]


def test_validate_runs_the_load_steps_of_a_sentinel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken template, an invalid schema, an unreadable prompt file, an
    output path that leaves the workspace: each is what the run would fail
    the codon for, so validate reports each, naming the file, the sentinel,
    what and how to fix it."""
    hank = _hank(tmp_path, "fake/haiku", required=True)
    doc = json.loads(hank.read_text())
    (tmp_path / "sentinels").mkdir()
    (tmp_path / "sentinels" / "schema.json").write_text('{"type": "nope"}')
    (tmp_path / "sentinels" / "broken.json").write_text(
        json.dumps(
            {
                "id": "broken",
                "name": "Broken",
                "model": "fake/haiku",
                "trigger": {"type": "event", "on": ["tool.result"]},
                "execution": {"strategy": "immediate"},
                "systemPromptText": "fine",
                "userPromptText": "a\n<%= new Date() %>",
                "structuredOutput": {"output": "object", "schemaFile": "schema.json"},
            }
        )
    )
    inline = doc["hank"][0]["sentinels"][0]
    inline["sentinelConfig"]["userPromptText"] = "<%= it.events.map(e => e.type %>"
    (tmp_path / "latin1.md").write_bytes(b"caf\xe9")
    inline["sentinelConfig"]["systemPromptFile"] = "latin1.md"
    doc["hank"][0]["sentinels"].append(
        {"sentinelConfig": "sentinels/broken.json", "settings": {"failCodonIfNotLoaded": True}}
    )
    hank.write_text(json.dumps(doc))
    assert main(["validate", str(hank), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    found = {
        (p["file"].replace(str(tmp_path), "<hank>"), p["path"], p["severity"])
        for p in report["errors"]
    }
    assert found == {
        ("<hank>/hank.json", "hank[0].sentinels[0].sentinelConfig.userPromptText", "error"),
        ("<hank>/hank.json", "hank[0].sentinels[0].sentinelConfig.systemPromptFile", "error"),
        ("<hank>/sentinels/broken.json", "userPromptText", "error"),
        ("<hank>/sentinels/broken.json", "structuredOutput", "error"),
    }, report["errors"]
    by_path = {p["path"]: p for p in report["errors"]}
    template = by_path["userPromptText"]
    assert template["message"].startswith('sentinel "broken" will not load: ')
    assert "line 2: 'new' is not supported" in template["message"]
    assert "JavaScript subset" in template["hint"]
    schema = by_path["structuredOutput"]
    assert "not valid JSON Schema" in schema["message"]
    assert "JSON Schema object" in schema["hint"]
    missing = by_path["hank[0].sentinels[0].sentinelConfig.systemPromptFile"]
    assert missing["message"] == (
        'sentinel "watch" will not load: systemPromptFile latin1.md is not UTF-8 text'
    )
    assert "UTF-8 text inside the folder" in missing["hint"]
    # The same problems on optional sentinels are warnings: the codon would run without them.
    for item in doc["hank"][0]["sentinels"]:
        del item["settings"]["failCodonIfNotLoaded"]
    hank.write_text(json.dumps(doc))
    assert main(["validate", str(hank), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len([w for w in report["warnings"] if w["code"] == "sentinel_unloadable"]) == 4


def test_an_unknown_provider_is_named_with_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hank = _hank(tmp_path, "amazon-bedrock/us.anthropic.claude-haiku-4-5", required=True)
    assert main(["validate", str(hank), "--json"]) == 2
    (problem,) = json.loads(capsys.readouterr().out)["errors"]
    assert problem["path"] == "hank[0].sentinels[0].sentinelConfig.model"
    assert 'unknown provider "amazon-bedrock"' in problem["message"]
    assert problem["hint"].startswith("the provider is unknown: name one of anthropic, fake, ")
    assert "set the key" not in problem["hint"]


def test_a_bad_sentinel_model_override_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hank = _hank(tmp_path, "fake/haiku", required=False)
    assert main(["validate", str(hank), "--sentinel-model", "haiku"]) == 2
    assert "provider/model" in capsys.readouterr().err
    assert main(["run", str(hank), "--sentinel-model", "nope/x", "--headless"]) == 2
    assert 'unknown provider "nope"' in capsys.readouterr().err


def _load(path: Path) -> tuple[SentinelConfig | None, str]:
    try:
        return load_sentinel_config(path), ""
    except ConfigError as e:
        return None, str(e)


@pytest.mark.skipif(HANKWEAVE_CONFIGS is None, reason="WEFT_HANKWEAVE_SENTINEL_CONFIGS not set")
async def test_hankweaves_public_sentinel_configs_load_and_run(tmp_path: Path) -> None:
    assert HANKWEAVE_CONFIGS is not None
    files = sorted(Path(HANKWEAVE_CONFIGS).glob("*.json"))
    assert files
    attached: list[AttachedSentinel] = []
    for f in files:
        config, refused = _load(f)
        if config is None:
            # The one thing refused on purpose: Zod source is code, never run.
            assert "schemaStr" in refused, (f, refused)
            assert "never by code" in refused, (f, refused)
            continue
        attached.append(AttachedSentinel(config, None, f.parent, "file", f.name))
    h = Harness(tmp_path)
    assert h.manager.load(attached) == []
    for seq, (kind, data) in enumerate(_stream(), 1):
        h.now = T0 + seq * 500
        h.manager.feed(kind, data, seq)
    await h.manager.drain()
    await h.manager.unload()
    assert h.of(SentinelError) == []
    assert {o.sentinel_id for o in h.of(SentinelOutput)}
