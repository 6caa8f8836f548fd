"""What ``weft run`` shows: the progress model, the headless lines, the JSON
lines, the live table and the end summary, fed with events processed by a real
StateManager."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from weft import core
from weft.cli.view import (
    HeadlessView,
    JsonView,
    LiveView,
    RunProgress,
    RunSummary,
    describe_action,
    describe_last,
    format_cost,
    format_duration,
    format_tokens,
    make_view,
    render_progress,
    rig_label,
    see,
    summary_data,
)
from weft.config.schema import Hank
from weft.events.stream import (
    STREAM_CLASSES,
    AssistantActionEvent,
    CodonRetryEvent,
    StreamData,
    TokenUsageEvent,
)
from weft.events.transitions import decode
from weft.plan import ExecutionPlan, plan_transitions
from weft.state import Processed, StateManager

RUN = "r1"
SECOND = 1_000_000_000
T0 = 1_790_000_000 * SECOND


# ----------------------------------------------------------------------------- builders


def codon_doc(ident: str, **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "type": "codon",
        "id": ident,
        "name": ident.title(),
        "model": "sonnet",
        "continuationMode": "fresh",
        "promptText": f"do {ident}",
    }
    doc.update(fields)
    return doc


def make_plan() -> ExecutionPlan:
    """design (with a rig), build, a two-iteration loop of review, deploy."""
    hank = msgspec.convert(
        {
            "hank": [
                codon_doc(
                    "design",
                    rigSetup=[
                        {"type": "command", "command": {"run": "npm ci\nnpm test"}},
                        {"type": "copy", "copy": {"from": "tpl", "to": "src"}},
                    ],
                ),
                codon_doc("build"),
                {
                    "type": "loop",
                    "id": "polish",
                    "name": "Polish",
                    "terminateOn": {"type": "iterationLimit", "limit": 2},
                    "codons": [codon_doc("review")],
                },
                codon_doc("deploy"),
            ]
        },
        Hank,
    )
    return ExecutionPlan.from_hank(hank)


def move(codon: str, frm: str, to: str, **meta: Any) -> core.CodonTransitioned:
    return core.CodonTransitioned(
        run_id=RUN,
        codon_id=codon,
        from_status=frm,  # type: ignore[arg-type]
        to_status=to,  # type: ignore[arg-type]
        timestamp="2026-11-21T00:00:00Z",
        metadata=core.TransitionMetadata(**meta) if meta else None,
    )


def usage(inp: int, out: int = 0, read: int = 0) -> core.TokenUsage:
    return core.TokenUsage(input_tokens=inp, output_tokens=out, cache_read_tokens=read)


class Recorder:
    """A StateManager whose processed events are collected."""

    def __init__(self, run_id: str = RUN) -> None:
        self.manager = StateManager()
        self.items: list[Processed] = []
        self.manager.add_listener(self.items.append)
        self.run_id = run_id

    def t(self, *events: core.Transition) -> None:
        for event in events:
            self.manager.transition(event)

    def emit(self, kind: str, data: Any, codon: str | None = None) -> None:
        event = (
            data if isinstance(data, StreamData) else msgspec.convert(data, STREAM_CLASSES[kind])
        )
        assert kind == event.TYPE
        self.manager.emit(event, run_id=self.run_id, codon_id=codon)

    def start_run(self, plan: list[core.PlanEntry] | None = None) -> None:
        """A fresh run ``RUN`` (with ``plan`` as its execution plan)."""
        self.t(
            core.RunStarted(
                run_id=RUN,
                run_folder="f",
                git_branch="b",
                starting_conditions=core.Fresh(),
                server_pid=1,
                start_time="t",
                execution_plan=plan,
            )
        )

    def to_running(self, codon: str) -> None:
        self.t(
            core.CodonStarted(run_id=RUN, codon_id=codon, start_time="t"),
            move(codon, "preparing", "starting"),
            move(codon, "starting", "initializing", claude_pid=7, claude_log_path="l"),
            move(codon, "initializing", "running", claude_session_id=f"s-{codon}"),
        )

    def spend(self, codon: str, usd: float, tokens: core.TokenUsage) -> None:
        self.t(
            core.CostsIncremented(run_id=RUN, codon_id=codon, cost_delta=usd, tokens_delta=tokens)
        )
        self.emit(
            "token.usage",
            TokenUsageEvent(
                codon_id=codon,
                input_tokens=tokens.input_tokens,
                output_tokens=tokens.output_tokens,
                cache_creation_tokens=0,
                cache_read_tokens=tokens.cache_read_tokens,
                total_cost=usd,
            ),
            codon,
        )

    async def flush(self) -> list[Processed]:
        await self.manager.flush()
        return self.items


def restamp(items: Sequence[Processed], step_ns: int = SECOND) -> list[Processed]:
    """The same events, one ``step_ns`` apart from T0 (durations become known)."""
    return [msgspec.structs.replace(p, time_ns=T0 + i * step_ns) for i, p in enumerate(items)]


async def full_run() -> Recorder:
    """A realistic run: a rig with an ignored failure, a retried codon, a loop
    extended then ended, a skipped codon, an error event and a rejected transition."""
    rec = Recorder()
    plan = make_plan()
    rec.t(
        core.RunStarted(
            run_id=RUN,
            run_folder="/x/.weft/runs/r1",
            git_branch="run-r1",
            starting_conditions=core.Fresh(),
            server_pid=1,
            start_time="t",
            execution_plan=plan.to_entries(),
        )
    )
    # design: rig setup, one tool call, live spend replaced by the agent's final figure.
    rec.t(core.CodonStarted(run_id=RUN, codon_id="design", start_time="t"))
    rec.emit("info", {"message": "Rig setup of design: 2 operation(s)"}, "design")
    rec.emit(
        "rig.output",
        {"stream": "stdout", "line": "added 12 packages", "lines": 1, "commandIndex": 0},
        "design",
    )
    rec.emit(
        "rig.setup.failed",
        {
            "failureType": "other",
            "operationType": "copy",
            "commandIndex": 1,
            "ignored": True,
            "message": "tpl: no such file or directory",
            "codonId": "design",
        },
        "design",
    )
    rec.emit("rig.setup.completed", {"codonId": "design", "operationCount": 2, "durationMs": 4200})
    rec.t(
        move("design", "preparing", "starting", checkpoint_sha="rigsha01design"),
        move("design", "starting", "initializing", claude_pid=7, claude_log_path="l"),
        move("design", "initializing", "running", claude_session_id="s-design"),
    )
    rec.emit(
        "assistant.action",
        AssistantActionEvent(
            codon_id="design",
            action="tool_use",
            content="Write",
            tool_name="Write",
            tool_input={"file_path": "/x/agentRoot/notes.md", "content": "# notes\n" * 50},
            tool_use_id="tu1",
        ),
        "design",
    )
    for _ in range(3):
        rec.spend("design", 0.01, usage(1000, 200))
    rec.t(
        core.CodonFinalCostSet(
            run_id=RUN, codon_id="design", final_cost=0.032, final_tokens=usage(3000, 600, 5000)
        ),
        move("design", "running", "completing-sentinels"),
        move("design", "completing-sentinels", "completed", checkpoint_sha="sha00design"),
    )
    # build: fails on a rate limit, is retried, completes.
    rec.to_running("build")
    rec.emit(
        "assistant.action",
        AssistantActionEvent(
            codon_id="build",
            action="message",
            content="I will now build   the project carefully,\nstep by step, and then test it all",
        ),
        "build",
    )
    rec.spend("build", 0.005, usage(700))
    rec.t(
        move(
            "build",
            "running",
            "failed",
            exit_code=1,
            failure_reason=core.FailureReason(
                kind="rate_limit", retriable=True, message="429 Too Many Requests"
            ),
            failed_during="running",
            checkpoint_sha="sha00builderr",
        )
    )
    rec.emit(
        "codon.retry",
        CodonRetryEvent(
            codon_id="build", attempt=2, max_attempts=3, delay_ms=5000, reason="rate_limit"
        ),
        "build",
    )
    rec.to_running("build")
    rec.spend("build", 0.02, usage(2000, 100))
    rec.t(move("build", "running", "completed", checkpoint_sha="sha00build"))
    # The loop: review#0 finishes, the plan grows by review#1, which ends the loop.
    for codon_id in ("review#0", "review#1"):
        rec.to_running(codon_id)
        rec.spend(codon_id, 0.0125, usage(500, 50))
        rec.t(move(codon_id, "running", "completed", checkpoint_sha=f"sha00{codon_id}"))
        change = plan.on_codon_finished(codon_id)
        plan = change.plan
        rec.t(*plan_transitions(change, RUN))
        rec.emit(
            "loop.iteration.completed",
            {
                "loopId": "polish",
                "iteration": int(codon_id[-1]),
                "durationMs": 65_000,
                "costUsd": 0.0125,
                "tokensUsed": 550,
                "isFinal": change.loop_finished,
                "terminationReason": change.termination_reason,
            },
        )
    # deploy: spends, then is skipped (its spend leaves the totals); a checkpoint error.
    rec.to_running("deploy")
    rec.spend("deploy", 0.004, usage(400))
    rec.emit(
        "error",
        {"message": "skipped checkpoint of deploy failed: disk full", "severity": "codon"},
        "deploy",
    )
    rec.t(move("deploy", "running", "skipped", skipped_during="running"))
    # Refused: the codon is no longer running.
    rec.t(move("design", "running", "completed", checkpoint_sha="x"))
    rec.t(core.RunCompleted(run_id=RUN, end_time="t"))
    await rec.flush()
    return rec


def core_codon_tokens(state: dict[str, Any], codon_id: str) -> int:
    """Every token of every record of a codon, read from the core's state."""
    total = 0
    for record in state["runs"][0]["codons"]:
        if record["codonId"] != codon_id:
            continue
        for key in ("finalTokens", "partialTokens", "currentTokens"):
            if key in record:
                total += sum(record[key].values())
                break
    return total


