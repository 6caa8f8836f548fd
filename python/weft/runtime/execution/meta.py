"""``.weft/execution-meta.json``: which hank and data an execution belongs to,
and the run-shaping settings kept with it (:class:`RunSettings`).

:func:`read_meta` refuses an unreadable or too new file with a message that
says how to fix it (:class:`~weft.runtime.execution.errors.ExecutionMetaError`);
:func:`write_meta` replaces it atomically (temp file, fsync, rename, fsync of
the folder), so a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import platform
import secrets
import sys
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from weft.filemodes import open_private
from weft.runtime.execution.errors import ExecutionMetaError
from weft.store.diskspace import STORAGE_ERRNOS, storage_error

__all__ = [
    "META_VERSION",
    "TEMP_SUFFIX",
    "ExecutionEnvironment",
    "ExecutionMeta",
    "ForkedFrom",
    "RunSettings",
    "current_environment",
    "read_meta",
    "weft_version",
    "write_meta",
]

META_VERSION = "1.0.0"

TEMP_SUFFIX = ".tmp"
"""``execution-meta.json.<pid>-<random>.tmp``: a metadata write in progress."""


class ExecutionEnvironment(msgspec.Struct, rename="camel", kw_only=True):
    """Where the execution was created (for bug reports, never for decisions)."""

    platform: str
    arch: str
    os_release: str
    python: str


Model = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Ceiling = Annotated[float, msgspec.Meta(gt=0)]


class RunSettings(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """The settings that shape an execution's runs, kept with it so that a later
    ``weft run`` without the flag goes on with them (``runSettings`` in the file).

    ``model`` replaces every codon's model (``--model``, or ``model`` in weft.json
    or ``WEFT_RUNTIME_MODEL``); ``sentinel_model`` is every sentinel's model
    (``--sentinel-model``, ``sentinel.model``); ``max_dollars``, ``max_seconds``
    and ``max_tokens`` are the run ceilings given as ``--max-cost``, ``--max-time``
    and ``--max-tokens`` (a ceiling from weft.json or the environment is read from
    there each time).
    ``None``: not set, the hank's own (or the runtime configuration's) applies.
    """

    model: Model | None = None
    sentinel_model: Model | None = None
    max_dollars: Ceiling | None = None
    max_seconds: Ceiling | None = None
    max_tokens: Annotated[int, msgspec.Meta(gt=0)] | None = None


class ForkedFrom(msgspec.Struct, rename="camel", kw_only=True):
    """Where a forked execution's history came from (``weft fork``)."""

    execution: str
    """The source execution's folder."""
    codon_id: str
    """The codon the fork runs again (its history is the source's up to it)."""
    at: str
    """When the fork was made (ISO-8601 UTC)."""


class ExecutionMeta(msgspec.Struct, rename="camel", kw_only=True):
    """``.weft/execution-meta.json``: the hank and data an execution belongs to.

    Field names follow the reference runtime's file where they exist.
    ``dataHashMode`` says how ``dataHash`` was computed (see :func:`hash_data`);
    two hashes only match when the modes match too. Unknown fields are
    tolerated so that a newer minor version can still be read.
    """

    version: str
    created_at: str
    last_used: str
    hank_path: str
    hank_hash: str
    read_only_source_data_path: str | None
    read_only_source_resolved_data_path: str | None
    data_kind: Literal["directory", "file"] | None
    data_hash: str
    data_hash_mode: Literal["content", "metadata", "none"]
    link_type: Literal["symlink", "copy", "none"]
    weft_version: str
    environment: ExecutionEnvironment
    run_settings: RunSettings = msgspec.field(default_factory=RunSettings)
    """Absent in files written before it existed: nothing kept."""
    forked_from: ForkedFrom | None = None
    """Set in an execution ``weft fork`` made."""


_meta_encoder = msgspec.json.Encoder()
_meta_decoder = msgspec.json.Decoder(ExecutionMeta)


def read_meta(path: Path) -> ExecutionMeta:
    """Reads an ``execution-meta.json``; :class:`ExecutionMetaError` if it is unusable."""
    root = path.parent.parent
    fix = (
        f"Fix the file by hand, or start a new execution in that folder with "
        f"`weft run --execution {root} --new --force` (the old .weft/ is kept as "
        f".weft.backup-<time>/)."
    )
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ExecutionMetaError(f"{path}: missing. {fix}") from None
    except OSError as e:
        raise ExecutionMetaError(f"{path}: cannot be read ({e.strerror}). {fix}") from None
    try:
        meta = _meta_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise ExecutionMetaError(f"{path}: not a valid execution-meta.json ({e}). {fix}") from None
    major = meta.version.split(".", 1)[0]
    if major != META_VERSION.split(".", 1)[0]:
        raise ExecutionMetaError(
            f"{path}: version {meta.version} is not supported by this Weft (it reads "
            f"{META_VERSION.split('.', 1)[0]}.x); use the Weft that created it, or {fix[0].lower()}"
            f"{fix[1:]}"
        )
    return meta


def write_meta(path: Path, meta: ExecutionMeta) -> None:
    """Writes ``meta`` atomically: a temp file, fsync, rename, fsync of the folder.

    The temp file's name is unique to this call, so two processes writing at
    once never rename each other's half-written file; a failed write removes
    it. A full disk raises :class:`~weft.errors.StorageFullError` naming the file.
    """
    data = msgspec.json.format(_meta_encoder.encode(meta), indent=2)
    temp = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")
    try:
        fd = open_private(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            view = memoryview(data + b"\n")
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as e:
        with contextlib.suppress(OSError):
            temp.unlink()
        if e.errno in STORAGE_ERRNOS:
            raise storage_error(str(path), e) from e
        raise


def current_environment() -> ExecutionEnvironment:
    """This machine and Python, for the record."""
    return ExecutionEnvironment(
        platform=sys.platform,
        arch=platform.machine(),
        os_release=platform.release(),
        python=platform.python_version(),
    )


def weft_version() -> str:
    """The compiled core's version (``unknown`` without it)."""
    try:
        from weft._core import __version__
    except ImportError:  # pragma: no cover - the extension is always built in practice
        return "unknown"
    return str(__version__)
