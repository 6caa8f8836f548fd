"""A small service embedding Weft's core: it tracks one run of two codons.

It shows the whole embedding API in one page: typed transitions, the
fire-and-forget queue, ``transition_and_wait``, a listener that sees applied
transitions in order, O(1) cost queries, a rejected transition, and reloading
the state from its state.json document. ``docs/embedding.md`` walks through
it, and the test suite runs it.
"""

from __future__ import annotations

import itertools

import uvloop

from weft import core
from weft.errors import InvalidTransitionError

RUN = "1763683200000-demo1"


_ticks = itertools.count(1)


def clock() -> str:
    """A fixed clock: the core never reads one, so the output is the same everywhere."""
    return f"2026-11-20T12:00:{next(_ticks):02d}Z"


def move(
    codon: str, frm: core.CodonStatus, to: core.CodonStatus, **meta: object
) -> core.Transition:
    """A CodonTransitioned event for ``codon``."""
    metadata = core.TransitionMetadata(**meta) if meta else None  # type: ignore[arg-type]
    return core.CodonTransitioned(
        run_id=RUN,
        codon_id=codon,
        from_status=frm,
        to_status=to,
        timestamp=clock(),
        metadata=metadata,
    )


def lifecycle(codon: str, session: str, spend: list[float]) -> list[core.Transition]:
    """One codon from preparing to completed, spending ``spend`` while running."""
    events: list[core.Transition] = [
        core.CodonStarted(run_id=RUN, codon_id=codon, start_time=clock()),
        move(codon, "preparing", "starting"),
        move(codon, "starting", "initializing", claude_pid=4242, claude_log_path=f"{codon}.log"),
        move(codon, "initializing", "running", claude_session_id=session),
    ]
    for usd in spend:
        events.append(
            core.CostsIncremented(
                run_id=RUN,
                codon_id=codon,
                cost_delta=usd,
                tokens_delta=core.TokenUsage(input_tokens=1000, output_tokens=200),
            )
        )
    events.append(move(codon, "running", "completed", checkpoint_sha=f"sha-{codon}"))
    return events


async def main() -> None:
    """Drive one run through the state manager and report what it saw."""
    manager = core.StateManager()
    seen: list[int] = []
    manager.add_listener(lambda processed: seen.append(processed.seq))

    await manager.transition_and_wait(
        core.RunStarted(
            run_id=RUN,
            run_folder=f"/tmp/weft-demo/.weft/runs/{RUN}",
            git_branch=f"run-{RUN}",
            starting_conditions=core.Fresh(),
            server_pid=1,
            start_time=clock(),
        )
    )
    for event in lifecycle("design", "session-a", [0.0125, 0.0075]):
        manager.transition(event)  # fire and forget: returns a sequence number at once
    for event in lifecycle("build", "session-b", [0.1, 0.2, 0.3]):
        manager.transition(event)
    await manager.flush()

    state = manager.core
    print(f"listener saw {len(seen)} transitions, in submission order: {seen == sorted(seen)}")
    print(f"codon design cost ${state.codon_cost(RUN, 'design'):.4f}")
    print(f"codon build cost ${state.codon_cost(RUN, 'build'):.4f}")
    print(f"run cost ${state.current_run_cost():.4f}, total ${state.total_cost():.4f}")

    try:
        await manager.transition_and_wait(move("build", "completed", "running"))
    except InvalidTransitionError as err:
        print(f"refused: {err} (from={err.from_status}, to={err.to_status})")

    await manager.transition_and_wait(core.RunCompleted(run_id=RUN, end_time=clock()))
    snapshot = state.state_json()
    reloaded = core.Core(snapshot)
    print(f"reloaded from state.json: total ${reloaded.total_cost():.4f}")
    print(f"current run after RunCompleted: {reloaded.current_run_id}")
    await manager.close()


if __name__ == "__main__":
    uvloop.run(main())
