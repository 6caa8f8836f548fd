"""Sentinel outputs: the schema check, the log file and the last value.

* :func:`load_schema`: a sentinel's structured-output JSON Schema, from
  ``schema`` (inline), ``schemaStr`` (JSON text), ``schemaFile`` or
  ``enumValues``, checked against its metaschema at load time;
* :func:`schema_problem`: why a value does not meet the schema (``None``
  when it does), in one line with the JSON path;
* :func:`resolve_outputs`: where a sentinel writes, by the reference's
  priority (the codon's ``settings.outputPaths``, then the config's
  ``output``, then an automatic path); a path with a ``/`` is in the agent's
  workspace, a bare name in the managed folder, and either must stay inside
  (:func:`weft.paths.inside`);
* :class:`OutputWriter`: appends to the log (text joined by ``joinString``
  in ``.md``, or one JSON object a line in ``.jsonl``) and replaces the last
  value file atomically. Each write opens its folders below their root
  without following a link (:func:`weft.paths.folder_below`): the paths were
  checked at load, and the agent may have put a link in the way since.
  Blocking: the manager calls it off the event loop.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from weft.config.schema import SentinelConfig, SentinelSettings
from weft.errors import WeftError
from weft.paths import component, folder_below, inside

__all__ = [
    "DEFAULT_JOIN",
    "OutputPlan",
    "OutputTarget",
    "OutputWriter",
    "SchemaError",
    "load_schema",
    "plan_outputs",
    "resolve_outputs",
    "schema_problem",
]

DEFAULT_JOIN = "\n---\n"
"""What separates text outputs in a log (the reference's default)."""


class SchemaError(WeftError):
    """A structured-output schema cannot be used; the message says why."""


def load_schema(config: SentinelConfig, base: Path) -> dict[str, Any] | None:
    """The JSON Schema of ``config``'s structured output (``None``: text output).

    ``base`` is the folder ``schemaFile`` is relative to (the sentinel config
    file's, or the hank's for an inline config). Raises :class:`SchemaError`.
    """
    spec = config.structured_output
    if spec is None:
        return None
    schema: Any
    if spec.output == "enum":
        schema = {"type": "string", "enum": list(spec.enum_values or [])}
    elif spec.schema is not None:
        schema = spec.schema
    elif spec.schema_str is not None:
        try:
            schema = orjson.loads(spec.schema_str)
        except orjson.JSONDecodeError:
            raise SchemaError(
                "structuredOutput.schemaStr is not JSON: structured output is described by "
                "JSON Schema, never by code (Zod source is not evaluated); write the schema "
                "as JSON Schema"
            ) from None
    elif spec.schema_file is not None:
        path = inside(base, spec.schema_file, what="structuredOutput.schemaFile")
        try:
            schema = orjson.loads(path.read_bytes())
        except OSError as e:
            raise SchemaError(
                f"cannot read structuredOutput.schemaFile {path}: {e.strerror}"
            ) from None
        except orjson.JSONDecodeError as e:
            raise SchemaError(f"structuredOutput.schemaFile {path} is not JSON: {e}") from None
    else:
        raise SchemaError(f'structuredOutput "{spec.output}" needs a JSON Schema')
    if not isinstance(schema, dict):
        raise SchemaError("the structured-output schema must be a JSON object")
    if spec.output == "array" and schema.get("type") not in (None, "array"):
        schema = {"type": "array", "items": schema}
    from jsonschema.exceptions import SchemaError as InvalidSchema
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except InvalidSchema as e:
        where = "/".join(str(p) for p in e.path) or "(root)"
        raise SchemaError(
            f"the structured-output schema is not valid JSON Schema at {where}: {e.message}"
        ) from None
    checked: dict[str, Any] = schema
    return checked


def schema_problem(value: Any, schema: dict[str, Any]) -> str | None:
    """Why ``value`` does not meet ``schema``, in one line (``None``: it does)."""
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    error = best_match(validator_for(schema)(schema).iter_errors(value))
    if error is None:
        return None
    where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where}: {error.message}"


@dataclass(frozen=True, slots=True)
class OutputTarget:
    """Where one sentinel writes during one codon."""

    log_file: Path
    log_format: Literal["md", "jsonl"]
    last_value_file: Path | None
    log_root: Path
    """The folder the log must stay in (the workspace or the managed folder)."""
    last_root: Path | None = None
    """The folder the last value file must stay in."""


def _place(value: str, workspace: Path, managed: Path, what: str) -> tuple[Path, Path]:
    """The path of an output file, and the folder it must stay in."""
    if "/" in value:
        return inside(workspace, value, what=what), workspace
    return inside(managed, component(value, what=what), what=what), managed


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """Where one sentinel writes, for every codon of a run: the paths that do
    not depend on the codon, checked once (:func:`plan_outputs`)."""

    sentinel_id: str
    sentinel_dir: Path
    """``<managed_dir>/<sentinelId>``: the automatic log's folder."""
    log_file: Path | None
    """The configured log (``None``: an automatic one per codon)."""
    jsonl: bool
    last_value_file: Path | None
    log_root: Path
    """The folder the log stays in (the automatic one's: the managed folder)."""
    last_root: Path | None

    def target(self, codon_id: str, stamp: str) -> OutputTarget:
        """The files of codon ``codon_id``. The automatic log's name is made of
        plain components (the id, the codon id, the time) in a folder already
        checked, so it needs no check of its own."""
        log = self.log_file
        if log is None:
            codon = component(codon_id, what="codon id")
            stamp = component(stamp, what="time stamp")
            log = (
                self.sentinel_dir
                / f"{self.sentinel_id}-{codon}-{stamp}.{'jsonl' if self.jsonl else 'md'}"
            )
        return OutputTarget(
            log,
            "jsonl" if self.jsonl else "md",
            self.last_value_file,
            self.log_root,
            self.last_root,
        )


