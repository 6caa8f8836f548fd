"""Sentinel config files: Hankweave-style configs load and run; bad ones say why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from tests.sentinels.test_manager import Harness

from weft.errors import ConfigError
from weft.sentinels import AttachedSentinel, load_sentinel_config
from weft.sentinels.events import SentinelError, SentinelOutput, SentinelTriggered

CONFIGS = Path(__file__).parent / "configs"
T0 = 1_800_000_000_000


def _stream() -> list[tuple[str, dict[str, Any]]]:
    """A codon's worth of events that wakes every sentinel in configs/."""
    events: list[tuple[str, dict[str, Any]]] = []
    for i in range(12):
        events.append(
            (
                "assistant.action",
                {
                    "codonId": "c",
                    "action": "tool_use",
                    "content": "",
                    "toolName": ["Bash", "Edit"][i % 2],
                    "toolUseId": f"t{i}",
                },
            )
        )
        events.append(
            (
                "tool.result",
                {
                    "codonId": "c",
                    "toolUseId": f"t{i}",
                    "toolName": "Bash",
                    "result": f"exit {i}",
                    "isError": 3 <= i <= 5,
                },
            )
        )
        events.append(
            (
                "assistant.action",
                {
                    "codonId": "c",
                    "action": "thinking",
                    "content": f"Maybe step {i} needs another look",
                },
            )
        )
        events.append(
            (
                "token.usage",
                {
                    "codonId": "c",
                    "inputTokens": 100,
                    "outputTokens": 10,
                    "cacheCreationTokens": 0,
                    "cacheReadTokens": 0,
                    "totalCost": 0.1 * i,
                },
            )
        )
        if i < 6:
            events.append(
                (
                    "file.updated",
                    {
                        "path": f"src/f{i}.py",
                        "filename": f"f{i}.py",
                        "action": "modified" if i else "created",
                        "bytes": 10,
                    },
                )
            )
        if i % 4 == 0:
            events.append(
                (
                    "assistant.action",
                    {
                        "codonId": "c",
                        "action": "message",
                        "content": "That failed, let me try again.",
                    },
                )
            )
    events.append(
        (
            "rollback.started",
            {
                "fromRun": "r1",
                "fromCodon": "b",
                "toCodon": "a",
                "toCheckpoint": "abc",
                "checkpointType": "completed",
                "codonsToProcess": ["b"],
            },
        )
    )
    events.append(
        (
            "rollback.completed",
            {
                "fromRun": "r1",
                "toRun": "r2",
                "checkpoint": "abc",
                "codonId": "a",
                "codonName": "A",
                "checkpointType": "completed",
                "autoRestart": False,
            },
        )
    )
    return events


def test_every_config_loads() -> None:
    files = sorted(CONFIGS.glob("*.sentinel.json"))
    assert len(files) == 10
    ids = {load_sentinel_config(f).id for f in files}
    assert ids == {
        "activity-tracker",
        "narrator",
        "error-detector",
        "file-activity-monitor",
        "cost-tracker",
        "thinking-analyzer",
        "tool-usage-patterns",
        "rollback-monitor",
        "stuck-detection",
        "cost-analyst",
    }


