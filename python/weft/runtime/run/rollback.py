"""Rollback: return the work tree to a checkpoint and continue from there.

A rollback never deletes history. It picks a target on the execution thread
(the newest git-confirmed success, a codon's checkpoint, or a checkpoint SHA
or unique prefix), removes the rig copies of the codons it rolls back,
restores every file the plan's checkpoints cover to the target exactly (files
the target does not hold are removed), moves back what the rolled-back codons
archived (:mod:`weft.runtime.codon.archive`), ends the current run if one is open,
and starts a continuation run from the target (reason ``rollback``). The
thread analyzer of the compiled core then makes that run the history's new
head: the rolled-back codons are superseded, not erased.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from weft._core import ExecutionThread, ThreadCodon
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.repo import run_branch
from weft.clock import utc_now_iso
from weft.errors import WeftError
from weft.events.stream import (
    RollbackCompletedEvent,
    RollbackProgressEvent,
    RollbackStartedEvent,
    StreamData,
)
from weft.events.transitions import (
    Continuation,
    ContinuationSource,
    Fresh,
    RunCompleted,
    RunStarted,
    Transition,
)
from weft.plan import ExecutionPlan
from weft.runtime.codon.archive import restore_archives
from weft.runtime.execution.layout import ExecutionLayout
from weft.state import StateManager

CheckpointType = Literal["rig-setup", "completed", "error", "skipped"]
CodonEnd = Literal["start", "end", "rig-setup", "completed", "error", "skipped"]

SHA_FIELDS = {
    "rigSetupCheckpoint": "rig-setup",
    "completionCheckpoint": "completed",
    "errorCheckpoint": "error",
    "skipCheckpoint": "skipped",
}


class RollbackError(WeftError):
    """A rollback that cannot be done: no target, an ambiguous or unknown
    checkpoint, a codon still running. Nothing was changed."""


@dataclass(frozen=True, slots=True)
class RollbackTarget:
    """Where a rollback goes: a checkpoint of a codon record of a run."""

    run_id: str
    codon_id: str
    checkpoint_type: str
    sha: str

    @property
    def after_codon(self) -> str | None:
        """The continuation's ``afterCodon``: none for a rig-setup target, whose
        codon runs again from its rig-setup checkpoint."""
        return None if self.checkpoint_type == "rig-setup" else self.codon_id


def recorded_shas(state: Mapping[str, Any]) -> set[str]:
    """Every checkpoint SHA the state records."""
    shas = {state["initialCheckpoint"]} if state.get("initialCheckpoint") else set()
    for run in state["runs"]:
        for record in run["codons"]:
            shas.update(record[f] for f in SHA_FIELDS if record.get(f))
    return shas


async def analyze(
    manager: StateManager, checkpoints: AsyncCheckpointRepo
) -> tuple[dict[str, Any], ExecutionThread, set[str]]:
    """The state, its execution thread, and the recorded checkpoints git confirms."""
    await manager.flush()
    state: dict[str, Any] = json.loads(manager.core.state_json())
    confirmed = await checkpoints.verify(recorded_shas(state))
    return state, await manager.execution_thread(checkpoints=confirmed), confirmed


def _checkpoints(tc: ThreadCodon) -> list[tuple[str, str]]:
    """(type, sha) of a thread codon's confirmed checkpoints, rig-setup first."""
    order = {"rig-setup": 0, "completed": 1, "error": 1, "skipped": 1}
    found = [(str(cp.type), cp.sha) for cp in tc.validated_checkpoints]
    return sorted(found, key=lambda item: order[item[0]])


def last_success(thread: ExecutionThread) -> RollbackTarget | None:
    """The newest completed codon of the thread with a confirmed completion checkpoint."""
    for tc in thread.codons:
        if tc.status != "completed":
            continue
        for kind, sha in _checkpoints(tc):
            if kind == "completed":
                return RollbackTarget(tc.run_id, tc.codon_id, kind, sha)
    return None


