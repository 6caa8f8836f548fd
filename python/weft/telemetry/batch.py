"""The trace of a ``weft batch run``: one trace per coordinator run, its steps' runs inside.

The tree::

    weft batch <name>                   the coordinator's run: counts, cost
      weft workstream <ws>              from its first move to S_RUNNING to its end
        weft step <ws/step>             a launch: key, attempt, tool, exit code, cost, outcome
          weft run <execution>          a hank step's run (its own trace export, see below)

A step's launch is given ``TRACEPARENT`` naming its step span (and the exporter
endpoint when only ``--otel`` asked for traces), so a hank step's run, in this
process through :mod:`weft.embed`, as its own ``weft run`` (``--isolate``) or on
a Ray worker, takes the step span as its parent, as ``weft run`` takes a
caller's. Retries, workstream moves, breaker changes and usage-window holds are
span events.

:class:`BatchTrace` is a coordinator listener: it folds each committed
:class:`~weft.batch.store.Change` into span records and hands finished spans to
the :class:`~weft.telemetry.export.Shipper` (its own thread, bounded queue), so
the coordinator's loop only appends to a queue; any fault in the fold costs the
trace (one warning), never the batch.

Ids are derived, as a run's are (:mod:`weft.telemetry.settings`): from the batch
state folder and the coordinator run's start (ms), and each span's place in it
(a step launch: its key and launch number), so the id a step's ``TRACEPARENT``
names is known before the span ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from weft.batch.store import Change
from weft.telemetry.export import FLUSH_TIMEOUT, Shipper
from weft.telemetry.settings import TelemetrySettings, TraceParent, span_id, trace_id
from weft.telemetry.spans import COST, STATUS, Scalar, SpanRecord

__all__ = ["BatchTrace", "batch_scope", "step_key"]

_WS_ENDS = frozenset({"S_SUCCESS", "S_FAILED", "S_ABANDONED"})


def batch_scope(state_dir: Path, run_id: str) -> str:
    """What a batch run's ids derive from: its state folder and the run's start."""
    return f"batch\0{state_dir.resolve()}\0{run_id}"


def step_key(key: str, launch: int) -> str:
    """The span key of launch number ``launch`` of step ``key`` (``ws/step``)."""
    return f"step\0{key}\0{launch}"


def _scalar(value: Any) -> Scalar | None:
    return value if isinstance(value, str | int | float | bool) else None


class BatchTrace:
    """Exports one coordinator run's trace; call :meth:`close` when it is over."""

    def __init__(
        self,
        settings: TelemetrySettings,
        *,
        state_dir: Path,
        name: str,
        started_ms: int,
        warn: Callable[[str], None],
        tools: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        shipper: Shipper | None = None,
    ) -> None:
        self.settings = settings
        self.env = os.environ if env is None else env
        self.run_id = str(started_ms)
        self.scope = batch_scope(state_dir, self.run_id)
        self.trace = trace_id(self.scope, settings.parent)
        self.tools = dict(tools or {})
        self.shipper = shipper or Shipper(
            settings, warn=warn, env_service=self.env.get("OTEL_SERVICE_NAME")
        )
        self.root = self._span("batch", f"weft batch {name}", None, started_ms * 1_000_000)
        if settings.parent is not None:
            self.root.parent_id, self.root.remote_parent = settings.parent.span_id, True
        self.root.attributes.update(
            {
                "weft.batch.name": name,
                "weft.batch.state_dir": str(state_dir),
                "weft.batch.run_id": self.run_id,
            }
        )
        self._workstreams: dict[str, SpanRecord] = {}
        self._ws_spans: dict[str, int] = {}
        """How many spans each workstream had (a reopened one gets another)."""
        self._steps: dict[str, SpanRecord] = {}
        self._costs: dict[str, float] = {}
        self._ends: dict[str, str] = {}
        """Each step's latest end (a retried step counts once, as it ended)."""
        self._launches = 0
        self._held: set[tuple[str, str, int]] = set()
        self._last_ns = self.root.start_ns
        self._warn = warn
        self._broken = False

    # -- what the coordinator calls --------------------------------------------

    def step_env(self, key: str, launch: int) -> dict[str, str]:
        """The variables a step's launch gets: its span as ``TRACEPARENT``, and the
        endpoint when no variable names one (only ``--otel`` asked for traces)."""
        parent = TraceParent(self.trace, span_id(self.scope, step_key(key, launch)))
        out = {"TRACEPARENT": parent.header()}
        traces = self.env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if not self.env.get("OTEL_EXPORTER_OTLP_ENDPOINT") and not traces:
            out["OTEL_EXPORTER_OTLP_ENDPOINT"] = self.settings.endpoint
        return out

    def __call__(self, change: Change, now_ms: int) -> None:
        """The listener: folds one committed change."""
        if self._broken:
            return
        try:
            self._take(change, now_ms * 1_000_000)
        except Exception as exc:  # a fault here may cost the trace, never the batch
            self._broken = True
            self._warn(
                f"batch traces stopped ({type(exc).__name__}: {exc}); the batch goes on "
                "without them (please report this)"
            )

    def on_tick(self, held: Mapping[str, tuple[str, int]], now_ms: int) -> None:
        """Each scheduler turn: a step newly held by a closed usage window is an event."""
        for key, (provider, opens) in held.items():
            if (key, provider, opens) in self._held:
                continue
            self._held.add((key, provider, opens))
            self.root.events.append(
                (
                    "weft.window.held",
                    now_ms * 1_000_000,
                    {"weft.batch.step": key, "weft.provider": provider, "weft.opens_at_ms": opens},
                )
            )

    def close(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Ends what is open (steps left running are marked unfinished), then sends
        the rest, waiting at most ``timeout`` seconds; True when every span left."""
        at = max(self._last_ns, self._now_ns())
        out: list[SpanRecord] = []
        for span in self._steps.values():
            span.attributes["weft.unfinished"] = True
            span.end_ns = at
            out.append(span)
        self._steps.clear()
        for span in self._workstreams.values():
            span.attributes.setdefault(STATUS, "unfinished")
            span.end_ns = at
            out.append(span)
        self._workstreams.clear()
        ends = list(self._ends.values())
        self.root.attributes.update(
            {
                COST: sum(self._costs.values()),
                "weft.steps.succeeded": ends.count("S_SUCCESS"),
                "weft.steps.failed": len(ends) - ends.count("S_SUCCESS"),
                "weft.launches": self._launches,
            }
        )
        self.root.end_ns = at
        out.append(self.root)
        self.shipper.send(out)
        return self.shipper.close(timeout)

    # -- the fold --------------------------------------------------------------

    @staticmethod
    def _now_ns() -> int:
        import time

        return time.time_ns() // 1_000_000 * 1_000_000

    def _span(self, key: str, name: str, parent: SpanRecord | None, at: int) -> SpanRecord:
        return SpanRecord(
            name=name,
            trace_id=self.trace,
            span_id=span_id(self.scope, key),
            parent_id=None if parent is None else parent.span_id,
            start_ns=at,
        )

    def _take(self, change: Change, at: int) -> None:
        self._last_ns = max(self._last_ns, at)
        reason = _scalar(change.metadata.get("reason"))
        if change.table == "breakers":
            attrs: dict[str, Scalar] = {
                "weft.tool": change.key[0],
                "weft.from": change.from_state,
                "weft.to": change.to_state,
            }
            failures = _scalar(change.metadata.get("consecutive_failures"))
            if failures is not None:
                attrs["weft.consecutive_failures"] = failures
            if reason is not None:
                attrs["weft.reason"] = reason
            self.root.events.append(("weft.breaker", at, attrs))
        elif change.table == "workstreams":
            self._workstream(change.key[0], change, at, reason)
        else:
            self._step(change, at, reason)

    def _workstream_span(self, ws_id: str, at: int) -> SpanRecord:
        span = self._workstreams.get(ws_id)
        if span is None:
            n = self._ws_spans[ws_id] = self._ws_spans.get(ws_id, 0) + 1
            span = self._span(f"ws\0{ws_id}\0{n}", f"weft workstream {ws_id}", self.root, at)
            span.attributes["weft.batch.workstream"] = ws_id
            self._workstreams[ws_id] = span
        return span

    def _workstream(self, ws_id: str, change: Change, at: int, reason: Scalar | None) -> None:
        if change.to_state in _WS_ENDS:
            span = self._workstream_span(ws_id, at)  # opened here if it never ran
            del self._workstreams[ws_id]
            span.attributes[STATUS] = change.to_state
            retries = _scalar(change.values.get("retry_count"))
            if retries is not None:
                span.attributes["weft.retries"] = retries
            if change.to_state != "S_SUCCESS":
                span.error = str(reason or change.to_state)
            span.end_ns = at
            self.shipper.send([span])
            return
        span = self._workstream_span(ws_id, at)
        if change.from_state != change.to_state and change.from_state != "S_PENDING":
            attrs: dict[str, Scalar] = {"weft.from": change.from_state, "weft.to": change.to_state}
            if reason is not None:
                attrs["weft.reason"] = reason
            span.events.append(("weft.workstream.state", at, attrs))

    def _step(self, change: Change, at: int, reason: Scalar | None) -> None:
        ws_id, step_id = change.key
        key = f"{ws_id}/{step_id}"
        values = change.values
        if change.to_state == "S_RUNNING" and "launches" in values:
            self._launched(key, ws_id, int(values["launches"]), at)
            return
        if change.from_state == "S_RUNNING" and "exit_code" in values:
            self._finished(key, ws_id, change, at, reason)
            return
        attrs: dict[str, Scalar] = {
            "weft.batch.step": key,
            "weft.from": change.from_state,
            "weft.to": change.to_state,
        }
        if reason is not None:
            attrs["weft.reason"] = reason
        ready = _scalar(change.metadata.get("ready_at_ms"))
        if ready is not None:
            attrs["weft.ready_at_ms"] = ready
        name = "weft.step.retry" if change.to_state == "S_RETRYING" else "weft.step.state"
        self._workstream_span(ws_id, at).events.append((name, at, attrs))

    def _launched(self, key: str, ws_id: str, launch: int, at: int) -> None:
        old = self._steps.pop(key, None)
        if old is not None:  # launched again with no end seen (a lost process)
            old.attributes["weft.unfinished"] = True
            old.end_ns = at
            self.shipper.send([old])
        self._launches += 1
        ws = self._workstream_span(ws_id, at)
        span = self._span(step_key(key, launch), f"weft step {key}", ws, at)
        span.attributes.update(
            {"weft.batch.step": key, "weft.batch.workstream": ws_id, "weft.step.attempt": launch}
        )
        tool = self.tools.get(key)
        if tool is not None:
            span.attributes["weft.step.tool"] = tool
        self._steps[key] = span

    def _finished(
        self, key: str, ws_id: str, change: Change, at: int, reason: Scalar | None
    ) -> None:
        span = self._steps.pop(key, None)
        values = change.values
        if span is None:  # adopted from an earlier coordinator: its launch is not in this run
            launch = _scalar(change.metadata.get("launch"))
            duration = int(values.get("duration_ms") or 0)
            ws = self._workstream_span(ws_id, at)
            span = self._span(
                step_key(key, int(launch or 0)), f"weft step {key}", ws, at - duration * 1_000_000
            )
            span.attributes.update({"weft.batch.step": key, "weft.step.adopted": True})
            if launch is not None:
                span.attributes["weft.step.attempt"] = launch
        code = values.get("exit_code")
        if isinstance(code, int):
            span.attributes["weft.step.exit_code"] = code
        cost = float(values.get("cost_usd") or 0.0)
        span.attributes[COST] = cost
        span.attributes["weft.step.outcome"] = change.to_state
        span.attributes["weft.duration_ms"] = int(values.get("duration_ms") or 0)
        if change.to_state != "S_SUCCESS":
            span.error = str(reason or change.to_state)
        span.end_ns = at
        self._costs[key] = cost
        self._ends[key] = change.to_state
        self.shipper.send([span])