async def test_every_config_runs_offline_and_writes(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    attached = [
        AttachedSentinel(load_sentinel_config(f), None, CONFIGS, "file", f.name)
        for f in sorted(CONFIGS.glob("*.sentinel.json"))
    ]
    assert h.manager.load(attached) == []
    for seq, (kind, data) in enumerate(_stream(), 1):
        h.now = T0 + seq * 500  # an event every half second
        h.manager.feed(kind, data, seq)
    await h.manager.drain()
    await h.manager.unload()
    assert h.of(SentinelError) == []
    outputs: dict[str, list[SentinelOutput]] = {}
    for o in h.of(SentinelOutput):
        outputs.setdefault(o.sentinel_id, []).append(o)
    assert set(outputs) == {a.config.id for a in attached}
    assert len(outputs["error-detector"]) == 1
    assert outputs["error-detector"][0].event_count == 3
    assert len(outputs["file-activity-monitor"]) == 2  # 5 by count, then the rest at the drain
    assert [o.event_count for o in outputs["tool-usage-patterns"]] == [10, 2]
    assert [o.event_count for o in outputs["stuck-detection"]] == [3]
    assert len(outputs["cost-tracker"]) == 6  # totalCost 0.6 .. 1.1
    assert outputs["cost-analyst"][0].content == {
        "totalCost": 0,
        "trend": "rising",
        "recommendation": "fake",
    }
    # function (event, i) { ... } callbacks, as Hankweave's extension-activity-tracker.
    assert [o.content for o in outputs["activity-tracker"]] == ["12 thoughts"]
    assert [e.sentinel_id for e in h.of(SentinelTriggered)] == ["rollback-monitor"]
    # The files, where the reference puts them.
    managed = h.state_dir / "sentinels/outputs"
    assert (managed / "stuck-detection/stuck.md").read_text().startswith("[fake/haiku]")
    assert orjson.loads((managed / "stuck-detection/stuck-latest.json").read_bytes()).startswith(
        "[fake/haiku]"
    )
    analysis = orjson.loads((managed / "cost-analyst/cost-analysis.json").read_bytes())
    assert analysis["trend"] == "rising"
    (narration,) = (managed / "narrator").glob("narrator-greet-*.md")
    assert narration.read_text().count("\n\n[fake/haiku]") == len(outputs["narrator"]) - 1
    (files,) = (managed / "file-activity-monitor").glob("*.jsonl")
    assert len(files.read_bytes().splitlines()) == 2
    history = orjson.loads(
        (h.state_dir / "sentinels/history/thinking-analyzer-greet.json").read_bytes()
    )
    assert history[0]["content"].startswith("The agent thought ")


def test_rendered_prompts_of_the_reference_shapes(tmp_path: Path) -> None:
    from weft.sentinels.template import compile_template

    config = load_sentinel_config(CONFIGS / "tool-usage.sentinel.json")
    assert config.user_prompt_text is not None
    events = [
        {"type": "assistant.action", "data": {"toolName": n}} for n in ["Bash", "Edit", "Bash"]
    ]
    out = compile_template(config.user_prompt_text).render({"events": events})
    assert out == 'Tool counts: {"Bash":2,"Edit":1}'
    narrator = compile_template((CONFIGS / "prompts/narrator.eta").read_text())
    text = narrator.render(
        {
            "events": [
                {"type": "assistant.action", "data": {"action": "tool_use", "toolName": "Bash"}},
                {"type": "tool.result", "data": {"result": "x" * 300}},
            ],
            "codon": {"name": "Build", "startTime": "t0"},
            "world": {"currentTime": "t1"},
        }
    )
    # Eta's default autoTrim eats the newline after each tag, as Hankweave renders it.
    assert (
        "Recent events:\n- [assistant.action] Tool: Bash- [tool.result] " + "x" * 100 + "\n" in text
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"structuredOutput": {"output": "object", "schemaStr": "z.object({ a: z.string() })"}},
            "never by code",
        ),
        ({"trigerr": {}}, "trigerr"),
        ({"execution": {"strategy": "debounce", "milliseconds": 999999}}, "300000"),
        ({"id": "Has Spaces"}, "id"),
        (
            {
                "trigger": {
                    "type": "event",
                    "on": ["tool.result"],
                    "conditions": [{"path": "x", "operator": "matches", "value": "("}],
                }
            },
            "regular expression",
        ),
        ({"model": "haiku"}, "provider/model"),
    ],
)
def test_bad_configs_list_their_problems(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    raw = orjson.loads((CONFIGS / "cost-tracker.sentinel.json").read_bytes())
    raw.update(change)
    path = tmp_path / "bad.sentinel.json"
    path.write_bytes(orjson.dumps(raw))
    with pytest.raises(ConfigError) as caught:
        load_sentinel_config(path)
    assert message in str(caught.value)
    assert "bad.sentinel.json" in str(caught.value)


def test_config_round_trips_through_msgspec() -> None:
    config = load_sentinel_config(CONFIGS / "cost-analyst.sentinel.json")
    again = msgspec.json.decode(msgspec.json.encode(config), type=type(config))
    assert again == config