def core_checkpoints(state: dict[str, Any]) -> set[str]:
    """Every checkpoint sha the core recorded on the run's codon records."""
    keys = ("rigSetupCheckpoint", "completionCheckpoint", "errorCheckpoint", "skipCheckpoint")
    return {r[k] for r in state["runs"][0]["codons"] for k in keys if r.get(k)}


def fold(items: Sequence[Processed], progress: RunProgress | None = None) -> RunProgress:
    progress = progress if progress is not None else RunProgress()
    for item in items:
        progress.apply(item)
    return progress


def nanos(usd: float) -> int:
    return round(usd * 1e9)


# ----------------------------------------------------------------------------- formatting


def test_costs_show_four_decimals_and_unknown_as_a_dash() -> None:
    assert format_cost(0.032) == "$0.0320"
    assert format_cost(12.34567) == "$12.3457"
    assert format_cost(0) == "$0.0000"
    assert format_cost(None) == "-"


def test_token_counts_are_compact() -> None:
    assert format_tokens(0) == "0"
    assert format_tokens(999) == "999"
    assert format_tokens(12_345) == "12.3k"
    assert format_tokens(99_960) == "100k"
    assert format_tokens(456_000) == "456k"
    assert format_tokens(999_600) == "1.0M"
    assert format_tokens(1_234_567) == "1.2M"


