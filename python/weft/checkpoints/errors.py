"""The checkpoint errors: what went wrong with the shadow repository, and how to fix it.

All of them derive from :class:`CheckpointError`, itself a :class:`~weft.errors.WeftError`,
so the CLI can print the message alone. Every message names the thing (a path, a
branch, a SHA) and says what to do next.
"""

from __future__ import annotations

from collections.abc import Sequence

from weft.errors import WeftError


class CheckpointError(WeftError):
    """A checkpoint operation failed; nothing was half-done unless the message says so."""


class CheckpointStorageError(CheckpointError):
    """The shadow repository cannot be read or written (permissions, a file in the way, I/O).

    Weft never deletes storage it cannot read; the message says which path to inspect.
    """


class CheckpointPatternError(CheckpointError):
    """A ``checkpointedFiles`` pattern is not usable (empty, absolute, or leaving the workspace)."""

    def __init__(self, message: str, *, pattern: str) -> None:
        super().__init__(message)
        self.pattern = pattern


class CheckpointConflictError(CheckpointError):
    """A history branch moved: its tip is not the parent the caller expected.

    Someone else committed to the branch (or the caller's idea of the current
    checkpoint is stale). Nothing was written to the branch.
    """

    def __init__(self, message: str, *, branch: str, expected: str, actual: str | None) -> None:
        super().__init__(message)
        self.branch = branch
        self.expected = expected
        self.actual = actual


class CheckpointNotFoundError(CheckpointError):
    """No checkpoint has this SHA (or SHA prefix)."""

    def __init__(self, message: str, *, sha: str) -> None:
        super().__init__(message)
        self.sha = sha


class AmbiguousCheckpointError(CheckpointError):
    """A SHA prefix names more than one checkpoint."""

    def __init__(self, message: str, *, prefix: str, candidates: Sequence[str]) -> None:
        super().__init__(message)
        self.prefix = prefix
        self.candidates = tuple(candidates)
