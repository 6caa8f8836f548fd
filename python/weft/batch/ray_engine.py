"""The Ray engine: each step a Ray task, for batches larger than one machine.

The coordinator stays the only writer of the batch store and the only keeper
of the circuit breakers; Ray only runs launches. A launch is a Ray task (one
CPU) that runs the step and returns the outcome: a hank through
:mod:`weft.embed` in the Ray worker's interpreter (as the local engine does in
its own), a command through the same ``sh`` wrapper as locally; both leave
``<step>/exit``. So:

* the step folders (``--state-dir``) must be on storage every node sees, as
  must the hanks and data: the batch file's paths are resolved on the
  coordinator and used as they are on the nodes;
* every node needs the same Weft installation (``pip install weft[ray]``);
* on resume, a step left running is finished from its ``exit`` file if it has
  one and launched again otherwise. A hank step's execution lock keeps a
  second ``weft run`` from running beside a first one that a remote cluster
  still runs (that launch then fails and the step retries or fails).

``ray`` is imported only when this engine is built (an optional extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weft.batch.engine import (
    _WRAPPER,
    LaunchSpec,
    _read_exit,
    _tail,
    _write_exit,
    ended_at_ms,
    execution_cost,
)
from weft.batch.scheduler import Outcome

__all__ = ["RayEngine", "run_launch"]


def run_launch(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    step_dir: str,
    execution_dir: str | None,
    hank: dict[str, str] | None = None,
) -> tuple[int | None, int, float, str | None]:
    """Runs one launch where it is called (a Ray worker); returns (exit code,
    duration ms, cost, failure text). A hank step runs in the worker's own
    interpreter through :mod:`weft.embed` (no ``weft run`` process)."""
    folder = Path(step_dir)
    folder.mkdir(parents=True, exist_ok=True)
    exit_path = folder / "exit"
    exit_path.unlink(missing_ok=True)
    started = time.monotonic()
    if hank is not None and execution_dir is not None:
        code, text = _run_hank_here(hank, Path(execution_dir), env, folder / "step.log")
        _write_exit(exit_path, code)
        duration = int((time.monotonic() - started) * 1000)
        return code, duration, execution_cost(Path(execution_dir)), text
    with (folder / "step.log").open("ab") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        log.write(f"--- {stamp} launch on {os.uname().nodename}: {' '.join(argv)}\n".encode())
        log.flush()
        done = subprocess.run(
            ["sh", "-c", _WRAPPER, str(exit_path), *argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    exit_code = _read_exit(exit_path)
    if exit_code is None and done.returncode >= 0:
        exit_code = done.returncode
    duration = int((time.monotonic() - started) * 1000)
    cost = execution_cost(Path(execution_dir) if execution_dir else None)
    return exit_code, duration, cost, None if exit_code == 0 else _tail(folder / "step.log")


def _run_hank_here(
    hank: dict[str, str], execution: Path, env: dict[str, str], log_path: Path
) -> tuple[int, str | None]:
    from weft import embed

    async def run() -> tuple[int, str | None]:
        prepared = embed.open_execution(
            hank["hank"],
            hank.get("data"),
            execution=execution,
            model=hank.get("model"),
            config=hank.get("config"),
            env=env,
            handle_signals=False,
        )
        outcome = await prepared.outcome()
        return outcome.exit_code, None if outcome.exit_code == 0 else outcome.message

    with log_path.open("a") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        log.write(f"--- {stamp} launch in a Ray worker on {os.uname().nodename}: {hank}\n")
        try:
            code, text = asyncio.run(run())
        except Exception as e:  # a bad hank or execution: the step fails, says why
            code, text = 2, f"weft: error: {e}"
        log.write(f"exit {code}" + (f": {text}" if text else "") + "\n")
    return code, text


@dataclass
class RayEngine:
    """Launches as Ray tasks; outcomes arrive on :attr:`completions`."""

    address: str | None = None
    """A cluster to join (``ray://...`` or ``host:port``); ``None`` starts a
    local Ray instance with ``num_cpus`` CPUs."""
    num_cpus: int | None = None
    completions: asyncio.Queue[tuple[str, Outcome]] = field(default_factory=asyncio.Queue)
    _refs: dict[str, Any] = field(default_factory=dict)
    _waiters: set[asyncio.Task[None]] = field(default_factory=set)
    _remote: Any = None

    def __post_init__(self) -> None:
        import ray

        if not ray.is_initialized():
            if self.address is None:
                ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=self.address, log_to_driver=False)
        self._remote = ray.remote(num_cpus=1, max_retries=0)(run_launch)

    @property
    def active(self) -> int:
        """Launches still running."""
        return len(self._refs)

    async def start(self, spec: LaunchSpec) -> tuple[int, str | None]:
        """Submits ``spec`` as a Ray task. There is no local pid: ``-1``."""
        env = {k: v for k, v in spec.env.items() if not k.startswith("RAY_")}
        ref = self._remote.remote(
            list(spec.argv),
            str(spec.cwd),
            env,
            str(spec.step_dir),
            str(spec.execution_dir) if spec.execution_dir else None,
            spec.hank,
        )
        self._refs[spec.key] = ref
        waiter = asyncio.ensure_future(self._wait(spec.key, ref, spec.exit_path))
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)
        return -1, None

    async def _wait(self, key: str, ref: Any, exit_path: Path) -> None:
        try:
            code, duration, cost, error = await ref
        except Exception as e:  # the task was cancelled or its worker died
            code, duration, cost, error = None, 0, 0.0, f"Ray task failed: {e}"
        self._refs.pop(key, None)
        outcome = Outcome(
            exit_code=code,
            duration_ms=duration,
            cost_usd=cost,
            error=error,
            # The exit file's time when the task wrote one: Ray reports the
            # result a little later than the step ended.
            ended_at_ms=ended_at_ms(exit_path),
        )
        self.completions.put_nowait((key, outcome))

    def adopt(self, spec: LaunchSpec, pid: int | None, pid_start: str | None) -> bool:
        """A launch of an earlier coordinator: finished from its ``exit`` file if
        it left one; otherwise ``False`` (launch it again)."""
        del pid, pid_start
        code = _read_exit(spec.exit_path)
        if code is None:
            return False
        outcome = Outcome(
            exit_code=code,
            cost_usd=execution_cost(spec.execution_dir),
            error=None if code == 0 else _tail(spec.log_path),
            ended_at_ms=ended_at_ms(spec.exit_path),
        )
        self.completions.put_nowait((spec.key, outcome))
        return True

    def cancel(self, key: str) -> None:
        """Cancels a launch's Ray task (its process is killed)."""
        import ray

        ref = self._refs.get(key)
        if ref is not None:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)

    async def detach(self) -> None:
        """The coordinator stops: Ray tasks are left to finish (their ``exit``
        files tell a resumed coordinator how they ended); none is reported."""
        for waiter in list(self._waiters):
            waiter.cancel()
        self._refs.clear()

    async def close(self) -> None:
        """Leaves Ray (a local instance stops)."""
        import ray

        ray.shutdown()