@given(st.integers(min_value=0, max_value=10**14))
def test_token_counts_read_back_within_rounding_and_stay_short(count: int) -> None:
    text = format_tokens(count)
    assert len(text) <= 5
    match = re.fullmatch(r"(\d+(?:\.\d)?)([kMBT]?)", text)
    assert match is not None, text
    value = float(match[1]) * {"": 1, "k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[match[2]]
    # Three significant figures at worst (1.2k for 1249): 5 % at most.
    assert abs(value - count) <= 0.05 * count
    if match[2]:
        assert float(match[1]) < 1000  # never "1000k": that is 1.0M


def test_durations_are_human() -> None:
    assert format_duration(0.4) == "<1s"
    assert format_duration(1.9) == "1s"
    assert format_duration(42) == "42s"
    assert format_duration(65) == "1m 05s"
    assert format_duration(3600 + 3 * 60 + 59) == "1h 03m"


def test_last_actions_are_short_and_say_what_happened() -> None:
    write = describe_action("tool_use", "Write", "Write", {"file_path": "/w/agentRoot/notes.md"})
    assert write == "tool Write notes.md"
    bash = describe_action("tool_use", "Bash", "Bash", {"command": "npm test\nnpm run lint"})
    assert bash == "tool Bash npm test"
    message = describe_action(
        "message", "Hello   there,\nI am going to " + "work " * 30, None, None
    )
    assert message.startswith("message: Hello there, I am going to work")
    assert message.endswith("…")
    assert len(message) <= 60
    assert describe_action("thinking", "secret plans", None, None) == "thinking…"


def test_rig_labels_come_from_the_plan_entry() -> None:
    entry = make_plan().to_state()[0]["codon"]
    assert rig_label(entry, 0) == "npm ci"
    assert rig_label(entry, 1) == "copy tpl -> src"
    assert rig_label(entry, 7) == "operation 8"
    assert rig_label(None, 0) == "operation 1"


# ----------------------------------------------------------------------------- the model


async def test_the_model_keeps_plan_order_with_loop_expansion() -> None:
    rec = await full_run()
    progress = fold(rec.items)
    plan_ids = [e["codonId"] for e in json.loads(rec.manager.core.state_json())["executionPlan"]]
    assert [c.codon_id for c in progress.codons] == plan_ids
    assert "review#1" in plan_ids  # added by PlanExtended during the run


async def test_the_model_figures_match_the_core() -> None:
    rec = await full_run()
    progress = fold(rec.items)
    state = json.loads(rec.manager.core.state_json())
    run_cost = rec.manager.core.run_cost(RUN)
    assert run_cost is not None
    assert progress.total_cost_nanos == nanos(run_cost)
    for c in progress.codons:
        assert c.tokens == core_codon_tokens(state, c.codon_id), c.codon_id
    assert progress.total_tokens == sum(
        core_codon_tokens(state, c.codon_id) for c in progress.codons
    )
    statuses = {r["codonId"]: r["status"] for r in state["runs"][0]["codons"]}  # latest wins
    assert {c.codon_id: c.status for c in progress.codons} == statuses


async def test_the_model_tracks_attempts_actions_checkpoints_and_failures() -> None:
    rec = await full_run()
    progress = fold(restamp(rec.items))
    retry = next(i for i, p in enumerate(rec.items) if p.stream and p.stream.type == "codon.retry")
    before_retry = fold(rec.items[:retry]).codon("build")
    assert before_retry is not None
    assert before_retry.status == "failed"
    assert describe_last(before_retry).startswith("message: I will now build the project")
    design, build, deploy = (progress.codon(x) for x in ("design", "build", "deploy"))
    assert design is not None
    assert build is not None
    assert deploy is not None
    assert describe_last(design) == "tool Write notes.md"
    assert design.checkpoint == "sha00design"
    assert design.model == "sonnet"
    assert design.name == "Design"
    assert build.attempts == 2
    assert build.status == "completed"
    assert describe_last(build) == "retry 2/3"
    assert build.failure is None  # the retry succeeded
    assert progress.failures == [("build", "rate_limit: 429 Too Many Requests")]
    assert deploy.status == "skipped"
    assert deploy.cost == 0.0
    assert progress.checkpoints == core_checkpoints(json.loads(rec.manager.core.state_json()))
    assert progress.ended
    assert progress.run_status == "completed"
    assert progress.counts() == {
        "completed": 4,
        "failed": 0,
        "stopped": 0,
        "skipped": 1,
        "active": 0,
        "pending": 0,
    }
    assert progress.rejected == 1
    assert progress.errors == 1
    # Restamped one second apart: from RunStarted (the first) to RunCompleted (the last).
    assert progress.elapsed(0) == len(rec.items) - 1
    started = next(k for k, p in enumerate(rec.items) if isinstance(p.event, core.CodonStarted))
    ended = next(
        k
        for k, p in enumerate(rec.items)
        if isinstance(p.event, core.CodonTransitioned) and p.event.to_status == "completed"
    )
    assert design.elapsed(0) == ended - started


async def test_the_active_codon_shows_its_rig_command_then_its_elapsed_time() -> None:
    rec = Recorder()
    plan = make_plan()
    rec.t(
        core.RunStarted(
            run_id=RUN,
            run_folder="f",
            git_branch="b",
            starting_conditions=core.Fresh(),
            server_pid=1,
            start_time="t",
            execution_plan=plan.to_entries(),
        ),
        core.CodonStarted(run_id=RUN, codon_id="design", start_time="t"),
    )
    rec.emit(
        "rig.output", {"stream": "stdout", "line": "x", "lines": 1, "commandIndex": 0}, "design"
    )
    items = restamp(await rec.flush())
    progress = fold(items)
    design = progress.active
    assert design is not None
    assert design.codon_id == "design"
    assert design.status == "preparing"
    assert describe_last(design) == "rig: npm ci"
    assert design.elapsed(items[1].time_ns + 90 * SECOND) == 90
    assert progress.counts()["pending"] == len(plan) - 1


async def test_a_crashed_run_fails_its_active_codon() -> None:
    rec = Recorder()
    rec.start_run()
    rec.to_running("a")
    rec.spend("a", 0.25, usage(10))
    rec.t(core.RunCrashed(run_id=RUN, detected_at="t", last_codon_status="running"))
    progress = fold(await rec.flush())
    a = progress.codon("a")
    assert a is not None
    assert a.status == "failed"
    assert a.failed_during == "running"
    assert progress.run_status == "crashed"
    state = json.loads(rec.manager.core.state_json())
    record = state["runs"][0]["codons"][0]
    assert record["status"] == "failed"
    assert a.failure is not None
    assert record["failureReason"]["message"] in a.failure
    assert progress.total_cost_nanos == nanos(rec.manager.core.run_cost(RUN) or 0)


async def test_a_continuation_shows_what_earlier_runs_finished() -> None:
    rec = await full_run()
    state = json.loads(rec.manager.core.state_json())
    progress = RunProgress.from_state(state)
    assert [c.earlier for c in progress.codons[:2]] == ["completed", "completed"]
    # A continuation run carries no plan: the seeded one stays.
    start = len(rec.items)
    rec.run_id = "r2"
    rec.manager.transition(
        core.RunStarted(
            run_id="r2",
            run_folder="f",
            git_branch="b",
            starting_conditions=core.Continuation(
                source=core.ContinuationSource(
                    run_id=RUN, after_codon="review#1", checkpoint_sha="sha00review#1"
                ),
                reason="continue",
            ),
            server_pid=1,
            start_time="t",
        )
    )
    rec.manager.transition(core.CodonStarted(run_id="r2", codon_id="deploy", start_time="t"))
    items = (await rec.flush())[start:]
    notes = [see(progress, i) for i in items]
    assert notes[0] is not None
    assert "continuing run r1 after review#1" in notes[0].text
    assert progress.counts()["active"] == 1
    assert progress.counts()["completed"] == 0
    assert progress.codon("design") is not None
    assert progress.codon("design").status == "pending"  # type: ignore[union-attr]
    assert progress.total_cost == 0.0
    codons = summary_data(progress, RunSummary(status="interrupted", exit_code=130), T0)["codons"]
    # design, build and both reviews were done by run r1; deploy was skipped there and runs now.
    assert (codons["doneEarlier"], codons["notRun"], codons["total"]) == (4, 1, 5)


@settings(max_examples=25)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 10**7), max_size=4),  # increments in nano-dollars
            st.one_of(st.none(), st.integers(0, 10**8)),  # the agent's final figure
            st.sampled_from(["completed", "failed", "skipped"]),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_the_model_total_equals_the_core_for_any_spending(
    attempts: list[tuple[list[int], int | None, str]],
) -> None:
    async def scenario() -> tuple[RunProgress, float]:
        rec = Recorder()
        rec.start_run()
        for k, (increments, final, end) in enumerate(attempts):
            codon = f"c{k % 2}"  # two codons, so some attempts are retries
            rec.to_running(codon)
            for n in increments:
                rec.spend(codon, n / 1e9, usage(n % 1000))
            if final is not None:
                rec.t(
                    core.CodonFinalCostSet(
                        run_id=RUN, codon_id=codon, final_cost=final / 1e9, final_tokens=usage(5)
                    )
                )
            meta: dict[str, Any] = {
                "completed": {"checkpoint_sha": f"s{k}"},
                "failed": {
                    "exit_code": 1,
                    "failure_reason": core.FailureReason(kind="x", retriable=False),
                    "failed_during": "running",
                },
                "skipped": {"skipped_during": "running"},
            }[end]
            rec.t(move(codon, "running", end, **meta))
        items = await rec.flush()
        return fold(items), rec.manager.core.run_cost(RUN) or 0.0

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        progress, expected = runner.run(scenario())
    assert progress.total_cost_nanos == nanos(expected)


