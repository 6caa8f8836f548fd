"""When traces are exported, where, and under which ids (no OpenTelemetry import).

Export is on when it is asked for: ``--otel`` (or ``--no-otel`` to refuse it), the
runtime setting ``telemetry: true`` in weft.json, or the standard variables
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``;
``OTEL_SDK_DISABLED=true`` and ``OTEL_TRACES_EXPORTER=none`` keep it off, as they
do for every OpenTelemetry SDK.

Ids are derived, not drawn: a run's trace id and every span id are hashes of the
run id and the span's place in the run (:func:`span_id`), so the live export and
``weft export-trace`` of the same journal send the same spans, and a second
export of an execution replaces nothing a backend keyed by id already holds. The
user's ``TRACEPARENT`` (from CI, from a caller) puts the run inside its trace.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_ENDPOINT = "http://localhost:4318"
"""Where ``--otel`` or the setting alone sends traces: an OTLP/HTTP receiver on
this machine (the OpenTelemetry default for http/protobuf)."""

CAPTURE_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' opt-in for prompt and output content (read through
``opentelemetry-util-genai``); unset, none is sent."""

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

_NOT_FOR_AGENTS = frozenset({"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SDK_DISABLED"})
"""Variables that describe Weft's own service: the agent names itself."""

AGENT_DEFAULTS = {
    # Claude Code exports nothing unless told to (its monitoring guide); the
    # enhanced-telemetry beta is what emits spans, and it reads TRACEPARENT.
    "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
    "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
    "OTEL_TRACES_EXPORTER": "otlp",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
}
"""What a codon's agent gets unless the environment already says otherwise."""


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A W3C trace context: the trace a run joins and the span it hangs under."""

    trace_id: int
    span_id: int
    sampled: bool = True

    def header(self) -> str:
        """The ``traceparent`` text of this context."""
        flags = "01" if self.sampled else "00"
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags}"


def parse_traceparent(text: str | None) -> TraceParent | None:
    """The context of a ``TRACEPARENT`` value; None when absent or malformed
    (a bad value from a caller must not stop a run: the run starts its own trace)."""
    if not text:
        return None
    found = _TRACEPARENT.match(text.strip().lower())
    if found is None:
        return None
    trace_id, span_id = int(found.group(1), 16), int(found.group(2), 16)
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, sampled=bool(int(found.group(3), 16) & 1))


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """Export is on, to :attr:`endpoint` (a base URL, ``/v1/traces`` is appended
    unless the traces variable named the full URL)."""

    endpoint: str
    traces_url: str
    parent: TraceParent | None = None
    asked_by: str = "OTEL_EXPORTER_OTLP_ENDPOINT"
    """What turned it on, for messages: ``--otel``, ``telemetry in weft.json``, a variable."""
    timeout_set: bool = False
    """``OTEL_EXPORTER_OTLP_TIMEOUT`` (or its traces form) is set: the SDK reads it."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def resolve(
    env: Mapping[str, str], *, flag: bool | None = None, setting: bool = False
) -> TelemetrySettings | None:
    """The export settings in force, or None when export is off.

    ``flag``: ``--otel`` (True) or ``--no-otel`` (False), None when neither was given.
    """
    if _truthy(env.get("OTEL_SDK_DISABLED")) or flag is False:
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none" and flag is not True:
        return None
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if flag:
        asked = "--otel"
    elif setting:
        asked = "telemetry in weft.json"
    elif traces:
        asked = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    elif base:
        asked = "OTEL_EXPORTER_OTLP_ENDPOINT"
    else:
        return None
    endpoint = (base or DEFAULT_ENDPOINT).rstrip("/")
    return TelemetrySettings(
        endpoint=endpoint,
        traces_url=traces or f"{endpoint}/v1/traces",
        parent=parse_traceparent(env.get("TRACEPARENT")),
        asked_by=asked,
        timeout_set=any(
            env.get(name)
            for name in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        ),
    )


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(parts).encode()).digest()


def run_scope(execution_id: str, run_id: str) -> str:
    """What a run's ids are derived from: the execution's id (its folder's name,
    as ``weft ls`` shows it) and the run's (its start in ms and 25 random bits)."""
    return f"{execution_id}\0{run_id}"


def trace_id(scope: str, parent: TraceParent | None = None) -> int:
    """The trace of the run of ``scope`` (:func:`run_scope`): the caller's when
    there is one, else derived from the scope."""
    if parent is not None:
        return parent.trace_id
    return int.from_bytes(_digest("weft-trace", scope)[:16], "big") or 1


def span_id(scope: str, key: str) -> int:
    """The id of the span at ``key`` in the run of ``scope`` (never 0, which OTLP refuses)."""
    return int.from_bytes(_digest("weft-span", scope, key)[:8], "big") or 1


def attempt_key(codon_id: str, start_time: str) -> str:
    """The key of one codon attempt: its codon and the start its ``CodonStarted`` records
    (what the runner building the agent's environment and the fold both know)."""
    return f"attempt\0{codon_id}\0{start_time}"


def agent_env(
    settings: TelemetrySettings, env: Mapping[str, str], scope: str, codon_id: str, start: str
) -> dict[str, str]:
    """The variables a codon's agent gets: its attempt span as ``TRACEPARENT`` and
    the exporter settings (the parent's ``OTEL_*`` variables, then the defaults)."""
    out = {
        name: value
        for name, value in env.items()
        if name.startswith("OTEL_") and name not in _NOT_FOR_AGENTS
    }
    out.setdefault("OTEL_EXPORTER_OTLP_ENDPOINT", settings.endpoint)
    for name, value in AGENT_DEFAULTS.items():
        out.setdefault(name, value)
    parent = TraceParent(
        trace_id(scope, settings.parent), span_id(scope, attempt_key(codon_id, start))
    )
    out["TRACEPARENT"] = parent.header()
    return out


__all__ = [
    "AGENT_DEFAULTS",
    "CAPTURE_VAR",
    "DEFAULT_ENDPOINT",
    "TelemetrySettings",
    "TraceParent",
    "agent_env",
    "attempt_key",
    "parse_traceparent",
    "resolve",
    "run_scope",
    "span_id",
    "trace_id",
]
