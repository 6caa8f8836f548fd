"""Real parts for the dashboard tests: headless Chromium through Selenium, and
real ``weft run`` / ``weft ui`` processes on the fake agent.

Chromium is Debian's (``apt-get install chromium chromium-driver``); without
it (or without selenium) every browser test is skipped with that reason.
Screenshots go to ``$WEFT_TEST_ARTIFACTS`` (default ``tmp/artifacts/web`` in
the repository), kept by CI as artifacts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from tests.runtime.hanks import subprocess_environment

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "hello"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def artifacts_dir() -> Path:
    """Where screenshots are kept."""
    path = Path(os.environ.get("WEFT_TEST_ARTIFACTS", ROOT / "tmp" / "artifacts")) / "web"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _missing(why: str) -> NoReturn:
    """Skips the test, or fails it where CI promised a browser (``WEFT_REQUIRE_BROWSER=1``,
    set by ``.ci/run`` after installing one), so CI cannot pass without running it."""
    if os.environ.get("WEFT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"WEFT_REQUIRE_BROWSER=1 but {why}")
    pytest.skip(why)


def chromium() -> Any:
    """A headless Chromium driven by Selenium (skips the test when there is none)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install selenium)")
    if CHROMIUM is None or CHROMEDRIVER is None:
        _missing("no chromium / chromedriver (apt-get install chromium chromium-driver)")
    options = Options()
    for flag in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root in a container
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--disable-gpu",
    ):
        options.add_argument(flag)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def wait_for(check: Callable[[], Any], what: str, timeout: float = 20.0, page: Any = None) -> Any:
    """Polls ``check`` until it returns something true; fails saying ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = ""
            if page is not None:
                detail = "\n" + page.find_element("css selector", "body").text[:2000]
            pytest.fail(f"timed out waiting for {what}{detail}")
        time.sleep(0.05)


def stats(page: Any) -> dict[str, int]:
    """The page's counters: events applied, duplicates, gaps, connects, lastSeq."""
    out: dict[str, int] = page.execute_script(
        "const s = window.weftDashboard.state;return Object.assign({lastSeq: s.lastSeq}, s.stats);"
    )
    return out


def journal_end(execution: Path) -> int:
    """The newest seq in the execution's journal."""
    from weft.web.machine import journal_end as end

    return end(execution / ".weft" / "weft.db")


@dataclass
class LiveRun:
    """A ``weft run --no-autostart`` process and what a client needs of it."""

    process: subprocess.Popen[bytes]
    execution: Path
    port: int

    @property
    def token(self) -> str:
        return (self.execution / ".weft" / "server.token").read_text().strip()

    @property
    def read_token(self) -> str:
        return (self.execution / ".weft" / "server-read.token").read_text().strip()

    def url(self, token: str | None) -> str:
        base = f"http://127.0.0.1:{self.port}/"
        return f"{base}#token={token}" if token else base

    def output(self) -> str:
        return (self.execution.parent / f"{self.execution.name}.log").read_text(errors="replace")


def child_environment(tmp_path: Path) -> dict[str, str]:
    """A ``python -m weft`` child that imports this worktree's code."""
    env = subprocess_environment(tmp_path)
    python = str(ROOT / "python")
    env["PYTHONPATH"] = python
    env["WEFT_PYTHONPATH"] = env.get("WEFT_PYTHONPATH", python)
    env["HOME"] = str(tmp_path / "home")
    return env


@contextlib.contextmanager
def live_run(
    tmp_path: Path, name: str = "x", hank: Path = HELLO, *extra: str, autostart: bool = False
) -> Iterator[LiveRun]:
    """Starts ``weft run HANK --no-autostart`` (with ``autostart``: without it) in
    ``tmp_path/executions/name`` and waits for its server's port."""
    execution = tmp_path / "executions" / name
    execution.parent.mkdir(parents=True, exist_ok=True)
    log = (execution.parent / f"{name}.log").open("wb")
    argv = [sys.executable, "-m", "weft", "run", str(hank), "--execution", str(execution)]
    process = subprocess.Popen(
        [*argv, "--headless", *([] if autostart else ["--no-autostart"]), *extra],
        env=child_environment(tmp_path),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        lock = execution / ".weft" / "runtime.lock"

        def port() -> int | None:
            if process.poll() is not None:
                log.flush()
                output = (execution.parent / f"{name}.log").read_text(errors="replace")
                pytest.fail(f"weft run exited ({process.returncode}):\n{output[-2000:]}")
            try:
                value = json.loads(lock.read_text()).get("port")
            except (OSError, ValueError):
                return None
            return int(value) if value else None

        found = wait_for(port, "the run's server port in the lock file")
        yield LiveRun(process, execution, found)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def rows(page: Any, *, pending: bool = True) -> list[tuple[str, str]]:
    """(codon id, state) of each row of the codon table drawn now (without
    ``pending``: the codon records only, not the plan's codons still to do)."""
    found: list[list[str]] = page.execute_script(
        "return [...document.querySelectorAll('#codons tr[data-key]')]"
        ".map(tr => [tr.dataset.codon, tr.dataset.state]);"
    )
    return [(c, s) for c, s in found if pending or s != "pending"]


def cells(page: Any, codon: str) -> list[str]:
    """The texts of a codon's row (codon, state, time, tokens, cost, last action)."""
    found: list[str] = page.execute_script(
        "const tr = [...document.querySelectorAll('#codons tr[data-key]')]"
        ".filter(tr => tr.dataset.codon === arguments[0]).pop();"
        "return tr ? [...tr.cells].map(td => td.textContent) : [];",
        codon,
    )
    return found


def settled(page: Any) -> None:
    """Waits until the page has drawn everything it holds: the heavy panels
    (timeline, checkpoints, chart...) are rebuilt at most every 300 ms."""
    wait_for(
        lambda: page.execute_script("return window.weftDashboard.settled()"),
        "the page to draw what it holds",
        page=page,
    )


def text(page: Any, element_id: str) -> str:
    """An element's text as the page shows it, once it drew what it holds."""
    settled(page)
    found: str = page.find_element("id", element_id).text
    return found


@contextlib.contextmanager
def _loop_thread() -> Iterator[Callable[[Any], Any]]:
    """An event loop on a thread; yields ``run(coroutine) -> its result``."""
    import asyncio
    import threading

    import uvloop

    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, loop).result(30)

    try:
        yield on_loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@contextlib.contextmanager
