"""A live run's metrics, recorded from the spans the fold finishes.

Nothing here reads events: every figure comes from a finished
:class:`~weft.telemetry.spans.SpanRecord` (which took its figures from the one
fold), so metrics and traces cannot disagree. Instruments, with low-cardinality
attributes (provider, model, outcome; never a codon or run id):

- ``gen_ai.client.token.usage`` (histogram, ``{token}``, by ``gen_ai.token.type``) and
  ``gen_ai.client.operation.duration`` (histogram, seconds): the GenAI conventions'
  own metrics, made by ``opentelemetry-semantic-conventions``, for each codon
  attempt (``invoke_agent``) and each sentinel call (``chat``);
- ``weft.cost`` (counter, USD): what attempts and sentinel calls cost;
- ``weft.codon.attempts`` (counter, by ``weft.status``: completed, failed, skipped);
- ``weft.codon.retries`` (counter): ``codon.retry`` events;
- ``weft.breaker.state`` (gauge per provider: 0 closed, 1 half open, 2 open) and
  ``weft.breaker.transitions`` (counter, by provider and new state).

A ``PeriodicExportingMetricReader`` sends them from its own thread every
:data:`EXPORT_INTERVAL_MS` and once more at :meth:`Meters.close`, which waits
at most its timeout. An export failure is dropped silently: the span exporter,
which talks to the same collector, already said so once. ``weft export-trace``
sends no metrics: points stamped with a past run's times are not what a
metrics backend expects.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics

from weft.telemetry.spans import COST, STATUS, SpanRecord

EXPORT_INTERVAL_MS = 10_000
"""How often metrics leave during a run (the SDK's default is a minute)."""
EXPORT_TIMEOUT_MS = 2_000
"""How long one metrics export may take."""
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}

_KEPT = (
    gen_ai.GEN_AI_OPERATION_NAME,
    gen_ai.GEN_AI_PROVIDER_NAME,
    gen_ai.GEN_AI_REQUEST_MODEL,
)
"""The span attributes a metric point carries (few values each)."""


class _Quiet(MetricExporter):
    """The OTLP metric exporter; a failure is counted, never raised or logged."""

    def __init__(self, inner: MetricExporter) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self.failures = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:  # the reader's thread must never see one
            result = MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            self.failures += 1
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class Meters:
    """The run's instruments and their exporter (see the module docstring)."""

    def __init__(
        self, url: str, resource: Resource, *, exporter: MetricExporter | None = None
    ) -> None:
        from weft import __version__

        self.exporter = _Quiet(
            exporter or OTLPMetricExporter(endpoint=url, timeout=EXPORT_TIMEOUT_MS / 1000)
        )
        reader = PeriodicExportingMetricReader(
            self.exporter,
            export_interval_millis=EXPORT_INTERVAL_MS,
            export_timeout_millis=EXPORT_TIMEOUT_MS,
        )
        self._provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = self._provider.get_meter("weft", __version__)
        self._tokens = gen_ai_metrics.create_gen_ai_client_token_usage(meter)
        self._duration = gen_ai_metrics.create_gen_ai_client_operation_duration(meter)
        self._cost = meter.create_counter(
            "weft.cost", unit="USD", description="What agents and sentinels cost (Weft's pricing)"
        )
        self._attempts = meter.create_counter(
            "weft.codon.attempts", unit="{attempt}", description="Codon attempts by outcome"
        )
        self._retries = meter.create_counter(
            "weft.codon.retries", unit="{retry}", description="Codon retries (codon.retry)"
        )
        self._transitions = meter.create_counter(
            "weft.breaker.transitions", unit="{change}", description="Circuit breaker changes"
        )
        self._breakers: dict[str, int] = {}
        meter.create_observable_gauge(
            "weft.breaker.state",
            callbacks=[self._observe_breakers],
            unit="1",
            description="Each provider's circuit breaker: 0 closed, 1 half open, 2 open",
        )
        self._closed = False

    def record(self, records: Iterable[SpanRecord]) -> None:
        """Records what finished spans say (cheap: the SDK aggregates in memory)."""
        for record in records:
            operation = record.attributes.get(gen_ai.GEN_AI_OPERATION_NAME)
            if operation in ("invoke_agent", "chat"):
                self._model_call(record)
            for name, _, attrs in record.events:
                if name == "codon.retry":
                    self._retries.add(1)
                elif name == "breaker.changed":
                    provider, state = attrs.get("weft.provider"), attrs.get("weft.state")
                    if isinstance(provider, str) and isinstance(state, str):
                        self._breakers[provider] = BREAKER_STATES.get(state, 0)
                        self._transitions.add(1, {"weft.provider": provider, "weft.state": state})

    def _model_call(self, record: SpanRecord) -> None:
        attrs = {k: record.attributes[k] for k in _KEPT if k in record.attributes}
        status = record.attributes.get(STATUS)
        for kind, key in (
            (gen_ai.GenAiTokenTypeValues.INPUT.value, gen_ai.GEN_AI_USAGE_INPUT_TOKENS),
            (gen_ai.GenAiTokenTypeValues.COMPLETION.value, gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS),
        ):
            count = record.attributes.get(key)
            if isinstance(count, int):
                self._tokens.record(count, {**attrs, gen_ai.GEN_AI_TOKEN_TYPE: kind})
        seconds = max(record.end_ns - record.start_ns, 0) / 1e9
        timed = attrs if status is None else {**attrs, STATUS: status}
        self._duration.record(seconds, timed)
        cost = record.attributes.get(COST)
        if isinstance(cost, int | float) and cost > 0:
            self._cost.add(float(cost), attrs)
        if record.attributes.get(gen_ai.GEN_AI_OPERATION_NAME) == "invoke_agent":
            self._attempts.add(1, {STATUS: str(status or "unfinished")})

    def _observe_breakers(self, options: CallbackOptions) -> Sequence[Observation]:
        return [Observation(v, {"weft.provider": p}) for p, v in sorted(self._breakers.items())]

    def close(self, timeout: float) -> None:
        """Sends the last points, waiting at most ``timeout`` seconds."""
        if self._closed:
            return
        self._closed = True
        closing = threading.Thread(target=self._provider.shutdown, daemon=True)
        closing.start()
        closing.join(timeout)


__all__ = ["EXPORT_INTERVAL_MS", "Meters"]
