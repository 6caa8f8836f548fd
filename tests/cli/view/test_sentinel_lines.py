"""The views' words for sentinels: an output and an error get a line each, and
their spend is folded apart from the agent's cost and shown in the summary."""

from __future__ import annotations

from weft.cli.view.notes import word
from weft.cli.view.summary import RunSummary, summary_data, summary_rows
from weft.events.stream import SentinelError, SentinelOutput, SentinelTokens
from weft.progress import RunProgress


def output(cost: float, content: object) -> SentinelOutput:
    return SentinelOutput(
        sentinel_id="narrator",
        codon_id="build",
        trigger_number=1,
        output_type="text" if isinstance(content, str) else "structured",
        content=content,
        cost=cost,
        tokens=SentinelTokens(input=10, output=5),
        event_count=3,
    )


def test_an_output_gets_a_line_with_its_cost_and_the_start_of_what_it_said() -> None:
    progress = RunProgress()
    said = "The agent\nwrote the migration. " + "x" * 500
    event = output(0.0012, said)
    progress.fold(event, 0, 1)
    note = word(progress, event, 0)
    assert note is not None
    assert note.kind == "sentinel"
    assert note.text.startswith(
        "build: sentinel narrator ($0.0012): The agent wrote the migration."
    )
    assert "\n" not in note.text
    assert len(note.text) < 300
    structured = word(progress, output(0.0, {"cause": "permissions"}), 0)
    assert structured is not None
    assert structured.text.endswith('{"cause":"permissions"}')


def test_an_error_gets_an_error_line() -> None:
    event = SentinelError(
        sentinel_id="keyless",
        codon_id="build",
        error_type="load-failed",
        message="needs an API key: set ANTHROPIC_API_KEY",
        retriable=False,
        consecutive_failure_count=0,
    )
    note = word(RunProgress(), event, 0)
    assert note is not None
    assert note.kind == "error"
    assert note.text == (
        "build: sentinel keyless load-failed: needs an API key: set ANTHROPIC_API_KEY"
    )


def test_sentinel_spend_is_folded_apart_from_the_agent_cost() -> None:
    progress = RunProgress()
    for i, cost in enumerate((0.25, 0.5), 1):
        progress.fold(output(cost, "ok"), i, i)
    assert progress.sentinel_cost == 0.75
    assert progress.total_cost == 0.0  # the agent spent nothing
    codon = progress.codon("build")
    assert codon is not None
    assert (codon.sentinel_cost, codon.sentinel_outputs) == (0.75, 2)
    data = summary_data(progress, RunSummary(status="completed", exit_code=0), 0)
    assert data["sentinelCost"] == 0.75
    progress.run_id = "r1"
    rows = dict(summary_rows(summary_data(progress, RunSummary("completed", 0), 0)))
    assert rows["sentinels"] == "$0.7500 (apart from the cost above)"
