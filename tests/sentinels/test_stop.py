"""A sentinel's model that never answers holds nothing up.

Each test runs a real ``weft run`` whose sentinel calls the real Anthropic
SDK against a local endpoint that accepts every request and never answers a
byte. Before the bound, each call waited for the SDK's 120 s timeout (three
triggers: six minutes in ``completing-sentinels``) and a SIGTERM during that
drain left the process alive for minutes. Now each call has
``sentinel.callTimeoutMs`` in all, and a stop abandons the queued triggers
and cancels the calls (docs/sentinels.md, "Failure handling").
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.runtime.hanks import codon, subprocess_environment, write_file, write_hank
from tests.sentinels.test_host import sentinel

GRACE = 15.0
"""Seconds a stop may take: the agent's stop grace plus a loaded machine's margin."""


class SilentApi:
    """Accepts connections and reads requests; ``silent``: never answers;
    ``trickle``: answers the headers of a 200 and then one byte of its body
    every 0.3 s (every read of the SDK succeeds, so its own per-read timeout
    never trips); ``reset``: drops the connection on the request."""

    def __init__(self, mode: str = "silent") -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._held.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                if b"POST " not in data:
                    continue
                self.requests += 1
                if self.mode == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                    conn.close()
                    return
                if self.mode == "trickle":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: 100000\r\n\r\n"
                    )
                    while True:
                        time.sleep(0.3)
                        conn.sendall(b" ")

    def close(self) -> None:
        self.sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture(params=["silent"])
def silent_api(request: pytest.FixtureRequest) -> Iterator[SilentApi]:
    api = SilentApi(request.param)
    try:
        yield api
    finally:
        api.close()


def _hank(tmp_path: Path, *, codons: int = 1) -> Path:
    watcher = sentinel(
        "watcher",
        model="anthropic/claude-haiku-4-5",
        trigger={"type": "event", "on": ["tool.result"]},
    )
    work = "".join(write_file(f"f{i}.md", f"file {i}") for i in range(3))  # three triggers
    first = codon("work", work, sentinels=[watcher])
    rest = [codon(f"after{i}", write_file(f"a{i}.md", "later")) for i in range(codons - 1)]
    return write_hank(tmp_path / "hank", first, *rest)


def _env(tmp_path: Path, api: SilentApi, **extra: str) -> dict[str, str]:
    env = subprocess_environment(tmp_path)
    env.update(
        ANTHROPIC_API_KEY="sk-ant-test-not-a-real-key",
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{api.port}",
        **extra,
    )
    return env


def _journal_has(execution: Path, where: str) -> bool:
    database = execution / ".weft" / "weft.db"
    if not database.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            row = db.execute(f"SELECT 1 FROM events WHERE {where} LIMIT 1").fetchone()
    except sqlite3.Error:
        return False
    return row is not None


def _payloads(execution: Path, kind: str) -> list[str]:
    database = execution / ".weft" / "weft.db"
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT payload FROM events WHERE type = ?", (kind,)).fetchall()
    return [bytes(r[0]).decode() if not isinstance(r[0], str) else r[0] for r in rows]


@pytest.mark.parametrize("silent_api", ["silent", "trickle", "reset"], indirect=True)
def test_each_call_to_a_silent_model_ends_at_its_timeout(
    tmp_path: Path, silent_api: SilentApi
) -> None:
    execution = tmp_path / "execution"
    env = _env(tmp_path, silent_api, WEFT_RUNTIME_SENTINEL_CALL_TIMEOUT_MS="1500")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "weft", "run", str(_hank(tmp_path)), "--execution", str(execution),
         "--headless"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert silent_api.requests >= 1
    errors = _payloads(execution, "sentinel.error")
    said = "did not answer within 1.5 s" if silent_api.mode != "reset" else "onnection"
    assert [e for e in errors if said in e], errors
    # Three calls of at most 1.5 s each, one at a time, plus the run itself:
    # far below one call of the SDK's own 120 s.
    assert took < 3 * 1.5 + 30, took


@pytest.mark.parametrize("into_the_call", [0.05, 1.0])
def test_sigterm_during_the_drain_abandons_the_calls_and_stops(
    tmp_path: Path, silent_api: SilentApi, into_the_call: float
) -> None:
    execution = tmp_path / "execution"
    process = subprocess.Popen(
        [sys.executable, "-m", "weft", "run", str(_hank(tmp_path, codons=2)),
         "--execution", str(execution), "--headless"],
        env=_env(tmp_path, silent_api), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _journal_has(execution, "payload LIKE '%completing-sentinels%'"):
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "the codon never reached its drain"
            time.sleep(0.05)
        time.sleep(into_the_call)  # inside a call that never returns (60 s by default)
        assert silent_api.requests >= 1
        stopped_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=GRACE)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    took = time.monotonic() - stopped_at
    text = out.decode(errors="replace")
    assert process.returncode == 128 + signal.SIGTERM, text[-3000:]
    assert took < GRACE
    assert "Sentinel work abandoned: Weft is stopping" in text, text[-3000:]
    unloads = _payloads(execution, "sentinel.unloaded")
    assert any('"shutdown"' in u for u in unloads), unloads
    # The codon's work was done: it completed; the next one stays to do.
    assert _journal_has(execution, "type = 'RunStopped'")
