"""Reference model of the execution-thread analyzer (``rust_core/src/thread.rs``, seed 003).

A plain restatement of the seed, naive on purpose: it reads the state
document as parsed JSON (runs newest first), finds runs and records by
scanning, and builds every thread codon, with its validated checkpoints,
eagerly. The core keeps positions and computes those on demand; the two must
agree on every field.

The rules the seed leaves open are decided as the core decides them (see the
module docs of ``thread.rs``): which record a continuation resumed after, how
a rig-setup continuation names the codon it re-runs, what ``failed`` and
``next_codon_id`` mean.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

TERMINAL = ("completed", "failed", "skipped")
# The checkpoint each final status vouches for: (type, record field).
_FINAL = {
    "completed": ("completed", "completionCheckpoint"),
    "failed": ("error", "errorCheckpoint"),
    "skipped": ("skipped", "skipCheckpoint"),
}


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint of a thread codon that exists in git."""

    type: str
    sha: str


@dataclass(frozen=True)
class ThreadCodon:
    """The seed's ThreadCodon."""

    codon: dict[str, Any]
    run_id: str
    run_status: str
    run_start_time: str
    run_end_time: str | None
    git_branch: str
    global_index: int
    run_index: int
    codon_index_in_run: int
    validated_checkpoints: tuple[CheckpointInfo, ...]
    continuation_session_id: str | None


@dataclass(frozen=True)
class ExecutionThread:
    """The seed's ExecutionThread."""

    codons: list[ThreadCodon]
    total_runs: int
    has_running_codon: bool
    next_codon_id: str | None
    failed: bool


def _run(state: dict[str, Any], run_id: str) -> dict[str, Any] | None:
    for run in state["runs"]:
        if run["runId"] == run_id:
            return run
    return None


def kept_of_source(parent: dict[str, Any], source: dict[str, Any]) -> tuple[int, int | None]:
    """How many of the source run's records (from its first) stay in the thread,
    and the position of the record a rig-setup continuation re-runs."""
    records = parent["codons"]
    sha = source["checkpointSha"]
    after = source["afterCodon"]
    if after is None:
        # Rig-setup target: the first record whose rig left this checkpoint.
        for i, rec in enumerate(records):
            if rec.get("rigSetupCheckpoint") == sha:
                return i, i
        return 0, None
    # Normal: up to and including the record whose end state was restored...
    for i in reversed(range(len(records))):
        rec = records[i]
        ends = (
            rec.get("completionCheckpoint"),
            rec.get("errorCheckpoint"),
            rec.get("skipCheckpoint"),
        )
        if rec["codonId"] == after and sha in ends:
            return i + 1, None
    # ...unless the sha is the rig-setup checkpoint of that codon (the older
    # encoding of a rig-setup target)...
    for i, rec in enumerate(records):
        if rec["codonId"] == after and rec.get("rigSetupCheckpoint") == sha:
            return i, i
    # ...else up to its latest record, else everything.
    for i in reversed(range(len(records))):
        if records[i]["codonId"] == after:
            return i + 1, None
    return len(records), None


def checkpoints_of(rec: dict[str, Any]) -> list[CheckpointInfo]:
    """The record's checkpoints its status vouches for, rig-setup first."""
    found = []
    if rec.get("rigSetupCheckpoint"):
        found.append(CheckpointInfo("rig-setup", rec["rigSetupCheckpoint"]))
    if rec["status"] in _FINAL:
        kind, key = _FINAL[rec["status"]]
        if rec.get(key):
            found.append(CheckpointInfo(kind, rec[key]))
    return found


def analyze_execution_thread(
    state: dict[str, Any],
    checkpoints: Collection[str] | None = None,
    target_run_id: str | None = None,
    validate_checkpoints: bool = True,
) -> ExecutionThread:
    """The thread ending in ``target_run_id`` (or the latest run).

    Raises ``KeyError`` for an unknown target run.
    """

    def exists(sha: str) -> bool:
        if not validate_checkpoints:
            return True
        return checkpoints is not None and sha in checkpoints

    if target_run_id is None:
        if not state["runs"]:
            return ExecutionThread([], 0, False, None, False)
        start = state["runs"][0]
    else:
        found = _run(state, target_run_id)
        if found is None:
            raise KeyError(target_run_id)
        start = found

    codons: list[ThreadCodon] = []
    visited: list[str] = []
    rerun: str | None = None
    run = start
    keep = len(run["codons"])
    while True:
        visited.append(run["runId"])
        run_index = len(visited) - 1
        for i in reversed(range(keep)):
            rec = run["codons"][i]
            codons.append(
                ThreadCodon(
                    codon=rec,
                    run_id=run["runId"],
                    run_status=run["status"],
                    run_start_time=run["startTime"],
                    run_end_time=run.get("endTime"),
                    git_branch=run["gitBranch"],
                    global_index=len(codons),
                    run_index=run_index,
                    codon_index_in_run=i,
                    validated_checkpoints=tuple(c for c in checkpoints_of(rec) if exists(c.sha)),
                    continuation_session_id=rec.get("previousSessionId"),
                )
            )
        conditions = run["startingConditions"]
        if conditions["type"] != "continuation":
            break
        source = conditions["source"]
        parent = _run(state, source["runId"])
        if parent is None or parent["runId"] in visited:
            break
        keep, rerun_at = kept_of_source(parent, source)
        if run_index == 0 and rerun_at is not None:
            rerun = parent["codons"][rerun_at]["codonId"]
        run = parent

    has_running = any(tc.codon["status"] not in TERMINAL for tc in codons)
    failed = start["status"] == "crashed" or (
        bool(codons) and codons[0].codon["status"] == "failed"
    )
    if failed or has_running:
        next_id = None
    elif rerun is not None and not start["codons"]:
        next_id = rerun
    else:
        next_id = _next_in_plan(state["executionPlan"], codons)
    return ExecutionThread(codons, len(visited), has_running, next_id, failed)


def _next_in_plan(plan: list[dict[str, Any]], codons: list[ThreadCodon]) -> str | None:
    ids = [entry["codonId"] for entry in plan]
    begin = 0
    if codons and codons[0].codon["codonId"] in ids:
        begin = ids.index(codons[0].codon["codonId"]) + 1
    finished = {
        tc.codon["codonId"] for tc in codons if tc.codon["status"] in ("completed", "skipped")
    }
    for codon_id in ids[begin:]:
        if codon_id not in finished:
            return codon_id
    return None


def find_continuation_session_id(
    thread: ExecutionThread, codon_id: str, state: dict[str, Any]
) -> str | None:
    """The seed's findContinuationSessionId."""
    ids = [entry["codonId"] for entry in state["executionPlan"]]
    if codon_id not in ids or ids.index(codon_id) == 0:
        return None
    previous = ids[ids.index(codon_id) - 1]
    for tc in thread.codons:
        rec = tc.codon
        if rec["codonId"] != previous or not rec.get("claudeSessionId"):
            continue
        if rec["status"] == "completed":
            return str(rec["claudeSessionId"])
        if rec["status"] == "skipped" and rec.get("assistantMessageCount", 0) >= 1:
            return str(rec["claudeSessionId"])
    return None
