"""Run a hank inside this Python process: the public async API behind ``weft run``.

:func:`open_execution` does what ``weft run`` does before it runs (load and
check the hank, resolve the runtime settings, create or resume the
execution folder) and returns an :class:`Execution`; nothing runs yet.
Then::

    execution = weft.embed.open_execution("hank.json", "data/", execution="runs/a")
    async with execution:                     # starts the run in the background
        async for item in execution.events(): # every event, once it is durable
            print(item.stream.type if item.stream else item.event)
        outcome = await execution.outcome()   # RunOutcome: status, exit code, cost

or simply ``outcome = await weft.embed.run("hank.json", "data/")``.

Steering is :meth:`Execution.next` (in manual mode, after
:meth:`~Execution.wait_idle`: a command is taken while the run waits for one),
:meth:`~Execution.skip`,
:meth:`~Execution.stop` and the general :meth:`~Execution.command` (the same
commands WebSocket clients send); a command that does not apply now raises
:class:`weft.errors.CommandRejectedError` saying why. The run is an ordinary
Weft execution: its folder, journal, lock and checkpoints are the ones ``weft
run`` makes, so ``weft status``, ``weft attach`` and a later ``weft run
--execution`` work on it. No new interpreter starts, so a batch step or a
service pays only for the run itself. This module builds on
:class:`weft.runtime.run.runtime.Runtime` without changing it.

Traces are exported as ``weft run`` exports them (``docs/telemetry.md``): when
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the runtime setting ``telemetry``) asks, in
``env`` or else this process's environment, or ``otel=True``; the run joins the
trace ``TRACEPARENT`` names (a batch step's run nests under its step's span).
Off, nothing of OpenTelemetry is imported.

While running, the run handles SIGINT and SIGTERM like ``weft run`` (the first
stops it gracefully) unless ``handle_signals=False``; ``serve=False`` (the
default here) starts no WebSocket server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from weft.config import load_hank
from weft.config.copies import check_copy_bounds
from weft.config.loader import LoadedHank
from weft.config.runtime import RuntimeConfig, resolve_runtime_config
from weft.errors import ConfigError
from weft.events.stream import ServerIdleEvent
from weft.runtime.execution.layout import ExecutionLayout
from weft.runtime.execution.prepare import PreparedExecution, prepare_execution
from weft.runtime.run.runtime import RunOutcome, Runtime, RuntimeOptions
from weft.state import Processed

if TYPE_CHECKING:
    from weft.telemetry.settings import TelemetrySettings
    from weft.telemetry.sink import TraceSink

__all__ = ["Execution", "RunOutcome", "open_execution", "run"]

_END = object()


def open_execution(
    hank: str | os.PathLike[str],
    data: str | os.PathLike[str] | None = None,
    *,
    execution: str | os.PathLike[str] | None = None,
    new: bool = False,
    model: str | None = None,
    config: str | os.PathLike[str] | None = None,
    resume_changed_hank: bool = False,
    autostart: bool = True,
    serve: bool = False,
    port: int = 0,
    env: dict[str, str] | None = None,
    handle_signals: bool = True,
    otel: bool | None = None,
) -> Execution:
    """Loads ``hank`` (a file or a folder holding ``hank.json``) and creates or
    resumes its execution on ``data``, as ``weft run`` does; nothing runs yet.

    ``execution`` is the folder (default: the settings' execution base folder,
    as ``weft run``); ``new`` always starts a new one; ``model`` and ``config``
    are ``--model`` and ``--config``; ``resume_changed_hank`` answers yes when
    the hank changed since the execution started (``-y``); ``autostart=False``
    waits for :meth:`Execution.next` before each codon; ``serve`` starts the
    WebSocket server on ``port``; ``handle_signals=False`` leaves SIGINT and
    SIGTERM to the host program (several runs in one process, a service with
    its own shutdown); ``otel`` is ``--otel`` (True) or ``--no-otel`` (False).
    Raises :class:`~weft.errors.ConfigError` for a bad hank and
    :class:`~weft.runtime.execution.errors.ExecutionSetupError` for unusable paths.
    """
    hank_path = Path(hank).absolute()
    if hank_path.is_dir():
        hank_path = hank_path / "hank.json"
    loaded = load_hank(hank_path, model=model)
    settings: RuntimeConfig = resolve_runtime_config(
        cli={"model": model, "autostart": False if not autostart else None, "port": port},
        config_file=Path(config) if config is not None else None,
        hank=loaded.hank,
    ).config
    base_dir = Path(os.path.expanduser(settings.execution_base_dir))
    target = Path(execution) if execution is not None else None
    unbounded = check_copy_bounds(
        loaded,
        execution=(target or base_dir).absolute(),
        workspace=None if target is None else ExecutionLayout(target).workspace,
    )
    if unbounded:
        raise ConfigError(unbounded)
    prepared = prepare_execution(
        hank_path,
        Path(data).absolute() if data is not None else None,
        execution_dir=target,
        new=new,
        yes=resume_changed_hank,
        interactive=False,
        base_dir=base_dir,
        data_hash_time_limit=settings.data_hash_time_limit / 1000,
        hank=loaded.hank,
    )
    options = RuntimeOptions(
        autostart=settings.autostart,
        idle_timeout=settings.shim_idle_timeout,
        serve=serve,
        port=settings.port,
        allow_anonymous_read=settings.allow_anonymous_read,
    )
    return Execution(
        prepared=prepared,
        hank=loaded,
        options=options,
        env=env,
        handle_signals=handle_signals,
        trace=_trace_settings(os.environ if env is None else env, otel, settings.telemetry),
    )


def _trace_settings(
    env: dict[str, str] | os._Environ[str], otel: bool | None, setting: bool
) -> TelemetrySettings | None:
    """The trace export of an embedded run (``weft run``'s rule): None when off,
    or when only a variable asked and the SDK (``weft[otel]``) is not installed."""
    from weft.telemetry.settings import resolve

    found = resolve(env, flag=otel, setting=setting)
    if found is None:
        return None
    import importlib.util

    if importlib.util.find_spec("opentelemetry.sdk") is None:
        if otel:
            raise ConfigError(
                [], summary="otel=True needs the OpenTelemetry SDK: pip install 'weft[otel]'"
            )
        return None
    return found


def _warn(text: str) -> None:
    print(f"weft: warning: {text}", file=sys.stderr, flush=True)


class _HostSignalsRuntime(Runtime):
    """A runtime that leaves SIGINT and SIGTERM to the program embedding it."""

    def _install_signals(self) -> list[int]:
        return []


@dataclass
class Execution:
    """One execution, run in this process (see the module doc)."""

    prepared: PreparedExecution
    hank: LoadedHank
    options: RuntimeOptions
    env: dict[str, str] | None = None
    handle_signals: bool = True
    """Whether the run takes SIGINT and SIGTERM as ``weft run`` does."""
    trace: TelemetrySettings | None = None
    """Where the run's trace goes (None: not exported)."""
    _queue: asyncio.Queue[object] = field(default_factory=asyncio.Queue, init=False)
    _idle: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _task: asyncio.Task[RunOutcome] | None = field(default=None, init=False)
    _runtime: Runtime | None = field(default=None, init=False)

    @property
    def root(self) -> Path:
        """The execution folder."""
        return self.prepared.layout.root

    @property
    def resumed(self) -> bool:
        """Whether an existing execution is resumed (rather than created)."""
        return self.prepared.resumed

    def start(self) -> None:
        """Starts the run as a task on the running loop (once)."""
        if self._task is not None:
            return
        runtime_class = Runtime if self.handle_signals else _HostSignalsRuntime
        options, listeners, on_state, sink = self.options, [self._on_event], None, None
        if self.trace is not None:
            from weft.telemetry.sink import TraceSink

            env = os.environ if self.env is None else self.env
            sink = TraceSink(self.trace, execution_id=self.root.name, warn=_warn, env=env)
            options = dataclasses.replace(options, agent_env=sink.agent_env)
            listeners.append(sink)
            on_state = sink.seeded(lambda _: None)
        self._runtime = runtime_class(
            self.prepared,
            self.hank,
            options,
            listeners=tuple(listeners),
            env=self.env,
            on_state=on_state,
        )
        self._task = asyncio.ensure_future(self._run(self._runtime, sink))

    def _on_event(self, item: Processed) -> None:
        if isinstance(item.event, ServerIdleEvent):
            self._idle.set()
        self._queue.put_nowait(item)

    async def wait_idle(self) -> None:
        """Waits until the run waits for a command (its next ``server.idle``
        event): in manual mode, before each codon and when all are done."""
        self.start()
        await self._idle.wait()
        self._idle.clear()

    async def _run(self, runtime: Runtime, sink: TraceSink | None) -> RunOutcome:
        try:
            return await runtime.run()
        finally:
            if sink is not None:
                # Waits a few seconds at most for the last spans: off the loop,
                # which other runs (a batch's) share.
                await asyncio.to_thread(sink.close)
            self._queue.put_nowait(_END)

    async def events(self) -> AsyncIterator[Processed]:
        """Every event of the run in journal order, each after it is durable,
        until the run ends. Starts the run if needed; one consumer at a time."""
        self.start()
        while True:
            item = await self._queue.get()
            if item is _END:
                self._queue.put_nowait(_END)  # later calls end at once too
                return
            assert isinstance(item, Processed)
            yield item

    async def outcome(self) -> RunOutcome:
        """Waits for the run to end (starting it if needed); how it ended."""
        self.start()
        assert self._task is not None
        return await self._task

    async def command(self, name: str) -> None:
        """Sends a steering command (``codon.next``, ``codon.skip``,
        ``codon.redo``, ``codon.forceStop``, ``server.shutdown``,
        ``server.force_shutdown``). Raises ``ValueError`` for an unknown one and
        :class:`~weft.errors.CommandRejectedError` when it does not apply now."""
        if self._runtime is None:
            raise RuntimeError("the execution is not running; call start() first")
        if not await self._runtime.command(name):
            raise ValueError(f"unknown command {name!r}")

    async def next(self) -> None:
        """Starts the next codon (manual mode)."""
        await self.command("codon.next")

    async def skip(self) -> None:
        """Skips the running codon."""
        await self.command("codon.skip")

    async def stop(self, *, force: bool = False) -> RunOutcome:
        """Stops the run (gracefully, or at once with ``force``) and waits for it."""
        await self.command("server.force_shutdown" if force else "server.shutdown")
        return await self.outcome()

    async def __aenter__(self) -> Execution:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is None:
            return
        if exc_type is not None and not self._task.done():
            await self.stop()
            return
        await self._task


async def run(
    hank: str | os.PathLike[str], data: str | os.PathLike[str] | None = None, **options: object
) -> RunOutcome:
    """Runs ``hank`` on ``data`` to the end in this process; how it ended.
    ``options`` are :func:`open_execution`'s."""
    execution = open_execution(hank, data, **options)  # type: ignore[arg-type]
    return await execution.outcome()
