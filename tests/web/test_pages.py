"""The dashboard over plain HTTP on a run's port (no browser): what each
request gets, and that tokens never travel where they could be logged."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.server.helpers import TOKEN, raw, running
from tests.web.browser import HELLO, child_environment
from websockets.datastructures import Headers
from websockets.http11 import Request

from weft.web import dashboard_response, dashboard_url
from weft.web.assets import asset, names

HTML = "text/html,application/xhtml+xml"


async def get(port: int, path: str, *headers: str) -> tuple[int, dict[str, str], bytes]:
    """One plain HTTP/1.1 GET: status, headers (lower-case names), body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = "".join(f"{h}\r\n" for h in headers)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n".encode())
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in fields.items()}, body


def request(path: str, **headers: str) -> Request:
    return Request(path, Headers(headers))


def test_every_shipped_file_has_a_type_and_the_pages_load_only_their_own_scripts() -> None:
    assert {"index.html", "app.js", "style.css", "list.html", "list.js"} <= set(names())
    for name in names():
        found = asset(name)
        assert found is not None, name
    for page in ("index.html", "list.html"):
        html = asset(page)
        assert html is not None
        text = html.body.decode()
        # No CDN, no inline script: everything comes from this server.
        assert "http://" not in text
        assert "https://" not in text
        assert "<script>" not in text


@given(st.text(min_size=1, max_size=60))
def test_a_static_path_never_reaches_outside_the_static_folder(name: str) -> None:
    answer = dashboard_response(request("/static/" + name, Accept=HTML))
    assert answer is not None
    if name in names():
        assert answer.status_code == 200
    else:
        assert answer.status_code == 404
        assert answer.body == b"not found\n"


@pytest.mark.parametrize(
    "path", ["/static/../server.py", "/static/%2e%2e/pages.py", "/static/", "/static/x/app.js"]
)
def test_paths_outside_the_shipped_files_are_404(path: str) -> None:
    answer = dashboard_response(request(path))
    assert answer is not None
    assert answer.status_code == 404


def test_the_dashboard_url_carries_the_token_in_the_fragment_only() -> None:
    class Server:
        url = "ws://127.0.0.1:4242"

    assert dashboard_url(Server()) == "http://127.0.0.1:4242/"
    assert dashboard_url(Server(), "abc") == "http://127.0.0.1:4242/#token=abc"


async def test_a_browser_gets_the_dashboard_and_a_script_still_gets_the_400_json(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, events=3) as h:
        port = h.server.port
        status, headers, body = await get(port, "/", f"Accept: {HTML}")
        assert status == 200
        assert headers["content-type"].startswith("text/html")
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "default-src 'none'" in csp
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["x-frame-options"] == "DENY"
        assert b'src="/static/app.js"' in body
        # A client that does not ask for HTML learns how to connect, as before.
        status, headers, body = await get(port, "/")
        assert status == 400
        assert headers["content-type"] == "application/json"
        assert b"dashboard" in body
        status, headers, body = await get(port, "/static/app.js")
        assert status == 200
        assert headers["content-type"].startswith("text/javascript")
        etag = headers["etag"]
        status, _, body = await get(port, "/static/app.js", f"If-None-Match: {etag}")
        assert (status, body) == (304, b"")
        status, _, _ = await get(port, "/favicon.ico", f"Accept: {HTML}")
        assert status == 204
        status, _, _ = await get(port, "/static/nothing.js")
        assert status == 404


async def test_the_page_and_its_requests_never_see_or_log_a_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # INFO: what an operator turns on (Weft configures no logging; websockets'
    # DEBUG level dumps every frame by design and is not for production).
    caplog.set_level(logging.INFO)
    async with running(tmp_path, events=3) as h, raw(h.url) as c:
        await c.send({"type": "handshake", "data": {"mode": "readandwrite", "token": TOKEN}})
        assert (await c.recv())["type"] == "handshake.response"
        # A token in a query string is not a way in: the page is the same for everyone.
        with_query = await get(h.server.port, f"/?token={TOKEN}", f"Accept: {HTML}")
        without = await get(h.server.port, "/", f"Accept: {HTML}")
        assert with_query[0] == without[0] == 200
        assert with_query[2] == without[2]
        assert TOKEN.encode() not in with_query[2]
        assert h.server.read_token.encode() not in with_query[2]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert TOKEN not in logged
    assert h.server.read_token not in logged


def test_weft_run_prints_the_dashboard_url_without_a_token_when_not_on_a_terminal(
    tmp_path: Path,
) -> None:
    execution = tmp_path / "executions" / "x"
    argv = [sys.executable, "-m", "weft", "run", str(HELLO), "--execution", str(execution)]
    done = subprocess.run(
        [*argv, "--headless"],
        env=child_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    line = next(x for x in output.splitlines() if "Dashboard: http://127.0.0.1:" in x)
    assert f"token: {execution / '.weft' / 'server.token'}" in line
    weft_dir = execution / ".weft"
    for secret in ("server.token", "server-read.token"):
        token = (weft_dir / secret).read_text().strip()
        assert token not in output
        for log in weft_dir.rglob("*.log"):
            assert token not in log.read_text(errors="replace"), log
    assert os.stat(weft_dir / "server.token").st_mode & 0o077 == 0


def test_weft_run_on_a_terminal_prints_the_dashboard_url_with_the_token_in_the_fragment(
    tmp_path: Path,
) -> None:
    import pty
    import select
    import time

    execution = tmp_path / "executions" / "x"
    argv = [sys.executable, "-m", "weft", "run", str(HELLO), "--execution", str(execution)]
    env = child_environment(tmp_path)
    pid, fd = pty.fork()
    if pid == 0:  # the child: weft on a terminal
        os.execvpe(sys.executable, [*argv, "--headless"], env)
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    _, status = os.waitpid(pid, 0)
    text = output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text[-2000:]
    token = (execution / ".weft" / "server.token").read_text().strip()
    line = next(x for x in text.splitlines() if "Dashboard: " in x)
    assert line.rstrip().endswith(f"/#token={token}"), line
    assert "?token" not in text
