"""The batch file: its schema, loading (TOML or JSON) and checks.

A batch file lists **workstreams**, each a list of **steps**. A step runs a
hank (``hank`` with optional ``data``, ``model`` and ``config``) or a
``command``; ``depends_on`` names steps of the same workstream that must
succeed first. ``expected_exit_codes``, ``max_retries`` and ``retry_backoff``
come from the step, else from ``[defaults]``, else the seed's defaults
(``[0]``, 0 retries, 1 s doubling up to 60 s). ``[breakers.<tool>]`` tunes
the circuit breaker of one tool (``"*"`` for every tool without its own).

The file is checked like a hank file: every problem at once, each with the
file, the JSON path and a hint (:class:`weft.config.problems.ConfigProblem`),
raised together as :class:`weft.errors.ConfigError`. The structural check is
the hank file's own walk (:func:`weft.config.walk.check_value`) over the
Structs below, so the JSON Schema (:func:`batch_json_schema`) cannot drift
from what is checked.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any

import msgspec
import orjson

from weft.config.hints import did_you_mean
from weft.config.ids import ID_PATTERN, MAX_ID_LENGTH
from weft.config.problems import ConfigProblem
from weft.config.walk import Sink, check_value
from weft.errors import ConfigError

__all__ = [
    "ID_PATTERN",
    "Backoff",
    "BatchBudget",
    "BatchFile",
    "BreakerSpec",
    "StepDefaults",
    "StepSpec",
    "WorkstreamSpec",
    "batch_json_schema",
    "load_batch_file",
    "read_batch_document",
]

# Workstream and step ids name folders: the hank file's id rule (letters,
# digits, ``_``, ``.``, ``-``), so its problems are explained the same way.
_Id = Annotated[str, msgspec.Meta(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=1000)]
_Millis = Annotated[int, msgspec.Meta(ge=0, le=86_400_000)]


class _Spec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class Backoff(_Spec, frozen=True, kw_only=True):
    """Exponential retry backoff: ``min(base_delay_ms * 2**retry_count, max_delay_ms)``."""

    base_delay_ms: _Millis = 1000
    max_delay_ms: _Millis = 60000


class BreakerSpec(_Spec, frozen=True, kw_only=True):
    """A circuit breaker's tuning (seed 004, ``config/circuit_breaker.json``)."""

    failure_threshold: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 5
    cooldown_seconds: Annotated[float, msgspec.Meta(ge=0, le=86400)] = 60.0
    success_threshold: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1


class StepDefaults(_Spec, frozen=True, kw_only=True):
    """Values every step takes unless it sets its own."""

    expected_exit_codes: list[int] | None = None
    max_retries: _Count | None = None
    retry_backoff: Backoff | None = None


class StepSpec(_Spec, frozen=True, kw_only=True):
    """One step: a hank run or a command."""

    id: _Id
    hank: str | None = None
    """A hank file, or a folder holding ``hank.json`` (relative to the batch file)."""
    data: str | None = None
    """The data the hank works on (relative to the batch file)."""
    model: str | None = None
    """Run every codon on this model (``weft run --model``)."""
    config: str | None = None
    """A ``weft.json`` with runtime settings (``weft run --config``)."""
    command: list[str] | None = None
    """A program and its arguments, run in the step's own folder (no shell)."""
    env: dict[str, str] = {}
    """Extra environment variables for the step's process."""
    tool: str | None = None
    """The circuit breaker this step counts against (default: ``weft`` for a
    hank, the program's name for a command)."""
    depends_on: list[_Id] = []
    expected_exit_codes: list[int] | None = None
    max_retries: _Count | None = None
    retry_backoff: Backoff | None = None


class WorkstreamSpec(_Spec, frozen=True, kw_only=True):
    """A workstream: steps, its own retries, and an optional matrix."""

    id: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    """The id; with a matrix it may hold ``{key}`` placeholders, else each
    expansion appends its values (``eval-alpha``)."""
    steps: list[StepSpec]
    max_retries: _Count = 0
    """Whole-workstream retries: its failed steps start over after the backoff."""
    retry_backoff: Backoff | None = None
    matrix: dict[str, list[str]] = {}
    """One workstream per combination of these values; ``{key}`` in any
    string of the workstream is replaced by the value."""


class BatchBudget(_Spec, frozen=True, kw_only=True):
    """A ceiling on the whole batch's cost, summed from its executions' stores."""

    max_dollars: Annotated[float, msgspec.Meta(gt=0)]
    """Once the batch has cost this much, no step starts; the workstreams not
    finished are abandoned (steps already running finish)."""


class BatchFile(_Spec, frozen=True, kw_only=True):
    """A whole batch file."""

    workstreams: list[WorkstreamSpec]
    name: str | None = None
    budget: BatchBudget | None = None
    defaults: StepDefaults = StepDefaults()
    breakers: dict[str, BreakerSpec] = {}


def batch_json_schema() -> dict[str, Any]:
    """The JSON Schema of a batch file (``weft batch schema``)."""
    schema: dict[str, Any] = msgspec.json.schema(BatchFile)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Weft batch file"
    return schema


