"""Reference model of the agent-session machine (seed ``002``).

A direct restatement of the seed's tables, written from the seed and not from
``rust_core/src/machine/session.rs``, so the differential test in
``tests/core/test_session_machine.py`` catches a disagreement in either. The
seed leaves three things open; the model takes the same decisions as the
core, each noted where it is made: the text of the fatal message, ``n = 0`` in
the backoff formula, and events after ``Stopped``. Weft adds one thing to the
seed, written here from its description in ``docs/supervisor.md``: a session
that ends on a closed usage window parks (``WindowClosed``, no error counted)
until ``WindowOpened``.

Effects are ``(kind, payload)`` tuples; a rejected event raises
:class:`OracleRejectedError` and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

BASE_MS = 2000
CAP_MS = 60000
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1

Effect = tuple[str, str | int | None]


class OracleRejectedError(Exception):
    """The seed's table has no row for ``event`` in ``state``."""

    def __init__(self, state: str, event: str) -> None:
        super().__init__(f"invalid session transition: {event} in {state}")
        self.state = state
        self.event = event


def backoff_ms(n: int) -> int:
    """``min(2000 * 2^(n-1), 60000)``; ``n = 0`` is treated as 1 (open in the seed)."""
    # The cap is reached at n = 6; stop the power there rather than build a
    # number with 2^64 bits.
    return min(BASE_MS * 2 ** (min(max(n, 1), 64) - 1), CAP_MS)


@dataclass
class OracleSession:
    """The machine's whole observable state."""

    max_consecutive_errors: int = 5
    max_total_errors: int = 20
    state: str = "Initializing"
    consecutive_errors: int = 0
    total_errors: int = 0
    session_seq: int = 0
    cooldown_ms: int | None = None
    parked_ms: int | None = None

    def _go(self, state: str, cooldown_ms: int | None = None, parked_ms: int | None = None) -> None:
        self.state = state
        self.cooldown_ms = cooldown_ms
        self.parked_ms = parked_ms

    def handle(self, event: str, payload: str | int | None = None) -> list[Effect]:
        """Apply any event but ``SessionExited`` (see :meth:`exited`); ``payload``
        is the prompt, the sequence number or the fatal message."""
        s = self.state
        if event == "OperatorStop":
            self._go("Stopped")
            return [("CancelSession", None)] if s in ("Running", "Interrupting") else []
        if event == "FatalError":
            self._go("Stopped")
            return [("LogFatal", payload)]
        if s == "Initializing" and event == "WorktreeReady":
            self._go("BuildingPrompt")
            return []
        if s == "BuildingPrompt" and event == "PromptReady":
            self._go("Spawning")
            return [("StorePrompt", payload)]
        if s == "Spawning" and event == "SessionStarted":
            assert isinstance(payload, int)
            self.consecutive_errors = 0
            self.session_seq = payload
            self._go("Running")
            return []
        if s == "Running" and event == "UrgentMessage":
            self._go("Interrupting")
            return [("CancelSession", None)]
        if s == "Interrupting" and event == "GraceExceeded":
            self._go("BuildingPrompt")
            return [("ForceStopSession", None)]
        if s == "SessionComplete" and event == "WorktreeReady":
            self.session_seq = min(self.session_seq + 1, U64_MAX)
            self._go("BuildingPrompt")
            return [("IncrementSession", self.session_seq)]
        if s == "CoolingDown" and event == "BackoffElapsed":
            self._go("BuildingPrompt")
            return []
        if s in ("Spawning", "Running") and event == "WindowClosed":
            assert isinstance(payload, int)
            self._go("Parked", parked_ms=payload)  # the counters do not move
            return []
        if s == "Parked" and event == "WindowOpened":
            self._go("BuildingPrompt")
            return []
        raise OracleRejectedError(s, event)

    def exited(self, outcome: str, message: str = "") -> list[Effect]:
        """``SessionExited(outcome)``; ``message`` belongs to ``Error``."""
        s = self.state
        if s == "Interrupting":
            # Interrupts are intentional: no error is counted.
            self._go("BuildingPrompt")
            return []
        if s == "Running" and outcome == "Success":
            self.consecutive_errors = 0
            self._go("SessionComplete")
            return []
        if s in ("Spawning", "Running") and outcome in ("Error", "Timeout"):
            self.consecutive_errors = min(self.consecutive_errors + 1, U32_MAX)
            self.total_errors = min(self.total_errors + 1, U32_MAX)
            hit = []
            if self.consecutive_errors >= self.max_consecutive_errors:
                hit.append(
                    f"consecutive_errors {self.consecutive_errors}/{self.max_consecutive_errors}"
                )
            if self.total_errors >= self.max_total_errors:
                hit.append(f"total_errors {self.total_errors}/{self.max_total_errors}")
            if not hit:
                self._go("CoolingDown", backoff_ms(self.consecutive_errors))
                return []
            last = f"error: {message}" if outcome == "Error" else "timeout"
            self._go("Stopped")
            # The wording is the core's; the seed only says "LogFatal".
            return [
                (
                    "LogFatal",
                    f"session error threshold reached ({', '.join(hit)}); last exit: {last}",
                )
            ]
        raise OracleRejectedError(s, "SessionExited")
