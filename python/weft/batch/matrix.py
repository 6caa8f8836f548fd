"""Matrix expansion: a checked batch file becomes the plan of concrete workstreams.

A workstream with ``matrix = {data = ["data/a", "data/b"], model = ["x", "y"]}``
becomes one workstream per combination (in the order the keys and values are
written), with ``{data}`` and ``{model}`` replaced in every string of it. Its id
is the written id with placeholders replaced, or, without placeholders, the
written id followed by each value's last path component (``eval-a-x``).

The plan is what the batch store records and the scheduler runs: every step
with its defaults resolved, its paths absolute and its breaker's tool named.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from weft.batch.file import ID_PATTERN, Backoff, BatchFile, BreakerSpec, StepSpec, WorkstreamSpec
from weft.config.problems import ConfigProblem
from weft.errors import ConfigError

__all__ = ["BatchPlan", "PlannedStep", "PlannedWorkstream", "expand", "placeholders"]

_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SLUG_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
_ID = re.compile(ID_PATTERN)

DEFAULT_BREAKER = BreakerSpec()
"""The seed's breaker: open after 5 failures, 60 s cool-down, close after 1 success."""


def placeholders(text: str) -> set[str]:
    """The ``{key}`` names in ``text`` (``${VAR}`` is left to the shell)."""
    return set(_PLACEHOLDER.findall(text))


@dataclass(frozen=True)
class PlannedStep:
    """One step, ready to run: defaults resolved, paths absolute."""

    ws_id: str
    step_id: str
    tool: str
    depends_on: tuple[str, ...]
    expected_exit_codes: tuple[int, ...]
    max_retries: int
    backoff: Backoff
    hank: Path | None = None
    data: Path | None = None
    model: str | None = None
    config: Path | None = None
    command: tuple[str, ...] | None = None
    cwd: Path | None = None
    """Where a command runs: the batch file's folder."""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``ws_id/step_id``, the step's name across the batch."""
        return f"{self.ws_id}/{self.step_id}"

    def to_json(self) -> dict[str, Any]:
        """The step as the store keeps it."""
        out: dict[str, Any] = {
            "tool": self.tool,
            "depends_on": list(self.depends_on),
            "expected_exit_codes": list(self.expected_exit_codes),
            "max_retries": self.max_retries,
            "backoff": msgspec.to_builtins(self.backoff),
            "env": self.env,
        }
        for name in ("hank", "data", "config"):
            value = getattr(self, name)
            if value is not None:
                out[name] = str(value)
        if self.model is not None:
            out["model"] = self.model
        if self.command is not None:
            out["command"] = list(self.command)
            out["cwd"] = str(self.cwd)
        return out


@dataclass(frozen=True)
class PlannedWorkstream:
    """One concrete workstream: its steps in file order."""

    ws_id: str
    max_retries: int
    backoff: Backoff
    steps: tuple[PlannedStep, ...]


@dataclass(frozen=True)
class BatchPlan:
    """Every workstream of the batch, in file order, and the breakers' tuning."""

    name: str
    workstreams: tuple[PlannedWorkstream, ...]
    breakers: dict[str, BreakerSpec]
    max_dollars: float | None = None
    """The batch budget (``[budget] max_dollars``), if any."""

    def breaker_spec(self, tool: str) -> BreakerSpec:
        """The tuning of ``tool``'s breaker: its own, else ``"*"``, else the seed's."""
        return self.breakers.get(tool) or self.breakers.get("*") or DEFAULT_BREAKER

    def steps(self) -> list[PlannedStep]:
        """Every step of every workstream, in order."""
        return [s for ws in self.workstreams for s in ws.steps]


