"""``weft batch``: many hank executions as seed-004 workstreams of steps.

The pieces, each with one job:

* :mod:`~weft.batch.file`: the batch file (TOML or JSON): its Structs, its
  JSON Schema, and every problem reported at once like a hank file's;
* :mod:`~weft.batch.matrix`: matrix expansion, from the file to the plan of
  concrete workstreams and steps (defaults resolved, paths absolute);
* :mod:`~weft.batch.store`: the batch store: SQLite (WAL), one writer, the
  ``workstreams``, ``steps`` and ``breakers`` rows and the seed's
  ``state_transitions`` audit table, plus the recovery commands' inbox;
* :mod:`~weft.batch.scheduler`: sans I/O: the core's workstream, step and
  circuit-breaker machines and the rules that say what runs next
  (dependencies, retries with backoff, abandonment, breakers per tool);
* :mod:`~weft.batch.engine`: the local engine: steps as subprocesses (``weft
  run`` for a hank, the program for a command) that outlive a killed
  coordinator and report their exit code through a file;
* :mod:`~weft.batch.coordinator`: the single writer: commits, then launches;
  resumes what a dead coordinator left running; applies recovery commands;
* :mod:`~weft.batch.report`: the JSON summary, JUnit XML, consistency checks;
* :mod:`~weft.batch.ray_engine`: the Ray engine: each launch a Ray task
  (optional extra ``weft[ray]``);
* :mod:`~weft.batch.breakers`: circuit breakers keyed by tool or provider
  with an injected clock, for any caller (the scheduler keeps its own,
  persisted in the store).

The command line is :mod:`weft.cli.batch`; the guide is ``docs/batch.md``.
"""

from __future__ import annotations

from pathlib import Path

from weft.batch.file import BatchFile, batch_json_schema, load_batch_file
from weft.batch.matrix import BatchPlan, PlannedStep, PlannedWorkstream, expand

__all__ = [
    "BatchFile",
    "BatchPlan",
    "PlannedStep",
    "PlannedWorkstream",
    "batch_json_schema",
    "load_batch",
    "load_batch_file",
]


def load_batch(path: str | Path) -> BatchPlan:
    """The checked, expanded plan of the batch file at ``path``.

    Raises :class:`weft.errors.ConfigError` listing every problem.
    """
    batch, base = load_batch_file(path)
    name = batch.name or Path(path).stem
    return expand(batch, base, name=name, display=str(path))
