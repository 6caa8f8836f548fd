"""A rig ``command`` operation: ``/bin/sh -c run`` in its own process group.

:func:`run_command` starts the shell in ``cwd`` with the given environment
(plus a survivor mark), stdin from ``/dev/null``, in a new process group that
dies with Weft (:data:`~weft.process_group.die_with_parent`). The group is
journaled (``process.started`` when it starts, ``process.ended`` once it is
gone) so the next ``weft run`` ends what a killed Weft left of it
(:mod:`weft.runtime.run.survivors`). When the shell exits, whatever it left
running in its group is killed. A command that outlives its timeout, or a
cancelled one, gets the stop sequence of :func:`weft.process_group.terminate_group`
(SIGTERM, then SIGKILL after ``kill_grace``); a cancellation is re-raised once
the group is gone. Output goes out as ``rig.output`` events
(:mod:`weft.runtime.rig.output`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weft.config.schema import CommandOp
from weft.events.stream import ProcessEndedEvent, RigOutputEvent
from weft.process_group import die_with_parent, signal_group, terminate_group
from weft.runtime.rig.output import Budget, OutputLimits, OutputStream, Tail
from weft.runtime.rig.results import Emit, FailureType
from weft.runtime.run.survivors import MARK_VAR, new_mark, started_event

__all__ = [
    "PIPE_GRACE",
    "CommandOutcome",
    "CommandSettings",
    "command_label",
    "run_command",
    "verdict",
]

PIPE_GRACE = 2.0
"""After the shell exited and its group was killed, how long its pipes may stay
open (a process that left the group) before Weft stops reading them."""
LABEL_CHARS = 80
"""A command's label (in messages) shows at most this much of its first line."""


