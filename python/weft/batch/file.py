"""The batch file: its schema, loading (TOML or JSON) and checks.

A batch file lists **workstreams**, each a list of **steps**. A step runs a
hank (``hank`` with optional ``data``, ``model`` and ``config``) or a
``command``; ``depends_on`` names steps of the same workstream that must
succeed first. ``expected_exit_codes``, ``max_retries``, ``retry_backoff`` and
``timeout_seconds`` come from the step, else from ``[defaults]``, else the
seed's defaults (``[0]``, 0 retries, 1 s doubling up to 60 s, no timeout).
``[breakers.<tool>]`` tunes the circuit breaker of one tool (``"*"`` for
every tool without its own).

The file is checked like a hank file, before anything runs: every problem at
once, each with the file, the JSON path and a hint
(:class:`weft.config.problems.ConfigProblem`), raised together as
:class:`weft.errors.ConfigError`. :func:`check_batch_document` runs the passes,
each on whatever the others left usable, so one mistake never hides another:

1. the structure: the hank file's own walk (:func:`weft.config.walk.check_value`)
   over the Structs below, so the JSON Schema (:func:`batch_json_schema`)
   cannot drift from what is checked (exit codes 0..255, tool names, ...);
2. NUL characters anywhere (the operating system ends a string there, so
   ``"tr\\0ue"`` would run ``tr``);
3. the meaning: one of hank or command, known and acyclic dependencies,
   unique ids, environment names, matrix placeholders;
4. the size: the steps the matrices expand to, counted without expanding,
   against ``max_steps``;
5. every expanded step: its model routes as a codon's would
   (:mod:`weft.config.rules.codon`), its paths stay in the batch file's folder
   (unless ``allow_absolute_paths``) and exist, and its hank passes what
   ``weft validate`` checks, its problems named by the step.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
import orjson

from weft.config.hints import did_you_mean
from weft.config.ids import ID_HINT, ID_PATTERN, MAX_ID_LENGTH, id_problem
from weft.config.problems import ConfigProblem, JsonPath
from weft.config.walk import Sink, check_value, describe_value
from weft.errors import ConfigError
from weft.terminal import plural

__all__ = [
    "DEFAULT_MAX_STEPS",
    "ID_PATTERN",
    "MAX_STEPS_LIMIT",
    "Backoff",
    "BatchBudget",
    "BatchFile",
    "BreakerSpec",
    "StepDefaults",
    "StepSpec",
    "WorkstreamSpec",
    "batch_json_schema",
    "check_batch_document",
    "combinations",
    "expanded_id",
    "load_batch_file",
    "placeholders",
    "read_batch_document",
    "step_count",
    "substitute",
]

# Workstream and step ids name folders: the hank file's id rule (letters,
# digits, ``_``, ``.``, ``-``), so its problems are explained the same way.
_Id = Annotated[str, msgspec.Meta(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=1000)]
_Millis = Annotated[int, msgspec.Meta(ge=0, le=86_400_000)]
# A process's exit status is one byte: 256 or -1 can never be seen, so a step
# expecting only them could never succeed.
_ExitCodes = Annotated[list[Annotated[int, msgspec.Meta(ge=0, le=255)]], msgspec.Meta(min_length=1)]
# Tool names key the circuit breakers and show in tables and audit rows: the id rule.
_Tool = Annotated[str, msgspec.Meta(min_length=1, pattern=ID_PATTERN, max_length=MAX_ID_LENGTH)]
_Path = Annotated[str, msgspec.Meta(min_length=1)]

DEFAULT_MAX_STEPS = 1000
"""The most steps a batch file may expand to unless it sets ``max_steps``. A
matrix of three keys with 100 values each is a million steps: refused at once,
with the count, instead of minutes of expansion with no output."""

MAX_STEPS_LIMIT = 1_000_000
"""The highest ``max_steps`` a file may set (the plan of every step is held in memory)."""

_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_Timeout = Annotated[float, msgspec.Meta(gt=0, le=604800)]
"""Seconds, above 0, at most a week."""


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

    expected_exit_codes: _ExitCodes | None = None
    max_retries: _Count | None = None
    retry_backoff: Backoff | None = None
    timeout_seconds: _Timeout | None = None


class StepSpec(_Spec, frozen=True, kw_only=True):
    """One step: a hank run or a command."""

    id: _Id
    hank: _Path | None = None
    """A hank file, or a folder holding ``hank.json`` (relative to the batch file)."""
    data: _Path | None = None
    """The data the hank works on (relative to the batch file)."""
    model: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    """Run every codon on this model (``weft run --model``)."""
    config: _Path | None = None
    """A ``weft.json`` with runtime settings (``weft run --config``)."""
    command: list[str] | None = None
    """A program and its arguments, run in the step's own folder (no shell)."""
    env: dict[str, str] = {}
    """Extra environment variables for the step's process."""
    tool: _Tool | None = None
    """The circuit breaker this step counts against (default: ``weft`` for a
    hank, the program's name for a command)."""
    depends_on: list[_Id] = []
    expected_exit_codes: _ExitCodes | None = None
    max_retries: _Count | None = None
    retry_backoff: Backoff | None = None
    timeout_seconds: _Timeout | None = None
    """A launch running longer is stopped (SIGTERM to its process group, SIGKILL
    after a grace) and fails, ``timed out``; retries apply as to any failure."""


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
    allow_absolute_paths: bool = False
    """Paths are relative to the batch file and stay in its folder; ``true``
    lets a step name absolute paths anywhere (``..`` is refused either way)."""
    max_steps: Annotated[int, msgspec.Meta(ge=1, le=MAX_STEPS_LIMIT)] = DEFAULT_MAX_STEPS
    """The most steps the file may expand to (matrices included)."""


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
        except RecursionError:  # tomllib descends once per nested array or table
            return None, [
                problem(
                    "invalid TOML: arrays or tables nested too deeply to read",
                    "bad_toml",
                    "a batch file needs a few levels: look for a run of [ or {",
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
    base = file.parent.resolve()
    sink = Sink(display, doc)
    check_batch_document(doc, base, sink)
    if sink.error_count:
        # An expanded step repeats its written step's problem once per combination.
        raise ConfigError(list(dict.fromkeys(sink.in_order())))
    return msgspec.convert(doc, BatchFile), base


def check_batch_document(doc: Any, base: Path, sink: Sink) -> None:
    """Every check of a parsed batch file (see the module docstring), into
    ``sink``; ``base`` is the folder its paths are relative to."""
    check_value(doc, BatchFile, (), sink)
    if isinstance(doc, dict):
        _check_all(doc, base, sink)
    _add_field_hints(sink)


def _check_all(doc: dict[str, Any], base: Path, sink: Sink) -> None:
    _check_nul(doc, sink)
    _check_meaning(doc, sink)
    counts = step_count(doc)
    total = sum(count for _, count, _how in counts)
    limit = doc.get("max_steps")
    if type(limit) is not int or not 1 <= limit <= MAX_STEPS_LIMIT:
        limit = DEFAULT_MAX_STEPS
    if total > limit:
        w, count, how = max(counts, key=lambda c: c[1])
        sink.add(
            ("workstreams", w),
            "too_many_steps",
            f"the file expands to {total:,} steps, over the limit of {limit:,} "
            f"(this workstream: {how} = {count:,})",
            hint="shrink the matrix or split the batch into several files; to run it anyway, "
            f"set max_steps = {total} at the top of the file (at most {MAX_STEPS_LIMIT:,})",
        )
        return  # expanding it to check each step is the work the limit prevents
    _check_expansions(doc, base, sink)


# The walk's problems say what is wrong; these say how to fix the batch file's own fields.
_FIELD_HINTS = {
    "expected_exit_codes": "exit codes are integers from 0 to 255, at least one: [0] or [0, 3]",
    "tool": ID_HINT,
    "timeout_seconds": "a number of seconds above 0 (at most 604800, a week): 600 or 0.5",
    "max_steps": f"a number of steps from 1 to {MAX_STEPS_LIMIT:,}",
    "model": "sonnet, opus, haiku, provider/model, or fake/<model> (offline)",
}
_FIELD = re.compile(r"\.([A-Za-z_]+)(?:\[\d+\])?$")


def _add_field_hints(sink: Sink) -> None:
    for i, problem in enumerate(sink.problems):
        if problem.file != sink.file:
            continue  # a hank's problem, with the hank's own hints
        found = _FIELD.search(problem.path) or re.match(r"^([A-Za-z_]+)$", problem.path)
        hint = _FIELD_HINTS.get(found.group(1)) if found else None
        if hint is not None and problem.hint is None:
            sink.problems[i] = msgspec.structs.replace(problem, hint=hint)


def _walk_strings(doc: Any) -> Iterator[tuple[JsonPath, str, bool]]:
    """Every string of ``doc`` with its path, keys included (``True``): without
    recursion, so a deeply nested value cannot exhaust the stack."""
    stack: list[tuple[JsonPath, Any]] = [((), doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            yield path, node, False
        elif isinstance(node, dict):
            for key, value in reversed(node.items()):
                if isinstance(key, str):
                    yield (*path, key), key, True
                stack.append(((*path, key), value))
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(node))))


def _check_nul(doc: dict[str, Any], sink: Sink) -> None:
    for path, text, is_key in _walk_strings(doc):
        if "\0" in text:
            sink.add(
                path,
                "nul_character",
                f"{'the key' if is_key else 'the value'} {describe_value(text)} holds a NUL "
                f"character (at position {text.index(chr(0))})",
                hint="remove it: the operating system ends a string at a NUL, so a program, "
                "argument or path would be silently cut short there",
            )


def _items(value: Any) -> list[tuple[int, dict[str, Any]]]:
    """The objects of an array with their indexes (anything else: none; the walk reports it)."""
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)]


