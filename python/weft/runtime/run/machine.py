"""The run machine: how a run is controlled, sans I/O.

The codon has its eight-state machine in the core; this is the run's. It holds
the run's control state and answers every input with values, never doing
anything itself; the run loop (:mod:`weft.runtime.run.loop`), the steering
commands (:mod:`weft.runtime.run.steering`) and the signal handler feed it and
perform what it returns.

Phases::

    starting --began--> running (autostart, a codon to run) | waiting (manual) | done
    waiting  --claim--> claimed --codon_started--> running
                               \\--rewinding--> rolling-back --rewound--> waiting | claimed
                               \\--release--> waiting           (the command was refused)
    running  --codon_ended--> running | waiting | done
                              (manual mode: a failure, or every codon done, ends the run
                               and still waits: a redo or a rollback starts a new one)
    any live --stop / budget_stop / fatal--> stopping --codon_ended / finish--> done
    stopping --stop--> stopping (forced)

Inputs: :meth:`RunMachine.began`, :meth:`~RunMachine.claim`,
:meth:`~RunMachine.release`, :meth:`~RunMachine.rewinding`,
:meth:`~RunMachine.rewound`, :meth:`~RunMachine.codon_started`,
:meth:`~RunMachine.codon_ended`, :meth:`~RunMachine.stop` (a signal, ``q``,
``server.shutdown``), :meth:`~RunMachine.budget_stop` (the run's ceiling),
:meth:`~RunMachine.fatal` (a refused transition, a full disk),
:meth:`~RunMachine.finish`. Effects: :class:`RunCodon`, :class:`Wait`,
:class:`Interrupt`, :class:`Kill`, :class:`CancelSleep`, :class:`WakeLoop`,
:class:`ShuttingDown`, :class:`Say`, :class:`End`; a command that does not
apply now gets a :class:`Refused`.

How a run ends (:class:`weft.outcome.Ending`) is decided here, once, by
precedence: a fatal error fails the run; the budget ceiling stops it (the codon
it cut stays to do); a codon that failed for good fails it (one a stop cut
short did not fail: it stays to do); a run with every codon done completed,
even if a stop came after the last; otherwise you stopped it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from weft.outcome import Ending

Phase: TypeAlias = Literal[
    "starting", "waiting", "claimed", "running", "rolling-back", "stopping", "done"
]
PHASES: tuple[Phase, ...] = (
    "starting",
    "waiting",
    "claimed",
    "running",
    "rolling-back",
    "stopping",
    "done",
)
StopBy: TypeAlias = Literal["user", "budget", "fatal"]


# -- effects ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunCodon:
    """Run the next codon of the plan."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for a command (manual mode); say why with ``server.idle``."""

    reason: Literal["startup", "codon-completed", "all-codons-completed", "rollback-completed"]


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Ask the running agent to stop (its stop sequence, an error checkpoint)."""

    why: Literal["shutdown", "budget"]


@dataclass(frozen=True, slots=True)
class Kill:
    """Kill the running agent now."""


@dataclass(frozen=True, slots=True)
class CancelSleep:
    """Cut a retry's back-off short."""


@dataclass(frozen=True, slots=True)
class WakeLoop:
    """Wake a run loop that waits for a command."""


@dataclass(frozen=True, slots=True)
class ShuttingDown:
    """Tell the server's clients the runtime is shutting down."""


@dataclass(frozen=True, slots=True)
class Say:
    """A note for the person watching (said at once: a stop can take seconds)."""

    message: str


@dataclass(frozen=True, slots=True)
class End:
    """End the run as ``ending`` (journal its outcome)."""

    ending: Ending


Effect: TypeAlias = (
    RunCodon | Wait | Interrupt | Kill | CancelSleep | WakeLoop | ShuttingDown | Say | End
)


@dataclass(frozen=True, slots=True)
class Refused:
    """A steering command that does not apply now: why, and what to do instead."""

    message: str
    code: str | None = None


@dataclass(frozen=True, slots=True)
class StopState:
    """Who is stopping the run, and how."""

    by: StopBy
    forced: bool
    reason: str
    signal: int | None = None
    budget: dict[str, object] | None = None
    """``{scope, kind, limit, used, source}`` of the ceiling (``by == "budget"``)."""


# -- the machine ----------------------------------------------------------------


