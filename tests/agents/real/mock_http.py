"""What both mock model servers share: the thread they serve from, the request
log, the ``MOCK[...]`` directive and the attempt counter.

A test drives a real agent CLI against a local server that plays the model API.
The scenario is chosen from the current turn's prompt: ``MOCK[tools=2]``,
``MOCK[err=429,times=1]`` (keys in each server's docstring). Attempts are counted
per prompt and tool round, so "fail K times, then succeed" can be scripted, and
every request is logged (:attr:`MockServer.requests`) for assertions: which
session sent it, how many messages, what was billed.

The servers are stdlib ``http.server`` on a daemon thread: the CLI under test is
a separate process, so the server's blocking I/O never touches the test's event
loop. A ``hang`` scenario holds its connection until the client goes away or the
server closes.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_DIRECTIVE = re.compile(r"MOCK\[([^\]]*)\]")
HANG_LIMIT_S = 60.0
"""Longest a ``hang`` holds a connection (a test's idle deadline is far shorter)."""


def directive(text: str) -> dict[str, str]:
    """The keys of the first ``MOCK[k=v,flag]`` in ``text`` (a flag maps to "")."""
    m = _DIRECTIVE.search(text)
    if m is None:
        return {}
    keys: dict[str, str] = {}
    for part in m.group(1).split(","):
        key, _, value = part.strip().partition("=")
        if key:
            keys[key] = value
    return keys


@dataclass
class Billed:
    """The usage one response reported, as the model API bills it."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_creation: int = 0


@dataclass
class Request:
    """One logged request."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any = None
    prompt: str = ""
    """The current turn's prompt (the scenario comes from it)."""
    rounds: int = 0
    """Tool rounds already done in this turn."""
    attempt: int = 0
    """1 for the first request with this prompt and round, 2 for a retry..."""
    keys: dict[str, str] = field(default_factory=dict)
    billed: Billed | None = None
    """The usage the answer reported (None: an error or a cut stream)."""
    partial: Billed | None = None
    """A cut stream's usage as its ``message_start`` reported it (the CLI may or
    may not count it, depending on whether it read that event before the cut)."""
    partial_full: Billed | None = None
    """The cut message's whole usage: the CLI may count as many of its output
    tokens as it read text before the cut (seen under load)."""
    outcome: str = ""
    at: float = field(default_factory=time.time)
    """When the request arrived (epoch seconds)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class MockServer:
    """A model API on ``127.0.0.1:<port>``; subclasses supply the handler."""

    handler: type[BaseHTTPRequestHandler]

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._attempts: Counter[tuple[str, int, str]] = Counter()
        self._lock = threading.Lock()
        self.closing = threading.Event()
        owner = self

        class Handler(self.handler):  # type: ignore[misc, name-defined]
            mock = owner

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MockServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def log(self, request: Request, *, stream: bool) -> Request:
        """Count the attempt (streaming and non-streaming separately) and keep the request."""
        with self._lock:
            key = (request.prompt, request.rounds, "s" if stream else "n")
            self._attempts[key] += 1
            request.attempt = self._attempts[key]
            request.keys = directive(request.prompt)
            self.requests.append(request)
        return request

    def posts(self, marker: str = "") -> list[Request]:
        """The logged model calls whose prompt holds ``marker``."""
        return [r for r in self.requests if r.method == "POST" and marker in r.prompt]

    def billed(self, marker: str = "") -> list[Billed]:
        """What the answers to the calls with ``marker`` reported, in order."""
        return [r.billed for r in self.posts(marker) if r.billed is not None]

    def session_calls(self, header: str, session_id: str | None) -> list[Request]:
        """The logged model calls whose ``header`` names ``session_id``."""
        return [r for r in self.posts() if r.headers.get(header) == session_id]


class Handler(BaseHTTPRequestHandler):
    """Shared plumbing of the two handlers."""

    mock: MockServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is the record."""

    def read_json(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self, headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def sse(self, event: str, data: Any) -> None:
        """One SSE event as one HTTP chunk."""
        payload = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def end_sse(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def cut(self) -> None:
        """Drop the connection mid-stream (no final chunk)."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(2)

    def hang(self) -> None:
        """Say nothing until the client leaves (or the server closes)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self.mock.closing.wait(HANG_LIMIT_S)
        self.close_connection = True

    def headers_dict(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}