def codon_target(thread: ExecutionThread, codon_id: str, end: CodonEnd = "end") -> RollbackTarget:
    """A checkpoint of ``codon_id``'s newest record on the thread: ``start``
    (its first checkpoint: the rig-setup one when it has one), ``end`` (its
    last), or exactly one type."""
    for tc in thread.codons:
        if tc.codon_id != codon_id:
            continue
        found = _checkpoints(tc)
        if not found:
            raise RollbackError(
                f"codon {codon_id} has no confirmed checkpoint on the execution thread; "
                "see `weft checkpoints` for the ones that exist"
            )
        if end == "start":
            kind, sha = found[0]
        elif end == "end":
            kind, sha = found[-1]
        else:
            matching = [item for item in found if item[0] == end]
            if not matching:
                kinds = ", ".join(kind for kind, _ in found)
                raise RollbackError(f"codon {codon_id} has no {end} checkpoint (it has: {kinds})")
            kind, sha = matching[0]
        return RollbackTarget(tc.run_id, tc.codon_id, kind, sha)
    raise RollbackError(
        f"codon {codon_id!r} is not on the execution thread; `weft thread` lists its codons"
    )


def checkpoint_target(
    thread: ExecutionThread, state: Mapping[str, Any], prefix: str, confirmed: Iterable[str]
) -> RollbackTarget:
    """The checkpoint whose SHA is ``prefix`` or starts with it: looked up on
    the thread first, then in every run. Ambiguous and unknown prefixes are errors."""
    prefix = prefix.strip().lower()
    if len(prefix) < 4:
        raise RollbackError(f"checkpoint {prefix!r}: give at least 4 characters of the SHA")
    on_thread = {
        (tc.run_id, tc.codon_id, kind, sha)
        for tc in thread.codons
        for kind, sha in _checkpoints(tc)
        if sha.startswith(prefix)
    }
    candidates = on_thread
    if not candidates:
        known = set(confirmed)
        candidates = {
            (run["runId"], record["codonId"], kind, record[field])
            for run in state["runs"]
            for record in run["codons"]
            for field, kind in SHA_FIELDS.items()
            if record.get(field, "").startswith(prefix) and record[field] in known
        }
    shas = {c[3] for c in candidates}
    if not shas:
        raise RollbackError(
            f"no confirmed checkpoint starts with {prefix!r}; `weft checkpoints` lists them"
        )
    if len(shas) > 1:
        listed = ", ".join(sorted(sha[:12] for sha in shas))
        raise RollbackError(f"checkpoint {prefix!r} is ambiguous ({listed}); give more characters")
    run_id, codon_id, kind, sha = min(candidates)
    return RollbackTarget(run_id, codon_id, kind, sha)


def target_for(
    thread: ExecutionThread,
    state: Mapping[str, Any],
    confirmed: Iterable[str],
    *,
    checkpoint: str | None = None,
    codon: str | None = None,
    end: CodonEnd = "end",
) -> RollbackTarget:
    """The target a rollback request names: a checkpoint SHA (or prefix), a
    codon's checkpoint, or (neither given) the thread's last success."""
    if not state["runs"]:
        raise RollbackError("this execution has no run yet: nothing to roll back")
    if checkpoint is not None:
        return checkpoint_target(thread, state, checkpoint, confirmed)
    if codon is not None:
        return codon_target(thread, codon, end)
    target = last_success(thread)
    if target is None:
        raise RollbackError("the execution thread has no git-confirmed success to roll back to")
    return target


def redo_target(thread: ExecutionThread, codon_id: str) -> RollbackTarget | None:
    """The checkpoint ``codon_id``'s newest attempt on the thread started
    from: the end of the thread codon before it, or None when it was the
    thread's first codon (a redo then starts from the initial checkpoint)."""
    codons = list(thread.codons)
    for index, tc in enumerate(codons):
        if tc.codon_id != codon_id:
            continue
        if index + 1 == len(codons):
            return None
        before = codons[index + 1]
        ends = [(kind, sha) for kind, sha in _checkpoints(before) if kind != "rig-setup"]
        if not ends:
            raise RollbackError(
                f"cannot redo {codon_id}: {before.codon_id} before it has no confirmed "
                "checkpoint to start from; roll back further (rollback.toCodon)"
            )
        kind, sha = ends[-1]
        return RollbackTarget(before.run_id, before.codon_id, kind, sha)
    raise RollbackError(
        f"codon {codon_id!r} has not run on the execution thread: there is nothing to redo"
    )


