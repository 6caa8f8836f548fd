"""What a rig reports: one :class:`RigOpResult` per operation and the :class:`RigResult`.

Plain values shared by the rig's parts (:mod:`weft.runtime.rig.setup` runs the
operations, :mod:`weft.runtime.rig.copy` and :mod:`weft.runtime.rig.command`
perform them); :attr:`RigResult.reason` is the codon's failure reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from weft.events.stream import StreamData

__all__ = ["Emit", "FailureType", "RigOpResult", "RigResult"]

REASON_TAIL_LINES = 20
"""Lines of a failed command's output quoted in the failure reason."""
REASON_TAIL_CHARS = 2000
"""At most this much of them (the end is kept)."""

Emit = Callable[[StreamData], object]
"""Where events go: ``emit(event)``, e.g. ``StateManager.emit`` with the run
and codon bound."""
FailureType = Literal["command_failed", "timeout", "other"]
"""How an operation failed: non-zero exit or a signal, too slow, or anything else."""


@dataclass(frozen=True, slots=True)
class RigOpResult:
    """What one operation did.

    ``ok`` is false for a failure, also one that ``failure_ignored`` let
    pass. ``exit_code`` is the shell's (negative: killed by that signal).
    ``target`` is a copy's destination; ``cwd`` is a command's directory, or
    for a copy the directory ``lastCopied`` commands will run in (the target,
    or its folder when a file was copied).
    """

    index: int
    type: Literal["copy", "command"]
    label: str
    ok: bool
    duration: float
    failure_type: FailureType | None = None
    failure_ignored: bool = False
    message: str | None = None
    exit_code: int | None = None
    output_tail: str = ""
    target: Path | None = None
    cwd: Path | None = None
    files_copied: int = 0
    bytes_copied: int = 0
    ignored: tuple[str, ...] = ()

    @classmethod
    def other_failure(
        cls,
        index: int,
        type: Literal["copy", "command"],
        label: str,
        message: str,
        *,
        duration: float,
    ) -> RigOpResult:
        """An operation that failed before or outside its work (``failureType`` ``other``)."""
        return cls(
            index=index,
            type=type,
            label=label,
            ok=False,
            duration=duration,
            failure_type="other",
            message=message,
        )

    def describe(self) -> str:
        """``command operation 2 ("npm ci")``."""
        return f"{self.type} operation {self.index + 1} ({self.label})"


@dataclass(frozen=True, slots=True)
class RigResult:
    """The outcome of a rig: every operation that ran, and the one that stopped it."""

    operations: tuple[RigOpResult, ...]
    failure: RigOpResult | None
    last_copied: Path | None
    duration: float

    @property
    def ok(self) -> bool:
        """True when no failure stopped the rig (ignored failures do not)."""
        return self.failure is None

    @property
    def command_count(self) -> int:
        """How many command operations ran."""
        return sum(1 for op in self.operations if op.type == "command")

    @property
    def ignored_failures(self) -> tuple[RigOpResult, ...]:
        """Failures that ``allowFailure``/``ignore_failures`` let pass."""
        return tuple(op for op in self.operations if op.failure_ignored)

    @property
    def reason(self) -> str | None:
        """The codon's failure reason, e.g. ``Rig setup failed at command operation 2
        ("npm ci"): exit code 1: <last lines of output>``."""
        op = self.failure
        if op is None:
            return None
        text = f"Rig setup failed at {op.describe()}: {op.message}"
        tail = _reason_tail(op.output_tail)
        return f"{text}: {tail}" if tail else text


def _reason_tail(output: str) -> str:
    lines = output.rstrip("\n").splitlines()[-REASON_TAIL_LINES:]
    text = "\n".join(lines)
    return text if len(text) <= REASON_TAIL_CHARS else "..." + text[-REASON_TAIL_CHARS:]
