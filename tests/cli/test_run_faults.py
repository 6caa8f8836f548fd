"""`weft run` ends on time whatever its clients do.

Each test starts a real ``weft run`` with its WebSocket server, attaches
clients that misbehave at the socket level (they hand-shake and then never
read, with a 4 KiB receive buffer), and checks that the run still ends as it
says: its summary printed, its exit code the documented one, within a stated
grace. Before the fix, a run whose last events were stuck behind such clients
waited for their close handshakes forever, and a SIGTERM then killed it by
signal (-15) instead of exiting 143.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.runtime.hanks import codon, scenario, write_hank
from tests.server.helpers import stalled_client
from tests.web.browser import child_environment

from weft.server.auth import read_read_token, read_token

GRACE = 15.0
"""Seconds a run may take to end once its work is done or it is told to stop:
the server's close grace plus a loaded machine's margin."""


def _start(tmp_path: Path, hank: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    execution = tmp_path / "execution"
    argv = [sys.executable, "-m", "weft", "run", str(hank), "--execution", str(execution)]
    process = subprocess.Popen(
        [*argv, "--headless", *extra],
        env=child_environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    return process, execution


def _port(process: subprocess.Popen[bytes], execution: Path) -> int:
    lock = execution / ".weft" / "runtime.lock"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out = process.stdout.read().decode(errors="replace") if process.stdout else ""
            pytest.fail(f"weft run exited early ({process.returncode}):\n{out[-3000:]}")
        try:
            port = json.loads(lock.read_text()).get("port")
        except (OSError, ValueError):
            port = None
        if port:
            return int(port)
        time.sleep(0.02)
    pytest.fail("no port in the lock file")


def _wait_ended(process: subprocess.Popen[bytes], within: float) -> tuple[int, str]:
    try:
        out, _ = process.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        pytest.fail(f"weft run still running {within} s later:\n{out.decode()[-3000:]}")
    return process.returncode, out.decode(errors="replace")


@pytest.fixture
def flooding_hank(tmp_path: Path) -> Path:
    # A codon that works 3 s (the clients attach meanwhile), then one that says
    # 3 MB: far more than two 4 KiB readers and the sockets' buffers take.
    return write_hank(
        tmp_path / "hank",
        codon("slow", scenario("sigterm,lines=10,interval_ms=300") + "Work slowly."),
        codon("flood", FLOOD),
    )


FLOOD = "".join(f"@@fake:say {'y' * 30_000} {i}@@\n" for i in range(100))
"""A prompt the fake agent answers with 3 MB of text (and the plan holds it too)."""


def test_clients_that_never_read_do_not_keep_a_finished_run_alive(
    tmp_path: Path, flooding_hank: Path
) -> None:
    process, execution = _start(tmp_path, flooding_hank)
    port = _port(process, execution)
    reader = read_read_token(execution / ".weft")
    assert reader
    with stalled_client(port, reader), stalled_client(port, reader):
        code, out = _wait_ended(process, 60 + GRACE)
    assert code == 0, out[-3000:]
    assert "All codons completed" in out, out[-3000:]
    assert "Run completed" in out, out[-3000:]  # the summary, after the server closed


def test_sigterm_with_stalled_clients_ends_with_143(tmp_path: Path, flooding_hank: Path) -> None:
    process, execution = _start(tmp_path, flooding_hank)
    port = _port(process, execution)
    reader = read_read_token(execution / ".weft")
    assert reader
    with stalled_client(port, reader), stalled_client(port, reader):
        time.sleep(5.0)  # mid-flood, or already at the end: either way a stop is honoured
        process.send_signal(signal.SIGTERM)
        code, out = _wait_ended(process, GRACE)
    assert code in (0, 143), out[-3000:]  # ended on its own meanwhile, or stopped
    assert code != -signal.SIGTERM


def test_a_shutdown_command_with_stalled_clients_ends_the_waiting_run(tmp_path: Path) -> None:
    flood = codon("flood", FLOOD)
    process, execution = _start(tmp_path, write_hank(tmp_path / "hank", flood), "--no-autostart")
    port = _port(process, execution)
    weft_dir = execution / ".weft"
    reader = read_read_token(weft_dir)
    writer = read_token(weft_dir)
    assert reader
    assert writer
    with stalled_client(port, reader), stalled_client(port, reader):
        time.sleep(0.3)
        _command(port, writer, "codon.next")
        _wait_for_event(execution, "RunCompleted", 60)
        answer = _command(port, writer, "server.shutdown")
        assert answer.get("type") != "error", answer
        code, out = _wait_ended(process, GRACE)
    assert code == 0, out[-3000:]


def _wait_for_event(execution: Path, kind: str, within: float) -> None:
    from weft.store import Journal

    database = execution / ".weft" / "weft.db"
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if database.exists():
            journal = Journal.open(database, readonly=True, check=False)
            try:
                if journal.last_of_type(kind) is not None:
                    return
            finally:
                journal.close()
        time.sleep(0.1)
    pytest.fail(f"no {kind} in the journal after {within} s")


def _command(port: int, token: str, command: str) -> dict[str, object]:
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{port}/", max_size=None) as ws:
        ws.send(json.dumps({"type": "handshake", "data": {"mode": "readandwrite", "token": token}}))
        ws.send(json.dumps({"id": "t1", "type": command}))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = json.loads(ws.recv(timeout=30))
            data = msg.get("data") or {}
            if isinstance(data, dict) and data.get("commandId") == "t1":
                answer: dict[str, object] = msg
                return answer
    pytest.fail(f"no answer to {command}")
