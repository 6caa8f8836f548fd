"""Process groups Weft starts and ends: one helper for the agents and the rig.

Every child Weft spawns (an agent CLI in :mod:`weft.agents.process`, a rig
command in :mod:`weft.runtime.rig.command`) starts a new session, so it and
whatever it spawns share one process group whose id is the child's pid. This
module is the one place that:

* makes the child die with Weft (:data:`die_with_parent`, Linux
  ``PR_SET_PDEATHSIG``);
* signals a group (:func:`signal_group`: a group already gone, or one that is
  no longer ours, is not an error);
* runs the stop sequence (:func:`terminate_group`: SIGTERM, wait up to a
  grace period for the leader to go, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Awaitable, Callable

__all__ = ["PR_SET_PDEATHSIG", "die_with_parent", "signal_group", "terminate_group"]

PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal a process gets when its parent (thread) dies."""


def _pdeathsig_setter() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    sig = int(signal.SIGKILL)

    def set_pdeathsig() -> None:
        # Runs in the child between fork and exec: one system call, nothing
        # that could wait for a lock another thread of Weft held at the fork.
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return set_pdeathsig


die_with_parent: Callable[[], None] | None = _pdeathsig_setter()
"""A ``preexec_fn`` after which the child gets SIGKILL when Weft dies
(Linux; None elsewhere). Weft spawns from its event-loop thread, which lives
as long as the process. It covers the direct child, also in the moment
before its ``process.started`` is journaled; the child's own children are
found through the journal (:mod:`weft.runtime.run.survivors`)."""


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; nothing when it is gone (or never started)."""
    if pgid <= 0:
        # 0 and negative ids would signal Weft's own group or every process.
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def terminate_group(
    pgid: int,
    gone_within: Callable[[float], Awaitable[bool]],
    grace: float,
    stop: int = signal.SIGTERM,
) -> bool:
    """Sends ``stop`` (SIGTERM unless said) to the group; SIGKILL it when
    ``gone_within(grace)`` says its leader is still there.

    ``gone_within(seconds)`` waits at most ``seconds`` for the leader to exit and
    says whether it did. Returns True when ``stop`` was enough.
    """
    signal_group(pgid, stop)
    if await gone_within(grace):
        return True
    signal_group(pgid, signal.SIGKILL)
    return False
