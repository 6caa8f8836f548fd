"""Steps and the runner that performs them.

A scenario is a generator of steps (a script, in the words of §7.1): emit a
JSON line, write raw text, write to stderr, sleep, exit, kill itself. Code
between two ``yield`` statements runs exactly when the stream reaches that
point, which is how file edits land between a tool_use line and its
tool_result. Script mode (:mod:`.script`) produces the same steps from a
JSON file.

The runner owns stdout and stderr: compact JSON, one flush per line, the
line delay, chunked writes, stalls, and the signal policy of
``FAKE_AGENT_SIGTERM``.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, TypeVar

from weft.agents.fake.common import Clock, JsonObj, Settings

T = TypeVar("T")


class Step:
    """One action of a scenario."""

    __slots__ = ()


class Emit(Step):
    """Write ``obj`` as one compact JSON line."""

    __slots__ = ("delay", "obj")

    def __init__(self, obj: JsonObj, *, delay: bool = True) -> None:
        self.obj = obj
        self.delay = delay


class Raw(Step):
    """Write ``text`` verbatim followed by ``\\n`` (non-JSON noise)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class Partial(Step):
    """Write ``text`` without a newline, then sleep."""

    __slots__ = ("sleep_ms", "text")

    def __init__(self, text: str, sleep_ms: float = 0.0) -> None:
        self.text = text
        self.sleep_ms = sleep_ms


class Stderr(Step):
    """Write ``text`` to stderr as is."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class StderrBytes(Step):
    """Write raw bytes to stderr (floods)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Sleep(Step):
    """Sleep ``ms`` milliseconds (interruptible by a graceful SIGTERM)."""

    __slots__ = ("ms",)

    def __init__(self, ms: float) -> None:
        self.ms = ms


class Hang(Step):
    """Sleep forever: only a signal ends the process."""

    __slots__ = ()


class Exit(Step):
    """End the process with ``code``."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


class Kill(Step):
    """Die by signal ``signame`` (``SIGKILL``, ``SIGSEGV``, ...)."""

    __slots__ = ("signame",)

    def __init__(self, signame: str) -> None:
        self.signame = signame


class Chunks(Step):
    """One line written piece by piece (a huge line that is never held in
    memory whole); the runner adds the newline."""

    __slots__ = ("parts",)

    def __init__(self, parts: Iterable[bytes]) -> None:
        self.parts = parts


class Chunked(Step):
    """Turn chunked writes on or off: every later line goes out in random
    1-7 byte pieces with 1 ms pauses, splitting 4-byte UTF-8 characters."""

    __slots__ = ("on",)

    def __init__(self, on: bool) -> None:
        self.on = on


class StallNext(Step):
    """Write half of the next line, sleep ``ms``, then write the rest."""

    __slots__ = ("ms",)

    def __init__(self, ms: float) -> None:
        self.ms = ms


def dumps(obj: JsonObj) -> bytes:
    """Compact JSON, UTF-8, the way the real CLIs print it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


_SLICE_S = 0.25
"""The longest sleep between two checks for a requested stop."""


