"""The sentinel manager driven by recorded journals and scripted events."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from weft.clock import iso_from_ms
from weft.config import load_hank
from weft.config.schema import SentinelConfig, SentinelSettings
from weft.events.transitions import SentinelState
from weft.sentinels import (
    AttachedSentinel,
    CodonInfo,
    ProviderRegistry,
    SentinelManager,
    attach,
)
from weft.sentinels.events import (
    SentinelData,
    SentinelError,
    SentinelLoaded,
    SentinelOutput,
    SentinelTriggered,
    SentinelUnloaded,
)
from weft.store.journal import Journal

ROOT = Path(__file__).resolve().parents[2]
Recorded = list[tuple[str, dict[str, Any], int, int]]


def _ms(timestamp: str) -> int:
    return int(dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """The committed events of a real run of examples/hello on the fake agent,
    as (type, data, seq, time in ms); transitions as ``state.transition``."""
    execution = tmp_path_factory.mktemp("hello") / "exec"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "weft",
            "run",
            str(ROOT / "examples/hello"),
            "--execution",
            str(execution),
            "--headless",
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    journal = Journal.open(execution / ".weft" / "weft.db", readonly=True)
    try:
        out: Recorded = []
        for page in journal.pages():
            for row in page:
                payload = orjson.loads(row.payload)
                if row.kind == "transition":
                    data = {"transitionType": row.type, "transition": payload}
                    out.append(("state.transition", data, row.seq, _ms(row.timestamp)))
                else:
                    out.append((row.type, payload["data"], row.seq, _ms(row.timestamp)))
        return out
    finally:
        journal.close()


class Harness:
    """A manager with a hand-driven clock, collecting what it emits."""

    def __init__(
        self,
        tmp: Path,
        *,
        env: dict[str, str] | None = None,
        override: str | None = "fake/haiku",
        clock: Any = None,
        after_seq: int = 0,
        persist_history: bool = True,
    ) -> None:
        self.now = 1_800_000_000_000
        self.events: list[SentinelData] = []
        self.states: list[tuple[list[SentinelState], float]] = []
        self.workspace = tmp / "agentRoot"
        self.state_dir = tmp / ".weft"
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.registry = ProviderRegistry(env or {})
        self.manager = SentinelManager(
            CodonInfo("greet", "Write a greeting", "says hello", "2026-11-25T08:00:00.000Z"),
            registry=self.registry,
            emit=self.events.append,
            workspace=self.workspace,
            state_dir=self.state_dir,
            persist_history=persist_history,
            clock=clock or (lambda: self.now),
            on_states=lambda states, cost: self.states.append((states, cost)),
            model_override=override,
            after_seq=after_seq,
        )

    def of(self, kind: type[SentinelData]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    async def replay(self, events: Recorded) -> None:
        for kind, data, seq, at in events:
            self.now = at
            self.manager.feed(kind, data, seq)
            await asyncio.sleep(0)  # let workers run between events, as live


def _config(**over: Any) -> SentinelConfig:
    raw: dict[str, Any] = {
        "id": "watcher",
        "name": "Watcher",
        "model": "fake/haiku",
        "trigger": {"type": "event", "on": ["tool.result"]},
        "execution": {"strategy": "immediate"},
        "userPromptText": (
            "<%= it.events.length %> events: <%= it.events.map(e => e.type).join(',') %>"
        ),
    }
    raw.update(over)
    return msgspec.convert(raw, SentinelConfig)


def _attached(tmp: Path, settings: dict[str, Any] | None = None, **over: Any) -> AttachedSentinel:
    return AttachedSentinel(
        _config(**over),
        msgspec.convert(settings, SentinelSettings) if settings else None,
        tmp,
    )


def _tools(n: int, *, error: bool = False, start: int = 1) -> Recorded:
    return [
        (
            "tool.result",
            {"codonId": "greet", "toolUseId": f"t{i}", "toolName": "Bash", "isError": error},
            i,
            1_800_000_000_000 + i,
        )
        for i in range(start, start + n)
    ]


async def test_example_sentinels_run_over_a_recorded_fake_agent_run(
    recorded: Recorded, tmp_path: Path
) -> None:
    loaded = load_hank(ROOT / "examples/sentinels", check_environment=False)
    ((codon, _),) = loaded.codons()
    attached, failures = attach(codon, loaded.directory, loaded.sentinel_configs)
    assert failures == []
    assert [a.config.id for a in attached] == [
        "narrator",
        "cost-watch",
        "error-streak",
        "file-watch",
    ]
    h = Harness(tmp_path)
    assert h.manager.load(attached) == []
    greet = [e for e in recorded if e[1].get("codonId") in (None, "greet")]
    await h.replay(greet)
    await h.manager.drain()
    await h.manager.unload("codon-complete")

    assert [e.sentinel_id for e in h.of(SentinelLoaded)] == [
        "narrator",
        "cost-watch",
        "error-streak",
        "file-watch",
    ]
    every = h.of(SentinelOutput)
    # No tool failed and no file event was recorded: the narrator and the cost watch speak.
    assert {o.sentinel_id for o in every} == {"narrator", "cost-watch"}
    outputs = [o for o in every if o.sentinel_id == "narrator"]
    assert [o.trigger_number for o in outputs] == list(range(1, len(outputs) + 1))
    assert all(o.output_type == "text" and o.cost > 0 and o.model == "fake/haiku" for o in outputs)
    assert sum(o.event_count for o in outputs) == sum(
        1 for e in greet if e[0] in ("assistant.action", "tool.result")
    )
    unloaded = h.of(SentinelUnloaded)
    assert [(u.sentinel_id, u.reason) for u in unloaded] == [
        ("narrator", "codon-complete"),
        ("cost-watch", "codon-complete"),
        ("error-streak", "codon-complete"),
        ("file-watch", "codon-complete"),
    ]
    narrator = {s.id: s for s in h.manager.states()}["narrator"]
    assert narrator.llm_call_count == len(outputs)
    assert narrator.failed_llm_calls == 0
    assert narrator.total_cost == pytest.approx(sum(o.cost for o in outputs))
    assert narrator.status == "unloaded"
    assert narrator.unload_reason == "codon-complete"
    assert h.manager.total_cost == pytest.approx(math.fsum(o.cost for o in every))
    log = h.state_dir / "sentinels/outputs/narrator/narration.md"
    assert log.read_text().count("\n---\n") == len(outputs) - 1
    history = orjson.loads((h.state_dir / "sentinels/history/narrator-greet.json").read_bytes())
    assert [m["role"] for m in history] == ["user", "assistant"] * len(outputs)
    # Every event encodes, and the last states are what the manager holds.
    for event in h.events:
        assert orjson.loads(msgspec.json.encode(event))["sentinelId"]
    assert h.states[-1][0] == h.manager.states()


async def test_failures_unload_after_max_consecutive(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.manager.load(
        [
            _attached(
                tmp_path,
                userPromptText="@@sentinel:fail kind=api-error@@",
                errorHandling={"maxConsecutiveFailures": 2},
            )
        ]
    )
    await h.replay(_tools(4))
    await h.manager.drain()
    errors = h.of(SentinelError)
    assert [(e.error_type, e.consecutive_failure_count) for e in errors] == [
        ("llm-call-failed", 1),
        ("llm-call-failed", 2),
    ]
    (unloaded,) = h.of(SentinelUnloaded)
    assert (unloaded.reason, unloaded.error_type, unloaded.llm_call_count) == (
        "consecutive-failures",
        "llm-call-failed",
        2,
    )
    (state,) = h.manager.states()
    assert (state.failed_llm_calls, state.status, state.unload_reason) == (
        2,
        "unloaded",
        "consecutive-failures",
    )
    await h.manager.unload()
    assert len(h.of(SentinelUnloaded)) == 1  # not unloaded twice


async def test_a_success_resets_the_failure_count(tmp_path: Path) -> None:
    # Triggers 1-2 fail, 3 succeeds, 4-5 fail, 6 succeeds: never 3 in a row.
    prompt = (
        "@@sentinel:fail kind=rate-limit times=2@@"
        "<% if (Number(it.events[0].id) >= 4) { %>@@sentinel:fail kind=timeout times=2@@<% } %>"
    )
    h = Harness(tmp_path)
    h.manager.load(
        [_attached(tmp_path, userPromptText=prompt, errorHandling={"maxConsecutiveFailures": 3})]
    )
    await h.replay(_tools(6))
    await h.manager.drain()
    errors = h.of(SentinelError)
    assert [e.consecutive_failure_count for e in errors] == [1, 2, 1, 2]
    assert all(e.retriable for e in errors)
    assert [o.trigger_number for o in h.of(SentinelOutput)] == [3, 6]
    (state,) = h.manager.states()
    assert (state.llm_call_count, state.failed_llm_calls, state.status) == (6, 4, "active")


@pytest.mark.parametrize(
    ("over", "error_type"),
    [
        ({"userPromptText": "<%= it.events[0].data.nothing.deeper %>"}, "template-render-failed"),
        ({"userPromptText": "@@sentinel:fail kind=auth@@"}, "llm-call-failed"),
    ],
)
async def test_fatal_errors_unload_at_once(
    tmp_path: Path, over: dict[str, Any], error_type: str
) -> None:
    h = Harness(tmp_path)
    h.manager.load([_attached(tmp_path, **over)])
    await h.replay(_tools(3))
    await h.manager.drain()
    assert [e.error_type for e in h.of(SentinelError)] == [error_type]
    (unloaded,) = h.of(SentinelUnloaded)
    assert unloaded.reason == "fatal-error"
    # With unloadOnFatalError false the same errors count towards the limit.
    h2 = Harness(tmp_path / "again")
    h2.manager.load(
        [
            _attached(
                tmp_path,
                **over,
                errorHandling={"unloadOnFatalError": False, "maxConsecutiveFailures": 3},
            )
        ]
    )
    await h2.replay(_tools(4))
    await h2.manager.drain()
    assert len(h2.of(SentinelError)) == 3
    assert h2.of(SentinelUnloaded)[0].reason == "consecutive-failures"


async def test_structured_output_is_validated_and_written(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"verdict": {"type": "string"}, "count": {"type": "integer", "minimum": 1}},
        "required": ["verdict", "count"],
    }
    h = Harness(tmp_path)
    h.manager.load(
        [
            _attached(
                tmp_path,
                {"outputPaths": {"lastValueFile": "costs/latest.json"}},
                structuredOutput={"output": "object", "schema": schema},
            ),
            _attached(
                tmp_path,
                id="broken",
                userPromptText="@@sentinel:malformed@@",
                structuredOutput={"output": "object", "schema": schema},
            ),
            _attached(
                tmp_path,
                id="enum",
                structuredOutput={"output": "enum", "enumValues": ["ok", "bad"]},
                output={"file": "reports/enum.jsonl"},
            ),
        ]
    )
    await h.replay(_tools(2))
    await h.manager.drain()
    outputs = {(o.sentinel_id, o.trigger_number): o for o in h.of(SentinelOutput)}
    assert outputs[("watcher", 1)].content == {"verdict": "fake", "count": 1}
    assert outputs[("enum", 2)].content == "ok"
    assert orjson.loads((h.workspace / "costs/latest.json").read_bytes()) == {
        "verdict": "fake",
        "count": 1,
    }
    lines = (h.workspace / "reports/enum.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line)["content"] for line in lines] == ["ok", "ok"]
    assert orjson.loads(lines[0])["triggerNumber"] == 1
    (log,) = (h.state_dir / "sentinels/outputs/watcher").glob("watcher-greet-*.jsonl")
    assert len(log.read_bytes().splitlines()) == 2
    errors = h.of(SentinelError)
    assert {e.sentinel_id for e in errors} == {"broken"}
    assert "does not match the schema: $: 'verdict' is a required property" in errors[0].message


async def test_fail_codon_if_not_loaded(tmp_path: Path) -> None:
    h = Harness(tmp_path, override=None)
    failures = h.manager.load(
        [
            _attached(
                tmp_path,
                {"failCodonIfNotLoaded": True},
                id="needs-key",
                model="anthropic/claude-haiku-4-5",
            ),
            _attached(tmp_path, id="optional", model="mistral/large"),
            _attached(tmp_path, {"outputPaths": {"logFile": "../outside.md"}}, id="escapes"),
            _attached(tmp_path, id="fine"),
        ]
    )
    assert [(f.sentinel_id, f.required) for f in failures] == [
        ("needs-key", True),
        ("optional", False),
        ("escapes", False),
    ]
    reason = h.manager.required_failure()
    assert reason == (
        "Required sentinels failed to load (failCodonIfNotLoaded=true): needs-key: "
        'sentinel model "anthropic/claude-haiku-4-5" needs an API key: set ANTHROPIC_API_KEY'
    )
    assert "outside" in failures[2].message
    assert [e.sentinel_id for e in h.of(SentinelLoaded)] == ["fine"]
    assert [e.error_type for e in h.of(SentinelError)] == ["load-failed"] * 3
    # Only optional ones failing: the codon runs.
    h2 = Harness(tmp_path / "b", override=None)
    h2.manager.load([_attached(tmp_path, id="optional", model="mistral/large")])
    assert h2.manager.required_failure() is None


async def test_reporting_settings_and_ignored_events(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.manager.load(
        [
            _attached(
                tmp_path,
                {"reportToWebsocket": {"triggers": True, "outputs": False, "lifecycle": False}},
                trigger={"type": "event", "on": ["*"]},
            )
        ]
    )
    for seq, kind in enumerate(
        ["sentinel.output", "sentinel.error", "pong", "server.ready", "info"], 1
    ):
        h.manager.feed(kind, {"message": "x"}, seq)
    await h.manager.drain()
    await h.manager.unload()
    assert [type(e) for e in h.events] == [SentinelTriggered]  # only "info" woke it
    assert h.of(SentinelTriggered)[0].event_count == 1
    (state,) = h.manager.states()
    assert state.llm_call_count == 1
    assert state.total_triggers == 1


async def test_events_seen_before_a_restart_are_not_fed_again(tmp_path: Path) -> None:
    h = Harness(tmp_path, after_seq=3)
    h.manager.load([_attached(tmp_path)])
    await h.replay(_tools(5))
    await h.manager.drain()
    assert [o.event_count for o in h.of(SentinelOutput)] == [1, 1]


async def test_debounce_fires_on_its_own_timer(tmp_path: Path) -> None:
    h = Harness(tmp_path, clock=lambda: int(time.time() * 1000))
    h.manager.load([_attached(tmp_path, execution={"strategy": "debounce", "milliseconds": 50})])
    for _, data, seq, _ in _tools(3):
        h.manager.feed("tool.result", data, seq)
    assert h.of(SentinelOutput) == []
    deadline = time.monotonic() + 5
    while not h.of(SentinelOutput) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    (output,) = h.of(SentinelOutput)
    assert output.event_count == 3
    await h.manager.unload()


async def test_triggers_of_one_sentinel_are_processed_in_order_one_at_a_time(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    h.manager.load(
        [_attached(tmp_path, userPromptText="@@sentinel:sleep ms=30@@ <%= it.events[0].id %>")]
    )
    calls: list[str] = []
    active = 0
    peak = 0
    fake = h.registry.get("fake/haiku")[0]
    original = fake.complete

    async def spy(request: Any) -> Any:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        calls.append(request.messages[-1].content)
        try:
            return await original(request)
        finally:
            active -= 1

    fake.complete = spy  # type: ignore[method-assign]
    await h.replay(_tools(4))
    await h.manager.drain()
    assert peak == 1
    assert [c.split()[-1] for c in calls] == ["1", "2", "3", "4"]


async def test_an_unforeseen_exception_is_a_counted_failure(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.manager.load([_attached(tmp_path, errorHandling={"maxConsecutiveFailures": 2})])
    fake = h.registry.get("fake/haiku")[0]

    async def broken(request: Any) -> Any:
        raise RuntimeError("socket went away")

    fake.complete = broken  # type: ignore[method-assign]
    await h.replay(_tools(3))
    await h.manager.drain()
    assert [e.message for e in h.of(SentinelError)] == [
        "unexpected RuntimeError: socket went away"
    ] * 2
    assert h.of(SentinelUnloaded)[0].reason == "consecutive-failures"


async def test_without_persistence_a_conversation_stays_in_memory(
    recorded: Recorded, tmp_path: Path
) -> None:
    """``sentinel.enablePersistence: false``: the conversational narrator
    still speaks, but writes no history to disk."""
    loaded = load_hank(ROOT / "examples/sentinels", check_environment=False)
    ((codon, _),) = loaded.codons()
    attached, _ = attach(codon, loaded.directory, loaded.sentinel_configs)
    narrator = [a for a in attached if a.config.id == "narrator"]
    h = Harness(tmp_path, persist_history=False)
    assert h.manager.load(narrator) == []
    await h.replay([e for e in recorded if e[1].get("codonId") in (None, "greet")])
    await h.manager.drain()
    await h.manager.unload("codon-complete")
    assert h.of(SentinelOutput)
    assert not (h.state_dir / "sentinels/history").exists()


async def test_world_current_time_is_when_the_trigger_fired_not_when_it_is_processed(
    tmp_path: Path,
) -> None:
    """Three triggers fire 1 ms apart; the model takes a while for each, so the
    last waits in the queue while the clock moves on: each prompt still names
    the moment its trigger fired (the reference's queuedAt)."""
    h = Harness(tmp_path)
    slow = "@@sentinel:sleep ms=30@@@@sentinel:say <%= it.world.currentTime %>@@"
    assert h.manager.load([_attached(tmp_path, userPromptText=slow)]) == []
    for kind, data, seq, at in _tools(3):
        h.now = at
        h.manager.feed(kind, data, seq)
    h.now += 60_000  # the calls are processed a minute later
    await h.manager.drain()
    said = [o.content for o in h.of(SentinelOutput)]
    assert said == [iso_from_ms(at) for _, _, _, at in _tools(3)]


async def test_a_codons_report_settings_merge_over_the_configs_field_by_field(
    tmp_path: Path,
) -> None:
    """The config turns outputs and lifecycle off, the codon turns triggers
    on: only sentinel.triggered goes out (the reference merges the codon's
    object over the config's)."""
    h = Harness(tmp_path)
    quiet = {"outputs": False, "lifecycle": False}
    entry = _attached(tmp_path, {"reportToWebsocket": {"triggers": True}}, reportToWebsocket=quiet)
    assert h.manager.load([entry]) == []
    await h.replay(_tools(2))
    await h.manager.drain()
    await h.manager.unload("codon-complete")
    assert {type(e).__name__ for e in h.events} == {"SentinelTriggered"}


async def test_report_settings_a_codon_leaves_out_stay_the_configs_then_the_defaults(
    tmp_path: Path,
) -> None:
    """The config turns triggers on, the codon turns outputs off: triggers
    (the config's), lifecycle (the default), no outputs (the codon's)."""
    h = Harness(tmp_path)
    entry = _attached(
        tmp_path, {"reportToWebsocket": {"outputs": False}}, reportToWebsocket={"triggers": True}
    )
    assert h.manager.load([entry]) == []
    await h.replay(_tools(2))
    await h.manager.drain()
    await h.manager.unload("codon-complete")
    kinds = {type(e).__name__ for e in h.events}
    assert kinds == {"SentinelLoaded", "SentinelTriggered", "SentinelUnloaded"}


def test_a_conversational_history_is_private_to_the_user(tmp_path: Path) -> None:
    import os
    import stat

    from weft.sentinels.manager import _write_history

    old = os.umask(0o022)
    try:
        path = tmp_path / "state" / "sentinels" / "codon" / "watcher.json"
        _write_history(path, b"[]")
        _write_history(path, b'[{"role":"user","content":"x"}]')  # replaced, still private
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_bytes() == b'[{"role":"user","content":"x"}]'