# ----------------------------------------------------------------------------- headless


async def test_headless_writes_a_timestamped_line_per_state_change_and_notable_event() -> None:
    rec = await full_run()
    out = io.StringIO()
    view = HeadlessView(out, clock=lambda: T0)
    for item in rec.items:
        view.on_event(item)
    lines = out.getvalue().splitlines()
    stamps = [line.split(" ", 1)[0] for line in lines]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", s) for s in stamps)
    texts = [line.split(" ", 1)[1] for line in lines]
    moves = sum(
        1
        for i in rec.items
        if i.applied and isinstance(i.event, core.CodonStarted | core.CodonTransitioned)
    )
    codon_lines = [
        t for t in texts if re.match(r"(design|build|review#\d|deploy): (?!rig|retry|error)", t)
    ]
    assert len(codon_lines) == moves
    assert "design: running (sonnet)" in texts
    assert any(t.startswith("design: completed in ") and "$0.0320" in t for t in texts)
    assert any(
        t.startswith("build: FAILED during running") and "429 Too Many Requests" in t for t in texts
    )
    assert any(
        "rig operation 2 (copy tpl -> src) failed (ignored: allowFailure)" in t for t in texts
    )
    assert "build: retry 2/3 in 5s" in texts  # the FAILED line above says why
    assert any(
        t.startswith("loop polish iteration 1 done in 1m 05s") and "final" in t for t in texts
    )
    assert "deploy: error: skipped checkpoint of deploy failed: disk full" in texts
    assert any(t.startswith("rejected CodonTransitioned: ") for t in texts)
    assert "Rig setup of design: 2 operation(s)" in texts  # not prefixed twice
    assert texts[-1].startswith("run r1 completed")


