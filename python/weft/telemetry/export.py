"""Span records to an OTLP/HTTP receiver, without ever holding a run up.

:class:`Shipper` owns the SDK's ``BatchSpanProcessor`` and ``OTLPSpanExporter``:
:meth:`Shipper.send` only appends to the processor's queue (a bounded deque:
when it is full the oldest span is dropped, so memory stays bounded whatever the
collector does); the processor's own thread encodes and sends. When the collector
cannot be reached or refuses, :class:`_Guarded` says so once (``warn``) and the
SDK's own log lines, one per retry, are kept quiet; :meth:`Shipper.close` then
waits for nothing, and otherwise waits at most ``timeout`` seconds for the last
spans (the run span is always among them).

Spans are built as ``ReadableSpan`` values directly, not through a tracer: their
ids and times come from the journal (:mod:`weft.telemetry.spans`), which is what
makes a re-export (:func:`export_journal`) send the very same spans.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from weft.events.stream import decode_event
from weft.telemetry.settings import TelemetrySettings, TraceParent
from weft.telemetry.spans import SpanRecord, TraceFold

MAX_QUEUE = 4096
"""Spans waiting to be sent at most (the SDK drops the oldest beyond): a few
hundred bytes each, so about a megabyte whatever the collector does."""
FLUSH_TIMEOUT = 5.0
"""Seconds the end of a run waits at most for its last spans to leave."""
SCHEDULE_DELAY_MS = 1000
"""How often the processor's thread sends what is queued."""
EXPORT_TIMEOUT = 2.0
"""Seconds one live export may take, retries included, unless ``OTEL_EXPORTER_OTLP_TIMEOUT``
says otherwise (the SDK's 10 s would hold a short run's end that long when the
collector is down)."""
PAUSE_AFTER_FAILURE = 30.0
"""Seconds without trying after an export failed: what ends in between is dropped
(counted), so a dead collector costs one timeout, not one per batch."""
_QUIET = ("opentelemetry.exporter", "opentelemetry.sdk._shared_internal")
"""The SDK loggers that say, once per retry, what :class:`_Guarded` says once."""
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _resource(env_service: str | None) -> Resource:
    from weft import __version__

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by Resource.create;
    # a service name given here would override the user's, so it is the default only.
    attributes: dict[str, str] = {SERVICE_VERSION: __version__}
    if not env_service:
        attributes[SERVICE_NAME] = "weft"
    return Resource.create(attributes)


