"""The seed's load-time checks against what exists on disk, when a run starts.

The core's state validation (``validate_state``) can compare a state with
the checkpoint repository's commits and the folders under ``runs/``; the
caller passes both in (the core does no I/O). Two findings matter:

* ``missing_checkpoint``: a recorded sha git does not have. When it is the
  completion or skip checkpoint of a codon on the execution thread (the
  history that counts), recovery cannot continue from where the thread says
  it is: it would quietly go back further and redo finished work. That is an
  error with the ways forward. A missing checkpoint off the thread (superseded
  history, a failed attempt's error checkpoint) is only noted.
* ``orphaned_folder``: a run folder without a run in the state; noted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from weft._core import ExecutionThread, validate_state

THREAD_FIELDS = ("completionCheckpoint", "skipCheckpoint")
"""The checkpoints a thread codon's status vouches for, which recovery continues from."""


@dataclass
class LoadCheck:
    """What the load-time checks found."""

    notes: list[str] = field(default_factory=list)
    """Warnings to say; the run goes on."""
    error: str | None = None
    """Why the run must not start, with the ways forward; None when it may."""


def run_folders(runs_dir: Path) -> list[str]:
    """The names of the folders under ``runs/``."""
    if not runs_dir.is_dir():
        return []
    return sorted(p.name for p in runs_dir.iterdir() if p.is_dir())


def load_checks(
    state_json: bytes,
    thread: ExecutionThread,
    confirmed: Iterable[str],
    folders: list[str],
    *,
    execution: Path,
) -> LoadCheck:
    """Runs the core's checks with ``confirmed`` (the recorded shas git has) and
    ``folders`` (under ``runs/``)."""
    report = validate_state(state_json, checkpoints=list(confirmed), run_folders=folders)
    needed: dict[str, str] = {}
    for tc in thread.codons:
        for name in THREAD_FIELDS:
            sha = tc.codon.get(name)
            if sha:
                needed.setdefault(sha, f"{tc.codon_id} (run {tc.run_id})")
    result = LoadCheck()
    lost: list[str] = []
    for issue in report.warnings:
        if issue.kind == "orphaned_folder":
            result.notes.append(f"warning: {issue.message}")
        elif issue.kind == "missing_checkpoint":
            sha = issue.message.split()[1]
            if sha in needed:
                lost.append(f"{sha[:10]} of {needed[sha]}")
            else:
                result.notes.append(f"warning: {issue.message} (at {issue.path})")
    if lost:
        listed = ", ".join(lost[:3]) + (" ..." if len(lost) > 3 else "")
        result.error = (
            f"{execution / '.weft' / 'checkpoints'}: the checkpoint repository lacks "
            f"{len(lost)} checkpoint(s) the execution thread continues from: {listed}. "
            f"Nothing was run. Ways forward: `weft checkpoints {execution}` lists what git "
            f"still has; `weft rollback {execution} --checkpoint SHA` continues from one of "
            f"those, or `weft run --execution {execution} --new --force` starts over"
        )
    return result