async def test_headless_never_writes_a_line_per_token_event() -> None:
    rec = Recorder()
    rec.start_run()
    rec.to_running("a")
    head = len(await rec.flush())
    for _ in range(300):
        rec.spend("a", 0.0001, usage(10, 5))
        rec.emit("assistant.action", {"codonId": "a", "action": "thinking", "content": "hm"}, "a")
    items = await rec.flush()
    out = io.StringIO()
    view = HeadlessView(out, clock=lambda: T0)
    for item in items[:head]:
        view.on_event(item)
    before = out.getvalue()
    for item in items[head:]:
        view.on_event(item)
    assert out.getvalue() == before
    assert view.progress.codon("a").tokens == 300 * 15  # type: ignore[union-attr]


async def test_headless_progress_lines_for_a_long_codon_are_throttled() -> None:
    rec = Recorder()
    rec.start_run()
    rec.to_running("a")
    rec.spend("a", 0.5, usage(1500))
    items = restamp(await rec.flush())
    out = io.StringIO()
    view = HeadlessView(out, progress_every=30)
    for item in items:
        view.on_event(item)
    started = next(i.time_ns for i in items if isinstance(i.event, core.CodonStarted))
    last = max(i.time_ns for i in items if isinstance(i.event, core.CodonTransitioned))
    written = len(out.getvalue().splitlines())
    view.tick(last + 29 * SECOND)  # the last state line is recent
    assert len(out.getvalue().splitlines()) == written
    view.tick(last + 31 * SECOND)
    lines = out.getvalue().splitlines()
    assert len(lines) == written + 1
    running = format_duration((last + 31 * SECOND - started) / SECOND)
    assert lines[-1].endswith(f"a: running for {running} ($0.5000, 1.5k tokens)")
    view.tick(last + 40 * SECOND)  # within 30 s of the previous progress line
    assert len(out.getvalue().splitlines()) == written + 1
    view.tick(last + 62 * SECOND)
    assert len(out.getvalue().splitlines()) == written + 2


