"""What the user sees during ``weft run`` and ``weft attach``: a live table,
plain lines or JSON lines.

Every event of a run reaches the views the way it reaches the journal and the
WebSocket clients: as a :class:`~weft.state.Processed` item, after its batch is
durable (``weft attach`` hands them wire events instead). A view is a
StateManager listener::

    view = make_view("live", sys.stdout, progress=RunProgress.from_state(state))
    view.note("Resuming execution ...")     # the command's own messages
    manager.add_listener(view.on_event)
    view.start()                             # before or on the event loop
    ...                                      # the run
    view.stop()
    view.summary(RunSummary(status="completed", exit_code=0, execution=path, ...))

The figures are not the views': they read the one fold of the run,
:class:`weft.progress.RunProgress`. The rooms:

* :mod:`~weft.cli.view.format`: words and figures (money, tokens, durations, last actions);
* :mod:`~weft.cli.view.notes`: one sentence per event worth a line, one function per class;
* :mod:`~weft.cli.view.summary`: the end summary, as data and as rows;
* :mod:`~weft.cli.view.lines`: :class:`HeadlessView` and :class:`JsonView`;
* :mod:`~weft.cli.view.live`: :class:`LiveView`, the rich table;
* :mod:`~weft.cli.view.terminal`: whether a live table can be drawn.

``on_event`` runs on the event loop for every event, token deltas included,
so it does a dictionary lookup and a few additions for most of them; words
are made only for lines and redraws.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TextIO

from weft.cli.view.base import RunView
from weft.cli.view.format import (
    checkpoint_list_text,
    describe_action,
    describe_last,
    describe_tool,
    format_duration,
    format_tokens,
    rig_label,
)
from weft.cli.view.lines import HeadlessView, JsonView
from weft.cli.view.notes import Note, see
from weft.cli.view.summary import RunSummary, summary_data, summary_rows
from weft.cli.view.terminal import wants_live
from weft.money import format_cost
from weft.progress import CodonProgress, RunProgress

if TYPE_CHECKING:
    from weft.cli.view.live import LiveView, render_progress

ViewMode = Literal["live", "headless", "json"]

__all__ = [
    "CodonProgress",
    "HeadlessView",
    "JsonView",
    "LiveView",
    "Note",
    "RunProgress",
    "RunSummary",
    "RunView",
    "ViewMode",
    "checkpoint_list_text",
    "describe_action",
    "describe_last",
    "describe_tool",
    "format_cost",
    "format_duration",
    "format_tokens",
    "make_view",
    "render_progress",
    "rig_label",
    "see",
    "summary_data",
    "summary_rows",
    "wants_live",
]


def __getattr__(name: str) -> Any:
    # The live table is loaded with rich (about 40 ms) only when a terminal
    # shows it: weft run into a pipe or a log, --headless and --json never do.
    if name in ("LiveView", "render_progress"):
        return getattr(importlib.import_module("weft.cli.view.live"), name)
    raise AttributeError(f"module 'weft.cli.view' has no attribute {name!r}")


def make_view(
    mode: str = "live",
    stream: TextIO | None = None,
    *,
    progress: RunProgress | None = None,
    environ: Mapping[str, str] | None = None,
    verbose: bool = False,
    keys: bool = False,
) -> RunView:
    """The view for ``weft run``'s flags: ``json`` (``--json``), ``headless``
    (``--headless``), or ``live``, which needs a terminal on ``stream`` (default
    stdout; see :func:`wants_live`) and is headless otherwise. ``verbose`` asks for
    the agent's tool calls, results and messages as lines: it selects the headless
    view (``json`` already holds every event). ``keys``: ``weft run`` reads keys
    on its terminal, so what the run waits for is said as the key to press
    (``press Enter to start polish``), not as the protocol's command."""
    if mode not in ("live", "headless", "json"):
        raise ValueError(f"unknown view mode {mode!r}: use live, headless or json")
    out = stream if stream is not None else sys.stdout
    if mode == "json":
        return JsonView(out, progress=progress)
    if mode == "live" and not verbose and wants_live(out, environ):
        from rich.console import Console

        from weft.cli.view.live import LiveView

        return LiveView(Console(file=out, force_terminal=True), progress=progress, keys=keys)
    return HeadlessView(out, progress=progress, verbose=verbose, keys=keys)
