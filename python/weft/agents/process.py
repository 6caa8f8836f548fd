"""The subprocess layer under every agent adapter.

:func:`spawn` starts an agent CLI and returns a :class:`SubprocessSession`,
the :class:`~weft.agents.harness.AgentSession` every harness uses; the
harness only supplies the argv, the environment and a sans-I/O
:class:`~weft.agents.harness.StreamParser`. What this layer guarantees:

* **Own process group.** The child starts a new session, so a stop signals
  the CLI *and* every tool process it spawned. When the CLI exits, whatever
  is left in its group is killed, so nothing it started outlives the codon.
  On Linux the CLI also gets SIGKILL when Weft dies (:data:`~weft.process_group.die_with_parent`);
  what it spawned is ended by the next run (:mod:`weft.runtime.run.survivors`).
* **Pipes.** The prompt is written to stdin, which is then closed. stdout is
  read as bytes and split by :class:`LineFramer` (no cap below 64 MiB; longer
  lines are counted and skipped, never buffered whole); a parser that takes
  batches (:class:`~weft.agents.harness.BatchStreamParser`) gets each read's
  lines in one call. stderr is drained concurrently (a child never blocks on
  a full pipe) into a bounded tail and :class:`~weft.agents.events.StderrLine`
  events.
* **Tee.** Raw stdout goes to ``log_path`` (and stderr to ``<log>.stderr``)
  through a writer thread, so disk latency never stalls the stream. A write
  that fails (a full disk) stops the session (``StopReason.LOG_FAILED``) and
  makes its verdict a failure naming the log; the writer thread always ends.
* **Deadlines.** First output (until the parser reports the session), idle
  stream (any stdout byte resets it; a retry notice extends it by the retry
  delay) and wall clock. A deadline stops the session like :meth:`stop` does.
* **Stop sequence.** Drop any prompt bytes not yet written; if the CLI is
  finishing on its own (its result is already out) give it ``flush_grace`` to
  write its transcript; send the group the harness's ``stop_signal`` (SIGTERM,
  or SIGINT for a CLI that answers it with a result carrying the spend so
  far); after ``stop_grace``, SIGKILL.
* **Reaping.** The child is always waited for and every pipe is closed, also
  when a grandchild that escaped the group keeps a pipe open.
* **Backpressure.** Events queue up to a bound; past it stdout reading pauses
  (the child then blocks on its own writes) until the consumer catches up.
  The idle deadline does not run while Weft is the slow side.

:func:`build_env` is the environment policy (reference hankweave-runtime
§6.2): a short allow-list of the parent's variables, the harness's own
prefixes, then ``WEFT_<X>`` as ``X`` and the codon's env, where the value
``unset`` deletes a variable.

Why one module of over 600 lines: :class:`SubprocessSession` is one object
whose pipe callbacks, deadlines, backpressure and stop sequence share its
state; the guarantees above hold only together. The process-group helpers
it shares with the rig are in :mod:`weft.process_group`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import queue
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from weft.agents.events import (
    AgentEvent,
    ErrorClass,
    RetryNotice,
    SessionExited,
    SessionResult,
    SessionStarted,
    StderrLine,
)
from weft.agents.harness import (
    AgentStartError,
    BatchStreamParser,
    ProcessEnd,
    StopReason,
    StreamParser,
    Timeouts,
)
from weft.filemodes import open_private, private_folder
from weft.process_group import die_with_parent, signal_group, terminate_group

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest stdout line that is parsed. Claude Code prints a whole Read
result as one line, so a line of several MiB is normal."""
STDERR_TAIL_BYTES = 64 * 1024
"""How much of the end of stderr is kept for the verdict."""
STDERR_LINE_BYTES = 8 * 1024
"""Longer stderr lines are split into pieces of this size."""
EVENT_HIGH_WATER = 4096
"""Queued events at which stdout reading pauses."""
EVENT_LOW_WATER = 1024
"""Queued events at which stdout reading resumes."""
PIPE_GRACE = 2.0
"""After the CLI exited, how long its pipes may stay open (a grandchild
outside its process group holding them) before Weft closes them."""