async def test_headless_timer_writes_progress_on_the_loop_without_events() -> None:
    rec = Recorder()
    rec.start_run()
    rec.to_running("a")
    items = await rec.flush()
    out = io.StringIO()
    view = HeadlessView(out, progress_every=0.05)
    view.start()
    for item in items:
        view.on_event(item)
    written = len(out.getvalue().splitlines())
    await asyncio.sleep(0.3)
    view.stop()
    progress_lines = out.getvalue().splitlines()[written:]
    assert progress_lines
    assert all(": running for " in line for line in progress_lines)
    stopped = out.getvalue()
    await asyncio.sleep(0.1)
    assert out.getvalue() == stopped


# ----------------------------------------------------------------------------- json


async def test_json_lines_are_the_events_with_ids_and_sequence_numbers() -> None:
    rec = await full_run()
    out = io.StringIO()
    view = JsonView(out)
    for item in rec.items:
        view.on_event(item)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(rec.items)
    for line, item in zip(lines, rec.items, strict=True):
        doc = json.loads(line)
        assert list(doc) == ["id", "seq", "timestamp", "type", "data"]
        assert (doc["id"], doc["seq"], doc["timestamp"]) == (item.id, item.seq, item.timestamp)
        # The payload's bytes (the journal's), not a re-encoding of them.
        assert line.endswith(item.payload.decode()[1:])
        assert {"type": doc["type"], "data": doc["data"]} == json.loads(item.payload)
        if not item.outcome.ok:
            assert doc["type"] == "error"
            assert doc["data"]["code"] == item.outcome.code
            refused = decode(doc["data"]["transition"].encode())
            assert isinstance(refused, core.CodonTransitioned)
            assert (refused.codon_id, refused.to_status) == ("design", "completed")


async def test_json_summary_is_one_last_line_with_the_figures() -> None:
    rec = await full_run()
    out = io.StringIO()
    view = JsonView(out)
    for item in rec.items:
        view.on_event(item)
    view.summary(
        RunSummary(
            status="completed",
            exit_code=0,
            execution=Path("/work/exec"),
            resume_command="weft run --execution /work/exec",
            duration_ms=81_000,
        )
    )
    last = json.loads(out.getvalue().splitlines()[-1])
    assert last["type"] == "run.summary"
    data = last["data"]
    assert data["codons"] == {
        "completed": 4,
        "failed": 0,
        "stopped": 0,
        "skipped": 1,
        "notRun": 0,
        "total": 5,
        "doneEarlier": 0,
    }
    assert nanos(data["totalCost"]) == nanos(rec.manager.core.run_cost(RUN) or 0)
    assert data["journal"] == "/work/exec/.weft/weft.db"
    assert data["checkpointRepository"] == "/work/exec/.weft/checkpoints/.weftcheckpoints"
    assert data["failures"] == [
        {
            "codonId": "build",
            "reason": "rate_limit: 429 Too Many Requests",
            "failedAttempts": 1,
            "attempts": 2,
            "status": "completed",
        }
    ]
    assert (data["exitCode"], data["wallTimeMs"]) == (0, 81_000)


def test_json_notes_are_json_lines_too() -> None:
    out = io.StringIO()
    view = JsonView(out)
    view.note("Created execution /x")
    doc = json.loads(out.getvalue())
    assert doc["type"] == "note"
    assert doc["data"] == {"message": "Created execution /x"}