def _check_meaning(doc: dict[str, Any], sink: Sink) -> None:
    """What the schema cannot say: one of hank or command, known and acyclic
    dependencies, unique ids, environment names, matrix placeholders. Each
    rule reads only values of the right type, so it runs beside the walk's
    problems without tripping over them."""
    for w, ws in _items(doc.get("workstreams")):
        where: JsonPath = ("workstreams", w)
        if ws.get("steps") == []:
            sink.add((*where, "steps"), "empty", "a workstream needs at least one step")
        steps = _items(ws.get("steps"))
        ids = [step["id"] for _, step in steps if isinstance(step.get("id"), str)]
        matrix = ws.get("matrix")
        if isinstance(matrix, dict):
            for key, values in matrix.items():
                if values == []:
                    sink.add((*where, "matrix", key), "empty", f'matrix key "{key}" has no values')
        seen: set[str] = set()
        for s, step in steps:
            at = (*where, "steps", s)
            step_id = step.get("id")
            if isinstance(step_id, str):
                if step_id in seen:
                    sink.add((*at, "id"), "duplicate_id", f'step id "{step_id}" is used twice')
                seen.add(step_id)
            _check_step_meaning(step, at, ids, sink)
        cycle = _cycle([step for _, step in steps])
        if cycle:
            sink.add(
                (*where, "steps"),
                "cycle",
                "the dependencies form a cycle: " + " -> ".join(cycle),
                hint="remove one of these depends_on entries",
            )
        if isinstance(matrix, dict) and matrix:
            for placeholder in sorted(_placeholders_in(ws) - set(matrix)):
                sink.add(
                    (*where, "matrix"),
                    "bad_ref",
                    f'"{{{placeholder}}}" is used but the matrix has no key "{placeholder}"',
                    hint=f"matrix keys: {', '.join(matrix)}",
                )
    _check_breakers(doc, sink)