def read_batch_document(path: Path, display: str) -> tuple[Any, list[ConfigProblem]]:
    """The parsed document (TOML by ``.toml``, else JSON) or the problem that stops it."""

    def problem(
        message: str,
        code: str,
        hint: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> ConfigProblem:
        return ConfigProblem(
            file=display,
            path="$",
            message=message,
            code=code,
            hint=hint,
            line=line,
            column=column,
        )

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, [problem(f"no batch file at {display}", "no_file", "check the path")]
    except OSError as e:
        return None, [problem(f"cannot read the batch file: {e.strerror}", "unreadable")]
    if path.suffix == ".toml":
        try:
            return tomllib.loads(data.decode("utf-8")), []
        except UnicodeDecodeError:
            return None, [problem("the file is not UTF-8", "bad_toml")]
        except tomllib.TOMLDecodeError as e:
            return None, [
                problem(
                    f"invalid TOML: {e}",
                    "bad_toml",
                    "fix the syntax there (a missing quote or bracket?)",
                )
            ]
    try:
        return orjson.loads(data[3:] if data.startswith(b"\xef\xbb\xbf") else data), []
    except orjson.JSONDecodeError as e:
        hint = "fix the syntax at this line and column (a trailing comma, a missing quote?)"
        return None, [
            problem(f"invalid JSON: {e.msg}", "bad_json", hint, line=e.lineno, column=e.colno)
        ]


def load_batch_file(path: str | os.PathLike[str]) -> tuple[BatchFile, Path]:
    """The checked batch file at ``path`` and the folder its paths are relative to.

    Raises :class:`ConfigError` listing every problem.
    """
    file = Path(path)
    display = os.fspath(path)
    doc, problems = read_batch_document(file, display)
    if problems:
        raise ConfigError(problems)
    sink = Sink(display, doc)
    check_value(doc, BatchFile, (), sink)
    if not sink.error_count:
        _check_meaning(doc, file.parent.resolve(), sink)
    if sink.error_count:
        raise ConfigError(sink.in_order())
    return msgspec.convert(doc, BatchFile), file.parent.resolve()


def _check_meaning(doc: dict[str, Any], base: Path, sink: Sink) -> None:
    """What the schema cannot say: one of hank or command, known and acyclic
    dependencies, unique ids, matrix placeholders. Paths are checked after the
    matrix is expanded (:func:`weft.batch.matrix.expand`)."""
    for w, ws in enumerate(doc["workstreams"]):
        where: tuple[str | int, ...] = ("workstreams", w)
        if not ws["steps"]:
            sink.add((*where, "steps"), "empty", "a workstream needs at least one step")
        ids = [step["id"] for step in ws["steps"]]
        matrix = ws.get("matrix", {})
        for key, values in matrix.items():
            if not values:
                sink.add((*where, "matrix", key), "empty", f'matrix key "{key}" has no values')
        for s, step in enumerate(ws["steps"]):
            at = (*where, "steps", s)
            if ids.index(step["id"]) != s:
                sink.add((*at, "id"), "duplicate_id", f'step id "{step["id"]}" is used twice')
            has_hank, has_command = "hank" in step, "command" in step
            if has_hank == has_command:
                sink.add(
                    at,
                    "bad_value",
                    "a step runs either a hank or a command"
                    + (", not both" if has_hank else ", and this one has neither"),
                    hint='set "hank" (with optional "data", "model", "config") or "command"',
                )
            if has_command and not step["command"]:
                sink.add(
                    (*at, "command"), "empty", "the command is empty", hint='["program", "arg"]'
                )
            if not has_hank:
                for key in ("data", "model", "config"):
                    if key in step:
                        sink.add((*at, key), "bad_value", f'"{key}" only applies to a hank step')
            for d, dep in enumerate(step.get("depends_on", [])):
                if dep not in ids:
                    hint = did_you_mean(dep, ids, None) or f"steps here: {', '.join(ids)}"
                    sink.add(
                        (*at, "depends_on", d),
                        "bad_ref",
                        f'no step "{dep}" in this workstream',
                        hint=hint,
                    )
                elif dep == step["id"]:
                    sink.add((*at, "depends_on", d), "bad_ref", "a step cannot depend on itself")
        cycle = _cycle(ws["steps"])
        if cycle:
            sink.add(
                (*where, "steps"),
                "cycle",
                "the dependencies form a cycle: " + " -> ".join(cycle),
                hint="remove one of these depends_on entries",
            )
        for placeholder in _placeholders(ws) - set(matrix):
            if matrix:
                sink.add(
                    (*where, "matrix"),
                    "bad_ref",
                    f'"{{{placeholder}}}" is used but the matrix has no key "{placeholder}"',
                    hint=f"matrix keys: {', '.join(matrix)}",
                )
    _check_breakers(doc, sink)


def _check_breakers(doc: dict[str, Any], sink: Sink) -> None:
    if not isinstance(doc.get("breakers"), dict):
        return
    for tool in doc["breakers"]:
        if not tool:
            sink.add(("breakers",), "bad_value", "a breaker needs a tool name")


def _placeholders(ws: dict[str, Any]) -> set[str]:
    from weft.batch.matrix import placeholders

    return placeholders(json.dumps(ws, ensure_ascii=False))


def _cycle(steps: list[dict[str, Any]]) -> list[str]:
    """One dependency cycle as ids (first id repeated at the end), or []."""
    graph = {s["id"]: [d for d in s.get("depends_on", []) if isinstance(d, str)] for s in steps}
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        colour[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if nxt not in graph:
                continue
            if colour.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in colour:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = 2
        return []

    for node in graph:
        if node not in colour:
            found = visit(node)
            if found:
                return found
    return []
