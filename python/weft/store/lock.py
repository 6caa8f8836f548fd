"""The runtime lock: one live Weft process per execution.

``.weft/runtime.lock`` holds ``{pid, lockId, runId, startTime, lastHeartbeat,
port}`` and is rewritten atomically (temp + rename). The owner refreshes
``lastHeartbeat`` every 30 s. :func:`holder` judges a lock found on disk
(seed 001: the pid and the heartbeat): its process is gone, or its pid now
names a process that started after the lock (a recycled pid): the lock is
taken over; its process lives with a fresh heartbeat: it is live; it lives
but its heartbeat is older than 120 s: it may be hung, and the lock is still
refused (two processes writing one journal would be worse than waiting for
the user to stop it). A new
``lockId`` is drawn at every acquisition, so an owner that finds another id
on disk knows it was fenced off and must stop writing.

Acquisition itself is serialised across processes with ``flock`` on a
guard file, so two starters cannot both see "no lock" and both take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import msgspec

from weft.errors import LockHeldError, LockLostError
from weft.filemodes import open_private, private_folder

LOCK = "runtime.lock"
GUARD = "runtime.lock.guard"
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 120.0


class LockInfo(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """What the lock file says."""

    pid: int
    lock_id: str
    start_time: str
    last_heartbeat: float
    run_id: str | None = None
    port: int | None = None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _process_started_at(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds), where the system says
    (Linux's /proc); ``None`` elsewhere or when it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        # Field 22 (starttime, in clock ticks since boot) counts from after the
        # command name, which may hold spaces: split after its closing ")".
        ticks = int(stat.rpartition(")")[2].split()[19])
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _lock_started_at(info: LockInfo) -> float | None:
    try:
        return datetime.fromisoformat(info.start_time).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Holder:
    """What a lock found on disk says of its process (see the module docstring)."""

    state: Literal["live", "hung", "gone"]
    reason: str
    """Why, in the words said to the user."""


def holder(info: LockInfo, now: float, *, stale_after: float = STALE_SECONDS) -> Holder:
    """Judges the process that holds ``info`` (one test for every reader)."""
    age = now - info.last_heartbeat
    if info.pid == os.getpid():
        return Holder("gone", "it names this process's pid but another lock id (a recycled pid)")
    if not pid_alive(info.pid):
        return Holder("gone", "its process is gone")
    started, locked = _process_started_at(info.pid), _lock_started_at(info)
    if started is not None and locked is not None and started > locked + 2.0:
        # The 2 s: the clocks' and the tick's rounding (the lock is written
        # after its process started, so its process is never younger).
        return Holder("gone", f"its pid {info.pid} now names a process started after the lock")
    if age > stale_after:
        return Holder("hung", f"its heartbeat is {age:.0f} s old but PID {info.pid} lives")
    return Holder("live", f"PID {info.pid} is running")


@dataclass(frozen=True, slots=True)
class Previous:
    """The lock found on disk when acquiring, and why it could be taken."""

    info: LockInfo
    reason: str


@contextlib.contextmanager
def _guard(weft_dir: Path) -> Iterator[None]:
    fd = open_private(weft_dir / GUARD, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_lock(path: Path) -> LockInfo | None:
    """The lock at ``path``; ``None`` when absent. Raises LockHeldError if unreadable."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return msgspec.json.decode(data, type=LockInfo)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        # Fail closed: a lock we cannot read may belong to a live process.
        raise LockHeldError(
            f"{path} is unreadable ({e}); if no Weft process is running on this "
            "execution, delete the file and start again"
        ) from e


class RuntimeLock:
    """A held lock. Use :meth:`acquire`."""

    def __init__(
        self, weft_dir: Path, info: LockInfo, previous: Previous | None, clock: Callable[[], float]
    ) -> None:
        self.weft_dir = weft_dir
        self.path = weft_dir / LOCK
        self.info = info
        self.previous = previous
        self._clock = clock
        self._written: tuple[int, int, int] | None = None
        self._write()

    @classmethod
    def acquire(
        cls,
        weft_dir: Path,
        *,
        run_id: str | None = None,
        port: int | None = None,
        clock: Callable[[], float] = time.time,
        stale_after: float = STALE_SECONDS,
    ) -> RuntimeLock:
        """Takes the lock, or raises :class:`~weft.errors.LockHeldError` if a live
        process holds it. ``previous`` tells whether a dead or stale lock was taken over."""
        private_folder(weft_dir)
        with _guard(weft_dir):
            current = read_lock(weft_dir / LOCK)
            previous = None
            if current is not None:
                judged = holder(current, clock(), stale_after=stale_after)
                if judged.state == "live":
                    raise LockHeldError(
                        f"Weft is already running on this execution (PID {current.pid}); "
                        "stop it first (Ctrl-C in its terminal, or kill "
                        f"{current.pid}): once it has exited, the lock is taken over at once"
                    )
                if judged.state == "hung":
                    raise LockHeldError(
                        f"PID {current.pid} holds this execution's lock and lives, but has "
                        f"not refreshed it for {clock() - current.last_heartbeat:.0f} s: it "
                        f"may be hung. Look at it (ps -p {current.pid}); once it is stopped "
                        f"(kill {current.pid}), the lock is taken over at once"
                    )
                previous = Previous(current, judged.reason)
            now = clock()
            info = LockInfo(
                pid=os.getpid(),
                lock_id=str(uuid.uuid4()),
                start_time=datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds"),
                last_heartbeat=now,
                run_id=run_id,
                port=port,
            )
            return cls(weft_dir, info, previous, clock)

    def _write(self) -> None:
        temp = self.path.with_name(LOCK + ".tmp")
        fd = open_private(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.json.encode(self.info))
        os.replace(temp, self.path)
        st = self.path.stat()
        self._written = (st.st_ino, st.st_mtime_ns, st.st_size)

    def verify(self) -> None:
        """Raises :class:`~weft.errors.LockLostError` if another process took the lock.

        Cheap enough to call before every commit: a ``stat`` unless the file
        changed since this process last wrote it.
        """
        try:
            st = self.path.stat()
        except FileNotFoundError:
            raise LockLostError(
                f"{self.path} was removed: this process no longer owns the execution"
            ) from None
        if (st.st_ino, st.st_mtime_ns, st.st_size) == self._written:
            return
        current = read_lock(self.path)
        if current is None or current.lock_id != self.info.lock_id:
            holder = f"PID {current.pid}" if current else "nobody"
            raise LockLostError(
                f"{self.path} now belongs to {holder}: this process was fenced off "
                "and stops writing"
            )

    def heartbeat(self) -> None:
        """Refreshes ``lastHeartbeat``; raises LockLostError if fenced."""
        self.verify()
        self.info.last_heartbeat = self._clock()
        self._write()

    def update(self, *, run_id: str | None = None, port: int | None = None) -> None:
        """Records the current run and the WebSocket port."""
        self.verify()
        if run_id is not None:
            self.info.run_id = run_id
        if port is not None:
            self.info.port = port
        self._write()

    def release(self) -> None:
        """Removes the lock file, only if it is still ours."""
        with _guard(self.weft_dir):
            current = read_lock(self.path)
            if current is not None and current.lock_id == self.info.lock_id:
                self.path.unlink()

    def describe_previous(self) -> str | None:
        """A sentence about a lock that was taken over, for the user."""
        if self.previous is None:
            return None
        info = self.previous.info
        run = f" (run {info.run_id})" if info.run_id else ""
        return f"took over the lock of PID {info.pid}{run}: {self.previous.reason}"