def _check_step_meaning(step: dict[str, Any], at: JsonPath, ids: list[str], sink: Sink) -> None:
    has_hank, has_command = "hank" in step, "command" in step
    if has_hank == has_command:
        sink.add(
            at,
            "bad_value",
            "a step runs either a hank or a command"
            + (", not both" if has_hank else ", and this one has neither"),
            hint='set "hank" (with optional "data", "model", "config") or "command"',
        )
    command = step.get("command")
    if command == []:
        sink.add((*at, "command"), "empty", "the command is empty", hint='["program", "arg"]')
    elif isinstance(command, list) and command[0] == "":
        sink.add(
            (*at, "command", 0),
            "empty",
            "the program to run is an empty string",
            hint='name the program first: ["program", "arg"]',
        )
    if not has_hank:
        for key in ("data", "model", "config"):
            if key in step:
                sink.add((*at, key), "bad_value", f'"{key}" only applies to a hank step')
    depends_on = step.get("depends_on")
    for d, dep in enumerate(depends_on if isinstance(depends_on, list) else []):
        if not isinstance(dep, str):
            continue
        if dep not in ids:
            hint = did_you_mean(dep, ids, None) or f"steps here: {', '.join(ids)}"
            sink.add(
                (*at, "depends_on", d),
                "bad_ref",
                f'no step "{dep}" in this workstream',
                hint=hint,
            )
        elif dep == step.get("id"):
            sink.add((*at, "depends_on", d), "bad_ref", "a step cannot depend on itself")
    env = step.get("env")
    for key in env if isinstance(env, dict) else {}:
        if "\0" not in key and not _ENV_NAME.match(key):
            sink.add(
                (*at, "env", key),
                "bad_env_name",
                f"{describe_value(key)} is not a valid environment variable name",
                hint='use letters, digits and "_", not starting with a digit '
                '(no "=", spaces or other characters), e.g. "LANG"',
            )


