"""The one-line notes of the archive and extension events."""

from __future__ import annotations

import pytest

from weft.cli.view.notes import word
from weft.events.stream import (
    ArchiveCompletedEvent,
    ArchiveFailure,
    ArchivePartialEvent,
    CodonExtendedEvent,
    RollbackArchiveRestoreEvent,
)
from weft.progress import RunProgress


def text(event: object, codon: str | None = None) -> tuple[str, str]:
    note = word(RunProgress(), event, 0, codon)  # type: ignore[arg-type]
    assert note is not None
    return note.kind, note.text


def test_an_extension_says_its_number_and_the_figures_so_far() -> None:
    event = CodonExtendedEvent(
        codon_id="grind",
        codon_name="Grind",
        extension_number=2,
        exhaust_with_prompt="Keep going.",
        cumulative_tokens=18_400,
        cumulative_cost=0.0213,
    )
    kind, line = text(event)
    assert kind == "codon"
    assert line.startswith("grind: extension 2: ")
    assert "$0.0213" in line


def test_archives_name_what_moved_where_and_what_did_not() -> None:
    done = ArchiveCompletedEvent(
        codon_id="w#1", archived_paths=["final"], archive_dir="rigArchive/L", loop_id="L"
    )
    assert text(done) == ("info", "archived final of loop L to rigArchive/L")
    partial = ArchivePartialEvent(
        codon_id="b",
        archived_paths=["site"],
        failed_paths=[ArchiveFailure(path="missing", error="not found in the workspace")],
        archive_dir="rigArchive/b",
    )
    kind, line = text(partial)
    assert kind == "error"
    assert line.endswith("not archived: missing (not found in the workspace)")
    restored = RollbackArchiveRestoreEvent(
        codon_id="b", restored_paths=["site", "notes"], status="completed"
    )
    assert text(restored) == ("info", "rollback: restored site, notes archived by b")


def test_verbose_details_are_tool_calls_results_and_messages_not_thinking() -> None:
    from weft.cli.view.notes import detail
    from weft.events.stream import AssistantActionEvent, ToolResultEvent

    def said(event: object) -> str | None:
        note = detail(event)  # type: ignore[arg-type]
        return None if note is None else note.text

    call = AssistantActionEvent(
        codon_id="a",
        action="tool_use",
        content="",
        tool_name="Write",
        tool_input={"file_path": "/w/notes.md", "content": "x"},
        tool_use_id="t1",
    )
    assert said(call) == "a: tool Write notes.md"
    result = ToolResultEvent(
        codon_id="a",
        tool_use_id="t1",
        tool_name="Bash",
        result="line one\nline two",
        truncated=False,
        original_length=17,
        execution_time_ms=12,
        is_error=True,
    )
    assert said(result) == "a: Bash error in 12 ms, 17 chars: line one line two"
    long = AssistantActionEvent(codon_id="a", action="message", content="word " * 100)
    text = said(long)
    assert text is not None
    assert text.startswith("a: says: word word")
    assert len(text) <= len("a: ") + 200
    assert said(AssistantActionEvent(codon_id="a", action="thinking", content="hmm")) is None
    assert word(RunProgress(), call, 0, "a") is None  # only --verbose shows them


def test_each_attempt_line_shows_that_attempts_cost_and_tokens() -> None:
    from weft.events.transitions import (
        CodonFinalCostSet,
        CodonStarted,
        CodonTransitioned,
        CostsIncremented,
        FailureReason,
        TokenUsage,
        TransitionMetadata,
    )

    progress = RunProgress()
    second = 1_000_000_000
    at = 0

    def fold(event: object) -> str | None:
        nonlocal at
        at += second
        progress.fold(event, at, at)  # type: ignore[arg-type]
        note = word(progress, event, at)  # type: ignore[arg-type]
        return None if note is None else note.text

    def attempt(usd: float, tokens: int, end: str, final: tuple[float, int] | None = None) -> str:
        fold(CodonStarted(run_id="r", codon_id="a", start_time="t"))
        spent = TokenUsage(input_tokens=tokens)
        fold(CostsIncremented(run_id="r", codon_id="a", cost_delta=usd, tokens_delta=spent))
        if final is not None:  # the agent's own total replaces the live figures
            usage = TokenUsage(input_tokens=final[1])
            fold(
                CodonFinalCostSet(run_id="r", codon_id="a", final_cost=final[0], final_tokens=usage)
            )
        reason = FailureReason(kind="crash_mid_run", retriable=True, message="died")
        meta = TransitionMetadata(failure_reason=reason if end == "failed" else None)
        line = fold(
            CodonTransitioned(
                run_id="r",
                codon_id="a",
                from_status="running",
                to_status=end,  # type: ignore[arg-type]
                timestamp="t",
                metadata=meta,
            )
        )
        assert line is not None
        return line

    # What each attempt's codon.completed says: $0.0074, $0.0150, $0.0206.
    assert attempt(0.0074, 17_600, "failed") == (
        "a: FAILED after 2s ($0.0074, 17.6k tokens): crash_mid_run: died"
    )
    assert attempt(0.0150, 16_500, "failed") == (
        "a: FAILED after 2s ($0.0150, 16.5k tokens; $0.0224 over 2 attempts): crash_mid_run: died"
    )
    assert attempt(0.0100, 10_000, "completed", final=(0.0206, 18_900)) == (
        "a: completed in 3s ($0.0206, 18.9k tokens; $0.0430 over 3 attempts)"
    )
    a = progress.codon("a")
    assert a is not None
    assert (a.cost, a.tokens) == (pytest.approx(0.0430), 53_000)  # the codon's total stays


def test_an_unpriced_attempt_says_so_never_zero() -> None:
    from weft.events.stream import TokenUsageEvent
    from weft.events.transitions import (
        CodonStarted,
        CodonTransitioned,
        CostsUpdated,
        TokenUsage,
    )

    progress = RunProgress()
    done = CodonTransitioned(
        run_id="r", codon_id="a", from_status="running", to_status="completed", timestamp="t"
    )
    for event in (
        CodonStarted(run_id="r", codon_id="a", start_time="t"),
        # A model without a price: its usage has no cost.
        TokenUsageEvent(
            codon_id="a",
            input_tokens=1000,
            output_tokens=0,
            cache_creation_tokens=0,
            cache_read_tokens=0,
            total_cost=None,
        ),
        CostsUpdated(run_id="r", codon_id="a", cost=0.0, tokens=TokenUsage(input_tokens=1000)),
        done,
    ):
        progress.fold(event, 0, 0, "a")
    note = word(progress, done, 0)
    assert note is not None
    assert note.text == "a: completed in <1s (unpriced, 1.0k tokens)"
