"""The one error of :mod:`weft.bundle`."""

from __future__ import annotations

from weft.errors import WeftError

__all__ = ["BundleError"]


class BundleError(WeftError):
    """A ``.hank`` bundle cannot be made or used: malformed, changed since it was
    packed (its members differ from its ``hank.lock``), over a quota, or holding a
    path that would leave its folder. The message says what and where; the CLI
    prints it with the hint and exits 2."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message}\n  hint: {hint}")
