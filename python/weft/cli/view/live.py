"""The live view: a rich table of every codon under a scrolling log, for a terminal."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from weft.cli.view.base import call_later, cancel
from weft.cli.view.format import (
    ACTION_LIMIT,
    codon_cost,
    describe_last,
    format_duration,
    format_tokens,
    run_cost,
)
from weft.cli.view.notes import Note, is_waiting, see, see_wire, waiting_words, wire_time_ns
from weft.cli.view.summary import RunSummary, reason, summary_data, summary_rows, title
from weft.client import Event
from weft.progress import NANO, PENDING, TERMINAL, CodonProgress, RunProgress
from weft.state import Processed
from weft.terminal import printable

_STYLES = {
    PENDING: "dim",
    "preparing": "yellow",
    "starting": "yellow",
    "initializing": "yellow",
    "running": "bold cyan",
    "completing-sentinels": "cyan",
    "completed": "green",
    "failed": "bold red",
    "stopped": "bold yellow",
    "budget": "bold yellow",
    "crashed": "bold red",
    "skipped": "magenta",
}
_ICONS = {PENDING: "·", "completed": "✓", "failed": "✗", "skipped": "↷"}
_PANEL_EDGES = 6
"""Columns a panel's border takes around its title (corner, rule and a space each side)."""
_NOTE_STYLES: dict[str, str] = {
    "error": "red",
    "rejected": "red",
    "rig": "yellow",
    "retry": "yellow",
    "run": "bold",
    "sentinel": "magenta",
    "budget": "magenta",
}