def _check_breakers(doc: dict[str, Any], sink: Sink) -> None:
    if not isinstance(doc.get("breakers"), dict):
        return
    for tool in doc["breakers"]:
        if tool == "*" or "\0" in tool:
            continue
        why = id_problem(tool) if tool else "a breaker needs a tool name"
        if why:
            sink.add(
                ("breakers", tool) if tool else ("breakers",),
                "bad_value",
                why.replace("id", "tool name", 1) if tool else why,
                hint=f'"*" for every tool, or a tool name: {ID_HINT}',
            )


def placeholders(text: str) -> set[str]:
    """The ``{key}`` names in ``text`` (``${VAR}`` is left to the shell)."""
    return set(_PLACEHOLDER.findall(text))


def _placeholders_in(ws: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for _, text, _is_key in _walk_strings(ws):
        found |= placeholders(text)
    return found


def step_count(doc: dict[str, Any]) -> list[tuple[int, int, str]]:
    """How many steps each workstream expands to, counted without expanding:
    (its index, the count, how it is made: ``100 x 100 combinations x 2 steps``)."""
    counts: list[tuple[int, int, str]] = []
    for w, ws in _items(doc.get("workstreams")):
        # A workstream without usable steps (reported as such) still counts one per
        # combination: each combination is a workstream id to check.
        steps = max(len(ws["steps"]) if isinstance(ws.get("steps"), list) else 0, 1)
        matrix = ws.get("matrix")
        sizes = (
            [len(v) for v in matrix.values() if isinstance(v, list)]
            if isinstance(matrix, dict)
            else []
        )
        how = " x ".join(str(n) for n in sizes) + " combinations x " if sizes else ""
        counts.append((w, math.prod(sizes) * steps, how + plural(steps, "step")))
    return counts


def combinations(matrix: dict[str, list[str]]) -> Iterator[dict[str, str]]:
    """Each combination of a matrix's values, in the order they are written."""
    if not matrix:
        yield {}
        return
    keys = list(matrix)
    for combo in itertools.product(*matrix.values()):
        yield dict(zip(keys, combo, strict=True))


def substitute(node: Any, values: dict[str, str]) -> Any:
    """``node`` with every ``{key}`` in its strings replaced by ``values[key]``."""
    if not values:
        return node
    if isinstance(node, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), node)
    if isinstance(node, list):
        return [substitute(x, values) for x in node]
    if isinstance(node, dict):
        return {k: substitute(v, values) for k, v in node.items()}
    return node