def served(execution: Path) -> Iterator[str]:
    """A finished execution served as ``weft ui`` serves one
    (:func:`weft.web.machine.start_replay`); yields the page's address."""
    from weft.web import dashboard_url
    from weft.web.machine import start_replay

    with _loop_thread() as on_loop:
        server = on_loop(start_replay(execution / ".weft" / "weft.db", execution=execution))
        try:
            yield dashboard_url(server, server.read_token)
        finally:
            on_loop(server.close())


@contextlib.contextmanager
def replayed(tmp_path: Path, events: Sequence[Any]) -> Iterator[str]:
    """``events`` (Weft's own msgspec structs: transitions and stream events)
    journaled by a real StateManager, so the core validates every transition
    (a refused one fails the test) and the journal holds the bytes a run would
    write; then :func:`served`. Yields the page's address."""
    import asyncio

    from weft.events.transitions import Transition
    from weft.store import ExecutionStore, Journal

    execution = tmp_path / "execution"

    async def journal() -> Path:
        store = await asyncio.to_thread(ExecutionStore.open, execution)
        manager = store.state_manager()
        for event in events:
            if isinstance(event, Transition):
                manager.transition(event)
            else:
                manager.emit(event)
        await manager.flush()
        path = Path(store.journal.path)
        await store.close(manager)
        return path

    with _loop_thread() as on_loop:
        database = on_loop(journal())
    written = Journal.open(database, readonly=True, check=False)
    try:
        refused = [
            e.payload
            for page in written.pages()
            for e in page
            if e.type == "error" and '"transitionType"' in e.payload
        ]
    finally:
        written.close()
    assert not refused, f"the core refused a transition of the test: {refused}"
    with served(execution) as url:
        yield url


def progress(page: Any) -> dict[str, Any] | None:
    """The newest ``progress.snapshot`` the page got (its data), if any."""
    found: dict[str, Any] | None = page.execute_script(
        "return window.weftDashboard.state.progress;"
    )
    return found


def assert_shows_the_figures(page: Any, execution: Path) -> dict[str, Any]:
    """The page got a ``progress.snapshot`` of the whole journal, its figures are
    :class:`weft.progress.RunProgress` folded over that journal, and the page
    shows what it says: each codon's state, cost words and failure, the outcome's
    word and kind, the totals' cost words. Returns the snapshot."""
    from tests.server.figures import expected, folded, said

    end = journal_end(execution)

    def whole() -> dict[str, Any] | None:
        snap = progress(page)
        return snap if snap is not None and snap["seq"] == end else None

    snap: dict[str, Any] = wait_for(whole, f"a snapshot of the journal's {end} events", page=page)
    assert said(snap) == expected(folded(execution / ".weft" / "weft.db"))
    drawn = [(c["codonId"], c["status"]) for c in snap["codons"]]
    wait_for(lambda: rows(page) == drawn, f"the rows {drawn}", page=page)
    for c in snap["codons"]:
        row = cells(page, c["codonId"])
        assert row[4] == (c["costText"] if c["attempts"] else ""), (c, row)
        if c["failure"]:
            assert row[5] == c["failure"], (c, row)
    ending = snap["ending"]
    outcome = page.find_element("id", "outcome")
    assert outcome.text == ending["word"]
    assert outcome.get_attribute("data-outcome") == ending["kind"]
    assert text(page, "totals").startswith(snap["totals"]["costText"] + " · ")
    return snap


@contextlib.contextmanager
def listed(root: Path) -> Iterator[str]:
    """``weft ui``'s server (:class:`weft.web.machine.MachineDashboard`) over
    ``root``, in this process; yields the list page's address with its token."""
    from weft.web.machine import MachineDashboard

    with _loop_thread() as on_loop:
        dashboard = MachineDashboard(root)
        on_loop(dashboard.start())
        try:
            yield f"{dashboard.url}#token={dashboard.token}"
        finally:
            on_loop(dashboard.close())
