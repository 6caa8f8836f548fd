"""OpenTelemetry traces of Weft runs (issue 38): off by default, nothing imported when off.

Pieces, one job each:

- :mod:`weft.telemetry.settings` (no OpenTelemetry import): whether export is on
  (``--otel``, the runtime setting ``telemetry``, the standard ``OTEL_*`` variables),
  the deterministic trace and span ids of a run, ``TRACEPARENT`` parsing, and the
  environment a codon's agent gets so its own spans nest under the codon's.
- :mod:`weft.telemetry.spans`: the pure mapping, a fold of journaled events into
  finished span records (run -> codon -> attempt -> session -> tool calls; rig
  setup, checkpoints, sentinel calls; budget, breaker and session events as span
  events) with ``gen_ai.*`` attributes named by ``opentelemetry-semantic-conventions``
  and costs read from the one fold (:mod:`weft.progress`). No I/O, no clock.
- :mod:`weft.telemetry.export`: the SDK side: span records to OTLP/HTTP through a
  ``BatchSpanProcessor`` (its own thread, bounded queue), one warning when the
  collector cannot be reached, a bounded wait at the end; and the export of a
  finished execution's journal (``weft export-trace``).
- :mod:`weft.telemetry.metrics`: a live run's metrics (tokens, durations, cost,
  outcomes, retries, breaker states), recorded from the finished spans.
- :mod:`weft.telemetry.sink`: the live road: a StateManager listener that feeds
  every committed event to the fold and hands finished spans to the exporter, and
  gives each codon's agent its trace context.
- :mod:`weft.telemetry.batch`: a ``weft batch run``'s trace: a coordinator
  listener folding committed batch changes into batch -> workstream -> step
  spans, and each step launch's ``TRACEPARENT`` (its step span), under which the
  hank step's run nests.

The package itself imports nothing: ``weft run`` and ``weft batch run`` without
telemetry never load OpenTelemetry (``tests/cli/test_imports.py``,
``tests/telemetry/test_batch_trace.py``).
"""
