"""Steering: the server's commands to a running execution.

``codon.*`` and ``server.*`` commands, ``checkpoint.list`` and the
``rollback.*`` commands. Whether a command applies now is the run machine's
to say (:meth:`~weft.runtime.run.machine.RunMachine.claim`; one that does not
raises :class:`~weft.errors.CommandRejectedError` saying why and what to do
instead); an accepted one is handed to the run loop as a request, and the loop
carries it out. Stops and signals go to the machine too, which answers with
what to do (interrupt or kill the agent, wake the loop).
"""

from __future__ import annotations

import asyncio

import msgspec

from weft.errors import CommandRejectedError
from weft.events.stream import CheckpointEntry, CheckpointListEvent, InfoEvent
from weft.runtime.codon.attempt import Interrupt
from weft.runtime.codon.breakers import PROVIDERS, Emit
from weft.runtime.run import rollback
from weft.runtime.run.state import Next, Request, Rewind, RuntimeState
from weft.server.protocol import (
    BreakerResetData,
    CodonStartData,
    MessageData,
    RollbackToCheckpointData,
    RollbackToCodonData,
    RollbackToLastSuccessData,
)


class Steering:
    """The runtime as the server's :class:`~weft.server.RuntimeCommands` and
    :class:`~weft.server.RollbackHandler`."""

    def __init__(self, ctx: RuntimeState) -> None:
        self.ctx = ctx
        """The run's shared state (the runtime itself)."""

    async def command(self, name: str, data: msgspec.Struct | None = None) -> bool:
        """Steers the run: ``codon.next``, ``codon.start`` (``data.codon_id``,
        ``data.skip_pre_commands``), ``codon.redo``, ``codon.skip``,
        ``codon.forceStop``, ``codon.message``, ``server.shutdown``, ``server.force_shutdown``.

        Returns False when ``name`` is not a command; raises
        :class:`~weft.errors.CommandRejectedError` when it does not apply now.
        """
        runner = self.ctx._runner
        if name in ("codon.next", "codon.start", "codon.redo"):
            start = data if isinstance(data, CodonStartData) else CodonStartData()
            request = await self._start(name, start.codon_id, start.skip_pre_commands)
            self.ctx._requests.put_nowait(request)
            return True
        if name == "codon.skip":
            if runner is None or not await runner.interrupt(Interrupt.SKIP):
                raise CommandRejectedError("codon.skip refused: no codon is running")
            return True
        if name == "codon.forceStop":
            if runner is None or not await runner.interrupt(Interrupt.FORCE_STOP):
                raise CommandRejectedError("codon.forceStop refused: no codon is running")
            return True
        if name == "codon.message":
            assert isinstance(data, MessageData)
            if not data.message.strip():
                raise CommandRejectedError("codon.message refused: the message is empty")
            if runner is None:
                raise CommandRejectedError("codon.message refused: the run has not started yet")
            if not await runner.message(data.message, urgent=data.urgent):
                raise CommandRejectedError(
                    "codon.message refused: no agent session is running to interrupt; "
                    "send it without urgent to deliver it with the next prompt"
                )
            return True
        if name == "breaker.reset":
            assert isinstance(data, BreakerResetData)
            if data.provider not in PROVIDERS.values():
                known = ", ".join(sorted(PROVIDERS.values()))
                raise CommandRejectedError(
                    f"breaker.reset refused: no agent provider {data.provider!r} (one of {known})"
                )
            self.ctx.breakers.reset(data.provider, self._breaker_emit())
            return True
        if name == "server.shutdown":
            await self.stop()
            return True
        if name == "server.force_shutdown":
            await self.stop(force=True)
            return True
        return False

    def _breaker_emit(self) -> Emit | None:
        """Journals a breaker's change in the current run (None before it starts)."""
        manager, cursor = self.ctx._manager, self.ctx._cursor
        if manager is None or cursor is None:
            return None
        run_id = cursor.run_id
        return lambda event, codon: manager.emit(event, run_id=run_id, codon_id=codon)

    @property
    def rolling_back(self) -> bool:
        """A rollback was accepted and has not finished."""
        return self.ctx.machine.rolling_back

    async def checkpoint_list(self, run_id: str | None) -> CheckpointListEvent:
        """The checkpoints of every run (or of ``run_id``), newest first.

        Not journaled: the server sends it to the client that asked (a flood
        of requests must not grow the journal)."""
        manager, checkpoints = self.ctx._manager, self.ctx._checkpoints
        if manager is None or checkpoints is None:
            raise CommandRejectedError("checkpoint.list refused: the run has not started yet")
        state, thread, confirmed = await rollback.analyze(manager, checkpoints)
        if run_id is not None and all(run["runId"] != run_id for run in state["runs"]):
            known = ", ".join(run["runId"] for run in state["runs"]) or "none"
            raise CommandRejectedError(f"checkpoint.list: no run {run_id!r} (runs: {known})")
        on_thread = {cp.sha for tc in thread.codons for cp in tc.validated_checkpoints}
        names = {cid: codon.name or cid for cid, codon in self.ctx._codons_by_id.items()}
        entries = [
            CheckpointEntry(
                codon_id=row["codonId"],
                codon_name=names.get(row["codonId"].split("#")[0], row["codonId"]),
                checkpoint_type=row["type"],
                sha=row["sha"],
                status=row["status"],
                run_id=row["runId"],
                on_thread=row["onThread"],
                timestamp=row["timestamp"],
            )
            for row in rollback.checkpoint_rows(state, on_thread, confirmed)
            if run_id is None or row["runId"] == run_id
        ]
        cursor = self.ctx._cursor
        return CheckpointListEvent(
            run_id=run_id,
            checkpoints=entries,
            current_branch=None if cursor is None else cursor.branch,
        )

    async def rollback(self, command: str, data: msgspec.Struct) -> None:
        """Accepts ``rollback.toCheckpoint``, ``rollback.toCodon`` or
        ``rollback.toLastSuccess``; the run loop carries it out (events
        ``rollback.*``, then ``server.idle{rollback-completed}`` or, with
        ``autoRestart``, the next codon)."""
        self._claim(command, rollback=True)
        self.ctx.machine.rewinding()  # from here on other steering commands are refused
        try:
            _, manager, checkpoints = self.ctx._parts()
            state, thread, confirmed = await rollback.analyze(manager, checkpoints)
            if isinstance(data, RollbackToCheckpointData):
                target = rollback.target_for(
                    thread, state, confirmed, checkpoint=data.checkpoint_sha
                )
            elif isinstance(data, RollbackToCodonData):
                target = rollback.target_for(
                    thread, state, confirmed, codon=data.codon_id, end=data.checkpoint_type
                )
            elif isinstance(data, RollbackToLastSuccessData):
                target = rollback.target_for(thread, state, confirmed)
            else:
                raise CommandRejectedError(f"{command}: not a rollback command")
        except rollback.RollbackError as exc:
            self.ctx.machine.release()
            raise CommandRejectedError(f"{command} refused: {exc}") from exc
        except BaseException:
            self.ctx.machine.release()
            raise
        self.ctx._requests.put_nowait(
            Rewind(target, "rollback", run_next=getattr(data, "auto_restart", False))
        )

    def _claim(self, command: str, *, rollback: bool = False) -> None:
        """Takes the waiting run loop for ``command``, or says why it cannot be."""
        runner = self.ctx._runner
        running = None if runner is None else runner.current_codon
        refused = self.ctx.machine.claim(command, rollback=rollback, running=running)
        if refused is not None:
            raise CommandRejectedError(refused.message, code=refused.code)

    async def _start(self, name: str, codon_id: str | None, skip_rig: bool) -> Request:
        """The request for ``codon.next`` / ``codon.start`` / ``codon.redo``:
        the next codon, or one that already ran, again from the checkpoint it
        started from (a new run, reason ``retry``)."""
        self._claim(name)
        try:
            cursor, manager, checkpoints = self.ctx._parts()
            upcoming = cursor.current
            failure = self.ctx.machine.failure
            if (
                name != "codon.redo"
                and failure is None
                and upcoming is not None
                and codon_id in (None, upcoming.codon_id)
            ):
                return Next(skip_rig)
            if name != "codon.redo" and codon_id is None:
                if failure is not None:
                    raise CommandRejectedError(
                        f"{name} refused: Codon {failure[0]} failed: {failure[1]}. "
                        "Send codon.redo to run it again, "
                        "a rollback.* command to go back, or server.shutdown"
                    )
                raise CommandRejectedError(
                    f"{name} refused: every codon has run; send codon.redo, a rollback.* "
                    "command, or server.shutdown"
                )
            _, thread, _ = await rollback.analyze(manager, checkpoints)
            if codon_id is None:
                if not len(thread.codons):
                    raise CommandRejectedError(f"{name} refused: no codon has run yet")
                codon_id = thread.codons[0].codon_id
            if cursor.plan.get(codon_id) is None:
                raise CommandRejectedError(f"{name}: the plan has no codon {codon_id!r}")
            if all(tc.codon_id != codon_id for tc in thread.codons):
                raise CommandRejectedError(
                    f"{name} {codon_id} refused: codons run in plan order and the next one is "
                    f"{'none' if upcoming is None else upcoming.codon_id}; start that one, or "
                    "go back with codon.redo / rollback.toCodon"
                )
            target = rollback.redo_target(thread, codon_id)
        except rollback.RollbackError as exc:
            self.ctx.machine.release()
            raise CommandRejectedError(f"{name} refused: {exc}") from exc
        except BaseException:
            self.ctx.machine.release()
            raise
        return Rewind(target, "retry", codon_id=codon_id, run_next=True, skip_rig=skip_rig)

    async def stop(self, *, force: bool = False) -> None:
        """Graceful stop (the agent is stopped, a checkpoint taken); ``force``
        kills the agent at once. A second graceful stop forces."""
        self.ctx._perform(self.ctx.machine.stop(force=force))
        await self._effects_done()

    async def _effects_done(self) -> None:
        """Waits for the interrupts and kills the machine asked for."""
        if self.ctx._effects:
            await asyncio.gather(*list(self.ctx._effects), return_exceptions=True)

    def on_signal(self, signum: int) -> None:
        if self.ctx.machine.phase == "done":
            # The run has ended and its clients are being let go: a signal
            # means now, so the ones still reading lose their connections.
            if self.ctx.server is not None:
                self.ctx.server.drop_connections()
            return
        # Said at once: stopping an agent and checkpointing can take seconds.
        first = self.ctx.machine.stopping is None
        self.ctx._perform(self.ctx.machine.stop(signal=signum))
        if first and self.ctx._manager is not None:
            self.ctx._emit(
                InfoEvent(
                    message="Stopping: the agent is asked to stop and a checkpoint is taken "
                    "(Ctrl-C again to kill it now)"
                )
            )