class LiveView:
    """A rich table of every codon (status, time, tokens, cost, last action)
    under a scrolling log of what happened (codons ending, failures, errors,
    retries, loop iterations). The table is rebuilt by a timer at most
    ``refreshes_per_second`` times a second, and once a second while a codon
    runs (its clock moves), never per event. Meant for a terminal: use
    :func:`make_view`, which falls back to :class:`HeadlessView` otherwise."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        progress: RunProgress | None = None,
        refreshes_per_second: float = 4.0,
        clock: Callable[[], int] = time.time_ns,
        keys: bool = False,
    ) -> None:
        self.progress = progress if progress is not None else RunProgress()
        self._keys = keys
        self.waiting: str | None = None
        """What the run waits for (a ``server.idle`` said so and nothing happened
        since), shown under the table; None while it runs."""
        self.console = console if console is not None else Console()
        self._period = 1.0 / refreshes_per_second
        self._clock = clock
        self._live: Live | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._dirty = True
        self._rendered_ns = 0
        self.renders = 0
        """How many times the table was rebuilt (the throttle is tested on it)."""

    def on_event(self, item: Processed) -> None:
        """Folds the event; lines worth keeping go to the log above the table."""
        self._show(see(self.progress, item), item.time_ns)

    def on_wire(self, event: Event) -> None:
        """Folds a wire event; lines worth keeping go to the log above the table."""
        self._show(see_wire(self.progress, event), wire_time_ns(event))

    def _show(self, note: Note | None, at_ns: int) -> None:
        self._dirty = True
        if self._timer is None and self._live is not None:
            self._schedule()
        if note is None:
            return
        if note.kind == "idle":
            # Shown under the table until the run moves on; an autostart run's
            # last "All codons completed" waits for nothing.
            if is_waiting(note):
                self.waiting = waiting_words(note.text) if self._keys else note.text
            return
        self.waiting = None
        if note.kind == "codon" and note.status not in TERMINAL:
            return  # the table shows it
        style = _STYLES[note.status] if note.status else _NOTE_STYLES.get(note.kind, "")
        self._print(at_ns, note.text, style)

    def note(self, message: str) -> None:
        """Prints ``message`` above the table."""
        self._print(self._clock(), message, "")

    def _print(self, at_ns: int, message: str, style: str) -> None:
        line = Text(time.strftime("%H:%M:%S ", time.localtime(at_ns // NANO)), style="dim")
        line.append(printable(message), style=style)
        with contextlib.suppress(BrokenPipeError, ValueError):
            if self._live is not None and self._dirty:
                # Printing redraws the last drawn table below the line: make it current.
                self._live.update(self.renderable(), refresh=True)
            self.console.print(line, soft_wrap=True)

    def start(self) -> None:
        """Shows the table and starts the refresh timer (when on an event loop)."""
        if self._live is not None:
            return
        # Other output (logging, prints) is routed above the table, but only
        # when the table is on the process's own stdout.
        redirect = self.console.file in (sys.stdout, sys.__stdout__)
        self._live = Live(
            self.renderable(),
            console=self.console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=redirect,
            redirect_stderr=redirect,
            vertical_overflow="ellipsis",
        )
        self._live.start(refresh=True)
        self._schedule()

    def refresh(self) -> None:
        """Rebuilds and redraws the table now."""
        if self._live is None:
            return
        self._live.update(self.renderable(), refresh=True)

    def stop(self) -> None:
        """Draws the table a last time and leaves it on the screen."""
        cancel(self._timer)
        self._timer = None
        if self._live is not None:
            with contextlib.suppress(BrokenPipeError, ValueError):
                self.refresh()
                self._live.stop()
            self._live = None

    def summary(self, result: RunSummary) -> None:
        """Prints the summary in a panel."""
        now = self._clock()
        data = summary_data(self.progress, result, now)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column(overflow="fold")
        command: tuple[str, str] | None = None
        heading = title(result)
        if len(heading) + _PANEL_EDGES > self.console.width and reason(result):
            # A title is one line on the border: the reason goes inside, whole.
            heading = title(result, with_message=False)
            grid.add_row("why", Text(printable(reason(result))))
        for label, text in summary_rows(data):
            if text == data["resumeCommand"]:
                command = (label, text)  # printed below the panel, whole
                continue
            grid.add_row(label, Text(printable(text)))
        ok = result.exit_code == 0
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.console.print(
                Panel(
                    grid,
                    title=_cell(heading, "bold green" if ok else "bold red"),
                    title_align="left",
                    border_style="green" if ok else "red",
                    expand=False,
                )
            )
            if command is not None:
                # Outside the panel and soft-wrapped: the terminal may wrap it, but no
                # border or inserted newline cuts it, so it copies as one command.
                self.console.print(
                    Text(f"{command[0]}: ", style="bold") + Text(printable(command[1])),
                    soft_wrap=True,
                )

    def renderable(self, now_ns: int | None = None) -> RenderableType:
        """The table and its totals line, as they stand."""
        now = self._clock() if now_ns is None else now_ns
        self._dirty = False
        self._rendered_ns = now
        self.renders += 1
        rows = max(self.console.size.height - 7, 5)
        return render_progress(self.progress, now, max_rows=rows, waiting=self.waiting)

    def _schedule(self) -> None:
        self._timer = call_later(self._period, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._live is None:
            return
        now = self._clock()
        ticking = self.progress.active is not None and now - self._rendered_ns >= NANO
        if self._dirty or ticking:
            with contextlib.suppress(BrokenPipeError, ValueError):
                self.refresh()
        self._schedule()


def _window(count: int, first_open: int, max_rows: int) -> tuple[int, int]:
    """Which rows ``[start, end)`` of ``count`` to show in ``max_rows`` lines,
    keeping the first unfinished codon and two finished ones before it in view."""
    if count <= max_rows:
        return 0, count
    budget = max(max_rows - 2, 1)  # two lines say what is hidden
    start = max(0, min(first_open - 2, count - budget))
    return start, min(count, start + budget)


def render_progress(
    progress: RunProgress, now_ns: int, *, max_rows: int = 40, waiting: str | None = None
) -> RenderableType:
    """The codon table and a totals line (and, when the run waits for a command,
    what it waits for). Every line is one line at any width: what does not fit is
    cut with an ellipsis."""
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
    # No cell ever wraps: a wrapped row is taller than the live region thinks it
    # is, so its redraw would leave stale lines (a second header) behind. The
    # figures keep their width; the codon and its last action give way first,
    # cut with an ellipsis (their columns may shrink, their cells never wrap).
    table.add_column("", width=1, no_wrap=True)
    table.add_column(_cell("codon"), max_width=32, min_width=8)
    table.add_column("status", no_wrap=True, overflow="ellipsis", min_width=6)
    table.add_column("time", justify="right", no_wrap=True, min_width=6)
    table.add_column("tokens", justify="right", no_wrap=True, min_width=6)
    table.add_column("cost", justify="right", no_wrap=True, overflow="ellipsis")
    table.add_column(_cell("last action"), max_width=ACTION_LIMIT)
    codons = progress.codons
    first_open = next((i for i, c in enumerate(codons) if not c.finished), len(codons))
    start, end = _window(len(codons), first_open, max_rows)
    if start:
        table.add_row("", _cell(f"… {start} earlier codons", "dim"))
    for c in codons[start:end]:
        table.add_row(*_row(c, now_ns))
    if end < len(codons):
        table.add_row("", _cell(f"… {len(codons) - end} more", "dim"))
    lines: list[RenderableType] = [table, _totals(progress, now_ns, waiting=waiting is not None)]
    if waiting is not None:
        lines.append(_cell(waiting, "bold yellow"))
    return Group(*lines)


def _cell(text: str | Text, style: str = "") -> Text:
    """One line that is cut with an ellipsis where it would wrap."""
    cell = text if isinstance(text, Text) else Text(text, style=style)
    cell.no_wrap = True
    cell.overflow = "ellipsis"
    return cell


def _row(c: CodonProgress, now_ns: int) -> tuple[RenderableType, ...]:
    style = _STYLES.get(c.status, "")
    name = _cell(printable(c.codon_id))
    if c.name and c.name != c.codon_id:
        name.append(f" {printable(c.name)}", style="dim")
    if c.status == PENDING and c.earlier:
        status = Text(f"{c.earlier} earlier", style="dim")
    else:
        status = Text(c.status, style=style)
        if c.attempts > 1:
            status.append(f" (try {c.attempts})", style="yellow")
    elapsed = c.elapsed(now_ns)
    action = _cell(printable(c.failure or describe_last(c)), "red" if c.failure else "")
    return (
        Text(_ICONS.get(c.status, "●"), style=style),
        name,
        status,
        "" if elapsed is None else format_duration(elapsed),
        format_tokens(c.tokens) if c.tokens else "",
        codon_cost(c) if c.status != PENDING else "",
        action,
    )


def _totals(progress: RunProgress, now_ns: int, *, waiting: bool = False) -> Text:
    counts = progress.counts()
    total = len(progress.codons)
    text = _cell("")
    if progress.run_id is None:
        text.append("waiting for the run to start", style="dim")
        return text
    status = progress.run_status or "running"
    if waiting and status == "running":
        status = "waiting"
    text.append(f"run {progress.run_id} ", style="bold")
    fallback = {"running": "bold cyan", "waiting": "bold yellow"}.get(status, "red")
    word = progress.ending.word if progress.ending is not None else status
    text.append(word, style=_STYLES.get(status, fallback))
    text.append(f" · {counts['completed']}/{total} completed")
    if counts["failed"]:
        text.append(f" · {counts['failed']} failed", style="red")
    if counts["stopped"]:
        text.append(f" · {counts['stopped']} stopped", style="yellow")
    if counts["skipped"]:
        text.append(f" · {counts['skipped']} skipped")
    text.append(f" · {run_cost(progress)} · {format_tokens(progress.total_tokens)} tokens")
    elapsed = progress.elapsed(now_ns)
    if elapsed is not None:
        text.append(f" · {format_duration(elapsed)}")
    return text