def readable(record: SpanRecord, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """The SDK span of a record."""
    context = SpanContext(record.trace_id, record.span_id, is_remote=False, trace_flags=_SAMPLED)
    parent = (
        None
        if record.parent_id is None
        else SpanContext(
            record.trace_id, record.parent_id, is_remote=record.remote_parent, trace_flags=_SAMPLED
        )
    )
    status = (
        Status(StatusCode.UNSET) if record.error is None else Status(StatusCode.ERROR, record.error)
    )
    return ReadableSpan(
        name=record.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=record.attributes,
        events=[Event(name, attrs, timestamp=at) for name, at, attrs in record.events],
        kind=SpanKind.INTERNAL,
        status=status,
        start_time=record.start_ns,
        end_time=max(record.end_ns, record.start_ns),
        instrumentation_scope=scope,
    )


class _Guarded(SpanExporter):
    """The OTLP exporter, made harmless: a failure is one warning, never an exception."""

    def __init__(
        self,
        inner: SpanExporter,
        where: str,
        warn: Callable[[str], None],
        *,
        pause: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._where = where
        self._warn = warn
        self._pause = pause
        self._clock = clock
        self._failed_at: float | None = None
        self.failed = False
        self.sent = 0
        self.dropped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._failed_at is not None and self._clock() - self._failed_at < self._pause:
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self._inner.export(spans)
        except Exception as exc:  # an exporter bug must not reach the processor's thread
            result = SpanExportResult.FAILURE
            why = f"{type(exc).__name__}: {exc}"
        else:
            why = "it did not accept them (is a collector listening there?)"
        if result is SpanExportResult.SUCCESS:
            self.sent += len(spans)
            return result
        self.dropped += len(spans)
        self._failed_at = self._clock()
        if not self.failed:
            self.failed = True
            self._warn(
                f"traces could not be sent to {self._where}: {why}; the run goes on "
                "without them (send them later with `weft export-trace`)"
            )
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class Shipper:
    """Sends span records from a background thread (see the module docstring)."""

    def __init__(
        self,
        settings: TelemetrySettings,
        *,
        warn: Callable[[str], None],
        env_service: str | None = None,
        exporter: SpanExporter | None = None,
    ) -> None:
        from weft import __version__

        for name in _QUIET:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        inner = exporter or OTLPSpanExporter(
            endpoint=settings.traces_url, timeout=None if settings.timeout_set else EXPORT_TIMEOUT
        )
        self.exporter = _Guarded(inner, settings.traces_url, warn, pause=PAUSE_AFTER_FAILURE)
        self._processor = BatchSpanProcessor(
            self.exporter, max_queue_size=MAX_QUEUE, schedule_delay_millis=SCHEDULE_DELAY_MS
        )
        self.resource = _resource(env_service)
        self._scope = InstrumentationScope("weft", __version__)
        self._closed = False
        self._warn = warn
        self._where = settings.traces_url

    def send(self, records: Iterable[SpanRecord]) -> None:
        """Queues finished spans (returns at once)."""
        if self._closed:
            return
        for record in records:
            self._processor.on_end(readable(record, self.resource, self._scope))

    def close(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Sends what is queued, waiting at most ``timeout`` seconds (none once the
        collector failed); True when everything left."""
        if self._closed:
            return not self.exporter.failed
        self._closed = True
        # The processor's shutdown drains its queue in its thread but waits up to
        # 30 s for it; run it on a daemon thread and wait only as long as we want.
        closing = threading.Thread(target=self._processor.shutdown, daemon=True)
        closing.start()
        closing.join(0 if self.exporter.failed else timeout)
        if closing.is_alive() and not self.exporter.failed:
            self.exporter.failed = True  # said once, here: the exporter may still say nothing
            self._warn(
                f"the run's last traces did not reach {self._where} within {timeout:g} s "
                "(is the collector slow?); send them with `weft export-trace`"
            )
        return not closing.is_alive() and not self.exporter.failed


def journal_records(
    execution: Path, *, workflow: str, parent: TraceParent | None, capture: bool
) -> Iterator[SpanRecord]:
    """The span records of every run in an execution's journal, in order (read-only:
    safe beside a live run, whose unfinished spans come out marked so)."""
    from weft.store import ExecutionStore

    store = ExecutionStore.open(execution, readonly=True)
    fold = TraceFold(workflow=workflow, parent=parent, capture=capture)
    last = 0
    try:
        for page in store.journal.pages():
            for row in page:
                # The event id starts with its commit time in ms: the live sink
                # uses the same millisecond, so both make the same span times.
                last = int(row.id.split("-", 1)[0]) * 1_000_000
                event = decode_event(row.payload.encode())
                yield from fold.feed(event, last, row.seq, row.codon_id)
    finally:
        store.journal.close()
    yield from fold.finish(last)


EXPORT_BATCH = 512
"""Spans per request of ``weft export-trace`` (the SDK processor's batch size)."""


def export_journal(
    execution: Path,
    settings: TelemetrySettings,
    *,
    workflow: str,
    capture: bool,
    warn: Callable[[str], None],
    env_service: str | None = None,
) -> tuple[int, int, bool]:
    """Sends an execution's trace, batch by batch from this thread (nothing is
    queued, so nothing is dropped); returns (spans, runs, all sent)."""
    from weft import __version__

    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    exporter = _Guarded(OTLPSpanExporter(endpoint=settings.traces_url), settings.traces_url, warn)
    resource, scope = _resource(env_service), InstrumentationScope("weft", __version__)
    spans = runs = 0
    batch: list[ReadableSpan] = []
    records = journal_records(execution, workflow=workflow, parent=settings.parent, capture=capture)
    for record in records:
        spans += 1
        runs += record.parent_id is None or record.remote_parent
        batch.append(readable(record, resource, scope))
        if len(batch) >= EXPORT_BATCH:
            exporter.export(batch)
            batch = []
            if exporter.failed:
                break  # said once; the rest would fail the same way
    if batch and not exporter.failed:
        exporter.export(batch)
    exporter.shutdown()
    return spans, runs, not exporter.failed


__all__ = [
    "FLUSH_TIMEOUT",
    "MAX_QUEUE",
    "Shipper",
    "export_journal",
    "journal_records",
    "readable",
]