def checkpoint_rows(
    state: Mapping[str, Any], on_thread: Iterable[str], exists: Iterable[str]
) -> list[dict[str, Any]]:
    """Every checkpoint the state records, newest first: SHA, type, codon, run,
    the codon's status and end time, whether it is on the thread and in git."""
    thread_shas, known = set(on_thread), set(exists)
    rows: list[dict[str, Any]] = []
    for run in state["runs"]:  # the document keeps its runs newest first
        for record in reversed(run["codons"]):
            for field, kind in reversed(SHA_FIELDS.items()):
                sha = record.get(field)
                if sha:
                    rows.append(
                        {
                            "sha": sha,
                            "type": kind,
                            "codonId": record["codonId"],
                            "runId": run["runId"],
                            "status": record["status"],
                            "timestamp": record.get("endTime") or record.get("startTime"),
                            "onThread": sha in thread_shas,
                            "exists": sha in known,
                        }
                    )
    # Newest first by time too: a continuation run may be listed before an older
    # run's later codons (stable, so one codon's checkpoints keep their order).
    rows.sort(key=lambda row: str(row["timestamp"] or ""), reverse=True)
    return rows


def rolled_back(thread: ExecutionThread, target: RollbackTarget | None) -> list[ThreadCodon]:
    """The thread codons a rollback to ``target`` undoes, newest first (all of
    them for None, the initial checkpoint)."""
    out: list[ThreadCodon] = []
    for tc in thread.codons:
        if target is None:
            out.append(tc)
            continue
        if tc.run_id == target.run_id and tc.codon_id == target.codon_id:
            if target.checkpoint_type == "rig-setup":
                out.append(tc)
            break
        out.append(tc)
    return out


def possibly_started(state: Mapping[str, Any], plans: Sequence[ExecutionPlan]) -> list[str]:
    """Every codon that may have acted on the work tree: each one with a record
    in some run, plus those that may have started without one (the first codon
    of each plan, and the codon after each run's last recorded one): a codon's
    start is not awaited before its rig runs, so a kill can land in between."""
    started = dict.fromkeys(
        record["codonId"] for run in reversed(state["runs"]) for record in run["codons"]
    )
    for plan in plans:
        first = plan.next_codon(None)
        if first is not None:
            started.setdefault(first.codon_id)
        for run in state["runs"]:
            if run["codons"]:
                after = plan.next_codon(run["codons"][-1]["codonId"])
                if after is not None:
                    started.setdefault(after.codon_id)
    return list(started)


def remove_rig_copies(
    layout: ExecutionLayout, plans: Sequence[ExecutionPlan], codon_ids: Iterable[str]
) -> list[str]:
    """Removes the ``copy`` targets of the rig setups of ``codon_ids`` (each
    looked up in the first of ``plans`` that has it); returns those removed.
    Never anything outside the workspace, whatever the hank says."""
    removed: list[str] = []
    workspace = layout.workspace.resolve()
    for codon_id in codon_ids:
        entry = next((e for plan in plans if (e := plan.get(codon_id)) is not None), None)
        if entry is None:
            continue
        for op in entry.codon.rig_setup:
            copy = getattr(op, "copy", None)
            if copy is None:
                continue
            target = (workspace / copy.to).resolve()
            if workspace not in target.parents:
                continue
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            elif target.exists() or target.is_symlink():
                target.unlink(missing_ok=True)
            else:
                continue
            removed.append(copy.to)
    return removed


def all_patterns(plan: ExecutionPlan) -> list[str]:
    """Every checkpointed-file pattern of the plan: what a rollback restores exactly."""
    if not len(plan):
        return []
    last = plan.entries[-1].codon_id
    return plan.checkpoint_patterns(last)