# ----------------------------------------------------------------------------- live


def recording_console(height: int = 40) -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=150, height=height, record=True)


async def test_live_view_renders_codon_rows_with_states_and_costs() -> None:
    rec = await full_run()
    console = recording_console()
    view = LiveView(console)
    view.start()
    for item in restamp(rec.items):
        view.on_event(item)
    view.stop()
    text = console.export_text()
    rows = {line.split()[1]: line for line in text.splitlines() if line[:1] in "✓✗↷·●"}
    assert set(rows) == {"design", "build", "review#0", "review#1", "deploy"}
    assert "completed" in rows["design"]
    assert "$0.0320" in rows["design"]
    assert "8.6k" in rows["design"]
    assert "tool Write notes.md" in rows["design"]
    assert "(try 2)" in rows["build"]
    assert format_cost(0.025) in rows["build"]
    assert "skipped" in rows["deploy"]
    assert "$0.0000" in rows["deploy"]
    assert f"run r1 completed · 4/5 completed · 1 skipped · {format_cost(0.082)}" in text
    # The log above the table keeps the endings and the trouble.
    assert "build: FAILED during running" in text
    assert "rig operation 2 (copy tpl -> src) failed" in text


async def test_live_view_does_not_render_per_event() -> None:
    rec = Recorder()
    rec.start_run()
    rec.to_running("a")
    head = len(await rec.flush())
    for _ in range(500):
        rec.spend("a", 0.001, usage(10))
    items = await rec.flush()
    console = recording_console()
    view = LiveView(console, refreshes_per_second=20)
    view.start()
    for item in items[:head]:
        view.on_event(item)
    before = view.renders
    for item in items[head:]:
        view.on_event(item)
    assert view.renders == before  # events only mark the table stale
    await asyncio.sleep(0.2)  # the timer redraws it, a bounded number of times
    assert before < view.renders <= before + 6
    view.stop()
    assert "$0.5000" in console.export_text()


def test_live_table_hides_finished_rows_of_a_long_plan() -> None:
    plan = [{"codonId": f"c{i:02d}", "codon": {"name": f"C{i}"}} for i in range(60)]
    progress = RunProgress(plan)
    console = recording_console()
    console.print(render_progress(progress, T0, max_rows=12))
    text = console.export_text()
    assert "c00" in text
    assert "c09" in text
    assert "c10" not in text
    assert "… 50 more" in text


def test_live_summary_is_a_panel_with_the_resume_command() -> None:
    console = recording_console()
    view = LiveView(console)
    view.summary(
        RunSummary(
            status="failed",
            exit_code=1,
            execution=Path("/work/exec"),
            resume_command="weft run --execution /work/exec",
            message="codon build failed",
        )
    )
    text = console.export_text()
    assert "Run failed (exit 1): codon build failed" in text
    assert "resume" in text
    assert "weft run --execution /work/exec" in text


# ----------------------------------------------------------------------------- summary, choice


async def test_headless_summary_lists_counts_cost_time_checkpoints_and_paths() -> None:
    rec = await full_run()
    out = io.StringIO()
    view = HeadlessView(out, clock=lambda: T0)
    for item in restamp(rec.items):
        view.on_event(item)
    view.summary(
        RunSummary(
            status="completed",
            exit_code=0,
            execution=Path("/work/exec"),
            resume_command="weft run --execution /work/exec",
        )
    )
    text = out.getvalue()
    summary = text[text.index("Run completed (exit 0)") :]
    cost = format_cost(rec.manager.core.run_cost(RUN))
    assert "codons       4 completed, 0 failed, 1 skipped (of 5)" in summary
    # The skipped codon counts $0 by the seed's rule, but its money was spent:
    # the summary says both, the second never below the first.
    spent = json.loads(rec.manager.core.state_json())["runs"][0]["codons"]
    money = sum(c.get("finalCost") or c.get("partialCost") or 0.0 for c in spent)
    assert money > rec.manager.core.run_cost(RUN)
    assert f"cost         {cost}, spent {format_cost(money)} (" in summary
    # From RunStarted (item 0) to RunCompleted (the last item), one second apart.
    assert f"time         {format_duration(len(rec.items) - 1)}" in summary
    made = len(core_checkpoints(json.loads(rec.manager.core.state_json())))
    assert f"checkpoints  {made} made" in summary
    # Listed once, with its attempts: the retry completed it.
    assert (
        "failed       build (1 of 2 attempts failed, then completed): "
        "rate_limit: 429 Too Many Requests"
    ) in summary
    assert "journal      /work/exec/.weft/weft.db" in summary
    assert "continue     weft run --execution /work/exec" in summary


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_make_view_picks_live_only_for_a_terminal_outside_ci() -> None:
    assert isinstance(make_view("live", FakeTty(), environ={}), LiveView)
    assert isinstance(make_view("live", io.StringIO(), environ={}), HeadlessView)
    assert isinstance(make_view("live", FakeTty(), environ={"CI": "true"}), HeadlessView)
    assert isinstance(make_view("live", FakeTty(), environ={"TERM": "dumb"}), HeadlessView)
    assert isinstance(make_view("headless", FakeTty(), environ={}), HeadlessView)
    assert isinstance(make_view("json", FakeTty(), environ={}), JsonView)
    with pytest.raises(ValueError, match="fancy"):
        make_view("fancy", io.StringIO())