def plan_outputs(
    config: SentinelConfig,
    settings: SentinelSettings | None,
    *,
    workspace: Path,
    managed_dir: Path,
) -> OutputPlan:
    """The paths :func:`resolve_outputs` gives, before the codon is known.
    Raises :class:`~weft.errors.UnsafePathError` for a path that leaves its folder."""
    structured = config.structured_output is not None
    paths = settings.output_paths if settings is not None else None
    output = config.output
    log = (paths.log_file if paths else None) or (output.file if output else None)
    last = (paths.last_value_file if paths else None) or (
        output.last_value_file if output else None
    )
    fmt = output.format if output else None
    sentinel_dir = managed_dir / component(config.id, what="sentinel id")
    jsonl = structured or fmt in ("jsonl", "json")
    log_path: Path | None = None
    log_root = managed_dir
    if log is not None:
        what = f"the log file of sentinel {config.id}"
        log_path, log_root = _place(log, workspace, sentinel_dir, what)
        jsonl = structured or fmt in ("jsonl", "json") or log_path.suffix in (".jsonl", ".ndjson")
    else:
        inside(managed_dir, sentinel_dir, what=f"the log folder of sentinel {config.id}")
    last_path = last_root = None
    if last:
        what = f"the lastValueFile of sentinel {config.id}"
        last_path, last_root = _place(last, workspace, sentinel_dir, what)
    return OutputPlan(config.id, sentinel_dir, log_path, jsonl, last_path, log_root, last_root)


def resolve_outputs(
    config: SentinelConfig,
    settings: SentinelSettings | None,
    *,
    codon_id: str,
    workspace: Path,
    managed_dir: Path,
    stamp: str,
) -> OutputTarget:
    """The files ``config`` writes to for codon ``codon_id`` (see the module doc).

    ``managed_dir`` is the execution's sentinel output folder; the automatic
    log is ``<managed_dir>/<sentinelId>/<sentinelId>-<codonId>-<stamp>.<ext>``.
    Raises :class:`~weft.errors.UnsafePathError` for a path that leaves its folder.
    """
    plan = plan_outputs(config, settings, workspace=workspace, managed_dir=managed_dir)
    return plan.target(codon_id, stamp)


_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
_LOG_LOCK = threading.Lock()
"""Text logs: whether a log is empty (no ``joinString`` before the first text)
and the append are one step, though sentinels and codons share a log and
write it from worker threads."""


class OutputWriter:
    """Appends a sentinel's outputs to its files (blocking I/O)."""

    def __init__(self, target: OutputTarget, join: str = DEFAULT_JOIN) -> None:
        self.target = target
        self.join = join

    def append(self, content: Any, record: dict[str, Any]) -> None:
        """Writes one output: ``content`` (text or value) and, for JSON logs,
        the ``record`` around it (trigger number, time, cost ...). Raises
        :class:`~weft.errors.UnsafePathError` when a folder on the way became
        a link, ``OSError`` when the file cannot be written."""
        target = self.target
        what = f"the log file {target.log_file.name}"
        with folder_below(target.log_root, target.log_file, what=what) as (folder, name):
            if target.log_format == "jsonl":
                _append(folder, name, orjson.dumps({**record, "content": content}) + b"\n")
            else:
                text = content if isinstance(content, str) else orjson.dumps(content).decode()
                with _LOG_LOCK:
                    fd = os.open(name, _APPEND, 0o644, dir_fd=folder)
                    # Joined to what is there, whoever wrote it (an earlier
                    # codon's sentinel may share the log and write it later).
                    joined = self.join if os.fstat(fd).st_size > 0 else ""
                    _write_all(fd, (joined + text).encode())
        if target.last_value_file is not None and target.last_root is not None:
            _replace(
                target.last_root,
                target.last_value_file,
                orjson.dumps(content, option=orjson.OPT_INDENT_2),
            )


def _write_all(fd: int, data: bytes) -> None:
    """Writes ``data`` to ``fd`` and closes it."""
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(data)
    finally:
        os.close(fd)


def _append(folder: int, name: str, data: bytes) -> None:
    _write_all(os.open(name, _APPEND, 0o644, dir_fd=folder), data)


def _replace(root: Path, path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` at once: a temp file renamed over it, so a
    reader sees the old value or the new one, never half of one. A link at
    ``path`` is replaced, not followed."""
    with folder_below(root, path, what=f"the lastValueFile {path.name}") as (folder, name):
        tmp = f".{name}.tmp"
        _write_all(os.open(tmp, _CREATE, 0o644, dir_fd=folder), data)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
