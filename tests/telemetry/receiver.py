"""A real OTLP/HTTP receiver of traces and metrics for the tests, on loopback.

It decodes each request with the official ``opentelemetry-proto`` messages
(``ExportTraceServiceRequest``, ``ExportMetricsServiceRequest``), as a
collector does, so a test passes only on what the SDK really put on the wire;
``refuse`` answers 403 instead (a collector that rejects us), and
:func:`closed_port` gives a port nobody listens on (a collector that is down).
Arize Phoenix would do the same job but takes minutes to install (see
docs/telemetry.md).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Span:
    """One received span, decoded."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: int
    """0 unset, 1 ok, 2 error."""
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attrs(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


@dataclass(frozen=True)
class Point:
    """One received metric data point: a sum's or gauge's value, or a histogram's
    sum and count."""

    metric: str
    attributes: dict[str, Any]
    value: float
    count: int = 0


@dataclass
class Receiver:
    """What a running receiver got."""

    url: str
    refuse: bool = False
    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    """Every metric point of every request (cumulative points repeat: use the last)."""
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, request: ExportTraceServiceRequest) -> None:
        with self.lock:
            self.requests += 1
            for rs in request.resource_spans:
                resource = _attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(
                            Span(
                                name=s.name,
                                trace_id=s.trace_id.hex(),
                                span_id=s.span_id.hex(),
                                parent_id=s.parent_span_id.hex(),
                                start_ns=s.start_time_unix_nano,
                                end_ns=s.end_time_unix_nano,
                                attributes=_attrs(s.attributes),
                                events=[(e.name, _attrs(e.attributes)) for e in s.events],
                                status=s.status.code,
                                resource=resource,
                            )
                        )

    def take_metrics(self, request: ExportMetricsServiceRequest) -> None:
        with self.lock:
            self.requests += 1
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            if kind == "histogram":
                                point = Point(m.name, _attrs(p.attributes), p.sum, p.count)
                            else:
                                value = p.as_double if p.HasField("as_double") else p.as_int
                                point = Point(m.name, _attrs(p.attributes), value)
                            self.points.append(point)

    def last(self, metric: str) -> list[Point]:
        """The newest point of each attribute set of ``metric`` (cumulative figures)."""
        with self.lock:
            newest: dict[str, Point] = {}
            for p in self.points:
                if p.metric == metric:
                    newest[repr(sorted(p.attributes.items()))] = p
        return list(newest.values())


@contextmanager
def otlp_receiver(*, refuse: bool = False) -> Iterator[Receiver]:
    """Runs a receiver on 127.0.0.1 (a free port) for the ``with`` block."""
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            receiver = holder[0]
            if receiver.refuse or self.path not in ("/v1/traces", "/v1/metrics"):
                self.send_response(403 if receiver.refuse else 404)
                self.end_headers()
                return
            if self.path == "/v1/metrics":
                metrics = ExportMetricsServiceRequest()
                metrics.ParseFromString(body)
                receiver.take_metrics(metrics)
                reply = ExportMetricsServiceResponse().SerializeToString()
            else:
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.take(request)
                reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(url=f"http://127.0.0.1:{server.server_address[1]}", refuse=refuse))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
