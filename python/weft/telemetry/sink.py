"""The live road: committed events in, spans out to the exporter's thread.

A :class:`TraceSink` is one more StateManager listener (as the progress view
and the WebSocket server are): it hears every event after its batch is
committed, in journal order, feeds it to the :class:`~weft.telemetry.spans.TraceFold`
and queues the spans that ended (and records their figures as metrics,
:mod:`weft.telemetry.metrics`, unless ``OTEL_METRICS_EXPORTER=none``). All it does
on the event loop is that fold, an append to a bounded queue and in-memory
metric aggregation; encoding and sending happen on the SDK
processor's thread, and any failure there stays there (one warning).

It also answers :meth:`TraceSink.agent_env`, which the codon runner calls when
it builds a codon's agent environment: ``TRACEPARENT`` names the attempt's span
(its id is derived, so it is known before the span ends) and the ``OTEL_*``
variables point the agent's own exporter at the same collector.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from weft.events.stream import decode_event
from weft.state import Processed
from weft.telemetry.export import FLUSH_TIMEOUT, Shipper
from weft.telemetry.settings import TelemetrySettings, agent_env, run_scope
from weft.telemetry.spans import TraceFold, capture_content

if TYPE_CHECKING:
    from weft.telemetry.metrics import Meters


def metrics_wanted(env: Mapping[str, str]) -> bool:
    """``OTEL_METRICS_EXPORTER=none`` keeps metrics off (traces stay on)."""
    return env.get("OTEL_METRICS_EXPORTER", "").strip().lower() != "none"


def metrics_url(env: Mapping[str, str], endpoint: str) -> str:
    """``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``, else the base endpoint's ``/v1/metrics``."""
    return env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip() or f"{endpoint}/v1/metrics"


class TraceSink:
    """Exports one live run's trace; call :meth:`close` when the run is over."""

    def __init__(
        self,
        settings: TelemetrySettings,
        *,
        execution_id: str,
        warn: Callable[[str], None],
        env: Mapping[str, str] | None = None,
        shipper: Shipper | None = None,
    ) -> None:
        self.settings = settings
        self.env = os.environ if env is None else env
        self.execution_id = execution_id
        self.fold = TraceFold(
            workflow=execution_id, parent=settings.parent, capture=capture_content()
        )
        self.shipper = shipper or Shipper(
            settings, warn=warn, env_service=self.env.get("OTEL_SERVICE_NAME")
        )
        self.meters: Meters | None = None
        if metrics_wanted(self.env):
            from weft.telemetry.metrics import Meters

            url = metrics_url(self.env, settings.endpoint)
            self.meters = Meters(url, self.shipper.resource)
        self._last_ns = 0
        self._warn = warn
        self._broken = False

    def __call__(self, item: Processed) -> None:
        """The listener: folds one committed item and queues what it finished."""
        if self._broken:
            return
        try:
            self._take(item)
        except Exception as exc:  # a fault here may cost the trace, never the run
            self._broken = True
            self._warn(
                f"traces stopped at event {item.seq} ({type(exc).__name__}: {exc}); the run "
                "goes on without them (please report this; `weft export-trace` may still work)"
            )

    def _take(self, item: Processed) -> None:
        event = item.event if item.event is not None else decode_event(item.payload)
        stream = item.stream
        # To the millisecond, as the journal keeps it: export-trace makes the same spans.
        at = item.time_ns // 1_000_000 * 1_000_000
        self._last_ns = at
        finished = self.fold.feed(event, at, item.seq, None if stream is None else stream.codon_id)
        if finished:
            self.shipper.send(finished)
            if self.meters is not None:
                self.meters.record(finished)

    def seeded(
        self, also: Callable[[Mapping[str, Any]], object]
    ) -> Callable[[Mapping[str, Any]], None]:
        """The runtime's ``on_state`` hook: seeds the fold with the state the run
        starts from (the plan, names and models of a continuation run, which its
        ``RunStarted`` does not carry), as the journal's earlier runs seed
        ``weft export-trace``'s fold, then calls ``also``."""

        def seed(state: Mapping[str, Any]) -> None:
            self.fold.progress.seed(state)
            also(state)

        return seed

    def agent_env(self, run_id: str, codon_id: str, start_time: str) -> dict[str, str]:
        """The trace variables of a codon attempt's agent (see the module docstring)."""
        scope = run_scope(self.execution_id, run_id)
        return agent_env(self.settings, self.env, scope, codon_id, start_time)

    def close(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Ends what the journal left open (a run cut short) and sends the rest,
        spans then metrics, waiting at most ``timeout`` seconds in all (none once
        the collector failed); True when every span left."""
        rest = self.fold.finish(self._last_ns) if self.fold.run_id is not None else []
        self.shipper.send(rest)
        started = time.monotonic()
        sent = self.shipper.close(timeout)
        if self.meters is not None:
            self.meters.record(rest)
            left = 0.0 if self.shipper.exporter.failed else timeout - (time.monotonic() - started)
            self.meters.close(max(left, 0.0))
        return sent


__all__ = ["TraceSink"]
