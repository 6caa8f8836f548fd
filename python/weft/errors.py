"""Weft's exception tree.

Everything Weft raises on purpose derives from :class:`WeftError`, so a caller
(and the CLI, which prints the message alone and exits 2 or 1) can catch one
class. Expected outcomes (a rejected transition in the queue) are values; these
classes are for broken contracts and for callers that asked to be told by an
exception (``validate_transition``, ``transition_and_wait``).

The compiled core raises these same classes (``rust_core/src/py/errors.rs``
imports them from here), so ``except InvalidTransitionError`` works the same for
Rust and Python callers. Classes defined outside this module are named with
their package::

    WeftError
    ├── TransitionRejectedError       a transition was refused; nothing changed
    │   ├── InvalidTransitionError    no edge from -> to (core)
    │   ├── MetadataValidationError   the target state's guard failed (core)
    │   ├── StateConflictError        does not fit the state (unknown run, ...)
    │   └── MalformedTransitionError  not a transition at all
    ├── StateValidationError          state.json failed its load-time checks (core)
    ├── CoreStateError                the in-memory state cannot be trusted (core)
    ├── SessionTransitionError        the agent-session machine has no such row (core)
    ├── ConfigError                   a hank file or config is invalid: every problem
    ├── StoreError                    the store cannot be used as it is
    │   └── StoreCorruptError         the journal failed its integrity check
    │       ├── JournalLossError      committed events are provably gone
    │       └── CheckpointLossError   a checkpoint the thread needs is gone
    ├── LockHeldError                 another live process holds the lock
    ├── LockLostError                 this process's lock was taken over
    ├── PersistenceError              persisting failed; the writer stopped (fatal)
    ├── StorageFullError              a write failed: disk full, quota, read-only, EIO
    ├── UnsafePathError               a path would leave the folder it must stay in
    ├── CommandRejectedError          a steering command does not apply now
    ├── CheckpointError               weft.checkpoints: the shadow repository
    │   ├── CheckpointStorageError    cannot be read or written
    │   │   └── TreeError             a tree object is missing or malformed
    │   ├── CheckpointPatternError    a checkpointedFiles pattern is unusable
    │   ├── CheckpointConflictError   a history branch moved under the caller
    │   ├── CheckpointNotFoundError   no checkpoint has this sha
    │   └── AmbiguousCheckpointError  a sha prefix names several
    ├── ExecutionSetupError           weft.runtime: the execution folder, as asked
    │   ├── InputPathError            the hank or data arguments are unusable
    │   ├── ExecutionMetaError        execution-meta.json missing or unreadable
    │   ├── HankChangedError          the hank changed and resuming was not confirmed
    │   │   └── RunSettingsChangedError  a run-shaping setting (the model) changed, not confirmed
    │   └── DataMismatchError         the data differs from the execution's
    ├── RollbackError                 weft.runtime: a rollback that cannot be done
    ├── CopyError                     weft.runtime: a rig copy failed (its message is for the user)
    ├── CopyCancelledError            weft.runtime: a rig copy was cancelled while its thread ran
    ├── OutputError                   weft.runtime: an outputFiles copy could not be made
    ├── PrefixChangedError            weft.runtime: what already ran of a changed hank changed
    ├── AgentStartError               weft.agents: an agent CLI could not start
    ├── PricingError                  weft.agents: the price table is unreadable
    ├── ServerError                   weft.server: the WebSocket server did not start
    ├── TemplateError                 weft.sentinels: a prompt template cannot be parsed or run
    ├── SchemaError                   weft.sentinels: a structured-output schema is unusable
    ├── ProviderError                 weft.sentinels: a sentinel's model call failed
    ├── PatternError                  weft.sentinels: a matches pattern refused (not linear-time)
    ├── ClientError                   weft.client: talking to a run's server
    │   ├── HandshakeError            the server refused the handshake
    │   ├── CommandError              the server refused or failed a command
    │   ├── ConnectionLostError       the server could not be reached again
    │   └── ProtocolViolationError    the server broke the protocol's guarantees
    ├── BundleError                   weft.bundle: a .hank bundle is malformed, changed, too big
    ├── ForkError                     weft.fork: a fork that cannot be made
    ├── ArchiveError                  weft.portable: an execution archive cannot be made or read
    ├── DiffInputError                weft.cli: an execution weft diff cannot compare
    ├── AttachError                   weft.cli: nothing to attach to
    └── ResolveError                  weft.cli: an argument names no execution

``tests/test_errors.py`` keeps this drawing true: every public exception class in
``weft`` must appear in it under its real parent. Outside the tree are a few
private control-flow exceptions that never leave their module (each says so), and
the fake agent CLIs (``weft.agents.fake``), which stand in for other vendors'
programs, import nothing from Weft and end with an exit code, never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from weft._core import Issue, Outcome
    from weft.config.problems import ConfigProblem


class WeftError(Exception):
    """Base class of every error Weft raises on purpose."""


class TransitionRejectedError(WeftError):
    """A state transition was refused; the state did not change.

    ``code`` is stable and machine-readable (``invalid_transition``,
    ``invalid_metadata``, ``malformed``, ``unknown_run``, ...). ``seq`` is the
    transition's sequence number when it went through the queue.
    """

    def __init__(self, message: str, *, code: str, seq: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.seq = seq


class InvalidTransitionError(TransitionRejectedError):
    """The codon state machine has no edge ``from_status -> to_status``.

    Message: ``Invalid transition from completed to running``.
    """

    def __init__(
        self,
        message: str,
        *,
        from_status: str,
        to_status: str,
        code: str = "invalid_transition",
        seq: int | None = None,
    ) -> None:
        super().__init__(message, code=code, seq=seq)
        self.from_status = from_status
        self.to_status = to_status


class MetadataValidationError(TransitionRejectedError):
    """The transition lacks metadata its target state requires.

    ``missing`` names absent fields; ``invalid`` pairs each present-but-wrong
    field with what it should be. Message:
    ``Missing required metadata for transition to running: claudeSessionId``.
    """

    def __init__(
        self,
        message: str,
        *,
        to_status: str,
        missing: Sequence[str] = (),
        invalid: Sequence[tuple[str, str]] = (),
        from_status: str | None = None,
        code: str = "invalid_metadata",
        seq: int | None = None,
    ) -> None:
        super().__init__(message, code=code, seq=seq)
        self.from_status = from_status
        self.to_status = to_status
        self.missing = tuple(missing)
        self.invalid = tuple(invalid)


class StateConflictError(TransitionRejectedError):
    """The transition is well formed but does not fit the current state.

    For example an unknown run, a codon that is not running, or a ``from``
    status that is not the codon's status.
    """


class MalformedTransitionError(TransitionRejectedError):
    """The bytes are not a transition (bad JSON, a missing or unknown field)."""


class StateValidationError(WeftError):
    """A state document failed its load-time integrity checks."""

    def __init__(
        self, message: str, *, errors: list[Issue], warnings: list[Issue] | None = None
    ) -> None:
        super().__init__(message)
        self.errors = errors
        self.warnings = warnings or []


class ConfigError(WeftError):
    """A configuration file (a hank file, weft.json, a sentinel config) is invalid.

    ``problems`` lists everything found in one pass, each with its file, JSON
    path, codon or loop, message and hint (:class:`weft.config.problems.ConfigProblem`);
    warnings found alongside the errors are included. ``str()`` lists them all.
    """

    def __init__(self, problems: Sequence[ConfigProblem], *, summary: str | None = None) -> None:
        self.problems = list(problems)
        errors = [p for p in self.problems if p.is_error]
        warnings = len(self.problems) - len(errors)
        if summary is None:
            files = sorted({p.file for p in errors} or {p.file for p in self.problems})
            noun = "error" if len(errors) == 1 else "errors"
            tail = f", {warnings} warning{'s' if warnings != 1 else ''}" if warnings else ""
            summary = f"invalid configuration {', '.join(files)}: {len(errors)} {noun}{tail}"
        self.summary = summary
        ordered = errors + [p for p in self.problems if not p.is_error]
        super().__init__("\n".join([summary, *(p.render() for p in ordered)]))

    @property
    def errors(self) -> list[ConfigProblem]:
        """The problems that make the file invalid."""
        return [p for p in self.problems if p.is_error]


class StoreError(WeftError):
    """An execution's store (journal, snapshots) cannot be used as it is.

    The message says what is wrong, where, and what to do; nothing is deleted.
    """


class StoreCorruptError(StoreError):
    """The journal failed its integrity check; the run refuses to continue."""


class JournalLossError(StoreCorruptError):
    """Committed journal events are provably gone (a missing, emptied or torn
    journal beside the snapshots and checkpoints that prove it held them).

    The run refuses rather than start over on top of the work they describe;
    the message names what was lost and the ways forward.
    """


class CheckpointLossError(StoreCorruptError):
    """The checkpoint repository lacks a checkpoint the execution thread
    continues from; the run refuses rather than redo finished work."""


class LockHeldError(WeftError):
    """Another live Weft process holds this execution's lock."""