_SLUG_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def expanded_id(written: str, values: dict[str, str]) -> str:
    """A workstream's id for one combination: its placeholders replaced, or,
    without placeholders, each value's last path component appended."""
    if not values:
        return written
    if placeholders(written):
        return str(substitute(written, values))
    parts = [_SLUG_BAD.sub("_", Path(v).name or v) for v in values.values()]
    return "-".join([written, *parts])


def _shown(values: dict[str, str]) -> str:
    return ", ".join(f"{k} = {describe_value(v)}" for k, v in values.items())


def _good_matrix(matrix: Any) -> bool:
    return isinstance(matrix, dict) and all(
        isinstance(v, list) and v and all(isinstance(x, str) for x in v) for v in matrix.values()
    )


def _check_expansions(doc: dict[str, Any], base: Path, sink: Sink) -> None:
    """Every step as it will run (each matrix combination): its workstream's
    id, its model, its paths and its hank."""
    steps = _StepChecks(base, doc.get("allow_absolute_paths") is True, sink)
    seen: set[str] = set()
    for w, ws in _items(doc.get("workstreams")):
        matrix = ws.get("matrix", {})
        good = _good_matrix(matrix)
        for values in combinations(matrix) if good else iter([{}]):
            written = ws.get("id")
            if isinstance(written, str) and written and good:
                ws_id = expanded_id(written, values)
                why = id_problem(ws_id)
                if why:
                    sink.add(
                        ("workstreams", w, "id"),
                        "bad_id",
                        f"expanded with {_shown(values)}: {why}" if values else why,
                        hint=ID_HINT + " (the matrix values become part of the id)" * bool(values),
                    )
                elif ws_id in seen:
                    sink.add(
                        ("workstreams", w, "id"),
                        "duplicate_id",
                        f'workstream "{ws_id}" appears twice',
                        hint="give each workstream (or matrix expansion) its own id",
                    )
                seen.add(ws_id)
            for s, step in _items(ws.get("steps")):
                # Only the fields checked here: any other value may be nested
                # arbitrarily deep (an unknown key, reported by the walk).
                concrete = {k: substitute(step[k], values) for k in _EXPANDED if k in step}
                # A placeholder left (a key the matrix lacks, or a broken matrix) is
                # reported as such; the path or model it is in is not checked.
                steps.check(concrete, ("workstreams", w, "steps", s), open_ended=bool(matrix))


_EXPANDED = ("id", "hank", "data", "model", "config")


