"""What goes wrong preparing an execution directory: one exception tree.

:class:`ExecutionSetupError` and its kinds are raised by the execution's
preparation (:mod:`weft.runtime.execution.prepare`), its metadata
(:mod:`weft.runtime.execution.meta`), the hank hash (:mod:`weft.runtime.execution.datahash`) and
``weft run``'s arguments (:mod:`weft.cli.run_args`); the CLI prints the
message and exits 2.
"""

from __future__ import annotations

from pathlib import Path

from weft.errors import WeftError

__all__ = [
    "DataMismatchError",
    "ExecutionMetaError",
    "ExecutionSetupError",
    "HankChangedError",
    "InputPathError",
]


class ExecutionSetupError(WeftError):
    """The execution directory cannot be created or resumed as asked.

    The message says what is wrong, where, and which flag or action fixes it;
    nothing has been deleted.
    """


class InputPathError(ExecutionSetupError):
    """The hank or data arguments do not name usable paths (a usage error)."""


class ExecutionMetaError(ExecutionSetupError):
    """``.weft/execution-meta.json`` is missing where it must exist, or unreadable."""


class HankChangedError(ExecutionSetupError):
    """The hank changed since the execution last used it, and resuming was not confirmed."""

    def __init__(self, message: str, execution: Path | None = None) -> None:
        super().__init__(message)
        self.execution = execution
        """The execution whose run history the hank no longer matches, when one did."""


class DataMismatchError(ExecutionSetupError):
    """The data given differs from the data the execution was created with."""
