"""The one-line notes of the archive and extension events."""

from __future__ import annotations

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