async def execute(
    target: RollbackTarget | None,
    *,
    thread: ExecutionThread,
    manager: StateManager,
    checkpoints: AsyncCheckpointRepo,
    plan: ExecutionPlan,
    layout: ExecutionLayout,
    current_run_id: str | None,
    new_run_id: str,
    server_pid: int,
    emit: Callable[[StreamData, str | None], None],
    reason: Literal["rollback", "retry"] = "rollback",
    current_ending: Transition | None = None,
) -> str:
    """Rolls back to ``target`` and starts the run ``new_run_id`` from it.

    ``current_ending`` ends the current run (``current_run_id``) the way its
    run machine says (``RunFailed`` when parked on a failure, ``RunStopped``
    with codons left); by default, ``RunCompleted``.

    ``reason="rollback"`` reports ``rollback.*`` events; ``"retry"`` (a redo)
    says one ``info``. A None target is the initial checkpoint: the new run
    is a fresh one with the whole plan.
    """
    if thread.has_running_codon:
        raise RollbackError(
            "Cannot roll back while a codon is running: stop it first (codon.forceStop)"
        )
    undone = rolled_back(thread, target)
    sha = checkpoints.initial_sha if target is None else target.sha
    to_codon = "" if target is None else target.codon_id
    kind = "initial" if target is None else target.checkpoint_type
    # A retry (a redo) reports nothing of its own: the caller says one info.
    say = emit if reason == "rollback" else _silent
    total = len(undone) + 1
    say(
        RollbackStartedEvent(
            from_run=current_run_id,
            to_run=new_run_id if target is None else target.run_id,
            to_codon=to_codon,
            to_checkpoint=sha,
            checkpoint_type=kind,
            codons_to_process=[tc.codon_id for tc in undone],
        ),
        current_run_id,
    )
    # What the undone codons archived goes back first, so that the restore
    # below has the last word on every path a checkpoint covers.
    pairs = {(tc.run_id, tc.codon_id) for tc in undone}
    for restored in await asyncio.to_thread(restore_archives, layout, pairs):
        say(restored, current_run_id)
    _undo_rig_copies(undone, layout, plan, total, say, current_run_id)
    await checkpoints.restore(sha, all_patterns(plan))
    say(
        RollbackProgressEvent(
            current_step=total,
            total_steps=total,
            message=f"Applied checkpoint {sha[:10]} of {to_codon or 'the initial state'}",
        ),
        current_run_id,
    )
    _start_run_from(
        target,
        sha,
        manager=manager,
        plan=plan,
        layout=layout,
        current_run_id=current_run_id,
        new_run_id=new_run_id,
        server_pid=server_pid,
        reason=reason,
        current_ending=current_ending,
    )
    say(
        RollbackCompletedEvent(
            from_run=current_run_id,
            to_run=new_run_id,
            checkpoint=sha,
            codon_id=to_codon,
            checkpoint_type=kind,
        ),
        new_run_id,
    )
    await manager.flush()
    return new_run_id


def _silent(event: StreamData, run_id: str | None) -> None:
    """Where a retry's rollback events go: nowhere."""


def _undo_rig_copies(
    undone: Sequence[ThreadCodon],
    layout: ExecutionLayout,
    plan: ExecutionPlan,
    total: int,
    say: Callable[[StreamData, str | None], None],
    run_id: str | None,
) -> None:
    """Removes the rig copies of each rolled-back codon, newest first, one progress event each."""
    for step, tc in enumerate(undone, start=1):
        removed = remove_rig_copies(layout, (plan,), [tc.codon_id])
        detail = f"; removed rig copies {', '.join(removed)}" if removed else ""
        say(
            RollbackProgressEvent(
                current_step=step,
                total_steps=total,
                message=f"Rolling back through {tc.codon_id} (run {tc.run_id}){detail}",
            ),
            run_id,
        )


def _start_run_from(
    target: RollbackTarget | None,
    sha: str,
    *,
    manager: StateManager,
    plan: ExecutionPlan,
    layout: ExecutionLayout,
    current_run_id: str | None,
    new_run_id: str,
    server_pid: int,
    reason: Literal["rollback", "retry"],
    current_ending: Transition | None = None,
) -> None:
    """Ends the current run (if one is open) and starts ``new_run_id`` from ``sha``: a fresh
    run with the whole plan for the initial checkpoint, else a continuation."""
    if current_run_id is not None:
        manager.transition(
            current_ending or RunCompleted(run_id=current_run_id, end_time=utc_now_iso())
        )
    conditions: Fresh | Continuation = (
        Fresh(initial_checkpoint_sha=sha)
        if target is None
        else Continuation(
            source=ContinuationSource(
                run_id=target.run_id, after_codon=target.after_codon, checkpoint_sha=sha
            ),
            reason=reason,
        )
    )
    manager.transition(
        RunStarted(
            run_id=new_run_id,
            run_folder=str(layout.runs / new_run_id),
            git_branch=run_branch(new_run_id),
            starting_conditions=conditions,
            server_pid=server_pid,
            start_time=utc_now_iso(),
            execution_plan=plan.to_entries() if target is None else None,
        )
    )


__all__ = [
    "SHA_FIELDS",
    "RollbackError",
    "RollbackTarget",
    "all_patterns",
    "analyze",
    "checkpoint_rows",
    "checkpoint_target",
    "codon_target",
    "execute",
    "last_success",
    "recorded_shas",
    "redo_target",
    "remove_rig_copies",
    "rolled_back",
    "target_for",
]