def expand(batch: BatchFile, base: Path, *, name: str, display: str) -> BatchPlan:
    """The plan of ``batch`` (paths relative to ``base``). Raises :class:`ConfigError`
    when an expansion makes a bad or duplicate id or names a missing path."""
    problems: list[ConfigProblem] = []
    planned: list[PlannedWorkstream] = []
    seen: dict[str, int] = {}
    for w, ws in enumerate(batch.workstreams):
        for values in _combinations(ws.matrix):
            concrete = _substitute(ws, values)
            ws_id = _expanded_id(ws.id, values)
            where = f"workstreams[{w}]"
            if not _ID.match(ws_id):
                problems.append(
                    ConfigProblem(
                        file=display,
                        path=f"{where}.id",
                        code="bad_id",
                        message=f'the workstream id "{ws_id}" is not a valid id',
                        hint="use letters, digits, '_', '.' and '-' (they name folders)",
                    )
                )
                continue
            if ws_id in seen:
                problems.append(
                    ConfigProblem(
                        file=display,
                        path=f"{where}.id",
                        code="duplicate_id",
                        message=f'workstream "{ws_id}" appears twice',
                        hint="give each workstream (or matrix expansion) its own id",
                    )
                )
                continue
            seen[ws_id] = w
            steps = tuple(
                _plan_step(batch, ws_id, step, base, display, f"{where}.steps[{s}]", problems)
                for s, step in enumerate(concrete.steps)
            )
            planned.append(
                PlannedWorkstream(
                    ws_id=ws_id,
                    max_retries=ws.max_retries,
                    backoff=ws.retry_backoff or Backoff(),
                    steps=steps,
                )
            )
    if problems:
        raise ConfigError(problems)
    return BatchPlan(
        name=name,
        workstreams=tuple(planned),
        breakers=dict(batch.breakers),
        max_dollars=batch.budget.max_dollars if batch.budget else None,
    )


def _combinations(matrix: dict[str, list[str]]) -> list[dict[str, str]]:
    if not matrix:
        return [{}]
    keys = list(matrix)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*matrix.values())]


def _substitute(ws: WorkstreamSpec, values: dict[str, str]) -> WorkstreamSpec:
    if not values:
        return ws

    def replace(node: Any) -> Any:
        if isinstance(node, str):
            return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), node)
        if isinstance(node, list):
            return [replace(x) for x in node]
        if isinstance(node, dict):
            return {k: replace(v) for k, v in node.items()}
        return node

    doc = msgspec.to_builtins(ws)
    doc["steps"] = replace(doc["steps"])
    return msgspec.convert(doc, WorkstreamSpec)


def _expanded_id(written: str, values: dict[str, str]) -> str:
    if not values:
        return written
    if placeholders(written):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), written)
    parts = [_SLUG_BAD.sub("_", Path(v).name or v) for v in values.values()]
    return "-".join([written, *parts])


def _plan_step(
    batch: BatchFile,
    ws_id: str,
    step: StepSpec,
    base: Path,
    display: str,
    where: str,
    problems: list[ConfigProblem],
) -> PlannedStep:
    defaults = batch.defaults

    def path(name: str) -> Path | None:
        value: str | None = getattr(step, name)
        if value is None:
            return None
        full = (base / value).resolve()
        if not full.exists():
            problems.append(
                ConfigProblem(
                    file=display,
                    path=f"{where}.{name}",
                    code="no_file",
                    message=f"{value} does not exist (relative to the batch file)",
                    hint="check the path, or the matrix values that build it",
                )
            )
        return full

    if step.command is not None:
        tool = step.tool or Path(step.command[0]).name
    else:
        tool = step.tool or "weft"
    codes = step.expected_exit_codes
    if codes is None:
        codes = defaults.expected_exit_codes if defaults.expected_exit_codes is not None else [0]
    retries = step.max_retries
    if retries is None:
        retries = defaults.max_retries or 0
    return PlannedStep(
        ws_id=ws_id,
        step_id=step.id,
        tool=tool,
        depends_on=tuple(step.depends_on),
        expected_exit_codes=tuple(codes),
        max_retries=retries,
        backoff=step.retry_backoff or defaults.retry_backoff or Backoff(),
        hank=path("hank"),
        data=path("data"),
        model=step.model,
        config=path("config"),
        command=tuple(step.command) if step.command is not None else None,
        cwd=base if step.command is not None else None,
        env=dict(step.env),
    )
