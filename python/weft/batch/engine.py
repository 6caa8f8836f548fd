"""The local engine: each step a subprocess, at most ``workers`` at once.

Guarantees, before any code:

* **A step survives its coordinator.** Each step runs in its own session
  (process group), so a SIGKILLed coordinator leaves it running; the step's
  exit code is written by a tiny ``sh`` wrapper to ``<step>/exit`` (atomically:
  temp file, rename), so a later coordinator learns how it ended without
  being its parent.
* **Nothing runs twice at once.** The store records each launch's pid and
  the process's start time (``/proc/<pid>/stat``); a resumed coordinator
  *adopts* a step whose process is still that process and waits for it,
  and launches again only a step whose process is gone without an exit file.
  A hank step launched again is ``weft run`` on the same execution folder,
  which resumes the execution as any ``weft run`` does.
* **Output is kept.** stdout and stderr of every launch go to ``<step>/step.log``
  (appended, one header line per launch); a failed step's last lines are its
  failure text in reports.
* **Ends are timed where they are seen.** A launch's outcome carries the
  wall-clock time the engine saw it end (for a step that ended while no
  coordinator watched it, its ``exit`` file's time), and the engine's slot is
  freed with the same outcome: the coordinator records both before it launches
  anything else, so the audit trail never shows more steps running than
  workers.
* **Costs come from the executions.** A hank step's cost is read from its
  execution's own ``state.json`` (every run, every codon), not tallied here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weft.batch.scheduler import Outcome

__all__ = [
    "LaunchSpec",
    "LocalEngine",
    "ended_at_ms",
    "execution_cost",
    "group_alive",
    "launch_spec",
    "process_start",
]

# "$0" is the exit file, "$@" the step's argv. The wrapper first writes its pid
# beside it ("exit.pid": a coordinator killed between starting a step and
# recording its pid can still find it), and the code is written before it
# exits, through a rename, so a reader never sees half a number.
_WRAPPER = (
    'printf "%s" "$$" > "$0.pid"; '
    '"$@"; code=$?; printf "%s" "$code" > "$0.tmp" && mv -f "$0.tmp" "$0"; exit "$code"'
)
_TAIL_LINES = 20
_ADOPT_POLL_S = 0.2
STOP_GRACE_S = 10.0
"""A cancelled launch's time between SIGTERM and SIGKILL: long enough for an
isolated hank step (``weft run``) to checkpoint."""


@dataclass(frozen=True)
class LaunchSpec:
    """How to run one launch of a step."""

    key: str
    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str]
    step_dir: Path
    execution_dir: Path | None
    hank: dict[str, str] | None = None
    """For a hank step: ``hank``, ``data``, ``model``, ``config`` as planned
    (the in-process path runs it through :mod:`weft.embed` instead of ``argv``)."""

    @property
    def log_path(self) -> Path:
        """Where the launch's output goes."""
        return self.step_dir / "step.log"

    @property
    def exit_path(self) -> Path:
        """Where the wrapper writes the exit code."""
        return self.step_dir / "exit"

    @property
    def pid_path(self) -> Path:
        """Where the wrapper writes its pid as it starts."""
        return self.step_dir / "exit.pid"

    def wrapper_pid(self) -> int | None:
        """The pid in :attr:`pid_path` if that process is still this launch's
        wrapper (its command line names this step's exit file), else ``None``."""
        try:
            pid = int(self.pid_path.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        if process_start(pid) is None:
            return None
        return pid if str(self.exit_path).encode() in cmdline.split(b"\0") else None


def launch_spec(key: str, plan: dict[str, Any], state_dir: Path) -> LaunchSpec:
    """The launch of the step ``key`` with the stored ``plan``."""
    ws_id, _, step_id = key.partition("/")
    step_dir = state_dir / "steps" / ws_id / step_id
    env = {
        **os.environ,
        **plan.get("env", {}),
        "WEFT_BATCH_STEP": key,
        "WEFT_BATCH_STEP_DIR": str(step_dir),
    }
    if "command" in plan:
        return LaunchSpec(key, tuple(plan["command"]), Path(plan["cwd"]), env, step_dir, None)
    execution = step_dir / "execution"
    argv = [sys.executable, "-m", "weft", "run", plan["hank"]]
    if "data" in plan:
        argv.append(plan["data"])
    argv += ["--execution", str(execution), "--headless"]
    if "model" in plan:
        argv += ["--model", plan["model"]]
    if "config" in plan:
        argv += ["--config", plan["config"]]
    hank: dict[str, str] = {k: plan[k] for k in ("hank", "data", "model", "config") if k in plan}
    return LaunchSpec(key, tuple(argv), step_dir, env, step_dir, execution, hank)


def process_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), ``None`` if it is gone
    (or a zombie) or the system has no ``/proc``. A pid reused by another
    process has another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    if not fields or fields[0] == "Z":
        return None  # a zombie has finished; nothing reaped it yet
    return fields[19] if len(fields) > 19 else None