class _StepChecks:
    """The checks of one expanded step; each hank is validated once per model."""

    def __init__(self, base: Path, allow_absolute: bool, sink: Sink) -> None:
        self.base = base
        self.allow_absolute = allow_absolute
        self.sink = sink
        self.hanks: dict[tuple[Path, str | None], list[ConfigProblem]] = {}

    def check(self, step: dict[str, Any], at: JsonPath, *, open_ended: bool) -> None:
        def usable(key: str) -> str | None:
            value = step.get(key)
            if not isinstance(value, str) or not value or "\0" in value:
                return None
            return None if open_ended and placeholders(value) else value

        routed = self._model(step, at, usable("model"))
        found: dict[str, Path] = {}
        for key in ("hank", "data", "config"):
            value = usable(key)
            full = self._inside(value, (*at, key)) if value is not None else None
            if value is None or full is None:
                continue
            try:
                full.stat()
            except (FileNotFoundError, NotADirectoryError):
                self.sink.add(
                    (*at, key),
                    "no_file",
                    f"{value} does not exist (relative to the batch file)",
                    hint="check the path, or the matrix values that build it",
                )
            except OSError as e:  # a name too long, a loop of links, no permission
                self.sink.add(
                    (*at, key),
                    "unreadable",
                    f"{describe_value(value)} cannot be used: {e.strerror}",
                    hint="check the path, or the matrix values that build it",
                )
            else:
                if key == "config" and not full.is_file():
                    self.sink.add(
                        (*at, key),
                        "not_a_file",
                        f"{value} is not a file",
                        hint="name the weft.json with the runtime settings",
                    )
                else:
                    found[key] = full
        if "hank" in found:
            self._hank(found["hank"], str(step["hank"]), routed, step, at)

    def _model(self, step: dict[str, Any], at: JsonPath, model: str | None) -> str | None:
        """The step's model if it routes to an agent harness, checked as a
        codon's model is (the same rule, so the same message and hint)."""
        from weft.config.rules.codon import _check_model

        if model is None:
            return None
        before = self.sink.error_count
        _check_model({"model": model}, at, self.sink)
        return model if self.sink.error_count == before else None

    def _inside(self, value: str, at: JsonPath) -> Path | None:
        """``value`` resolved against the batch file's folder, or ``None`` (with
        a problem) when it leaves the folder."""
        how = (
            "write it relative to the batch file's folder, or set allow_absolute_paths = true "
            "at the top of the batch file to allow absolute paths"
        )
        if os.path.isabs(value):
            if self.allow_absolute:
                return Path(os.path.normpath(value))
            self.sink.add(
                at,
                "outside_folder",
                f"{describe_value(value)} is an absolute path, outside the batch file's folder",
                hint=how,
            )
            return None
        normal = os.path.normpath(value)
        if normal == ".." or normal.startswith(".." + os.sep):
            self.sink.add(
                at,
                "outside_folder",
                f"{describe_value(value)} leaves the batch file's folder (through ..)",
                hint="keep relative paths inside the batch file's folder; for a path elsewhere, "
                "write it absolute and set allow_absolute_paths = true at the top of the file",
            )
            return None
        return self.base / normal

    def _hank(
        self, path: Path, written: str, model: str | None, step: dict[str, Any], at: JsonPath
    ) -> None:
        from weft.config.loader import find_hank_file

        file = find_hank_file(path)
        if not file.is_file():
            self.sink.add(
                (*at, "hank"),
                "not_a_hank",
                f"{written} is a folder without a hank.json",
                hint="name a hank.json, or a folder holding one (weft init FOLDER makes one)",
            )
            return
        key = (file, model)  # as written: resolving each of a thousand steps costs more
        if key not in self.hanks:
            self.hanks[key] = _hank_errors(file, model)
        errors = self.hanks[key]
        if not errors:
            return
        label = f'batch step "{step.get("id")}"'
        self.sink.add(
            (*at, "hank"),
            "invalid_hank",
            f"the hank {describe_value(written)} does not validate: "
            f"{plural(len(errors), 'error')}, listed after this one",
            hint=f"fix them in the hank (weft validate {written}"
            + (f" --model {model})" if model else ")"),
        )
        self.sink.extend([_named_by(p, label) for p in errors], (*at, "hank"))


def _hank_errors(file: Path, model: str | None) -> list[ConfigProblem]:
    """The errors ``weft validate`` (with ``--model``) reports for the hank
    ``file``: its checks, whether its sentinels load and whether its agent
    CLIs are installed (as ``weft run`` checks before it starts)."""
    from weft.config import validate_hank
    from weft.config.preflight import machine_problems

    report = validate_hank(file, model=model)
    problems = list(report.problems)
    if report.built is not None:
        problems += machine_problems(report.built, file=report.file, env=os.environ)
    return [p for p in problems if p.is_error]


def _named_by(problem: ConfigProblem, label: str) -> ConfigProblem:
    """A hank's problem, labelled with the batch step that names the hank."""
    if problem.item is not None and problem.where is not None:
        return msgspec.structs.replace(problem, where=f"{label} > {problem.where}")
    return msgspec.structs.replace(problem, item=problem.path, where=label)


def _cycle(steps: list[dict[str, Any]]) -> list[str]:
    """One dependency cycle as ids (first id repeated at the end), or []. A
    depth-first search with its own stack: a chain of thousands of steps is
    a valid file, and must not exhaust Python's."""
    graph: dict[str, list[str]] = {}
    for step in steps:
        if isinstance(step.get("id"), str) and step["id"] not in graph:
            deps = step.get("depends_on")
            graph[step["id"]] = (
                [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []
            )
    done: set[str] = set()
    for root in graph:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        nexts = [iter(graph[root])]
        while nexts:
            nxt = next(nexts[-1], None)
            if nxt is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                nexts.pop()
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt in graph and nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                nexts.append(iter(graph[nxt]))
    return []