class LineFramer:
    """Splits a byte stream into lines, without the ``\\n``.

    Chunk boundaries may fall anywhere, also inside a multi-byte character.
    A line longer than ``max_line`` is dropped while it streams past (counted
    in :attr:`oversized`), so memory stays bounded by ``max_line``.
    """

    __slots__ = ("_buf", "_skipping", "max_line", "oversized")

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self.oversized = 0
        self._buf = bytearray()
        self._skipping = False

    def push(self, data: bytes) -> list[bytes]:
        """The lines ``data`` completes."""
        lines: list[bytes] = []
        start = 0
        find = data.find
        while (nl := find(b"\n", start)) >= 0:
            if self._skipping:
                self._skipping = False
            elif self._buf:
                if len(self._buf) + nl - start > self.max_line:
                    self.oversized += 1
                else:
                    self._buf += data[start:nl]
                    lines.append(bytes(self._buf))
                self._buf.clear()
            elif nl - start > self.max_line:
                self.oversized += 1
            else:
                lines.append(data[start:nl])
            start = nl + 1
        rest = len(data) - start
        if rest and not self._skipping:
            if len(self._buf) + rest > self.max_line:
                self.oversized += 1
                self._skipping = True
                self._buf.clear()
            else:
                self._buf += data[start:]
        return lines

    def close(self) -> bytes | None:
        """The unterminated last line at end of stream, if any."""
        if self._skipping or not self._buf:
            return None
        tail = bytes(self._buf)
        self._buf.clear()
        return tail


# -- environment ---------------------------------------------------------------------------

BASE_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TMPDIR",
        "TEMP",
        "TMP",
        "LANG",
        "LANGUAGE",
        "TZ",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
        "no_proxy",
        "NODE_EXTRA_CA_CERTS",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
    }
)
"""Parent variables every agent gets: identity, locale, temp dirs, proxies
and CA bundles. Everything else must be allowed by the harness or passed
explicitly as ``WEFT_<X>``."""
BASE_ENV_PREFIXES = ("LC_",)

WEFT_OWN_PREFIXES = ("WEFT_RUNTIME_", "WEFT_SENTINEL_")
"""``WEFT_`` variables that configure Weft itself and are never forwarded."""
WEFT_OWN_NAMES = frozenset({"WEFT_CLAUDE_BIN", "WEFT_CODEX_BIN", "WEFT_GEMINI_BIN"})
UNSET = "unset"
"""The value that deletes a variable in ``WEFT_<X>`` and codon env."""


FAKE_AGENT_PREFIX = "FAKE_AGENT_"
"""The fake agents' knobs (``FAKE_AGENT_SCENARIO``...): passed through when a fake runs."""


@dataclass(frozen=True, slots=True)
class EnvPolicy:
    """Which parent variables a harness lets through, and which it removes."""

    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    remove: frozenset[str] = frozenset()
    """Deleted last, whatever set them (Claude: ``CLAUDECODE``)."""


