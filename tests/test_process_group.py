"""The shared process-group helper: signalling and the stop sequence, on real process groups."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import pytest

from weft.process_group import die_with_parent, signal_group, terminate_group

# A leader that announces it is ready (its handlers are set) before waiting.
IGNORES_TERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
OBEYS_TERM = "import sys, time\nprint('ready', flush=True)\ntime.sleep(60)\n"


def start_group(code: str) -> tuple[subprocess.Popen[bytes], bytes]:
    """Starts ``code`` as a group leader; it and the rest of its ``ready`` line."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith(b"ready")
    return proc, line.removeprefix(b"ready").strip()


def gone_within_for(proc: subprocess.Popen[bytes]) -> Callable[[float], Awaitable[bool]]:
    async def gone_within(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return True
            await asyncio.sleep(0.01)
        return proc.poll() is not None

    return gone_within


def test_signal_group_ignores_a_group_that_is_gone() -> None:
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait()
    signal_group(proc.pid, signal.SIGKILL)  # no ProcessLookupError


@pytest.mark.parametrize("pgid", [0, -1])
def test_signal_group_never_signals_its_own_group_or_everyone(pgid: int) -> None:
    # killpg(0) would signal the test process's own group; the helper must refuse.
    signal_group(pgid, signal.SIGTERM)
    assert os.getpid() > 0  # still alive


def test_signal_group_reaches_every_member() -> None:
    proc, rest = start_group(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('ready', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = int(rest)
    signal_group(proc.pid, signal.SIGKILL)
    assert proc.wait(5) == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        # The grandchild is reparented and reaped by init; give it a moment.
        time.sleep(0.02)
    with open(f"/proc/{child}/stat") as f:
        assert f.read().split()[2] == "Z", "the grandchild survived its group's SIGKILL"


async def test_terminate_group_stops_with_sigterm_when_that_is_enough() -> None:
    proc, _ = start_group(OBEYS_TERM)
    assert await terminate_group(proc.pid, gone_within_for(proc), 5.0) is True
    assert proc.wait(5) == -signal.SIGTERM


async def test_terminate_group_kills_a_leader_that_ignores_sigterm_after_the_grace() -> None:
    proc, _ = start_group(IGNORES_TERM)
    started = time.monotonic()
    assert await terminate_group(proc.pid, gone_within_for(proc), 0.3) is False
    assert proc.wait(5) == -signal.SIGKILL
    assert time.monotonic() - started >= 0.3


@pytest.mark.skipif(die_with_parent is None, reason="PR_SET_PDEATHSIG is Linux only")
def test_die_with_parent_is_a_preexec_fn_that_lets_the_child_run() -> None:
    out = subprocess.run(
        ["echo", "ok"], preexec_fn=die_with_parent, capture_output=True, check=True
    ).stdout
    assert out == b"ok\n"
