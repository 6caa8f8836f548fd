"""``weft ui``: the list of the machine's executions and opening one, over
plain HTTP and WebSocket (the browser side is in test_browser.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.web.browser import HELLO, child_environment, journal_end
from tests.web.test_pages import get
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from weft.web.listing import list_executions, read_execution
from weft.web.machine import MachineDashboard


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with one execution of examples/hello, run to the end."""
    tmp = tmp_path_factory.mktemp("machine")
    execution = tmp / "executions" / "hello-1"
    argv = [sys.executable, "-m", "weft", "run", str(HELLO), "--execution", str(execution)]
    done = subprocess.run(
        [*argv, "--headless"],
        env=child_environment(tmp),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return execution.parent


@asynccontextmanager
async def ui(root: Path) -> AsyncIterator[MachineDashboard]:
    dashboard = MachineDashboard(root)
    await dashboard.start()
    try:
        yield dashboard
    finally:
        await dashboard.close()


def bearer(token: str) -> str:
    return f"Authorization: Bearer {token}"


def test_the_list_reads_state_hank_cost_and_codons_from_files(finished: Path) -> None:
    (finished / "not-an-execution").mkdir(exist_ok=True)
    entries = list_executions(finished)
    assert [e.id for e in entries] == ["hello-1"]
    entry = entries[0]
    assert (entry.hank, entry.state, entry.codons) == ("hello", "completed", 6)
    assert entry.cost > 0
    assert entry.port is None
    assert read_execution(finished / "not-an-execution") is None
    assert list_executions(finished / "missing") == []


async def test_the_api_needs_the_token_in_a_header(finished: Path) -> None:
    async with ui(finished) as d:
        for headers in ((), (bearer("wrong"),), ("Authorization: Basic x",)):
            status, _, body = await get(d.port, "/api/executions", *headers)
            assert status == 401, headers
            assert b"Authorization: Bearer" in body
        # A token in the query string is not accepted (it would end up in logs).
        status, _, _ = await get(d.port, f"/api/executions?token={d.token}")
        assert status == 401
        status, headers, body = await get(d.port, "/api/executions", bearer(d.token))
        assert status == 200
        assert headers["cache-control"] == "no-store"
        doc = json.loads(body)
        assert doc["root"] == str(finished)
        assert [(e["id"], e["state"], e["live"]) for e in doc["executions"]] == [
            ("hello-1", "completed", False)
        ]
        # The list page itself is public: it holds no data, only the login.
        status, _, page = await get(d.port, "/")
        assert status == 200
        assert b"list.js" in page


async def test_opening_a_finished_execution_replays_its_journal_read_only(finished: Path) -> None:
    async with ui(finished) as d:
        status, _, body = await get(d.port, "/api/open/hello-1", bearer(d.token))
        assert status == 200
        target = json.loads(body)
        assert target["mode"] == "readonly"
        assert target["live"] is False
        ws_url = target["url"].replace("http", "ws", 1)
        end = journal_end(finished / "hello-1")
        async with connect(ws_url, max_size=None) as ws:
            # The replay token does not steer.
            hello = {"mode": "readandwrite", "token": target["token"]}
            await ws.send(json.dumps({"type": "handshake", "data": hello}))
            assert json.loads(await ws.recv())["data"]["code"] == "INVALID_TOKEN"
            hello = {"mode": "readonly", "token": target["token"], "afterSeq": 0}
            await ws.send(json.dumps({"type": "handshake", "data": hello}))
            seqs: list[int] = []
            while not seqs or seqs[-1] < end:
                msg: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if msg["type"] == "history.batch":
                    seqs += [e["seq"] for e in msg["data"]["events"]]
            assert seqs == list(range(1, end + 1))
            await ws.send(json.dumps({"id": 1, "type": "codon.next"}))
            refusal = json.loads(await ws.recv())
            assert refusal["data"]["code"] == "INSUFFICIENT_PERMISSIONS"
        # Opening again reuses the same replay server.
        _, _, again = await get(d.port, "/api/open/hello-1", bearer(d.token))
        assert json.loads(again)["url"] == target["url"]


async def test_replaying_a_finished_execution_does_not_make_it_look_new(finished: Path) -> None:
    """Issue 23's audit: the replay's reader created ``weft.db-wal``, whose time
    was taken as the execution's "updated", so looking at it reset its age."""
    weft_dir = finished / "hello-1" / ".weft"
    an_hour_ago = time.time() - 3600
    for path in weft_dir.iterdir():
        if path.is_file():
            os.utime(path, (an_hour_ago, an_hour_ago))
    before = read_execution(finished / "hello-1")
    assert before is not None
    assert before.updated == pytest.approx(an_hour_ago)
    async with ui(finished) as d:
        _, _, body = await get(d.port, "/api/open/hello-1", bearer(d.token))
        target = json.loads(body)
        end = journal_end(finished / "hello-1")
        async with connect(target["url"].replace("http", "ws", 1), max_size=None) as ws:
            hello = {"mode": "readonly", "token": target["token"], "afterSeq": 0}
            await ws.send(json.dumps({"type": "handshake", "data": hello}))
            last = 0
            while last < end:
                msg: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if msg["type"] == "history.batch" and msg["data"]["events"]:
                    last = msg["data"]["events"][-1]["seq"]
        assert (weft_dir / "weft.db-wal").exists()  # the reader's; it must not count
        during = read_execution(finished / "hello-1")
        _, _, listing = await get(d.port, "/api/executions", bearer(d.token))
    after = read_execution(finished / "hello-1")
    assert during is not None
    assert after is not None
    assert during.updated == after.updated == before.updated
    (entry,) = json.loads(listing)["executions"]
    assert entry["ageSeconds"] >= 3600


@pytest.mark.parametrize("ident", ["nope", "..", "..%2Fhello-1", "hello-1/.weft"])
async def test_opening_what_is_not_an_execution_under_the_root_is_404(
    finished: Path, ident: str
) -> None:
    async with ui(finished) as d:
        status, _, body = await get(d.port, f"/api/open/{ident}", bearer(d.token))
        assert status == 404, body


async def test_the_ui_port_has_no_websocket_endpoint(finished: Path) -> None:
    async with ui(finished) as d:
        with pytest.raises(InvalidStatus) as caught:
            async with connect(f"ws://127.0.0.1:{d.port}/"):
                pass
        assert caught.value.response.status_code == 404


def test_weft_ui_prints_its_address_and_keeps_the_token_out_of_a_log(
    finished: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "ui.token"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "weft",
            "ui",
            "--root",
            str(finished),
            "--token-file",
            str(token_file),
        ],
        env=child_environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"Dashboard of {finished}: http://127.0.0.1:"), line
        token = token_file.read_text().strip()
        assert token
        assert token not in line
        assert token_file.stat().st_mode & 0o077 == 0
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=10)
    assert process.returncode == 0, out
    assert token not in out


def test_weft_ui_help_states_its_own_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """``weft ui`` exits 0 on SIGTERM (tested above) and has no "run failed": its help
    says so, not the table the other commands share (1 a run failed, 143 on SIGTERM)."""
    from weft.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["ui", "--help"])
    assert exited.value.code == 0
    codes = capsys.readouterr().out.split("exit codes:", 1)[1]
    assert "0    stopped by SIGTERM" in codes
    assert "130  interrupted by Ctrl-C" in codes
    assert "143" not in codes
    assert "the run failed" not in codes
