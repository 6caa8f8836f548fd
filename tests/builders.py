"""Transition builders shared by the store tests and the torture child."""

from __future__ import annotations

from weft import core


def move(run: str, codon: str, frm: str, to: str, **meta: object) -> core.Transition:
    """A CodonTransitioned event."""
    return core.CodonTransitioned(
        run_id=run,
        codon_id=codon,
        from_status=frm,  # type: ignore[arg-type]
        to_status=to,  # type: ignore[arg-type]
        timestamp="2026-11-21T00:00:00Z",
        metadata=core.TransitionMetadata(**meta) if meta else None,  # type: ignore[arg-type]
    )


def run_started(run: str) -> core.RunStarted:
    """A fresh RunStarted."""
    return core.RunStarted(
        run_id=run,
        run_folder=f"/x/.weft/runs/{run}",
        git_branch=f"run-{run}",
        starting_conditions=core.Fresh(),
        server_pid=1,
        start_time="2026-11-21T00:00:00Z",
    )


def lifecycle(run: str, codon: str, costs: int = 3) -> list[core.Transition]:
    """One codon from CodonStarted to completed, with ``costs`` increments."""
    events: list[core.Transition] = [
        core.CodonStarted(run_id=run, codon_id=codon, start_time="t"),
        move(run, codon, "preparing", "starting"),
        move(run, codon, "starting", "initializing", claude_pid=7, claude_log_path="l"),
        move(run, codon, "initializing", "running", claude_session_id="s"),
    ]
    events += [
        core.CostsIncremented(
            run_id=run,
            codon_id=codon,
            cost_delta=0.001 * (k + 1),
            tokens_delta=core.TokenUsage(input_tokens=10),
        )
        for k in range(costs)
    ]
    events.append(move(run, codon, "running", "completed", checkpoint_sha=f"sha-{codon}"))
    return events