def test_a_view_started_before_the_loop_refreshes_on_it_and_stops_after_it() -> None:
    # `weft run` starts its view, then runs the event loop, then stops the view.
    console = recording_console()
    live = LiveView(console, refreshes_per_second=50)
    out = io.StringIO()
    headless = HeadlessView(out, progress_every=0.05)
    live.start()
    headless.start()

    async def run() -> int:
        rec = Recorder()
        rec.manager.add_listener(live.on_event)
        rec.manager.add_listener(headless.on_event)
        rec.start_run()
        rec.to_running("a")
        rec.spend("a", 0.125, usage(10))
        await rec.flush()
        rendered = live.renders
        await asyncio.sleep(0.2)
        return live.renders - rendered

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        refreshed = runner.run(run())
    live.stop()
    headless.stop()
    assert refreshed >= 1
    assert "a: running for " in out.getvalue()
    assert "$0.1250" in console.export_text()


def test_agent_text_reaches_the_live_view_as_text_not_markup_or_escapes() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, color_system=None, width=200)
    view = LiveView(console)
    view.note("agent said [bold red]boom[/bold red] \x1b]0;title\x07 \u202eevil\nforged line")
    text = out.getvalue()
    assert "[bold red]boom[/bold red]" in text
    assert "\\x1b]0;title\\x07 \\u202eevil\\nforged line" in text
    assert "\x1b" not in text
    assert "\u202e" not in text


@pytest.mark.parametrize("width", [80, 160])
def test_the_live_summary_never_cuts_the_continue_command(width: int) -> None:
    console = Console(
        file=io.StringIO(), record=True, width=width, force_terminal=True, color_system=None
    )
    view = LiveView(console)
    command = (
        "weft run --execution /home/someone/.weft-executions/1795601048577-d0b1-nodata "
        "--model fake/haiku"
    )
    view.summary(
        RunSummary(status="completed", exit_code=0, execution=Path("/x"), resume_command=command)
    )
    lines = console.export_text().splitlines()
    assert f"continue: {command}" in lines


async def test_verbose_headless_adds_tool_calls_results_and_messages_on_both_paths() -> None:
    from weft.client import Event as WireEvent

    rec = Recorder()
    rec.start_run()
    rec.to_running("a")
    rec.emit("assistant.action", {"codonId": "a", "action": "thinking", "content": "hm"}, "a")
    tool = {"file_path": "/w/notes.md"}
    rec.emit(
        "assistant.action",
        {
            "codonId": "a",
            "action": "tool_use",
            "content": "",
            "toolName": "Write",
            "toolInput": tool,
        },
        "a",
    )
    result = {
        "codonId": "a",
        "toolUseId": "t1",
        "toolName": "Write",
        "result": "File created",
        "truncated": False,
        "originalLength": 12,
        "executionTimeMs": 3,
        "isError": False,
    }
    rec.emit("tool.result", result, "a")
    rec.emit("assistant.action", {"codonId": "a", "action": "message", "content": "Done."}, "a")
    items = await rec.flush()
    wanted = [
        "a: tool Write notes.md",
        "a: Write ok in 3 ms, 12 chars: File created",
        "a: says: Done.",
    ]
    for verbose in (False, True):
        out, wire = io.StringIO(), io.StringIO()
        view = HeadlessView(out, clock=lambda: T0, verbose=verbose)
        attached = HeadlessView(wire, clock=lambda: T0, verbose=verbose)
        for item in items:
            view.on_event(item)
            doc = json.loads(item.payload)
            attached.on_wire(
                WireEvent(
                    id=item.id,
                    seq=item.seq,
                    timestamp=item.timestamp,
                    type=doc["type"],
                    data=doc["data"],
                )
            )
        for written in (out.getvalue(), wire.getvalue()):
            texts = [line.split(" ", 1)[1] for line in written.splitlines()]
            assert [t for t in texts if t in wanted] == (wanted if verbose else [])
            assert not any("hm" in t for t in texts)
