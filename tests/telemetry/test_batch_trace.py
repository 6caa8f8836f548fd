"""``weft batch run`` exports one trace per batch run, its steps' runs nested (issue 38).

Real batches (a hank step on the fake agent, in process and ``--isolate``, and a
command step that fails once and is retried) run as users run them, against the
real OTLP/HTTP receiver of :mod:`tests.telemetry.receiver`; the tests read the
decoded spans and check the tree batch -> workstream -> step -> the hank's run
-> its codons, the step attributes and the retry and breaker events. With export
off nothing is sent and nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.batch.support import write_batch
from tests.cli.test_imports import DEFERRED_BY_RUN, _loaded
from tests.runtime.hanks import subprocess_environment
from tests.telemetry.receiver import Receiver, Span, closed_port, otlp_receiver

from weft.batch.engine import execution_cost
from weft.telemetry.batch import batch_scope, step_key
from weft.telemetry.settings import span_id, trace_id

ROOT = Path(__file__).resolve().parents[2]
HANK = ROOT / "examples" / "batch" / "hank"
DATA = ROOT / "examples" / "batch" / "data" / "alpha"

# Fails its first launch (exit 3), succeeds on the retry; both launches write the
# TRACEPARENT they were given, so the test sees what a command step gets.
FLAKY = 'echo "$TRACEPARENT" >> traceparents.txt; test -f tried || { touch tried; exit 3; }'


def _batch(tmp_path: Path) -> Path:
    hank_step = {"id": "analyse", "hank": str(HANK), "data": str(DATA)}
    command_step = {
        "id": "flaky",
        "command": ["sh", "-c", FLAKY],
        "tool": "flaky",
        "max_retries": 1,
        "retry_backoff": {"base_delay_ms": 10, "max_delay_ms": 10},
    }
    doc = {
        "name": "traced",
        "allow_absolute_paths": True,  # the example's hank and data, outside tmp_path
        "breakers": {"flaky": {"failure_threshold": 1, "cooldown_seconds": 0}},
        "workstreams": [
            {"id": "a", "steps": [hank_step]},
            {"id": "b", "steps": [command_step]},
        ],
    }
    return write_batch(tmp_path, doc)


def _batch_run(path: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--headless", *flags],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def _children(spans: list[Span], parent: Span) -> list[Span]:
    return [s for s in spans if s.parent_id == parent.span_id]


ENGINES = {
    "in-process": (),
    "isolate": ("--isolate",),
    "ray": ("--engine", "ray", "--workers", "2"),
}
"""Where the hank step runs: in the coordinator's process (``weft.embed``), as its
own ``weft run``, in a Ray worker (``weft.embed`` there)."""


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_batch_run_is_one_trace_with_its_steps_runs_nested(tmp_path: Path, engine: str) -> None:
    if engine == "ray" and os.environ.get("WEFT_REQUIRE_RAY") != "1":
        pytest.importorskip("ray")
    path = _batch(tmp_path)
    with otlp_receiver() as receiver:
        env = {**subprocess_environment(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        done = _batch_run(path, env, *ENGINES[engine])
        assert done.returncode == 0, done.stdout + done.stderr
        spans = list(receiver.spans)

    # One trace: the batch's, the hank step's run and codons in it.
    assert {s.trace_id for s in spans} == {spans[0].trace_id}
    batch = _one(spans, "weft batch traced")
    assert batch.parent_id == ""
    assert batch.attributes["weft.steps.succeeded"] == 2
    assert batch.attributes["weft.steps.failed"] == 0  # the flaky step ended well
    assert batch.attributes["weft.launches"] == 3  # its first launch failed

    # batch -> workstreams -> step launches
    ws_a, ws_b = _one(spans, "weft workstream a"), _one(spans, "weft workstream b")
    assert ws_a.parent_id == ws_b.parent_id == batch.span_id
    assert ws_a.attributes["weft.status"] == ws_b.attributes["weft.status"] == "S_SUCCESS"
    analyse = _one(spans, "weft step a/analyse")
    assert analyse.parent_id == ws_a.span_id
    assert analyse.attributes["weft.batch.step"] == "a/analyse"
    assert analyse.attributes["weft.step.attempt"] == 1
    assert analyse.attributes["weft.step.tool"] == "weft"
    assert analyse.attributes["weft.step.exit_code"] == 0
    assert analyse.attributes["weft.step.outcome"] == "S_SUCCESS"
    execution = tmp_path / ".weft-batch" / "batch" / "steps" / "a" / "analyse" / "execution"
    assert analyse.attributes["weft.cost_usd"] == pytest.approx(execution_cost(execution))
    assert analyse.attributes["weft.cost_usd"] > 0

    # the hank step's run under its step's span, its codons under the run
    run = _one(spans, "weft run execution")
    assert run.parent_id == analyse.span_id
    codons = sorted(s.name for s in _children(spans, run) if s.name.startswith("weft codon"))
    assert codons == ["weft codon read", "weft codon review", "weft codon summarise"]
    assert run.attributes["weft.cost_usd"] == pytest.approx(analyse.attributes["weft.cost_usd"])
    assert analyse.start_ns <= run.start_ns
    assert run.end_ns <= analyse.end_ns

    # the command step: two launches, the first failed, its retry and the breaker as events
    flaky = sorted(
        (s for s in spans if s.name == "weft step b/flaky"),
        key=lambda s: s.attributes["weft.step.attempt"],
    )
    assert [s.attributes["weft.step.attempt"] for s in flaky] == [1, 2]
    assert [s.attributes["weft.step.exit_code"] for s in flaky] == [3, 0]
    assert [s.attributes["weft.step.outcome"] for s in flaky] == ["S_FAILED", "S_SUCCESS"]
    assert [s.status for s in flaky] == [2, 0]  # the failed launch is an error span
    assert all(s.parent_id == ws_b.span_id for s in flaky)
    assert all(s.attributes["weft.cost_usd"] == 0 for s in flaky)
    retries = [attrs for name, attrs in ws_b.events if name == "weft.step.retry"]
    assert len(retries) == 1
    assert retries[0]["weft.batch.step"] == "b/flaky"
    breaker = [attrs for name, attrs in batch.events if name == "weft.breaker"]
    assert ("CLOSED", "OPEN") in {(a["weft.from"], a["weft.to"]) for a in breaker}
    assert all(a["weft.tool"] == "flaky" for a in breaker)

    # each launch of a command step got its own span as TRACEPARENT
    given = (tmp_path / "traceparents.txt").read_text().split()
    assert given == [f"00-{s.trace_id}-{s.span_id}-01" for s in flaky]


def test_ids_are_derived_from_the_state_folder_and_the_run(tmp_path: Path) -> None:
    """The ids a backend sees are the documented derivation (so ``TRACEPARENT``
    handed to a step before its span ends names that span)."""
    path = _batch(tmp_path)
    with otlp_receiver() as receiver:
        env = {**subprocess_environment(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        assert _batch_run(path, env).returncode == 0
        spans = list(receiver.spans)
    batch = _one(spans, "weft batch traced")
    scope = batch_scope(tmp_path / ".weft-batch" / "batch", batch.attributes["weft.batch.run_id"])
    assert batch.trace_id == f"{trace_id(scope):032x}"
    assert batch.span_id == f"{span_id(scope, 'batch'):016x}"
    analyse = _one(spans, "weft step a/analyse")
    assert analyse.span_id == f"{span_id(scope, step_key('a/analyse', 1)):016x}"


def test_a_callers_traceparent_is_the_batch_spans_parent(tmp_path: Path) -> None:
    path = _batch(tmp_path)
    caller_trace, caller_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    with otlp_receiver() as receiver:
        env = {
            **subprocess_environment(tmp_path),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "TRACEPARENT": f"00-{caller_trace}-{caller_span}-01",
        }
        assert _batch_run(path, env).returncode == 0
        spans = list(receiver.spans)
    assert {s.trace_id for s in spans} == {caller_trace}
    batch = _one(spans, "weft batch traced")
    assert batch.parent_id == caller_span
    # the step's run hangs under its step, not under the caller's span
    assert _one(spans, "weft run execution").parent_id == _one(spans, "weft step a/analyse").span_id


def _received(receiver: Receiver) -> int:
    with receiver.lock:
        return receiver.requests


def test_no_otel_sends_nothing_and_imports_nothing(tmp_path: Path) -> None:
    """``--no-otel`` with the endpoint variable set: neither the batch nor its
    hank step's run sends a request or loads OpenTelemetry (the tests above,
    with the variable, load and send it: this one can fail)."""
    path = _batch(tmp_path)
    watched = (*DEFERRED_BY_RUN, "weft.telemetry.batch")
    with otlp_receiver() as receiver:
        env = {**subprocess_environment(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        loaded, done = _loaded(
            watched, "batch", "run", path, "--headless", "--no-otel", env=env, cwd=tmp_path
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert _received(receiver) == 0
    opentelemetry = [m for m in loaded if "telemetry" in m]
    assert opentelemetry == [], f"weft batch run --no-otel loaded {opentelemetry}"


def test_without_configuration_batch_run_imports_no_opentelemetry(tmp_path: Path) -> None:
    path = _batch(tmp_path)
    env: dict[str, Any] = subprocess_environment(tmp_path)
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    watched = ("opentelemetry", "weft.telemetry.batch", "weft.telemetry.sink")
    loaded, done = _loaded(watched, "batch", "run", path, "--headless", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert loaded == [], f"weft batch run loaded {loaded}"


def test_a_collector_that_is_down_does_not_change_the_batch(tmp_path: Path) -> None:
    """Nothing listens at the endpoint: the batch ends as it does without export,
    each exporter (the batch's, the in-process step run's) says so once, and the
    end waits for no export (a bounded wait, generous on a shared machine)."""
    env = subprocess_environment(tmp_path / "off")
    started = time.monotonic()
    off = _batch_run(_batch(tmp_path / "off"), env)
    off_seconds = time.monotonic() - started
    assert off.returncode == 0, off.stdout + off.stderr
    url = f"http://127.0.0.1:{closed_port()}"
    env = {**subprocess_environment(tmp_path / "on"), "OTEL_EXPORTER_OTLP_ENDPOINT": url}
    started = time.monotonic()
    done = _batch_run(_batch(tmp_path / "on"), env)
    on_seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = [line for line in done.stderr.splitlines() if "could not be sent" in line]
    assert 1 <= len(warnings) <= 2, done.stderr
    assert all(url in w for w in warnings)
    assert on_seconds < off_seconds + 8, (on_seconds, off_seconds)