def execution_cost(execution_dir: Path | None) -> float:
    """The whole cost of an execution, from its ``state.json`` (0 if none yet)."""
    if execution_dir is None:
        return 0.0
    try:
        state = json.loads((execution_dir / ".weft" / "state.json").read_bytes())
    except (OSError, ValueError):
        return 0.0
    total = 0.0
    for run in state.get("runs", []):
        for codon in run.get("codons", []):
            status = codon.get("status")
            if status == "completed":
                total += float(codon.get("finalCost", 0.0))
            elif status == "failed":
                total += float(codon.get("partialCost", 0.0))
            elif status in ("running", "completing-sentinels"):
                total += float(codon.get("currentCost", 0.0))
    return total


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-_TAIL_LINES:])


def ended_at_ms(exit_path: Path | None = None) -> int:
    """When a launch ended (ms since the epoch): now, or for a launch that ended
    unwatched, the time its ``exit`` file was written, if earlier."""
    now = time.time_ns() // 1_000_000
    if exit_path is None:
        return now
    try:
        written = exit_path.stat().st_mtime_ns // 1_000_000
    except OSError:
        return now
    return min(now, written)


def _written_at_ms(path: Path) -> int | None:
    """When ``path`` was last written (ms since the epoch), ``None`` if absent."""
    try:
        return path.stat().st_mtime_ns // 1_000_000
    except OSError:
        return None