@dataclass(frozen=True, slots=True)
class CommandSettings:
    """What every command of one rig shares: environment, events, limits, timing."""

    env: Mapping[str, str]
    emit: Emit
    extra: Mapping[str, Any]
    """Fields added to every event (``codonId``)."""
    limits: OutputLimits
    timeout: float | None
    kill_grace: float


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """How a command ended: ``failure_type`` None for success; the last output for the reason."""

    failure_type: FailureType | None
    message: str | None
    exit_code: int | None
    tail: str


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, streams: dict[int, OutputStream], loop: asyncio.AbstractEventLoop) -> None:
        self.streams = streams
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes_closed: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        stream = self.streams.get(fd)
        if stream is not None:
            stream.feed(data.encode() if isinstance(data, str) else data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.pipes_closed.done():
            self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    async def gone_within(self, seconds: float) -> bool:
        """Waits at most ``seconds`` for the shell to exit; whether it did."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), seconds)
        return self.exited.done()


async def _stop_group(pgid: int, protocol: _Protocol, grace: float) -> None:
    """SIGTERM the group, SIGKILL it after ``grace``, wait for the shell to exit."""
    try:
        await terminate_group(pgid, protocol.gone_within, grace)
    finally:
        # Also when the shell went on SIGTERM: what it left in its group goes too.
        signal_group(pgid, signal.SIGKILL)
    await asyncio.shield(protocol.exited)


async def _stop_and_close(pgid: int, protocol: _Protocol, transport: Any, grace: float) -> None:
    """The cancellation path: stop the group, and kill it and close the pipes whatever happens."""
    try:
        await _stop_group(pgid, protocol, grace)
    finally:
        signal_group(pgid, signal.SIGKILL)
        transport.close()


def command_label(run: str) -> str:
    """The command's first line, quoted and shortened, for messages."""
    first = run.strip().splitlines()[0] if run.strip() else run
    if len(first) > LABEL_CHARS:
        first = first[: LABEL_CHARS - 3] + "..."
    elif first != run.strip():
        first += " ..."
    return f'"{first}"'


async def run_command(
    op: CommandOp, index: int, *, cwd: Path, settings: CommandSettings
) -> CommandOutcome:
    """Runs one command (see the module docstring) and says how it ended."""
    loop = asyncio.get_running_loop()
    emit, extra, limits = settings.emit, settings.extra, settings.limits
    tail = Tail(limits.tail_bytes)
    budget = Budget(limits.streamed_bytes)

    def send(data: dict[str, Any]) -> None:
        emit(
            RigOutputEvent(
                stream=data["stream"],
                line=data["line"],
                lines=data["lines"],
                dropped_lines=data.get("droppedLines", 0),
                command_index=index,
                codon_id=extra.get("codonId"),
            )
        )

    streams = {
        fd: OutputStream(name, send=send, limits=limits, budget=budget, tail=tail, loop=loop)
        for fd, name in ((1, "stdout"), (2, "stderr"))
    }
    protocol = _Protocol(streams, loop)
    mark = new_mark()
    try:
        transport = await _spawn(op.command.run, cwd, settings, protocol, mark)
    except OSError as e:
        return CommandOutcome(
            "other", f"could not start /bin/sh in {cwd}: {e.strerror or e}", None, ""
        )
    pgid = transport.get_pid()
    codon_id = extra.get("codonId")
    started = started_event(
        pgid,
        role="rig",
        argv=["/bin/sh", "-c", op.command.run],
        mark=mark,
        codon_id=codon_id if isinstance(codon_id, str) else None,
    )
    emit(started)
    timed_out = await _wait(pgid, transport, protocol, settings)
    code = transport.get_returncode()
    transport.close()
    return verdict(code, timed_out, settings.timeout, tail.text())


async def _spawn(
    run: str, cwd: Path, settings: CommandSettings, protocol: _Protocol, mark: str
) -> asyncio.SubprocessTransport:
    """Starts the shell in a new process group. Raises OSError when it cannot start."""
    loop = asyncio.get_running_loop()
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: protocol,
            "/bin/sh",
            "-c",
            run,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env={**settings.env, MARK_VAR: mark},
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    )
    try:
        transport, _ = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # Cancelled while the shell was being started: the event loop's own
        # cleanup would only kill the shell, not what it already spawned.
        with contextlib.suppress(BaseException):
            transport, _ = await spawn
            await _stop_and_close(transport.get_pid(), protocol, transport, settings.kill_grace)
        raise
    return transport


async def _wait(
    pgid: int,
    transport: asyncio.SubprocessTransport,
    protocol: _Protocol,
    settings: CommandSettings,
) -> bool:
    """Waits for the shell (stopping it at the timeout), then ends its group; whether it
    timed out. Journals ``process.ended`` however it ends, also when cancelled."""
    timed_out = False
    try:
        try:
            async with asyncio.timeout(settings.timeout):
                await asyncio.shield(protocol.exited)
        except TimeoutError:
            timed_out = True
            await _stop_group(pgid, protocol, settings.kill_grace)
        # Whatever the command left running in its group goes with it.
        signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(protocol.pipes_closed), PIPE_GRACE)
    except asyncio.CancelledError:
        await _stop_and_close(pgid, protocol, transport, settings.kill_grace)
        raise
    finally:
        for stream in protocol.streams.values():
            stream.close()
        # Both ways out above SIGKILLed the group: nothing of it runs now.
        settings.emit(ProcessEndedEvent(pid=pgid))
    return timed_out


def verdict(code: int | None, timed_out: bool, timeout: float | None, tail: str) -> CommandOutcome:
    """The verdict on a shell that ended with ``code`` (negative: killed by that signal)."""
    if timed_out:
        return CommandOutcome("timeout", f"timed out after {timeout:g} s", code, tail)
    if code == 0:
        return CommandOutcome(None, None, 0, tail)
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return CommandOutcome(
                "command_failed", f"killed by {signal.Signals(-code).name}", code, tail
            )
    return CommandOutcome("command_failed", f"exit code {code}", code, tail)
