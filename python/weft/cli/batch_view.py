"""The live view of ``weft batch run``: one progress bar per workstream.

Each row shows the workstream's state, a bar of finished steps, how many
steps run, succeeded and failed, its retries and its cost so far; steps that
wait (for a worker, or on an open circuit) are listed below with why. It
reads the coordinator's in-memory rows (the same the store was just given)
and redraws after every committed change and a few times a second.
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from weft.batch.coordinator import Coordinator
from weft.batch.store import Change
from weft.terminal import printable

_STYLES = {
    "S_PENDING": "dim",
    "S_RUNNING": "cyan",
    "S_SUCCESS": "green",
    "S_FAILED": "red",
    "S_RETRYING": "yellow",
    "S_ABANDONED": "red",
}


class LiveBatchView:
    """A rich ``Live`` display of a running batch."""

    def __init__(self, coordinator: Coordinator, console: Console | None = None) -> None:
        self.coordinator = coordinator
        self.live = Live(
            self.render(), console=console or Console(), refresh_per_second=4, transient=False
        )

    def __enter__(self) -> LiveBatchView:
        self.live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.live.update(self.render())
        self.live.__exit__(exc_type, exc, tb)

    def on_change(self, change: Change, now_ms: int) -> None:
        """Redraws after a committed change."""
        del change, now_ms
        self.live.update(self.render())

    def render(self) -> Group:
        """The table and the waiting steps."""
        table = Table(box=None, pad_edge=False)
        for column in ("workstream", "state", "steps", "", "running", "ok", "failed", "retries"):
            table.add_column(column)
        table.add_column("cost", justify="right")
        total_cost = 0.0
        for ws in self.coordinator.scheduler.workstreams.values():
            states = [s.machine.state for s in ws.steps.values()]
            done = sum(1 for s in states if s == "S_SUCCESS")
            cost = sum(s.row.cost_usd for s in ws.steps.values())
            total_cost += cost
            state = ws.machine.state
            table.add_row(
                printable(ws.row.ws_id),
                Text(state, style=_STYLES.get(state, "")),
                ProgressBar(total=max(1, len(states)), completed=done, width=20),
                f"{done}/{len(states)}",
                str(states.count("S_RUNNING")),
                str(done),
                str(states.count("S_FAILED")),
                f"{ws.machine.retry_count}/{ws.machine.max_retries}",
                f"${cost:.4f}",
            )
        lines: list[Table | Text] = [table]
        for key, why in list(self.coordinator.waiting.items())[:5]:
            lines.append(Text(printable(f"  {key}: {why}"), style="dim"))
        lines.append(Text(f"cost so far ${total_cost:.4f}", style="bold"))
        return Group(*lines)
