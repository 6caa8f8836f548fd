"""Usage windows in a batch: a step calling a provider whose window is closed is
held back (the scheduler with windows as input, like its clock), status shows
it, and end to end a batch of hank steps on the fake claude waits for a window
written through Weft's own registry, then finishes with nothing counted as an error."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.batch.support import Driver, write_batch
from tests.batch.test_cli import weft
from tests.runtime.hanks import codon, subprocess_environment, write_hank

from weft.batch.coordinator import wall_clock_ms
from weft.batch.report import summary
from weft.batch.store import BatchStore
from weft.batch.windows import WindowWatch, step_providers, steps_providers
from weft.windows.registry import WindowRegistry

ROOT = Path(__file__).resolve().parents[2]
HANK = ROOT / "examples" / "batch" / "hank"
DATA = ROOT / "examples" / "batch" / "data" / "alpha"


def _step(step_id: str, tool: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "command": ["true"], "tool": tool, "depends_on": list(deps), **extra}


def _driver(tmp_path: Path, doc: dict[str, Any], workers: int = 4) -> Driver:
    driver = Driver.open(tmp_path, doc, workers=workers)
    plans = [(s.key, s.plan) for s in driver.store.load().steps]
    driver.scheduler.providers = {k: frozenset(v) for k, v in steps_providers(plans).items()}
    return driver


def test_a_step_calling_a_closed_provider_is_held_until_the_window_opens(tmp_path: Path) -> None:
    doc = {
        "workstreams": [
            {"id": "api", "steps": [_step("a", "claude"), _step("b", "anthropic", "a")]},
            {"id": "other", "steps": [_step("x", "curl")]},
            {"id": "gpt", "steps": [_step("g", "codex")]},
        ]
    }
    d = _driver(tmp_path, doc)
    opens = d.now + 3_000
    windows = {"anthropic": opens}
    tick = d.scheduler.tick(d.now, 4, windows)
    d.commit(tick.changes)
    assert sorted(tick.launches) == ["gpt/g", "other/x"]
    assert tick.held == {"api/a": ("anthropic", opens)}
    assert "anthropic usage window closed until" in tick.waiting["api/a"]
    assert tick.wake_at_ms == opens
    # Held: its workstream did not even start, and nothing about it was recorded.
    assert d.states()["api"] == "S_PENDING"
    assert all(t["ws_id"] != "api" for t in d.store.transitions())
    d.running += tick.launches
    for key in tick.launches:
        d.finish(key, 0)
    # Still closed a millisecond before it opens; launched at the opening.
    tick = d.scheduler.tick(opens - 1, 4, windows)
    assert tick.launches == []
    assert tick.held == {"api/a": ("anthropic", opens)}
    tick = d.scheduler.tick(opens, 4, windows)
    d.commit(tick.changes)
    assert tick.launches == ["api/a"]
    assert tick.held == {}
    d.running.append("api/a")
    d.finish("api/a", 0)
    # A window closed again holds the dependent too, once its dependency is met.
    later = opens + 60_000
    assert d.scheduler.held(opens + 1, {"anthropic": later}) == {"api/b": ("anthropic", later)}
    assert not d.store.breaker_transitions()


def test_a_retrying_step_is_held_without_spending_a_retry_or_moving_its_breaker(
    tmp_path: Path,
) -> None:
    doc = {
        "workstreams": [
            {"id": "w", "steps": [_step("s", "claude", max_retries=2)]},
        ]
    }
    d = _driver(tmp_path, doc)
    assert d.tick() == ["w/s"]
    d.finish("w/s", 1)  # failed: S_RETRYING, first backoff 1 s
    row = next(s for s in d.store.load().steps if s.key == "w/s")
    assert row.state == "S_RETRYING"
    spent = row.retry_count
    ready = row.retry_ready_at_ms
    assert ready is not None
    opens = ready + 10_000
    before = (d.store.transitions(), d.store.breaker_transitions())
    for now in (ready, ready + 5_000, opens - 1):
        tick = d.scheduler.tick(now, 4, {"anthropic": opens})
        d.commit(tick.changes)
        assert tick.launches == []
        assert tick.held == {"w/s": ("anthropic", opens)}
        assert tick.wake_at_ms == opens
    assert (d.store.transitions(), d.store.breaker_transitions()) == before
    tick = d.scheduler.tick(opens, 4, {"anthropic": opens})
    assert tick.launches == ["w/s"]
    assert tick.launches == ["w/s"]
    # The one retry the failure asked for, no more for the time held.
    assert d.scheduler.step("w/s").machine.retry_count <= spent + 1
    assert d.scheduler.step("w/s").row.launches == 2


def test_without_windows_or_for_other_providers_nothing_is_held(tmp_path: Path) -> None:
    doc = {"workstreams": [{"id": "w", "steps": [_step("s", "claude")]}]}
    d = _driver(tmp_path, doc)
    tick = d.scheduler.tick(d.now, 1, {"google": d.now + 10_000, "anthropic": d.now})
    assert tick.launches == ["w/s"]
    assert tick.held == {}


def test_a_hank_step_calls_its_codons_providers_and_a_model_override_wins() -> None:
    plan = {"tool": "weft", "hank": str(HANK)}
    assert step_providers(plan) == {"anthropic", "weft"}
    assert step_providers({**plan, "model": "fake/openai/gpt-5"}) == {"openai", "weft"}
    assert step_providers({"tool": "gemini", "command": ["x"]}) == {"google"}
    # A hank that does not load counts for its tool: the launch reports it.
    assert step_providers({"tool": "weft", "hank": "/nonexistent/hank.json"}) == {"weft"}


def test_the_watch_reads_the_registry_again_only_when_it_changed(tmp_path: Path) -> None:
    registry = WindowRegistry(tmp_path / "windows.json")
    watch = WindowWatch(registry)
    now = wall_clock_ms()
    assert watch.closed(now) == {}
    assert watch.reads == 0
    registry.close("anthropic", now + 5_000, window="five_hour", source="t", now_ms=now)
    assert watch.closed(now) == {"anthropic": now + 5_000}
    for _ in range(50):
        watch.closed(now)
    assert watch.reads == 1
    assert watch.closed(now + 5_000) == {}, "open at its reset"
    registry.close("openai", now + 9_000, window=None, source="t", now_ms=now)
    assert watch.closed(now) == {"anthropic": now + 5_000, "openai": now + 9_000}
    assert watch.reads == 2


def test_twenty_hank_steps_wait_for_a_closed_window_then_all_finish(tmp_path: Path) -> None:
    steps = [{"id": f"s{i:02}", "hank": str(HANK), "data": str(DATA)} for i in range(20)]
    doc = {"allow_absolute_paths": True, "workstreams": [{"id": "w", "steps": steps}]}
    path = write_batch(tmp_path, doc)
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    registry = WindowRegistry.default()  # this test's own (tests/conftest.py), in env too
    assert env["WEFT_USAGE_WINDOWS"] == str(registry.path)
    closed_at = wall_clock_ms()
    opens = closed_at + 3_000
    registry.close("anthropic", opens, window="five_hour", source="test/codon", now_ms=closed_at)
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--workers", "4", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # While it waits, status names every step and when the window opens.
        seen: dict[str, Any] | None = None
        while wall_clock_ms() < opens - 800 and seen is None:
            time.sleep(0.2)
            if not (state_dir / "batch.db").exists():
                continue
            got = weft(env, "status", str(path), "--json")
            if got.returncode == 0:
                report = json.loads(got.stdout)
                waits = [s.get("waiting_for_window") for s in report["workstreams"][0]["steps"]]
                if all(waits):
                    seen = report
        out, err = coordinator.communicate(timeout=120)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 0, out[-2000:] + err[-2000:]
    assert seen is not None, "status never showed the steps waiting for the window"
    for st in seen["workstreams"][0]["steps"]:
        assert st["state"] == "S_PENDING"
        assert st["waiting_for_window"]["provider"] == "anthropic"
        assert st["waiting_for_window"]["opens_at_ms"] == opens
    assert [w["provider"] for w in seen["usage_windows"]] == ["anthropic"]
    with BatchStore.open(state_dir, writer=False) as store:
        audit = store.transitions()
        breakers = store.breaker_transitions()
        final = summary(store)
    launches = [t for t in audit if t["step_id"] and t["to"] == "S_RUNNING"]
    assert len(launches) == 20
    first = min(launches, key=lambda t: t["at"])["at"]
    assert first >= _iso(opens), f"a step launched at {first}, before the window opened"
    steps = final["workstreams"][0]["steps"]
    assert all(s["state"] == "S_SUCCESS" and s["launches"] == 1 for s in steps)
    assert all(s["retry_count"] == 0 and s.get("error") is None for s in steps)
    assert not [t for t in audit if t["to"] in ("S_FAILED", "S_RETRYING")]
    assert breakers == [], "no breaker moved"
    assert final["workstreams"][0]["retry_count"] == 0


def _iso(ms: int) -> str:
    from weft.clock import iso_from_ms

    return iso_from_ms(ms)


def test_the_first_step_discovers_the_window_and_the_rest_are_held_back(tmp_path: Path) -> None:
    """The codon runner parks a codon refused by a closed window and records the
    window (the fake claude's ``usage_window`` scenario, refused until ``until``);
    the batch then holds back the steps that become ready, until it opens."""
    until = int(time.time()) + 7
    opens = until * 1000
    write_hank(
        tmp_path / "hank",
        codon("build", "Build it.", env={"FAKE_AGENT_SCENARIO": f"usage_window,until={until}"}),
    )
    rest = [{"id": f"r{i}", "hank": "hank", "depends_on": ["gate"]} for i in range(5)]
    doc = {
        "workstreams": [
            {"id": "probe", "steps": [{"id": "a", "hank": "hank"}]},
            # The gate holds the rest back until the probe has met the window.
            {"id": "rest", "steps": [{"id": "gate", "command": ["sleep", "2.5"]}, *rest]},
        ]
    }
    path = write_batch(tmp_path, doc)
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = {**subprocess_environment(tmp_path), "WEFT_RUNTIME_USAGE_WINDOW_MARGIN_MS": "0"}
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--workers", "8", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        held: dict[str, Any] | None = None
        while wall_clock_ms() < opens - 800 and held is None:
            time.sleep(0.2)
            if not (state_dir / "batch.db").exists():
                continue
            got = weft(env, "status", str(path), "--json")
            if got.returncode != 0:
                continue
            steps = {s["id"]: s for s in json.loads(got.stdout)["workstreams"][1]["steps"]}
            if all(steps[f"r{i}"].get("waiting_for_window") for i in range(5)):
                held = steps
        out, err = coordinator.communicate(timeout=120)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 0, out[-2000:] + err[-2000:]
    assert held is not None, "the steps behind the gate were never held for the window"
    assert held["gate"]["state"] == "S_SUCCESS"
    assert all(held[f"r{i}"]["waiting_for_window"]["opens_at_ms"] == opens for i in range(5))
    with BatchStore.open(state_dir, writer=False) as store:
        audit = store.transitions()
        breakers = store.breaker_transitions()
        final = summary(store)
    launched = {
        f"{t['ws_id']}/{t['step_id']}": t["at"]
        for t in audit
        if t["step_id"] and t["to"] == "S_RUNNING"
    }
    assert launched["probe/a"] < _iso(opens), "the probe met the window"
    for i in range(5):
        assert launched[f"rest/r{i}"] >= _iso(opens), f"rest/r{i} launched before the window opened"
    for ws in final["workstreams"]:
        assert ws["state"] == "S_SUCCESS"
        assert ws["retry_count"] == 0
        for s in ws["steps"]:
            assert (s["state"], s["launches"], s["retry_count"]) == ("S_SUCCESS", 1, 0), s
    assert not [t for t in audit if t["to"] in ("S_FAILED", "S_RETRYING")]
    assert breakers == [], "no breaker moved"


def test_status_names_the_held_steps_and_when_the_window_opens(tmp_path: Path) -> None:
    from weft.cli.batch import render_summary

    doc = {
        "workstreams": [
            {"id": "api", "steps": [_step("a", "claude"), _step("b", "claude", "a")]},
            {"id": "other", "steps": [_step("x", "curl")]},
        ]
    }
    d = _driver(tmp_path, doc)
    opens = d.now + 3_600_000
    report = summary(d.store, d.now, {"anthropic": opens, "google": opens})
    steps = {s["id"]: s for ws in report["workstreams"] for s in ws["steps"]}
    assert steps["a"]["waiting_for_window"] == {
        "provider": "anthropic",
        "opens_at_ms": opens,
        "opens_at": _iso(opens),
    }
    assert "waiting_for_window" not in steps["b"], "b waits for a, not for the window"
    assert "waiting_for_window" not in steps["x"]
    assert [w["provider"] for w in report["usage_windows"]] == ["anthropic"], (
        "only those waited for"
    )
    text = render_summary(report)
    assert f"waiting: anthropic usage window closed until {_iso(opens)}" in text
    assert f"usage window anthropic: closed until {_iso(opens)}; 1 step waiting for it" in text
