"""``weft run``'s positional arguments: which hank, and which data.

:func:`resolve_inputs` reads the zero, one or two positionals the way the
reference runtime does and names what it expected when they do not fit
(:class:`~weft.runtime.execution.errors.InputPathError`, exit 2).
"""

from __future__ import annotations

from pathlib import Path

from weft.runtime.execution.errors import InputPathError
from weft.runtime.execution.layout import HANK_FILE

__all__ = ["resolve_inputs"]


def resolve_inputs(args: list[str], *, cwd: Path | None = None) -> tuple[Path, Path | None]:
    """The hank file and the data path (or ``None``) named by ``weft run``'s positionals.

    * no argument: ``./hank.json``, no data;
    * one argument: a path ending in ``.json``, or a directory that contains a
      ``hank.json``, is the hank (no data); anything else is the data, run
      with ``./hank.json``;
    * two arguments: the hank (a ``.json`` file or a directory holding a
      ``hank.json``), then the data (a file or a directory).

    A ``.hank`` bundle in the hank's place stands for its extracted hank file.

    Both paths must exist; they are returned absolute with symlinks resolved.
    Raises :class:`InputPathError` with what was expected otherwise.
    """
    base = (cwd or Path.cwd()).absolute()
    args = _unbundled(args, base)
    if len(args) > 2:
        raise InputPathError(
            f"too many positional arguments: expected at most 2 (hank, data), got {len(args)}"
        )
    for arg in args:
        if arg == "-":
            raise InputPathError("reading data from stdin ('-') is not supported; pass a path")
        if not arg:
            raise InputPathError("an empty path was given; pass a hank file or a data path")
    if not args:
        return _default_hank(base, None), None
    if len(args) == 2:
        return _hank_file(base / args[0], args[0]), _data_path(base / args[1], args[1])
    only = base / args[0]
    if args[0].endswith(".json") or (only.is_dir() and (only / HANK_FILE).is_file()):
        return _hank_file(only, args[0]), None
    if not only.exists():
        raise InputPathError(
            f"{args[0]}: no such file or directory (expected a hank .json file, a folder "
            f"containing {HANK_FILE}, or the data to run ./{HANK_FILE} on)"
        )
    return _default_hank(base, args[0]), _data_path(only, args[0])


def _unbundled(args: list[str], base: Path) -> list[str]:
    """A ``.hank`` bundle named as the hank (``weft pack``) runs from its verified,
    extracted copy (:func:`weft.bundle.hank_argument`); a bundle that does not match
    its lock is a usage error (exit 2)."""
    from weft.bundle import BundleError, hank_argument

    try:
        hank = hank_argument(args[0], base) if args else None
    except BundleError as e:
        raise InputPathError(str(e)) from None
    return args if hank is None else [str(hank), *args[1:]]


def _default_hank(base: Path, data_arg: str | None) -> Path:
    path = base / HANK_FILE
    if path.is_file():
        return path.resolve()
    if data_arg is None:
        raise InputPathError(
            f"no {HANK_FILE} in {base}; pass the hank: weft run path/to/hank.json [data]"
        )
    raise InputPathError(
        f"{data_arg} is not a hank (not a .json file, no {HANK_FILE} inside), so it was taken "
        f"as the data, but there is no {HANK_FILE} in {base} to run on it; "
        f"pass both: weft run path/to/hank.json {data_arg}"
    )


def _hank_file(path: Path, arg: str) -> Path:
    if path.is_dir():
        candidate = path / HANK_FILE
        if not candidate.is_file():
            raise InputPathError(f"{arg}: the folder has no {HANK_FILE}; pass the hank file itself")
        return candidate.resolve()
    if not path.exists():
        raise InputPathError(f"{arg}: hank file not found")
    if not path.is_file():
        raise InputPathError(f"{arg}: not a regular file; pass the hank .json file")
    return path.resolve()


def _data_path(path: Path, arg: str) -> Path:
    if not path.exists():
        raise InputPathError(f"{arg}: data not found (pass an existing file or folder)")
    if not (path.is_dir() or path.is_file()):
        raise InputPathError(f"{arg}: the data must be a regular file or a folder")
    return path.resolve()
