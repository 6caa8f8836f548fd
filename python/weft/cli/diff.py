"""``weft diff A B [--files] [--json]``: two executions compared codon by codon.

This module reads and prints; the comparison is :mod:`weft.fork.diff`'s. It
reads each execution as ``weft status`` does (the store opened read-only: no
lock, nothing written, safe beside a live run): the state, the journal's tool
calls and unpriced codons, ``execution-meta.json``'s ``forkedFrom``, and the
files of the completion checkpoints the comparison needs (the shadow
repository opened as a reader; a fork's repository reads its source's objects
through git alternates).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weft.cli.resolve import EXECUTION_HELP, resolve_execution
from weft.errors import WeftError
from weft.money import known_cost, total_cost
from weft.terminal import format_wait, printable

if TYPE_CHECKING:
    from weft.fork.diff import CodonDiff, CodonFigures, ExecutionDiff, Files, Side


def register(commands: Any) -> None:
    """Adds ``diff``."""
    parser = commands.add_parser(
        "diff",
        help="compare two executions codon by codon (forks of one, or any two)",
        description=(
            "Compare two executions codon by codon along their execution threads: state, "
            "cost, tokens, time, attempts, tool calls and the files each codon's completion "
            "checkpoints differ in, the totals, and the first codon where they diverge (for "
            "forks of one execution: the fork point)."
        ),
    )
    parser.add_argument("a", metavar="A", help=f"the first execution ({EXECUTION_HELP})")
    parser.add_argument("b", metavar="B", help="the second execution (likewise)")
    parser.add_argument(
        "--files", action="store_true", help="also print the patch of the files that differ"
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.set_defaults(run=run)


class DiffInputError(WeftError):
    """An execution that cannot be compared; the message says which and why."""


def _tool_calls(store: Any) -> dict[tuple[str, str], int]:
    """``(run id, codon id)`` -> the tool uses the journal recorded (``assistant.action``)."""
    from weft.events.stream import AssistantActionEvent

    counted: Counter[tuple[str, str]] = Counter()
    for row in store.journal.of_types([AssistantActionEvent.TYPE]):
        data = json.loads(row.payload).get("data") or {}
        if data.get("action") == "tool_use" and row.run_id and row.codon_id:
            counted[(row.run_id, row.codon_id)] += 1
    return dict(counted)


def read_side(execution: Path) -> Side:
    """One execution as :func:`weft.fork.diff.side` compares it."""
    from weft.cli.status import unpriced_codons
    from weft.errors import WeftError
    from weft.fork.diff import side
    from weft.runtime.execution.layout import ExecutionLayout
    from weft.runtime.execution.meta import read_meta
    from weft.store import ExecutionStore

    layout = ExecutionLayout(execution)
    try:
        meta = read_meta(layout.meta_path)
    except WeftError as exc:
        raise DiffInputError(str(exc)) from None
    store = ExecutionStore.open(execution, readonly=True)
    try:
        state = json.loads(store.core.state_json())
        tools = _tool_calls(store)
        unpriced = unpriced_codons(store)
    finally:
        store.journal.close()
    forked = meta.forked_from
    return side(
        str(execution),
        state,
        tool_calls=tools,
        unpriced=unpriced,
        forked_from=None if forked is None else (forked.execution, forked.codon_id),
    )


def read_files(execution: Path, shas: Iterable[str]) -> dict[str, Files]:
    """The files of each checkpoint of ``shas`` that can be read (a missing
    one is left out: its codon's files are then unknown)."""
    wanted = sorted(set(shas))
    if not wanted:
        return {}
    from weft.checkpoints import CheckpointError, CheckpointRepo, checkpoint_git_dir
    from weft.runtime.execution.layout import ExecutionLayout

    layout = ExecutionLayout(execution)
    try:
        repo = CheckpointRepo.open_or_create(
            checkpoint_git_dir(layout.weft_dir), layout.workspace, watch=False, writer=False
        )
    except CheckpointError:
        return {}
    out: dict[str, Files] = {}
    try:
        for sha in wanted:
            try:
                out[sha] = repo.files(sha)
            except CheckpointError:
                continue
    finally:
        repo.close()
    return out


def compare_executions(a: Path, b: Path, *, patches: bool = False) -> ExecutionDiff:
    """Reads A and B and compares them (:func:`weft.fork.diff.compare`)."""
    from weft.fork.diff import checkpoints_to_read, compare

    side_a, side_b = read_side(a), read_side(b)
    need_a, need_b = checkpoints_to_read(side_a, side_b)
    return compare(side_a, side_b, read_files(a, need_a), read_files(b, need_b), patches=patches)


# --------------------------------------------------------------------------- text


def duration(seconds: float | None) -> str:
    """``0.3s``, ``42s``, ``1m 05s``, ``2h 03m`` (:func:`weft.terminal.format_wait`:
    fake and fast codons take fractions of a second, and ``<1s`` on both sides would
    hide the difference); ``-`` when unknown (a codon still running)."""
    return "-" if seconds is None else format_wait(seconds)


def _signed_dollars(delta: float) -> str:
    return f"{'-' if delta < 0 else '+'}${abs(delta):.4f}"


def _pair(a: str | None, b: str | None) -> str:
    """One value when A and B agree, else ``A → B`` (``-`` for a side without it)."""
    if a == b:
        return a or "-"
    return f"{a or '-'} → {b or '-'}"


def _field(c: CodonDiff, get: Callable[[CodonFigures], str]) -> str:
    return _pair(None if c.a is None else get(c.a), None if c.b is None else get(c.b))


def _cost_cell(c: CodonDiff) -> str:
    text = _field(c, lambda f: known_cost(f.cost, f.unpriced))
    delta = c.to_json()["costDelta"]
    if delta and c.a is not None and c.b is not None:
        text += f" ({_signed_dollars(delta)})"
    return text


def _files_cell(c: CodonDiff) -> str:
    if c.same_record:
        return "same record"
    if c.files is None:
        return "-"
    if not c.files:
        return "same"
    names = ", ".join(f.path for f in c.files[:3]) + (", ..." if len(c.files) > 3 else "")
    return f"{len(c.files)} differ: {names}"


def _divergence(d: ExecutionDiff) -> str:
    at = d.diverged_at
    if at is None:
        return "The two have the same history: they do not diverge."
    fa, fb = d.a.forked_from, d.b.forked_from
    if fa is not None and fa == fb and fa[1] == at:
        why = f", where both were forked from {fa[0]}"
    elif fb is not None and fb == (d.a.execution, at):
        why = ", where B was forked from A"
    elif fa is not None and fa == (d.b.execution, at):
        why = ", where A was forked from B"
    else:
        why = ""
    return f"They diverge at {at}{why}."


def _about(name: str, s: Side) -> str:
    forked = (
        "" if s.forked_from is None else f"  (forked from {s.forked_from[0]} at {s.forked_from[1]})"
    )
    return f"{name}  {s.execution}{forked}"


def _totals_line(d: ExecutionDiff) -> list[str]:
    ta, tb = d.a.totals(), d.b.totals()
    cost = _pair(
        total_cost(ta["cost"], ta["unpricedCodons"]), total_cost(tb["cost"], tb["unpricedCodons"])
    )
    if not ta["unpricedCodons"] and not tb["unpricedCodons"] and ta["cost"] != tb["cost"]:
        cost += f" ({_signed_dollars((tb['cost'] or 0.0) - (ta['cost'] or 0.0))})"
    figures = [
        f"codons {_pair(str(ta['codons']), str(tb['codons']))}",
        f"cost {cost}",
        f"tokens {_pair(format(ta['tokens'], ','), format(tb['tokens'], ','))}",
        f"time {_pair(duration(ta['seconds']), duration(tb['seconds']))}",
        f"attempts {_pair(str(ta['attempts']), str(tb['attempts']))}",
        f"tool calls {_pair(str(ta['toolCalls']), str(tb['toolCalls']))}",
    ]
    execution = _pair(
        total_cost(ta["executionCost"], ta["executionUnpricedCodons"]),
        total_cost(tb["executionCost"], tb["executionUnpricedCodons"]),
    )
    return [
        "total  " + ", ".join(figures),
        f"execution total cost (as weft status counts it, superseded records too): {execution}",
    ]


HEADER = ("", "codon", "state", "cost", "tokens", "time", "attempts", "tool calls", "files")


def render(d: ExecutionDiff, *, files: bool = False) -> str:
    """The comparison as text: who is compared, where they diverge, a table of
    codons (``*`` marks a codon whose record differs; a cell shows one value
    when A and B agree, else ``A → B``), the totals, and with ``files`` the patches."""
    rows: list[tuple[str, ...]] = [HEADER]
    for c in d.codons:
        rows.append(
            (
                " " if c.same_record else "*",
                c.codon_id,
                _field(c, lambda f: f.status),
                _cost_cell(c),
                _field(c, lambda f: f"{f.tokens:,}"),
                _field(c, lambda f: duration(f.seconds)),
                _field(c, lambda f: str(f.attempts)),
                _field(c, lambda f: str(f.tool_calls)),
                _files_cell(c),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    table = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines = [_about("A", d.a), _about("B", d.b), _divergence(d), "", *table, "", *_totals_line(d)]
    if files:
        for c in d.codons:
            for f in c.files or ():
                lines += ["", f"{c.codon_id}: {f.path} ({f.change})", f.patch.rstrip("\n")]
    return "\n".join(
        printable(line) if "\n" not in line else _printable_block(line) for line in lines
    )


def _printable_block(text: str) -> str:
    return "\n".join(printable(line) for line in text.split("\n"))


def run(args: argparse.Namespace) -> int:
    """Prints the comparison of ``args.a`` and ``args.b``."""
    a, b = resolve_execution(args.a), resolve_execution(args.b)
    try:
        compared = compare_executions(a, b, patches=args.files)
    except DiffInputError as exc:
        print(f"weft: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(compared.to_json(), indent=2))
    else:
        print(render(compared, files=args.files))
    return 0


__all__ = ["compare_executions", "duration", "read_files", "read_side", "register", "render"]