def _read_exit(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@dataclass
class _Running:
    spec: LaunchSpec
    started: float
    pid: int
    task: asyncio.Task[None] | None = None
    stop: Callable[[], Awaitable[object]] | None = None
    """How to stop an in-process run (it shares this process: no signal)."""
    detached: bool = False
    """Stopped for the coordinator's own shutdown: its end is not an outcome."""
    cancelled: bool = False
    """:meth:`LocalEngine.cancel` stopped it: its end waits for its whole
    process group (a child ignoring SIGTERM outlives the wrapper)."""
    started_at_ms: int | None = None
    """An adopted launch's real start (wall clock): its duration runs from
    there, not from the adoption, to when its ``exit`` file was written."""


@dataclass
class LocalEngine:
    """Runs launches as subprocesses of this machine; outcomes arrive on
    :attr:`completions` as ``(key, Outcome)``."""

    completions: asyncio.Queue[tuple[str, Outcome]] = field(default_factory=asyncio.Queue)
    in_process: bool = True
    """Run hank steps in this process through :mod:`weft.embed` (no new
    interpreter per step); ``False`` runs ``weft run`` as a subprocess."""
    stop_grace_s: float = STOP_GRACE_S
    """How long a cancelled launch has between SIGTERM and SIGKILL."""
    _running: dict[str, _Running] = field(default_factory=dict)

    @property
    def active(self) -> int:
        """Launches still running."""
        return len(self._running)

    async def start(self, spec: LaunchSpec) -> tuple[int, str | None]:
        """Starts ``spec``; returns its pid and process start time."""
        if self.in_process and spec.hank is not None:
            return await self._start_in_process(spec, spec.hank)
        spec.step_dir.mkdir(parents=True, exist_ok=True)
        spec.exit_path.unlink(missing_ok=True)
        spec.pid_path.unlink(missing_ok=True)
        log = spec.log_path.open("ab")
        try:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log.write(f"--- {stamp} launch: {' '.join(spec.argv)}\n".encode())
            log.flush()
            proc = await asyncio.create_subprocess_exec(
                "sh",
                "-c",
                _WRAPPER,
                str(spec.exit_path),
                *spec.argv,
                cwd=spec.cwd,
                env=spec.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            log.close()
            running = _Running(spec, time.monotonic(), -1)
            self._running[spec.key] = running
            self._finish(running, None, f"cannot start: {e}")
            return -1, None
        log.close()
        running = _Running(spec, time.monotonic(), proc.pid)
        self._running[spec.key] = running
        running.task = asyncio.ensure_future(self._wait_child(running, proc))
        return proc.pid, process_start(proc.pid)

    async def _start_in_process(
        self, spec: LaunchSpec, hank: dict[str, str]
    ) -> tuple[int, str | None]:
        spec.step_dir.mkdir(parents=True, exist_ok=True)
        spec.exit_path.unlink(missing_ok=True)
        # No wrapper writes one: an earlier launch's would lend an adoption its start.
        spec.pid_path.unlink(missing_ok=True)
        running = _Running(spec, time.monotonic(), os.getpid())
        self._running[spec.key] = running
        running.task = asyncio.ensure_future(self._run_in_process(running, hank))
        return running.pid, process_start(running.pid)

    async def _run_in_process(self, running: _Running, hank: dict[str, str]) -> None:
        spec = running.spec
        with spec.log_path.open("a") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log.write(f"--- {stamp} launch in process: {' '.join(spec.argv[3:])}\n")
            try:
                execution = await asyncio.to_thread(
                    _open_execution_serially,
                    hank["hank"],
                    hank.get("data"),
                    execution=spec.execution_dir,
                    model=hank.get("model"),
                    config=hank.get("config"),
                    env={**spec.env},
                    # Many runs share this process: a signal is the coordinator's.
                    handle_signals=False,
                )
                execution.start()
                running.stop = execution.stop
                outcome = await execution.outcome()
            except Exception as e:  # a bad hank or execution: the step fails, says why
                log.write(f"weft: error: {e}\n")
                code, text = 2, str(e)
            else:
                code, text = outcome.exit_code, outcome.message
                log.write(f"{outcome.status} (exit {code}): {outcome.message}\n")
        if running.detached:
            # Stopped because the coordinator stops: the step stays S_RUNNING
            # and its execution resumes on `weft batch resume`.
            self._running.pop(spec.key, None)
            return
        _write_exit(spec.exit_path, code)
        self._finish(running, code, None if code == 0 else text)

    def adopt(self, spec: LaunchSpec, pid: int | None, pid_start: str | None) -> bool:
        """Takes over a launch made by an earlier coordinator, if its process is
        still that process or it left an exit code. ``False``: launch it again."""
        if pid is None:
            # Killed between the launch and recording its pid: the wrapper
            # may have started all the same and said so in its pid file.
            pid = spec.wrapper_pid()
            pid_start = process_start(pid) if pid is not None else None
        alive = (
            pid is not None
            and pid > 0
            and (process_start(pid) == pid_start if pid_start is not None else _pid_alive(pid))
        )
        if not alive and not spec.exit_path.exists():
            return False
        running = _Running(spec, time.monotonic(), pid or -1)
        # The wrapper writes its pid file as the launch starts (see _WRAPPER).
        running.started_at_ms = _written_at_ms(spec.pid_path)
        self._running[spec.key] = running
        running.task = asyncio.ensure_future(self._wait_adopted(running, pid_start))
        return True

    def cancel(self, key: str) -> None:
        """Asks a launch to stop: SIGTERM to its process group, then SIGKILL
        after :attr:`stop_grace_s` if it still runs (an in-process hank run
        stops gracefully instead)."""
        running = self._running.get(key)
        if running is not None and running.stop is not None:
            task = asyncio.ensure_future(running.stop())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        elif running is not None and running.pid > 0 and running.pid != os.getpid():
            running.cancelled = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(running.pid, signal.SIGTERM)
            asyncio.get_running_loop().call_later(self.stop_grace_s, self._kill, key, running)

    def _kill(self, key: str, running: _Running) -> None:
        """SIGKILL to a cancelled launch's group, if that launch still runs (a
        launch that ended has left ``_running``: its pid may be another's now)."""
        if self._running.get(key) is running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(running.pid, signal.SIGKILL)

    async def _group_gone(self, running: _Running) -> None:
        """After a cancelled launch's wrapper ended: waits for the rest of its
        process group, SIGKILLed once the grace since the SIGTERM is over. The
        launch is still in ``_running`` meanwhile, so its pid (the group's id)
        cannot be another's: a group lives while any of its processes does."""
        deadline = time.monotonic() + self.stop_grace_s
        killed_at: float | None = None
        while group_alive(running.pid):
            now = time.monotonic()
            if killed_at is None and now >= deadline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(running.pid, signal.SIGKILL)
                killed_at = now
            elif killed_at is not None and now - killed_at > 5.0:
                return  # unkillable (uninterruptible sleep): stop waiting for it
            await asyncio.sleep(_ADOPT_POLL_S / 4)

    async def detach(self) -> None:
        """The coordinator stops: in-process runs stop gracefully (their
        executions checkpoint and resume later), subprocesses are left running
        (a resumed coordinator adopts them); no outcome is reported for either."""
        stops = []
        for running in list(self._running.values()):
            running.detached = True
            if running.stop is not None:
                stops.append(running.task)
                task = asyncio.ensure_future(running.stop())
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
            else:
                if running.task is not None:
                    running.task.cancel()
                self._running.pop(running.spec.key, None)
        await asyncio.gather(*(t for t in stops if t is not None), return_exceptions=True)
        self._running.clear()

    async def close(self) -> None:
        """Stops waiting (the processes themselves are left to finish)."""
        for running in list(self._running.values()):
            if running.task is not None:
                running.task.cancel()
        self._running.clear()

    async def _wait_child(self, running: _Running, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if running.cancelled:
            await self._group_gone(running)
        exit_code = _read_exit(running.spec.exit_path)
        if exit_code is None and code >= 0:
            exit_code = code
        self._finish(running, exit_code, None)

    async def _wait_adopted(self, running: _Running, pid_start: str | None) -> None:
        while running.pid > 0 and (
            process_start(running.pid) == pid_start
            if pid_start is not None
            else _pid_alive(running.pid)
        ):
            await asyncio.sleep(_ADOPT_POLL_S)
        if running.cancelled:
            await self._group_gone(running)
        # Polled: the exit file says when it really ended (maybe long ago).
        ended = ended_at_ms(running.spec.exit_path)
        self._finish(running, _read_exit(running.spec.exit_path), None, ended)

    def _finish(
        self,
        running: _Running,
        exit_code: int | None,
        error: str | None,
        ended: int | None = None,
    ) -> None:
        ended = ended_at_ms() if ended is None else ended
        spec = running.spec
        self._running.pop(spec.key, None)
        failed = exit_code != 0
        text = error or (_tail(spec.log_path) if failed else None)
        if running.started_at_ms is not None:
            duration_ms = max(0, ended - running.started_at_ms)
        else:
            duration_ms = int((time.monotonic() - running.started) * 1000)
        outcome = Outcome(
            exit_code=exit_code,
            duration_ms=duration_ms,
            cost_usd=execution_cost(spec.execution_dir),
            error=text,
            ended_at_ms=ended,
        )
        self.completions.put_nowait((spec.key, outcome))


_OPEN_LOCK = threading.Lock()


def _open_execution_serially(*args: Any, **kwargs: Any) -> Any:
    """:func:`weft.embed.open_execution`, one at a time: the hank checker
    (``weft.config.walk``) compiles its checkers lazily and is not safe to run
    from two threads at once (seen as an ``IndexError`` in its trampoline)."""
    from weft import embed

    with _OPEN_LOCK:
        return embed.open_execution(*args, **kwargs)


def _write_exit(path: Path, code: int) -> None:
    """Writes an exit code as the ``sh`` wrapper does: temp file, then rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(code))
    os.replace(tmp, path)


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies aside: they have
    ended, and an init that is slow to reap them must not hold a launch)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
