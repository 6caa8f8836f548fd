"""A child for the crash torture: drives codons through a real store until killed.

Usage: ``python torture_child.py EXECUTION_DIR RUN_ID``. Each sequence number a
listener sees (listeners run only after the batch is committed) is printed on
stdout, so the parent knows what was reported durable before the kill.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.builders import move, run_started

from weft import core
from weft.events.stream import AssistantActionEvent
from weft.state import Processed
from weft.store import ExecutionStore


async def main(execution: Path, run: str) -> None:
    store = ExecutionStore.open(execution)
    manager = store.state_manager(max_batch=64)

    def report(p: Processed) -> None:
        sys.stdout.write(f"{p.seq}\n")
        sys.stdout.flush()

    manager.add_listener(report)
    await store.mark_crashed_runs(manager)
    await manager.transition_and_wait(run_started(run))
    i = 0
    while True:
        c = f"codon-{i}"
        manager.transition(core.CodonStarted(run_id=run, codon_id=c, start_time="t"))
        manager.transition(move(run, c, "preparing", "starting"))
        manager.transition(
            move(run, c, "starting", "initializing", claude_pid=7, claude_log_path="l")
        )
        manager.transition(move(run, c, "initializing", "running", claude_session_id="s"))
        for k in range(3):
            manager.transition(
                core.CostsIncremented(
                    run_id=run,
                    codon_id=c,
                    cost_delta=0.001 * (k + 1),
                    tokens_delta=core.TokenUsage(input_tokens=10),
                )
            )
            manager.emit(
                AssistantActionEvent(codon_id=c, action="message", content=str(k)),
                run_id=run,
                codon_id=c,
            )
        if i % 5 == 4:
            manager.transition(move(run, c, "running", "starting"))  # refused: journaled as error
        manager.transition(move(run, c, "running", "completed", checkpoint_sha=f"sha-{i}"))
        await manager.flush()
        i += 1


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
