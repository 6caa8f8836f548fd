"""The views' words: plurals, a failure said once, a title that does not repeat
itself, the waiting line in the words of ``weft run``'s keys, and lines that
never wrap at 80 columns."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from tests.cli.view.test_view import T0, fold, full_run, restamp

from weft.cli.view import HeadlessView, LiveView, RunSummary, render_progress
from weft.cli.view.format import format_wait
from weft.cli.view.notes import Note, is_waiting, waiting_words, word
from weft.cli.view.summary import title
from weft.events.stream import CodonRetryEvent, RigSetupCompletedEvent, ServerIdleEvent
from weft.progress import RunProgress


def test_one_rig_operation_is_singular() -> None:
    done = RigSetupCompletedEvent(codon_id="a", operation_count=1, duration_ms=10)
    note = word(RunProgress(), done, T0, "a")
    assert note is not None
    assert note.text == "a: rig setup done (1 operation, <1s)"
    two = RigSetupCompletedEvent(codon_id="a", operation_count=2, duration_ms=10)
    assert "(2 operations, " in (word(RunProgress(), two, T0, "a") or Note("info", "")).text


async def test_a_retried_failure_is_said_once() -> None:
    rec = await full_run()
    out = io.StringIO()
    view = HeadlessView(out, clock=lambda: T0)
    for item in rec.items:
        view.on_event(item)
    lines = out.getvalue().splitlines()
    said = [line.split(" ", 1)[1] for line in lines if "429 Too Many Requests" in line]
    assert len(said) == 1, said
    assert said[0].startswith("build: FAILED during running")
    assert any(line.endswith(" build: retry 2/3 in 5s") for line in lines)


def test_a_retry_gives_its_reason_when_no_failure_said_it() -> None:
    retry = CodonRetryEvent(codon_id="x", attempt=2, max_attempts=3, delay_ms=0, reason="timeout")
    note = word(RunProgress(), retry, T0, "x")
    assert note is not None
    assert note.text == "x: retry 2/3 in 0s: timeout"


def test_nothing_to_do_is_said_once() -> None:
    result = RunSummary(
        status="nothing_to_do", exit_code=0, message="Execution /x is complete: nothing to do"
    )
    assert title(result) == "Nothing to do (exit 0): Execution /x is complete"
    failed = RunSummary(status="failed", exit_code=1, message="codon build failed")
    assert title(failed) == "Run failed (exit 1): codon build failed"


def idle(reason: str, message: str) -> Note:
    note = word(RunProgress(), ServerIdleEvent(reason=reason, message=message), T0)  # type: ignore[arg-type]
    assert note is not None
    return note


def test_a_person_at_the_terminal_is_told_the_key_not_the_command() -> None:
    startup = idle("startup", "Waiting for codon.next to start polish")
    assert is_waiting(startup)
    assert waiting_words(startup.text) == "Waiting: press Enter to start polish (q stops the run)"
    parked = idle(
        "codon-completed", "Codon b failed: boom: send codon.redo, rollback.* or server.shutdown"
    )
    assert is_waiting(parked)
    said = waiting_words(parked.text)
    assert said.startswith("Waiting: Codon b failed: boom. Press q to stop the run")
    assert "codon.redo" not in said
    # The last server.idle of an autostart run waits for nothing.
    assert not is_waiting(idle("all-codons-completed", "All codons completed"))


async def test_headless_says_the_key_only_when_weft_run_reads_keys() -> None:
    from weft.client import Event

    event = Event(
        id=f"{T0 // 1_000_000}-0",
        seq=1,
        timestamp="2026-11-21T00:00:00.000Z",
        type="server.idle",
        data={"reason": "startup", "message": "Waiting for codon.next to start a"},
    )
    keyed, plain = io.StringIO(), io.StringIO()
    HeadlessView(keyed, keys=True).on_wire(event)
    HeadlessView(plain).on_wire(event)
    assert keyed.getvalue().endswith(" Waiting: press Enter to start a (q stops the run)\n")
    assert plain.getvalue().endswith(" Waiting for codon.next to start a\n")  # for clients


async def test_the_table_is_one_line_per_codon_at_any_width() -> None:
    rec = await full_run()
    progress = fold(restamp(rec.items))
    codons = len(progress.codons)
    for width in (60, 80, 160):
        console = Console(file=io.StringIO(), width=width, color_system=None)
        with console.capture() as captured:
            console.print(render_progress(progress, T0, waiting="Waiting: press Enter " * 10))
        lines = captured.get().splitlines()
        assert all(len(line) <= width for line in lines), lines
        # header, one line per codon, the totals, the waiting line (cut, not wrapped)
        assert len(lines) == codons + 3, "\n".join(lines)
        assert lines[-1].endswith("…")
        assert " waiting " in lines[-2] or "completed" in lines[-2]


def test_a_long_summary_title_is_not_cut_mid_word() -> None:
    out = io.StringIO()
    view = LiveView(Console(file=out, width=80, color_system=None), clock=lambda: T0)
    message = "Codon build failed: rate_limit: 429 Too Many Requests from the provider"
    view.summary(
        RunSummary(
            status="failed",
            exit_code=1,
            message=message,
            execution=Path("/x"),
            resume_command="weft run --execution /x",
        )
    )
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("╭─ Run failed (exit 1) ─")
    inside = " ".join(line.strip("│ ") for line in lines[1:])
    assert " ".join(message.split()) in " ".join(inside.split())
    assert lines[-1].endswith(": weft run --execution /x")  # whole, below the panel


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.3, "0.3s"), (1.5, "1.5s"), (2, "2s"), (9.96, "10s"), (65, "1m 05s")],
)
def test_a_wait_under_ten_seconds_is_shown_to_the_tenth(seconds: float, text: str) -> None:
    # A 1.5 s Retry-After used to read "cooling down 1s".
    assert format_wait(seconds) == text
