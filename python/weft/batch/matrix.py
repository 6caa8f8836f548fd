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

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from weft.batch.file import (
    Backoff,
    BatchFile,
    BreakerSpec,
    StepSpec,
    WorkstreamSpec,
    combinations,
    expanded_id,
    placeholders,
    substitute,
)

__all__ = ["BatchPlan", "PlannedStep", "PlannedWorkstream", "expand", "placeholders"]

_TOOL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")

DEFAULT_BREAKER = BreakerSpec()
"""The seed's breaker: open after 5 failures, 60 s cool-down, close after 1 success."""


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
    timeout_seconds: float | None = None

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
        if self.timeout_seconds is not None:
            out["timeout_seconds"] = self.timeout_seconds
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


def expand(batch: BatchFile, base: Path, *, name: str, display: str | None = None) -> BatchPlan:
    """The plan of ``batch`` (paths relative to ``base``).

    ``batch`` is one :func:`weft.batch.file.load_batch_file` checked: every
    expansion's ids, paths and hanks, and the number of steps, so nothing
    here can fail or grow beyond the file's ``max_steps``. (``display``, the
    file's name as shown, named the problems found here before that check
    took them over; it is accepted and unused.)
    """
    del display
    planned: list[PlannedWorkstream] = []
    for ws in batch.workstreams:
        for values in combinations(ws.matrix):
            concrete = _substitute(ws, values)
            ws_id = expanded_id(ws.id, values)
            steps = tuple(_plan_step(batch, ws_id, step, base) for step in concrete.steps)
            planned.append(
                PlannedWorkstream(
                    ws_id=ws_id,
                    max_retries=ws.max_retries,
                    backoff=ws.retry_backoff or Backoff(),
                    steps=steps,
                )
            )
    return BatchPlan(
        name=name,
        workstreams=tuple(planned),
        breakers=dict(batch.breakers),
        max_dollars=batch.budget.max_dollars if batch.budget else None,
    )


def _substitute(ws: WorkstreamSpec, values: dict[str, str]) -> WorkstreamSpec:
    if not values:
        return ws
    doc = msgspec.to_builtins(ws)
    doc["steps"] = substitute(doc["steps"], values)
    return msgspec.convert(doc, WorkstreamSpec)


def _command_tool(program: str) -> str:
    """A command step's default tool: its program's name, made a valid tool
    name (``g++`` -> ``g_``), ``command`` when nothing is left."""
    return _TOOL_BAD.sub("_", Path(program).name).lstrip(".-") or "command"


def _plan_step(batch: BatchFile, ws_id: str, step: StepSpec, base: Path) -> PlannedStep:
    defaults = batch.defaults

    def path(name: str) -> Path | None:
        value: str | None = getattr(step, name)
        return None if value is None else (base / value).resolve()

    if step.command is not None:
        tool = step.tool or _command_tool(step.command[0])
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
        timeout_seconds=(
            step.timeout_seconds if step.timeout_seconds is not None else defaults.timeout_seconds
        ),
    )