class LockLostError(WeftError):
    """This process's lock was taken over (fenced): it must stop writing."""


class PersistenceError(WeftError):
    """Persisting transitions failed; the state manager stopped (fatal).

    Everything committed before the failure is kept; the cause is chained.
    """


class CoreStateError(WeftError):
    """The in-memory state can no longer be trusted (an internal failure)."""


class CommandRejectedError(WeftError):
    """A steering command (``codon.next``, ``codon.redo``, ``rollback.*``...)
    does not apply now; nothing changed. The message says why and what to do
    instead, e.g. ``Cannot rollback while codon is running. Use
    'codon.forceStop' first.``

    ``code`` is the protocol error code when it is more precise than
    ``COMMAND_REJECTED`` (``ROLLBACK_IN_PROGRESS``)."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class SessionTransitionError(WeftError):
    """The agent-session machine (seed 002) has no row for ``event`` in ``state``.

    The machine did not change. ``state`` and ``event`` are the seed's names.
    Message: ``invalid session transition: BackoffElapsed in Running``.
    """

    def __init__(self, message: str, *, state: str, event: str) -> None:
        super().__init__(message)
        self.message = message
        self.state = state
        self.event = event


def rejection_error(outcome: Outcome) -> TransitionRejectedError:
    """The exception that describes a rejected ``outcome``.

    Raises ``ValueError`` if the outcome was applied.
    """
    if outcome.ok or outcome.code is None or outcome.message is None:
        raise ValueError(f"transition {outcome.seq} was applied, not rejected")
    code, message, seq = outcome.code, outcome.message, outcome.seq
    if code == "invalid_transition":
        return InvalidTransitionError(
            message,
            from_status=outcome.from_status or "",
            to_status=outcome.to_status or "",
            seq=seq,
        )
    if code == "invalid_metadata":
        return MetadataValidationError(
            message,
            from_status=outcome.from_status,
            to_status=outcome.to_status or "",
            missing=outcome.missing,
            invalid=outcome.invalid,
            seq=seq,
        )
    if code == "malformed":
        return MalformedTransitionError(message, code=code, seq=seq)
    return StateConflictError(message, code=code, seq=seq)


class UnsafePathError(WeftError):
    """A path built from an id or a hank value would leave the folder it must stay
    in (the execution, its workspace, a rig copy's bounds); nothing was written.

    ``path`` is the offending path as built, ``root`` the folder it had to stay in.
    """

    def __init__(self, message: str, *, path: str, root: str) -> None:
        super().__init__(message)
        self.path = path
        self.root = root


class StorageFullError(WeftError):
    """A file Weft must write could not be written: the disk is full, out of
    quota, read-only or failing (``ENOSPC``, ``EDQUOT``, ``EROFS``, ``EIO``).

    ``what`` names the file or the part of the store; the message is one line
    that says so and that freeing space and running the same command again
    resumes the run. Everything committed before the failure is kept.
    """

    def __init__(self, message: str, *, what: str) -> None:
        super().__init__(message)
        self.what = what