class RunMachine:
    """One run's control state (see the module docstring). Not thread-safe:
    only the event loop's thread feeds it."""

    def __init__(self, *, autostart: bool) -> None:
        self.autostart = autostart
        self.phase: Phase = "starting"
        self.codon: str | None = None
        """The codon being run (``running``), or the next one to run."""
        self.stopping: StopState | None = None
        self.failure: tuple[str | None, str] | None = None
        """``(codon id, reason)`` of the codon that failed for good (manual mode parks on it)."""
        self.ending: Ending | None = None

    # -- reading --------------------------------------------------------------

    @property
    def live(self) -> bool:
        """Not stopping and not done: codons may still start."""
        return self.phase not in ("stopping", "done")

    @property
    def rolling_back(self) -> bool:
        return self.phase == "rolling-back"

    # -- inputs -----------------------------------------------------------------

    def began(self, next_codon: str | None) -> list[Effect]:
        """The run started; ``next_codon`` is the first codon to run (None: none left)."""
        self.codon = next_codon
        if self.phase == "stopping":
            return self._end()  # stopped before the run began: nothing ran
        self._expect("began", "starting")
        return self._next("startup")

    def claim(
        self, command: str, *, rollback: bool = False, running: str | None = None
    ) -> Refused | None:
        """A steering command wants the waiting run loop (``codon.next``,
        ``codon.start``, ``codon.redo``, ``rollback.*``): None when it has it
        (the phase is ``claimed``), else why not. ``running``: the codon the
        runner says is running, for the message."""
        if self.phase in ("stopping", "done"):
            return Refused(f"{command} refused: the runtime is shutting down")
        if self.phase == "rolling-back":
            return Refused(f"{command} refused: a rollback is in progress", "ROLLBACK_IN_PROGRESS")
        if self.phase == "waiting":
            self.phase = "claimed"
            return None
        if self.phase == "running" or running is not None:
            codon = running or self.codon
            if rollback:
                return Refused(
                    "Cannot rollback while codon is running. Use 'codon.forceStop' first."
                )
            return Refused(
                f"{command} refused: codon {codon} is running; wait for it to finish, "
                "or send codon.skip / codon.forceStop"
            )
        if self.autostart:
            return Refused(
                f"{command} refused: this run starts its codons itself (autostart); "
                "start `weft run` with --no-autostart to step through codons"
            )
        return Refused(f"{command} refused: the runtime is busy; try again")

    def release(self) -> None:
        """A claimed command was refused after all: the loop waits again."""
        if self.phase in ("claimed", "rolling-back"):
            self.phase = "waiting"

    def rewinding(self) -> None:
        """A claimed rollback or redo is being carried out."""
        self._expect("rewinding", "claimed")
        self.phase = "rolling-back"

    def rewound(self, next_codon: str | None, *, run_next: bool, ok: bool = True) -> list[Effect]:
        """A rollback or redo finished (``ok``) or could not be done; a new run
        starts at ``next_codon``, and runs it when ``run_next``."""
        if self.phase == "stopping":
            return self._end()  # stopped while it rolled back: the run ends now
        self._expect("rewound", "rolling-back")
        if not ok:
            self.phase = "waiting"
            return [Wait("codon-completed")]
        self.codon = next_codon
        self.failure = None
        self.ending = None  # a new run
        if run_next and next_codon is not None:
            self.phase = "claimed"
            return [RunCodon()]
        self.phase = "waiting"
        return [Wait("rollback-completed")]

    def codon_started(self, codon_id: str) -> None:
        """The loop starts running ``codon_id`` (under its failure policy)."""
        self._expect("codon_started", "claimed", "running")
        self.phase = "running"
        self.codon = codon_id

    def codon_ended(
        self,
        codon_id: str,
        *,
        moved_on: bool,
        reason: str | None = None,
        next_codon: str | None = None,
    ) -> list[Effect]:
        """The codon finished under its failure policy. ``moved_on``: the plan
        goes past it (completed, skipped, or failed under ``ignore``), on to
        ``next_codon`` (None: every codon is done); otherwise it failed for good
        (``reason``) or was stopped, and stays to do."""
        if self.phase == "stopping":
            # A stop was asked while it ran: the run ends whatever it did.
            if moved_on:
                self.codon = next_codon
            return self._end()
        self._expect("codon_ended", "running")
        if not moved_on:
            self.failure = (codon_id, reason or "failed")
            self.codon = codon_id
            if self.autostart:
                return self._end()
            # Manual mode parks on it: the run ends (failed) now, so a crash while
            # it waits loses nothing, and the loop waits for a redo or a rollback.
            return [*self._end(), *self._park("codon-completed")]
        self.codon = next_codon
        return self._next("codon-completed")

    def stop(self, *, force: bool = False, signal: int | None = None) -> list[Effect]:
        """The user stops the run (a signal, ``q``, ``server.shutdown``); a second
        graceful stop, or ``force``, kills the agent."""
        if self.phase == "done":
            return []
        current = self.stopping
        if current is not None:
            # Already stopping: a second stop forces (it never changes who stopped it).
            if current.forced:
                return []
            self.stopping = StopState(
                current.by, True, current.reason, current.signal or signal, current.budget
            )
            return [Say("Killing the agent now"), CancelSleep(), WakeLoop(), Kill()]
        why = "stopped by SIGTERM" if signal == 15 else "stopped by you"
        self.stopping = StopState("user", force, why, signal)
        return self._stopping_effects(force, "shutdown")

    def budget_stop(self, reason: str, budget: dict[str, object]) -> list[Effect]:
        """The run's ceiling was crossed: the running codon stops (with a
        checkpoint) and stays to do; nothing more starts."""
        if self.stopping is not None or self.phase == "done":
            return []
        self.stopping = StopState("budget", False, reason, None, budget)
        return self._stopping_effects(False, "budget")

    def fatal(self, message: str) -> list[Effect]:
        """The run cannot go on (the core refused the runtime's own transition,
        the disk is full): the agent is killed, the run fails."""
        if self.phase == "done" or (self.stopping is not None and self.stopping.by == "fatal"):
            return []
        self.stopping = StopState("fatal", True, message)
        self.phase = "stopping"
        return [ShuttingDown(), CancelSleep(), WakeLoop(), Kill()]

    def rewind_ending(self, why: str) -> Ending:
        """How the current run ends when a rollback or a redo (``why``) starts a
        new one: failed when it was parked on a failure, completed when every
        codon was done, else stopped by you with codons left."""
        if self.failure is not None:
            codon, reason = self.failure
            return Ending("failed", codon_id=codon, reason=reason)
        if self.codon is None:
            return Ending("completed")
        return Ending("stopped", codon_id=self.codon, reason=why)

    def finish(self) -> Ending:
        """The loop is over: how the run ended (see the module docstring)."""
        if self.ending is None:
            self._end()
        self.phase = "done"
        assert self.ending is not None
        return self.ending

    # -- helpers ------------------------------------------------------------------

    def _next(self, idle: Literal["startup", "codon-completed"]) -> list[Effect]:
        if not self.autostart:
            if self.codon is None:
                # Every codon is done: the run ends (completed) now; manual mode
                # stays up for a redo, a rollback or server.shutdown.
                return [*self._end(), *self._park("all-codons-completed")]
            self.phase = "waiting"
            return [Wait(idle)]
        if self.codon is None:
            return self._end()
        self.phase = "running"
        return [RunCodon()]

    def _park(self, reason: Literal["codon-completed", "all-codons-completed"]) -> list[Effect]:
        """Manual mode, its run ended: it waits for a command all the same."""
        self.phase = "waiting"
        return [Wait(reason)]

    def _end(self) -> list[Effect]:
        self.ending = self._decide()
        self.phase = "done"
        return [End(self.ending)]

    def _decide(self) -> Ending:
        stop = self.stopping
        if stop is not None and stop.by == "fatal":
            return Ending("failed", reason=stop.reason)
        if stop is not None and stop.by == "budget":
            return Ending("budget", codon_id=self.codon, reason=stop.reason, budget=stop.budget)
        if self.failure is not None:
            # Failed for good (a manual run parked on it, then shut down, too).
            codon, reason = self.failure
            return Ending("failed", codon_id=codon, reason=reason)
        if self.codon is None:
            # Every codon is done: a manual run shut down at its end completed.
            return Ending("completed")
        if stop is not None:
            return Ending("stopped", forced=stop.forced, codon_id=self.codon, reason=stop.reason)
        # Codons left and nobody stopped it: cannot happen in a closed loop.
        return Ending("stopped", codon_id=self.codon, reason="stopped before the run finished")

    def _stopping_effects(self, force: bool, why: Literal["shutdown", "budget"]) -> list[Effect]:
        running = self.phase == "running"
        self.phase = "stopping"
        effects: list[Effect] = [ShuttingDown(), CancelSleep(), WakeLoop()]
        if running:
            effects.append(Kill() if force else Interrupt(why))
        return effects

    def _expect(self, what: str, *phases: Phase) -> None:
        if self.phase not in phases:
            raise RuntimeError(f"run machine: {what} in phase {self.phase}")


__all__ = [
    "PHASES",
    "CancelSleep",
    "Effect",
    "End",
    "Interrupt",
    "Kill",
    "Phase",
    "Refused",
    "RunCodon",
    "RunMachine",
    "Say",
    "ShuttingDown",
    "StopBy",
    "StopState",
    "Wait",
    "WakeLoop",
]
