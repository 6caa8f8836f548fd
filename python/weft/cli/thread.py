"""``weft thread``, ``weft checkpoints`` and ``weft rollback``: an execution's
history, its checkpoints, and going back to one of them.

``thread`` and ``checkpoints`` only read (no lock; safe beside a live run).
``rollback`` takes the execution's lock; it restores the files, records a
continuation run that starts at the target, and the next ``weft run`` goes on
from there. While a ``weft run`` is live on the execution, the rollback goes
through that run's server instead (:mod:`weft.cli.live_rollback`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import uvloop

from weft._core import ExecutionThread
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.cli.resolve import (
    CRASHED_UNMARKED,
    EXECUTION_HELP,
    nobody_holds,
    resolve_execution,
)
from weft.cli.status import stopped_record
from weft.clock import utc_now_iso
from weft.config import load_hank
from weft.config.loader import LoadedHank
from weft.events.stream import (
    RollbackCompletedEvent,
    RollbackProgressEvent,
    RollbackStartedEvent,
)
from weft.events.transitions import RunCompleted, RunStopped
from weft.outcome import ending_of
from weft.plan import ExecutionPlan
from weft.runtime.execution.layout import ExecutionLayout
from weft.runtime.execution.meta import read_meta
from weft.runtime.run import rollback
from weft.store import ExecutionStore
from weft.store.execution import live_holder, weft_dir_of
from weft.terminal import plural, printable, printable_lines


def register(commands: Any) -> None:
    """Adds ``thread``, ``checkpoints`` and ``rollback``."""
    thread = commands.add_parser(
        "thread",
        help="show the execution thread: the history that counts, run by run",
        description=(
            "Show the execution thread: every run of the continuation chain, newest "
            "first, with its codons, their checkpoints and the codons later runs superseded."
        ),
    )
    _execution_arg(thread)
    thread.add_argument("--json", action="store_true", help="print the thread as JSON")
    thread.set_defaults(run=run_thread)

    checkpoints = commands.add_parser(
        "checkpoints", help="list an execution's checkpoints, newest first"
    )
    _execution_arg(checkpoints)
    checkpoints.add_argument("--json", action="store_true", help="print JSON")
    checkpoints.set_defaults(run=run_checkpoints)

    back = commands.add_parser(
        "rollback",
        help="return the work tree to a checkpoint and continue from there",
        description=(
            "Restore the files to a checkpoint and record a continuation run starting there; "
            "the next `weft run` continues from it. History is never deleted. While a `weft run` "
            "is live on the execution, the rollback is sent to its server (the run must be "
            "waiting between codons, as with --no-autostart) and the run continues from there."
        ),
    )
    _execution_arg(back)
    target = back.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--last-success", action="store_true", help="the newest git-confirmed success"
    )
    target.add_argument("--codon", metavar="ID", help="a codon of the execution thread")
    target.add_argument("--checkpoint", metavar="SHA", help="a checkpoint SHA or unique prefix")
    back.add_argument(
        "--type",
        default="end",
        choices=["start", "end", "rig-setup", "completed", "error", "skipped"],
        help="with --codon: which of its checkpoints (default: end, its last)",
    )
    back.add_argument(
        "--discard",
        action="store_true",
        help="drop uncheckpointed changes in covered files instead of saving them to a "
        "recovery/ branch of the checkpoint repository first",
    )
    back.set_defaults(run=run_rollback)


def _execution_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)


def _run(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


async def _confirmed(store: ExecutionStore, state: dict[str, Any]) -> set[str]:
    layout = ExecutionLayout(store.weft_dir.parent)
    if not layout.checkpoints.exists():
        return set()
    # Perhaps beside a live run: it owns the checkpoint log.
    repo = await AsyncCheckpointRepo.open(
        layout.checkpoints, layout.workspace, watch=False, writer=False
    )
    try:
        return await repo.verify(rollback.recorded_shas(state))
    finally:
        await repo.close()


def _read(execution: Path) -> tuple[dict[str, Any], ExecutionThread, set[str]]:
    """The state, its thread, and the recorded checkpoints git confirms."""
    store = ExecutionStore.open(execution, readonly=True)
    try:
        state: dict[str, Any] = json.loads(store.core.state_json())
        confirmed = _run(_confirmed(store, state))
        return state, store.core.execution_thread(checkpoints=confirmed), confirmed
    finally:
        store.journal.close()


def _newest_run(state: dict[str, Any]) -> dict[str, Any] | None:
    runs: list[dict[str, Any]] = state["runs"]
    return max(runs, key=lambda r: str(r.get("startTime", ""))) if runs else None


def _next_words(state: dict[str, Any], thread: ExecutionThread, cut_off: bool) -> str:
    """``next codon: b`` and what the next ``weft run`` does about the thread's end.

    The core's thread (seed 003) calls a thread whose newest codon failed
    ``failed`` and one with a codon running unfinished: a stop (yours, a
    budget's) leaves its codon failed as ``interrupted``, and a run cut off
    leaves its codon running; in both the next ``weft run`` does that codon
    again (as :mod:`weft.runtime.run.recovery` does), nothing needs fixing."""
    newest = _newest_run(state)
    ending = None if newest is None else ending_of(newest)
    top = thread.codons[0] if len(thread.codons) else None
    if (
        ending is not None
        and ending.kind in ("stopped", "budget")
        and thread.failed
        and top is not None
        and top.codon_id == ending.codon_id
    ):
        how = (
            "stopped by its budget: raise it and run again"
            if ending.kind == "budget"
            else "stopped: run again"
        )
        return f"next codon: {ending.codon_id} ({how} to go on from it)"
    if cut_off and thread.has_running_codon and top is not None:
        return (
            f"next codon: {top.codon_id} (its run was cut off: the next run marks it "
            "crashed and goes on from it)"
        )
    return f"next codon: {thread.next_codon_id or '-'}" + (
        "; FAILED: roll back or fix, then run again" if thread.failed else ""
    )


def run_thread(args: argparse.Namespace) -> int:
    """Prints the execution thread."""
    execution = resolve_execution(args.execution)
    state, thread, _ = _read(execution)
    if args.json:
        sys.stdout.write(thread.to_json().decode() + "\n")
        return 0
    # A run the state calls running that no live process holds was cut off (weft status's rule).
    cut_off = nobody_holds(weft_dir_of(execution))
    on_thread = {(tc.run_id, tc.codon_id, tc.codon_index_in_run) for tc in thread.codons}
    runs = {run["runId"]: run for run in state["runs"]}
    print(
        printable(
            f"{plural(thread.total_runs, 'run')} on the thread; "
            + _next_words(state, thread, cut_off)
        )
    )
    shown: list[str] = []
    for tc in thread.codons:
        if tc.run_id not in shown:
            shown.append(tc.run_id)
    for run_id in shown:
        run = runs[run_id]
        conditions = run["startingConditions"]
        origin = (
            "fresh"
            if conditions["type"] == "fresh"
            else f"continues {conditions['source']['runId']} after "
            f"{conditions['source']['afterCodon'] or '(rig setup)'}"
        )
        ending = ending_of(run)
        said = f": {ending.reason}" if ending.reason and ending.kind != "running" else ""
        word = CRASHED_UNMARKED if ending.kind == "running" and cut_off else ending.word
        print(printable(f"run {run_id}  {word}  {origin}{said}"))
        for index, record in enumerate(run["codons"]):
            mark = " " if (run_id, record["codonId"], index) in on_thread else "~"
            shas = [
                f"{kind}:{record[field][:10]}"
                for field, kind in rollback.SHA_FIELDS.items()
                if record.get(field)
            ]
            # A codon a stop cut short is to do again, not failed (weft status says so too).
            status = "stopped" if stopped_record(record) else record["status"]
            line = f"  {mark} {record['codonId']:<24} {status:<22} {' '.join(shas)}"
            print(printable(line))
    print("(~ superseded by a later run)")
    return 0


def run_checkpoints(args: argparse.Namespace) -> int:
    """Lists the checkpoints the state records, newest first, with their git status."""
    state, thread, exists = _read(resolve_execution(args.execution))
    on_thread = {cp.sha for tc in thread.codons for cp in tc.validated_checkpoints}
    rows = rollback.checkpoint_rows(state, on_thread, exists)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no checkpoints yet")
        return 0
    print(f"{'TIME':<19}  {'SHA':<12}  {'TYPE':<10} {'CODON':<24} RUN")
    for row in rows:
        flags = ("thread " if row["onThread"] else "") + ("" if row["exists"] else "MISSING")
        when = _local_time(row["timestamp"])
        print(
            printable(
                f"{when:<19}  {row['sha'][:12]}  {row['type']:<10} {row['codonId']:<24} "
                f"{row['runId']}  {flags}".rstrip()
            )
        )
    return 0


def _local_time(stamp: str | None) -> str:
    """An ISO UTC time as local ``YYYY-MM-DD HH:MM:SS`` (``-`` when unknown)."""
    if not stamp:
        return "-"
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp[:19]
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def run_rollback(args: argparse.Namespace) -> int:
    """Rolls back and records the continuation run."""
    try:
        execution = resolve_execution(args.execution)
        if live_holder(weft_dir_of(execution)) is not None:
            # Loaded here: it brings the client and the views, which thread and checkpoints
            # (read-only, run beside every live run) need not load.
            from weft.cli.live_rollback import rollback_live

            # The live run holds the lock: it carries the rollback out itself.
            return int(
                _run(rollback_live(args, execution, save=lambda: _save_beside_live(execution)))
            )
        return int(_run(_rollback(args)))
    except rollback.RollbackError as exc:
        print(f"weft: error: {printable_lines(str(exc))}", file=sys.stderr)
        return 1


async def rollback_offline(
    execution: Path, codon: str, *, end: str = "end", discard: bool = False
) -> int:
    """``weft rollback EXECUTION --codon CODON --type END``, for an execution
    no run holds (``weft fork`` rolls its fresh copy back this way)."""
    args = argparse.Namespace(
        execution=str(execution), checkpoint=None, codon=codon, type=end, discard=discard
    )
    return await _rollback(args)


async def _rollback(args: argparse.Namespace) -> int:
    store = await asyncio.to_thread(ExecutionStore.open, resolve_execution(args.execution))
    layout = ExecutionLayout(store.weft_dir.parent)
    manager = store.state_manager()
    repo = await AsyncCheckpointRepo.open(layout.checkpoints, layout.workspace, watch=False)
    try:
        await store.mark_crashed_runs(manager)
        state, thread, confirmed = await rollback.analyze(manager, repo)
        target = rollback.target_for(
            thread,
            state,
            confirmed,
            checkpoint=args.checkpoint,
            codon=args.codon,
            end=args.type,
        )
        plan = ExecutionPlan.from_state(state["executionPlan"], _hank_of(layout).hank)
        if not args.discard:
            await _save_uncheckpointed(repo, rollback.all_patterns(plan))
        from weft.runtime.run.runtime import new_run_id  # the run machinery, for a rollback only

        run_id = new_run_id()

        def say(event: Any, _run_id: str | None) -> None:
            manager.emit(event, run_id=_run_id)
            if isinstance(event, RollbackStartedEvent):
                undone = ", ".join(event.codons_to_process) or "nothing"
                print(
                    printable(
                        f"Rolling back to the {event.checkpoint_type} checkpoint "
                        f"{event.to_checkpoint[:10]} of {event.to_codon}; superseded: {undone}"
                    )
                )
            elif isinstance(event, RollbackProgressEvent):
                print(printable(event.message))
            elif isinstance(event, RollbackCompletedEvent):
                print(f"Rolled back; run {event.to_run} continues from {event.checkpoint[:10]}")

        await rollback.execute(
            target,
            thread=thread,
            manager=manager,
            checkpoints=repo,
            plan=plan,
            layout=layout,
            current_run_id=None,
            new_run_id=run_id,
            server_pid=os.getpid(),
            emit=say,
        )
        # The run that records the rollback ends at once; `weft run` continues from it.
        # It ends as a live rollback ends a run (the run machine's rewind_ending):
        # completed only when no codon is left, else stopped by you, its next codon
        # to do (weft status says so, as weft ls says rolled-back).
        _, after, _ = await rollback.analyze(manager, repo)
        left = after.next_codon_id
        end = utc_now_iso()
        await manager.transition_and_wait(
            RunCompleted(run_id=run_id, end_time=end)
            if left is None
            else RunStopped(
                run_id=run_id,
                end_time=end,
                by="user",
                reason=f"rolled back to {target.codon_id} ({target.checkpoint_type} checkpoint "
                f"{target.sha[:10]})",
                codon_id=left,
            )
        )
        print(f"Continue with: weft run --execution {layout.root}")
        return 0
    finally:
        await repo.close()
        await store.close(manager)


async def _save_beside_live(execution: Path) -> None:
    """:func:`_save_uncheckpointed` beside a live run (its store read-only)."""
    store = await asyncio.to_thread(ExecutionStore.open, execution, readonly=True)
    try:
        state: dict[str, Any] = json.loads(store.core.state_json())
    finally:
        store.journal.close()
    layout = ExecutionLayout(store.weft_dir.parent)
    plan = ExecutionPlan.from_state(state["executionPlan"], _hank_of(layout).hank)
    from weft.checkpoints.errors import CheckpointError

    try:
        repo = await AsyncCheckpointRepo.open(
            layout.checkpoints, layout.workspace, watch=False, writer=False
        )
    except CheckpointError as e:
        raise _save_failed(e) from e
    try:
        await _save_uncheckpointed(repo, rollback.all_patterns(plan))
    finally:
        await repo.close()


CHANGES_SHOWN = 20
"""Changed paths a rollback lists before it says how many more there are."""


def _save_failed(e: Exception) -> rollback.RollbackError:
    return rollback.RollbackError(
        f"cannot save the uncheckpointed changes before rolling back ({e}); pass --discard "
        "to roll back anyway and lose them"
    )


async def _save_uncheckpointed(repo: AsyncCheckpointRepo, patterns: list[str]) -> None:
    """Saves the covered work tree to a ``recovery/`` branch and lists what differs from
    the newest checkpoint (what the rollback would otherwise lose); refuses when the
    save fails, so nothing is lost by accident (``--discard`` skips this)."""
    from weft.checkpoints.errors import CheckpointError

    try:
        head = await repo.head()
        saved = await repo.recovery_snapshot(patterns, reason="uncheckpointed work before rollback")
        before = await asyncio.to_thread(repo.repo.files, head)
        now = await asyncio.to_thread(repo.repo.files, saved.sha)
    except CheckpointError as e:
        raise _save_failed(e) from e
    changed = sorted(p for p in before.keys() | now.keys() if before.get(p) != now.get(p))
    if not changed:
        return
    print(
        printable(
            f"Saved {plural(len(changed), 'uncheckpointed change')} to {saved.branch} "
            f"({saved.sha[:10]}) before rolling back:"
        )
    )
    for path in changed[:CHANGES_SHOWN]:
        mark = "deleted" if path not in now else "new" if path not in before else "changed"
        print(printable(f"  {mark:<8} {path}"))
    if len(changed) > CHANGES_SHOWN:
        print(f"  ... and {len(changed) - CHANGES_SHOWN} more")


def _hank_of(layout: ExecutionLayout) -> LoadedHank:
    """The hank this execution runs (its path is in execution-meta.json)."""
    meta = read_meta(layout.meta_path)
    return load_hank(meta.hank_path, check_environment=False)