def build_env(
    policy: EnvPolicy,
    extra: Mapping[str, str] | None = None,
    parent: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The child environment, in this order: the allowed parent variables,
    then every parent ``WEFT_<X>=v`` as ``X=v`` (Weft's own settings
    excepted), then ``extra`` (the codon's env); in both overlays the value
    ``unset`` deletes ``X``; finally ``policy.remove`` is deleted."""
    source = os.environ if parent is None else parent
    names = BASE_ENV_NAMES | policy.names
    prefixes = BASE_ENV_PREFIXES + policy.prefixes
    env = {k: v for k, v in source.items() if k in names or k.startswith(prefixes)}
    for key, value in source.items():
        if not key.startswith("WEFT_") or key in WEFT_OWN_NAMES:
            continue
        if key.startswith(WEFT_OWN_PREFIXES):
            continue
        target = key[len("WEFT_") :]
        if target:
            _set(env, target, value)
    for key, value in (extra or {}).items():
        _set(env, key, value)
    for key in policy.remove:
        env.pop(key, None)
    return env


def _set(env: dict[str, str], key: str, value: str) -> None:
    if value == UNSET:
        env.pop(key, None)
    else:
        env[key] = value


# -- log tee -------------------------------------------------------------------------------


class _Tee:
    """Appends chunks to a file from a writer thread (the event loop only
    enqueues).

    A write error (a full disk) is kept in :attr:`error` and reported once
    through ``on_error`` (called on the writer thread); the tee then drops
    what it is given. Whatever fails, and wherever (opening, a write, the
    flush at close), the thread ends once :meth:`close` is called: the stop
    sentinel is never consumed by an error path, so closing cannot hang.
    """

    def __init__(self, path: Path, on_error: Callable[[OSError], None] | None = None) -> None:
        self.path = path
        self.error: OSError | None = None
        """The first write error, if any."""
        self._on_error = on_error
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"tee:{path.name}", daemon=True)
        self._thread.start()

    def write(self, data: bytes) -> None:
        self._queue.put(data)

    def _run(self) -> None:
        stopped = False
        try:
            if not self.path.parent.is_dir():  # Weft's runs/<runId>/: made private
                private_folder(self.path.parent)
            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            with open(fd, "ab", buffering=1024 * 1024) as f:
                while (chunk := self._queue.get()) is not None:
                    f.write(chunk)
                # The sentinel is taken: the flush at close may still fail,
                # and then nothing more will come to drain.
                stopped = True
        except OSError as e:
            self._failed(e)
            while not stopped and self._queue.get() is not None:
                pass

    def _failed(self, error: OSError) -> None:
        self.error = error
        # Said once, by the session's verdict (its log_error); this is for debugging.
        log.info("cannot write the agent log %s: %s", self.path, error)
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:  # the loop may be closed; the error is kept anyway
                log.exception("reporting the agent log failure failed")

    async def close(self) -> None:
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)


# -- the session ---------------------------------------------------------------------------


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, session: SubprocessSession) -> None:
        self.session = session

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if isinstance(data, str):  # only with text=True, which Weft never uses
            data = data.encode()
        if fd == 1:
            self.session._on_stdout(data)
        elif fd == 2:
            self.session._on_stderr(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.session._on_pipe_closed(fd)

    def process_exited(self) -> None:
        self.session._on_exit()


class SubprocessSession:
    """One agent CLI process, its pipes, deadlines and stop sequence; yields
    the parser's events. Create it with :func:`spawn`."""

    def __init__(
        self,
        parser: StreamParser,
        *,
        timeouts: Timeouts,
        log_path: Path | None,
        max_line_bytes: int,
        name: str,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.name = name
        self._stop_signal = stop_signal
        self._parser = parser
        # A parser that takes a batch gets every read's lines in one call.
        self._batch_parser = parser if isinstance(parser, BatchStreamParser) else None
        self._timeouts = timeouts
        self._loop = asyncio.get_running_loop()
        self._framer = LineFramer(max_line_bytes)
        self._stderr_buf = bytearray()
        self._stderr_tail = bytearray()
        self._events: collections.deque[AgentEvent] = collections.deque()
        self._wakeup = asyncio.Event()
        self._exited: asyncio.Future[SessionExited] = self._loop.create_future()
        self._process_gone = asyncio.Event()
        self._tee = _Tee(log_path, self._log_failed) if log_path is not None else None
        self._stderr_tee = (
            _Tee(log_path.with_name(log_path.name + ".stderr"), self._log_failed)
            if log_path is not None
            else None
        )
        self._transport: asyncio.SubprocessTransport | None = None
        self._open_pipes = {1, 2}
        self._returncode: int | None = None
        self._stop_reason: StopReason | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._pipe_timer: asyncio.TimerHandle | None = None
        self._finish_task: asyncio.Task[None] | None = None
        self._paused = False
        self._discard = False
        self._iterated = False
        self._started = False
        self._result_seen = False
        self._finishing = False
        now = self._loop.time()
        self._spawned_at = now
        self._last_output = now
        self._quiet_until = now
        self._pid = -1

    # -- public face (AgentSession) --

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group id."""
        return self._pid

    @property
    def stop_reason(self) -> StopReason | None:
        """Why Weft stopped the session, if it did."""
        return self._stop_reason

    async def events(self) -> AsyncIterator[AgentEvent]:
        """The normalised events, ending with :class:`SessionExited`. Can be
        iterated once; leaving the loop early discards the rest."""
        if self._iterated:
            raise RuntimeError("the events of a session can be iterated only once")
        self._iterated = True
        try:
            while True:
                while self._events:
                    event = self._events.popleft()
                    if self._paused and len(self._events) <= EVENT_LOW_WATER:
                        self._resume_reading()
                    yield event
                    if isinstance(event, SessionExited):
                        return
                self._wakeup.clear()
                await self._wakeup.wait()
        finally:
            self._start_discarding()

    async def wait(self) -> SessionExited:
        """Wait for the end; events nobody iterates are discarded."""
        if not self._iterated:
            self._iterated = True
            self._start_discarding()
        return await asyncio.shield(self._exited)

    async def stop(self, reason: StopReason = StopReason.OPERATOR) -> None:
        """Run the stop sequence (see the module docs) and return once the
        process is gone. Idempotent; the first reason is the one reported."""
        self._begin_stop(reason)
        await self._process_gone.wait()

    async def kill(self) -> None:
        """SIGKILL the process group now."""
        if self._stop_reason is None:
            self._stop_reason = StopReason.OPERATOR
        if not self._process_gone.is_set():
            signal_group(self._pid, signal.SIGKILL)
        await self._process_gone.wait()

    # -- start --

    async def _start(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], stdin: bytes | None
    ) -> None:
        try:
            transport, _ = await self._loop.subprocess_exec(
                lambda: _Protocol(self),
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(cwd),
                env=dict(env),
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except OSError as e:
            await self._close_tees()
            what = e.strerror or str(e)
            if isinstance(e, FileNotFoundError) and not cwd.is_dir():
                what = f"working directory {cwd} does not exist"
            raise AgentStartError(f"cannot start {self.name} ({argv[0]}): {what}") from e
        self._transport = transport
        self._pid = transport.get_pid()
        self._spawned_at = self._last_output = self._quiet_until = self._loop.time()
        stdin_pipe = transport.get_pipe_transport(0)
        if stdin_pipe is not None:
            if stdin:
                stdin_pipe.write(stdin)  # type: ignore[attr-defined]
            # write_eof closes the pipe once the buffered prompt is written.
            stdin_pipe.write_eof()  # type: ignore[attr-defined]
        self._watchdog = self._loop.create_task(self._watch())

    # -- pipe callbacks (run on the loop, never block) --

    def _on_stdout(self, data: bytes) -> None:
        self._last_output = self._loop.time()
        if self._tee is not None:
            self._tee.write(data)
        lines = self._framer.push(data)
        if lines:
            self._feed(lines)

    def _feed(self, lines: list[bytes]) -> None:
        batch_parser = self._batch_parser
        if batch_parser is not None and len(lines) > 1:
            try:
                events = batch_parser.feed_many(lines)
            except Exception:  # a parser bug must not take the session down
                log.exception("%s parser failed on %d lines", self.name, len(lines))
                return
            if events:
                self._push(events)
            return
        for line in lines:
            try:
                events = self._parser.feed(line)
            except Exception:  # a parser bug must not take the session down
                log.exception("%s parser failed on a line of %d bytes", self.name, len(line))
                continue
            if events:
                self._push(events)

    def _on_stderr(self, data: bytes) -> None:
        if self._stderr_tee is not None:
            self._stderr_tee.write(data)
        tail = self._stderr_tail
        tail += data
        if len(tail) > STDERR_TAIL_BYTES:
            del tail[: len(tail) - STDERR_TAIL_BYTES]
        buf = self._stderr_buf
        buf += data
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) < STDERR_LINE_BYTES:
                    break
                nl = STDERR_LINE_BYTES
                raw = bytes(buf[:nl])
                del buf[:nl]
            else:
                raw = bytes(buf[:nl])
                del buf[: nl + 1]
            self._stderr_line(raw)

    def _stderr_line(self, raw: bytes) -> None:
        line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
        events: list[AgentEvent] = []
        try:
            events.extend(self._parser.stderr(line))
        except Exception:
            log.exception("%s parser failed on a stderr line", self.name)
        # Under a flood with a slow consumer the lines are dropped, not
        # queued without bound; the tail still has the end of stderr.
        if len(self._events) < EVENT_HIGH_WATER:
            events.append(StderrLine(line=line))
        if events:
            self._push(events)

    def _on_pipe_closed(self, fd: int) -> None:
        self._open_pipes.discard(fd)
        self._maybe_finish()

    def _on_exit(self) -> None:
        assert self._transport is not None
        self._returncode = self._transport.get_returncode()
        # Whatever the CLI left running in its group (background tools) goes
        # with it; this also releases pipes those processes held.
        signal_group(self._pid, signal.SIGKILL)
        self._process_gone.set()
        if self._open_pipes:
            self._pipe_timer = self._loop.call_later(PIPE_GRACE, self._abandon_pipes)
        self._maybe_finish()

    def _abandon_pipes(self) -> None:
        if self._open_pipes:
            log.warning(
                "%s (pid %d) exited but a process outside its group keeps its pipes open; "
                "closing them",
                self.name,
                self._pid,
            )
            self._open_pipes.clear()
            if self._transport is not None:
                self._transport.close()
            self._maybe_finish()

    # -- events --

    def _push(self, events: Iterable[AgentEvent]) -> None:
        for event in events:
            if isinstance(event, SessionStarted):
                self._started = True
            elif isinstance(event, SessionResult):
                self._result_seen = True
            elif isinstance(event, RetryNotice):
                delay = (event.delay_ms or 0) / 1000
                self._quiet_until = max(self._quiet_until, self._loop.time() + delay)
            if not self._discard:
                self._events.append(event)
        self._wakeup.set()
        if not self._discard and not self._paused and len(self._events) >= EVENT_HIGH_WATER:
            self._pause_reading()

    def _pause_reading(self) -> None:
        pipe = self._transport.get_pipe_transport(1) if self._transport else None
        if pipe is not None and 1 in self._open_pipes:
            pipe.pause_reading()  # type: ignore[attr-defined]
            self._paused = True

    def _resume_reading(self) -> None:
        self._paused = False
        # Weft was the slow side: the child's silence meanwhile is not idleness.
        self._last_output = self._loop.time()
        pipe = self._transport.get_pipe_transport(1) if self._transport else None
        if pipe is not None and 1 in self._open_pipes:
            pipe.resume_reading()  # type: ignore[attr-defined]

    def _start_discarding(self) -> None:
        self._discard = True
        self._events.clear()
        if self._paused:
            self._resume_reading()

    # -- the end --

    def _maybe_finish(self) -> None:
        if self._finishing or self._returncode is None or self._open_pipes:
            return
        self._finishing = True
        if self._pipe_timer is not None:
            self._pipe_timer.cancel()
        # Held: the loop keeps only weak references to tasks.
        self._finish_task = self._loop.create_task(self._finish())

    async def _finish(self) -> None:
        try:
            tail = self._framer.close()
            if tail is not None:
                self._feed([tail])
            if self._stderr_buf:
                self._stderr_line(bytes(self._stderr_buf))
                self._stderr_buf.clear()
            code = self._returncode
            assert code is not None
            end = ProcessEnd(
                exit_code=code if code >= 0 else None,
                signal=-code if code < 0 else None,
                stderr_tail=self._stderr_tail.decode("utf-8", errors="replace"),
                stopped=self._stop_reason,
            )
            try:
                closing = list(self._parser.finish(end))
                if not closing or not isinstance(closing[-1], SessionExited):
                    raise TypeError("its closing events do not end with SessionExited")
            except Exception as e:  # a parser bug still ends the session
                log.exception("%s parser failed to give a verdict", self.name)
                closing = [
                    SessionExited(
                        ok=False,
                        exit_code=end.exit_code,
                        signal=end.signal,
                        error_class=ErrorClass.ERROR_RESULT,
                        message=f"internal error: the {self.name} parser gave no verdict ({e})",
                        stderr_tail=end.stderr_tail,
                    )
                ]
            exited = closing[-1]
            assert isinstance(exited, SessionExited)
            if self._framer.oversized:
                exited = msgspec.structs.replace(
                    exited, oversized_lines=exited.oversized_lines + self._framer.oversized
                )
                closing[-1] = exited
            for task in (self._watchdog, self._stop_task):
                if task is not None and task is not asyncio.current_task():
                    task.cancel()
            if self._transport is not None:
                self._transport.close()
            await self._close_tees()
            log_error = self.log_error
            if log_error is not None:
                # The raw log is part of what a run keeps: a session whose log
                # could not be written failed, whatever the agent said.
                exited = msgspec.structs.replace(
                    exited,
                    ok=False,
                    error_class=ErrorClass.STOPPED,
                    retriable=False,
                    message=log_error,
                    log_error=log_error,
                )
                closing[-1] = exited
            self._push(closing)
            self._exited.set_result(exited)
        except BaseException as e:
            if not self._exited.done():
                self._exited.set_exception(e)
            raise

    @property
    def log_error(self) -> str | None:
        """Why the raw log (or its stderr copy) could not be written, if it could not."""
        for tee in (self._tee, self._stderr_tee):
            if tee is not None and tee.error is not None:
                what = tee.error.strerror or str(tee.error)
                return f"cannot write the agent log {tee.path}: {what}"
        return None

    def _log_failed(self, error: OSError) -> None:
        """On a tee's thread: stop the agent, whose work could no longer be recorded."""
        self._loop.call_soon_threadsafe(self._begin_stop, StopReason.LOG_FAILED)

    async def _close_tees(self) -> None:
        for tee in (self._tee, self._stderr_tee):
            if tee is not None:
                await tee.close()

    # -- deadlines and stopping --

    async def _watch(self) -> None:
        t = self._timeouts
        while not self._process_gone.is_set():
            deadlines: list[tuple[float, StopReason]] = []
            if t.first_output is not None and not self._started:
                first = self._spawned_at + t.first_output
                deadlines.append((first, StopReason.FIRST_OUTPUT_TIMEOUT))
            if t.idle is not None and not self._paused:
                since = max(self._last_output, self._quiet_until)
                deadlines.append((since + t.idle, StopReason.IDLE_TIMEOUT))
            if t.wall is not None:
                deadlines.append((self._spawned_at + t.wall, StopReason.WALL_TIMEOUT))
            if not deadlines:
                return
            when, reason = min(deadlines)
            delay = when - self._loop.time()
            if delay <= 0:
                log.info("%s (pid %d): %s, stopping it", self.name, self._pid, reason)
                self._begin_stop(reason)
                return
            # Deadlines only move later, so waking at the earliest and
            # looking again is exact.
            await asyncio.sleep(delay)

    def _begin_stop(self, reason: StopReason) -> None:
        if self._stop_task is not None or self._process_gone.is_set():
            return
        self._stop_reason = reason
        self._stop_task = self._loop.create_task(self._stop_sequence(reason))

    async def _stop_sequence(self, reason: StopReason) -> None:
        t = self._timeouts
        self._close_stdin()
        graceful = reason in (StopReason.OPERATOR, StopReason.INTERRUPT, StopReason.SHUTDOWN)
        # The prompt went in with EOF at start, so the only CLI that would end
        # by itself is one whose result is out (it is writing its transcript).
        finishing = self._result_seen
        if graceful and finishing and t.flush_grace > 0 and await self._gone_within(t.flush_grace):
            return
        if not await terminate_group(self._pid, self._gone_within, t.stop_grace, self._stop_signal):
            log.info(
                "%s (pid %d) ignored %s; killed it",
                self.name,
                self._pid,
                signal.Signals(self._stop_signal).name,
            )

    def _close_stdin(self) -> None:
        """Drop a prompt still being written (the CLI is not reading it)."""
        pipe = self._transport.get_pipe_transport(0) if self._transport else None
        if pipe is not None and pipe.get_write_buffer_size() > 0:  # type: ignore[attr-defined]
            pipe.abort()  # type: ignore[attr-defined]

    async def _gone_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._process_gone.wait(), seconds)
        return self._process_gone.is_set()


async def spawn(
    argv: Sequence[str],
    *,
    parser: StreamParser,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bytes | None,
    timeouts: Timeouts,
    log_path: Path | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    name: str | None = None,
    stop_signal: int = signal.SIGTERM,
) -> SubprocessSession:
    """Start ``argv`` in its own process group and return its session.

    ``stdin`` is written to the child and the pipe closed (``None``: closed at
    once). Raises :class:`~weft.agents.harness.AgentStartError` when the
    program cannot be started at all.
    """
    session = SubprocessSession(
        parser,
        timeouts=timeouts,
        log_path=log_path,
        max_line_bytes=max_line_bytes,
        name=name or Path(argv[0]).name,
        stop_signal=stop_signal,
    )
    await session._start(argv, cwd, env, stdin)
    return session