class StopRequestedError(Exception):
    """A graceful stop was requested by a signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Runner:
    """Performs steps on stdout and stderr."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        rng: random.Random,
        *,
        capture: list[JsonObj] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.rng = rng
        self.out: BinaryIO = sys.stdout.buffer
        self.err: BinaryIO = sys.stderr.buffer
        self.capture = capture
        """When a list, emitted objects are collected instead of written
        (Claude's ``--output-format json|text``)."""
        self.chunked = False
        self._stall_ms: float | None = None
        self._pending: int | None = None
        self._interruptible = False
        self._aborting = False
        """Performing the abort steps: a pending stop no longer interrupts."""
        self._lines = 0
        self.emitted: Callable[[JsonObj], None] | None = None
        """Told of each :class:`Emit` once its line is out (or captured): a
        line a stop cut short before it was written was never said."""

    # -- signals ---------------------------------------------------------------

    def install_signals(self, *, sigint_graceful: bool = False) -> None:
        """Apply the ``FAKE_AGENT_SIGTERM`` policy to SIGTERM and SIGINT.
        ``sigint_graceful``: SIGINT always stops gracefully (unless the policy
        is ``ignore``), as Claude Code 2.1.330 does whatever the policy."""
        mode = self.settings.sigterm
        for signum in (signal.SIGTERM, signal.SIGINT):
            if mode == "ignore":
                signal.signal(signum, signal.SIG_IGN)
            elif mode == "graceful" or (sigint_graceful and signum == signal.SIGINT):
                signal.signal(signum, self._on_signal)
            else:
                # Die by the signal itself, like a process with no handler.
                signal.signal(signum, signal.SIG_DFL)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._pending is None:
            self._pending = signum
        if self._interruptible and not self._aborting:
            self._interruptible = False
            raise StopRequestedError(signum)

    def interruptible_call(self, fn: Callable[[], T]) -> T:
        """Run a blocking call (a stdin read) that a graceful stop may cut short."""
        # Interruptible before the check: a signal landing between the two
        # would otherwise only be noticed after the blocking call returns.
        self._interruptible = True
        try:
            self._check()
            return fn()
        finally:
            self._interruptible = False

    def _check(self) -> None:
        if self._pending is not None and not self._aborting:
            raise StopRequestedError(self._pending)

    # -- running ---------------------------------------------------------------

    def run(self, steps: Iterator[Step], on_abort: Callable[[int], Iterable[Step]]) -> int:
        """Perform ``steps``; return the exit code. A graceful stop abandons
        the steps, performs ``on_abort(signum)`` and exits ``128 + signum``."""
        try:
            for step in steps:
                code = self.do(step)
                if code is not None:
                    return code
                self._check()
        except StopRequestedError as stop:
            # The abort's own lines still pause between them (the line delay):
            # the pending stop must not cut them short, nor escape as a traceback.
            self._aborting = True
            close = getattr(steps, "close", None)
            if close is not None:
                close()
            for step in on_abort(stop.signum):
                code = self.do(step)
                if code is not None:
                    return code
            return 128 + stop.signum
        return 0

    def do(self, step: Step) -> int | None:
        """Perform one step; an exit code means stop."""
        if isinstance(step, Emit):
            if self.capture is not None:
                self.capture.append(step.obj)
            else:
                self._line(dumps(step.obj), delay=step.delay)
            if self.emitted is not None:
                self.emitted(step.obj)
        elif isinstance(step, Raw):
            if self.capture is None:
                self._line(step.text.encode("utf-8"), delay=True)
        elif isinstance(step, Partial):
            if self.capture is None:
                self._write(step.text.encode("utf-8"))
            self.sleep(step.sleep_ms)
        elif isinstance(step, Stderr):
            self._err(step.text.encode("utf-8"))
        elif isinstance(step, StderrBytes):
            self._err(step.data)
        elif isinstance(step, Sleep):
            self.sleep(step.ms)
        elif isinstance(step, Hang):
            while True:
                self.sleep(3_600_000)
        elif isinstance(step, Exit):
            return step.code
        elif isinstance(step, Kill):
            kill_self(step.signame)
        elif isinstance(step, Chunks):
            if self.capture is None:
                self._pause()
                for part in step.parts:
                    self.out.write(part)
                self.out.write(b"\n")
                self.out.flush()
        elif isinstance(step, Chunked):
            self.chunked = step.on
        elif isinstance(step, StallNext):
            self._stall_ms = step.ms
        return None

    def sleep(self, ms: float) -> None:
        """Sleep ``ms`` (interruptible by a graceful stop); advances the clock."""
        if ms <= 0:
            return
        self.clock.advance(ms)
        self._interruptible = True  # before the check, as in interruptible_call
        try:
            # In slices, checking for a requested stop between them: a stop
            # whose signal did not cut the sleep short is still seen within one
            # (a graceful SIGTERM was once missed by an hour-long hang in CI).
            end = time.monotonic() + ms / 1000
            while (left := end - time.monotonic()) > 0:
                self._check()
                time.sleep(min(left, _SLICE_S))
        finally:
            self._interruptible = False

    def _pause(self) -> None:
        if self._lines and self.settings.line_delay_ms > 0:
            self.sleep(self.settings.line_delay_ms)
        self._lines += 1

    def _line(self, data: bytes, *, delay: bool) -> None:
        if delay:
            self._pause()
        else:
            self._lines += 1
        line = data + b"\n"
        if self._stall_ms is not None:
            stall, self._stall_ms = self._stall_ms, None
            half = len(line) // 2
            self._write(line[:half])
            self.sleep(stall)
            self._write(line[half:])
        elif self.chunked:
            self._write_chunked(line)
        else:
            self._write(line)

    def _write(self, data: bytes) -> None:
        self.out.write(data)
        self.out.flush()

    def _write_chunked(self, data: bytes) -> None:
        cuts: set[int] = set()
        pos = 0
        while True:
            pos += self.rng.randint(1, 7)
            if pos >= len(data):
                break
            cuts.add(pos)
        # Cut every 4-byte character in the middle, so a reader that decodes
        # chunk by chunk instead of line by line is caught.
        cuts.update(i + 2 for i, byte in enumerate(data) if byte >= 0xF0)
        bounds = [0, *sorted(c for c in cuts if 0 < c < len(data)), len(data)]
        for start, end in itertools.pairwise(bounds):
            self._write(data[start:end])
            time.sleep(0.001)

    def _err(self, data: bytes) -> None:
        self.err.write(data)
        self.err.flush()


def kill_self(signame: str) -> None:
    """Die by ``signame``, with no core file."""
    signum = getattr(signal, signame, None)
    if not isinstance(signum, int):
        raise ValueError(f"unknown signal {signame!r}")
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    if signum not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(1)
    os._exit(128 + signum)
