"""The execution plan: flattening, lazy loop expansion, termination, persistence."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weft import core
from weft.config.schema import ContextExceeded, Hank, IterationLimit, Loop
from weft.errors import ConfigError
from weft.plan import REDACTED, ExecutionPlan, PlanChange, PlannedCodon, plan_transitions

# ----------------------------------------------------------------------------- builders


def codon(ident: str, **fields: Any) -> dict[str, Any]:
    """A codon as a hank file writes it."""
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


def loop(ident: str, codons: list[dict[str, Any]], limit: int | None = 3, **fields: Any) -> Any:
    """A loop; ``limit=None`` makes it a contextExceeded loop."""
    terminate = (
        {"type": "contextExceeded"} if limit is None else {"type": "iterationLimit", "limit": limit}
    )
    return {
        "type": "loop",
        "id": ident,
        "name": ident.title(),
        "terminateOn": terminate,
        "codons": codons,
        **fields,
    }


def make_hank(*items: dict[str, Any]) -> Hank:
    """A Hank Struct from item documents."""
    return msgspec.convert({"hank": list(items)}, Hank)


def renamed(hank: Hank, index: int, ident: str) -> Hank:
    """``hank`` with item ``index`` renamed to ``ident`` without validation: the
    schema refuses a ``#`` in an id, and the plan must still refuse Structs built
    in code (the embedding API) that hold one."""
    items = list(hank.hank)
    items[index] = msgspec.structs.replace(items[index], id=ident)
    return msgspec.structs.replace(hank, hank=items)


def ids(plan: ExecutionPlan) -> list[str]:
    """The runtime codon ids of a plan, in order."""
    return [e.codon_id for e in plan]


def run_to_end(
    plan: ExecutionPlan, flags: dict[str, tuple[bool, bool]] | None = None
) -> tuple[list[str], list[PlanChange]]:
    """Drives the plan as the runtime will: run the next codon, finish it, repeat."""
    flags = flags or {}
    executed: list[str] = []
    changes: list[PlanChange] = []
    cursor: str | None = None
    while (entry := plan.next_codon(cursor)) is not None:
        executed.append(entry.codon_id)
        context_exceeded, budget_exceeded = flags.get(entry.codon_id, (False, False))
        change = plan.on_codon_finished(
            entry.codon_id, context_exceeded=context_exceeded, budget_exceeded=budget_exceeded
        )
        changes.append(change)
        plan = change.plan
        cursor = entry.codon_id
    return executed, changes


REFINE = make_hank(
    codon("survey"),
    loop("refine", [codon("write"), codon("review", continuationMode="continue-previous")]),
    codon("report"),
)


# ----------------------------------------------------------------------------- building


def test_a_fresh_plan_holds_every_codon_and_the_first_iteration_of_each_loop() -> None:
    plan = ExecutionPlan.from_hank(REFINE)

    assert ids(plan) == ["survey", "write#0", "review#0", "report"]
    write, review = plan["write#0"], plan["review#0"]
    assert plan["survey"].loop_context is None
    assert write.loop_context == core.LoopContext(
        loop_id="refine", iteration=0, codon_index_in_loop=0
    )
    assert review.loop_context is not None
    assert review.loop_context.codon_index_in_loop == 1
    assert review.codon.continuation_mode == "continue-previous"


def test_a_loop_budget_travels_in_the_loop_context() -> None:
    hank = make_hank(loop("l", [codon("a")], budget={"maxDollars": 2.5}))
    context = ExecutionPlan.from_hank(hank)["a#0"].loop_context

    assert context is not None
    assert context.loop_budget == {"maxDollars": 2.5, "allocation": "shared"}


def test_a_top_level_id_that_looks_like_an_iteration_id_is_refused() -> None:
    hank = renamed(make_hank(codon("x"), loop("l", [codon("a")])), 0, "a#0")

    with pytest.raises(ConfigError) as caught:
        ExecutionPlan.from_hank(hank)
    assert caught.value.problems[0].code == "duplicate_id"
    assert "'a#0'" in str(caught.value)


# ----------------------------------------------------------------------------- loops


def test_an_iteration_limit_loop_runs_exactly_limit_iterations_in_order() -> None:
    executed, _ = run_to_end(ExecutionPlan.from_hank(REFINE))

    loop_part = [f"{c}#{i}" for i in range(3) for c in ("write", "review")]
    assert executed == ["survey", *loop_part, "report"]


def test_the_next_iteration_appears_only_after_the_last_codon_of_the_current_one() -> None:
    plan = ExecutionPlan.from_hank(REFINE)

    first = plan.on_codon_finished("write#0")
    assert not first.changed
    assert not first.iteration_completed
    assert "write#1" not in first.plan

    last = first.plan.on_codon_finished("review#0")
    assert [e.codon_id for e in last.inserted] == ["write#1", "review#1"]
    assert last.iteration_completed
    assert not last.loop_finished
    assert ids(last.plan) == ["survey", "write#0", "review#0", "write#1", "review#1", "report"]
    assert last.plan.next_codon("review#0") == last.plan["write#1"]


def test_the_last_iteration_ends_the_loop_with_the_iteration_limit_reason() -> None:
    _, changes = run_to_end(ExecutionPlan.from_hank(REFINE))

    final = next(c for c in changes if c.finished.codon_id == "review#2")
    assert final.loop_finished
    assert final.iteration_completed
    assert final.termination_reason == "iteration_limit"
    assert not final.changed


def test_a_limit_of_one_never_expands() -> None:
    hank = make_hank(loop("l", [codon("a"), codon("b")], limit=1), codon("z"))

    executed, _ = run_to_end(ExecutionPlan.from_hank(hank))

    assert executed == ["a#0", "b#0", "z"]


def test_context_exceeded_ends_a_context_exceeded_loop_and_drops_the_rest_of_the_iteration() -> (
    None
):
    hank = make_hank(loop("l", [codon("a"), codon("b"), codon("c")], limit=None), codon("z"))

    executed, changes = run_to_end(ExecutionPlan.from_hank(hank), {"b#1": (True, False)})

    assert executed == ["a#0", "b#0", "c#0", "a#1", "b#1", "z"]
    stop = changes[4]
    assert stop.finished.codon_id == "b#1"
    assert stop.termination_reason == "context_exceeded"
    assert stop.loop_finished
    assert stop.iteration_completed
    assert [e.codon_id for e in stop.dropped] == ["c#1"]
    assert "c#1" not in stop.plan


def test_context_exceeded_does_not_end_an_iteration_limit_loop() -> None:
    hank = make_hank(loop("l", [codon("a")], limit=2))

    executed, changes = run_to_end(ExecutionPlan.from_hank(hank), {"a#0": (True, False)})

    assert executed == ["a#0", "a#1"]
    assert changes[0].termination_reason is None


def test_an_exceeded_budget_ends_any_loop_early() -> None:
    hank = make_hank(loop("l", [codon("a"), codon("b")], limit=5), codon("z"))

    executed, changes = run_to_end(ExecutionPlan.from_hank(hank), {"a#0": (False, True)})

    assert executed == ["a#0", "z"]
    assert changes[0].termination_reason == "budget_exceeded"
    assert [e.codon_id for e in changes[0].dropped] == ["b#0"]


def test_codons_outside_loops_never_change_the_plan() -> None:
    plan = ExecutionPlan.from_hank(REFINE)

    change = plan.on_codon_finished("survey", context_exceeded=True, budget_exceeded=True)

    assert change.plan is plan
    assert not change.changed
    assert not change.iteration_completed
    assert change.termination_reason is None


def test_an_unknown_codon_is_a_key_error() -> None:
    plan = ExecutionPlan.from_hank(REFINE)

    with pytest.raises(KeyError, match="write#7"):
        plan.on_codon_finished("write#7")
    with pytest.raises(KeyError):
        plan.next_codon("nope")


# ----------------------------------------------------------------------------- replay


def test_replaying_a_completion_never_expands_an_iteration_twice() -> None:
    plan = ExecutionPlan.from_hank(REFINE)
    once = plan.on_codon_finished("write#0").plan.on_codon_finished("review#0")

    again = once.plan.on_codon_finished("review#0")
    restarted = ExecutionPlan.from_state(once.plan.to_state(), REFINE)
    after_restart = restarted.on_codon_finished("review#0")

    for replay in (again, after_restart):
        assert not replay.changed
        assert replay.plan == once.plan
        # The decision is still reported, so a replaying runtime knows where it is.
        assert replay.iteration_completed
        assert replay.termination_reason is None


def test_replaying_a_termination_drops_nothing_more() -> None:
    hank = make_hank(loop("l", [codon("a"), codon("b")], limit=None), codon("z"))
    stop = ExecutionPlan.from_hank(hank).on_codon_finished("a#0", context_exceeded=True)

    replay = stop.plan.on_codon_finished("a#0", context_exceeded=True)

    assert not replay.changed
    assert replay.plan == stop.plan
    assert replay.termination_reason == "context_exceeded"


def test_rerunning_a_codon_that_had_ended_its_loop_restores_the_rest_of_the_iteration() -> None:
    hank = make_hank(loop("l", [codon("a"), codon("b")], limit=None), codon("z"))
    stopped = ExecutionPlan.from_hank(hank).on_codon_finished("a#0", context_exceeded=True).plan
    assert ids(stopped) == ["a#0", "z"]

    # A rollback reruns a#0, which this time keeps its context.
    rerun = stopped.on_codon_finished("a#0")

    assert [e.codon_id for e in rerun.inserted] == ["b#0"]
    assert ids(rerun.plan) == ["a#0", "b#0", "z"]


def test_ending_a_loop_on_a_rerun_drops_iterations_planned_before() -> None:
    hank = make_hank(loop("l", [codon("a")], limit=4), codon("z"))
    plan = ExecutionPlan.from_hank(hank)
    plan = plan.on_codon_finished("a#0").plan.on_codon_finished("a#1").plan
    assert ids(plan) == ["a#0", "a#1", "a#2", "z"]

    # A rollback reruns a#0, and this time the budget runs out.
    rerun = plan.on_codon_finished("a#0", budget_exceeded=True)

    assert [e.codon_id for e in rerun.dropped] == ["a#1", "a#2"]
    assert ids(rerun.plan) == ["a#0", "z"]


def test_an_expansion_that_clashes_with_another_entry_is_refused() -> None:
    hank = renamed(make_hank(loop("l", [codon("a")], limit=3), codon("x")), 1, "a#1")
    plan = ExecutionPlan.from_hank(hank)

    with pytest.raises(ConfigError) as caught:
        plan.on_codon_finished("a#0")
    assert caught.value.problems[0].code == "duplicate_id"


# ----------------------------------------------------------------------------- reading


def test_position_helpers_follow_the_plan_order() -> None:
    plan = ExecutionPlan.from_hank(REFINE)

    assert plan.next_codon() == plan["survey"]
    assert plan.next_codon("review#0") == plan["report"]
    assert plan.next_codon("report") is None
    assert plan.previous_codon("write#0") == plan["survey"]
    assert plan.previous_codon("survey") is None
    assert [e.codon_id for e in plan.remaining("write#0")] == ["review#0", "report"]
    assert plan.index("report") == len(plan) - 1
    assert plan.get("nope") is None
    assert "write#0" in plan
    assert [e.codon_id for e in plan.iteration("refine", 0)] == ["write#0", "review#0"]


def test_checkpoint_patterns_are_the_union_of_everything_planned_so_far() -> None:
    hank = make_hank(
        codon("a", checkpointedFiles=["notes/**", "*.md"]),
        loop("l", [codon("b", checkpointedFiles=["*.md", "src/**"])], limit=2),
        codon("c"),
    )
    plan = ExecutionPlan.from_hank(hank).on_codon_finished("b#0").plan

    assert plan.checkpoint_patterns("a") == ["notes/**", "*.md"]
    assert plan.checkpoint_patterns("b#1") == ["notes/**", "*.md", "src/**"]
    assert plan.checkpoint_patterns("c") == ["notes/**", "*.md", "src/**"]


# ----------------------------------------------------------------------------- state


def test_the_state_form_is_the_documented_json_shape() -> None:
    state = ExecutionPlan.from_hank(REFINE).to_state()

    assert state[0] == {"codonId": "survey", "codon": state[0]["codon"]}
    assert state[0]["codon"]["id"] == "survey"
    assert state[0]["codon"]["continuationMode"] == "fresh"
    assert "description" not in state[0]["codon"]  # unset fields are left out, never null
    assert state[2]["loopContext"] == {"loopId": "refine", "iteration": 0, "codonIndexInLoop": 1}
    assert json.loads(json.dumps(state)) == state


def test_a_meaningful_null_survives_the_state_round_trip() -> None:
    sentinel = {
        "sentinelConfig": {
            "id": "watch",
            "name": "Watch",
            "model": "anthropic/claude-haiku",
            "trigger": {
                "type": "event",
                "on": ["tool.result"],
                "conditions": [{"path": "error", "operator": "notEquals", "value": None}],
            },
            "execution": {"strategy": "immediate"},
            "userPromptText": "note it",
        }
    }
    hank = make_hank(loop("l", [codon("a", description="d", sentinels=[sentinel])]))
    plan = ExecutionPlan.from_hank(hank)

    state = json.loads(json.dumps(plan.to_state()))
    condition = state[0]["codon"]["sentinels"][0]["sentinelConfig"]["trigger"]["conditions"][0]

    assert condition == {"path": "error", "operator": "notEquals", "value": None}
    assert ExecutionPlan.from_state(state, hank) == plan


def test_env_values_are_redacted_in_the_stored_plan_and_come_back_from_the_hank() -> None:
    secret = "sk-live-0123456789abcdef"
    hank = make_hank(
        codon("a", env={"API_KEY": secret, "MODE": "fast"}),
        loop("l", [codon("b", env={"TOKEN": secret + "-b"})]),
    )
    plan = ExecutionPlan.from_hank(hank)
    stored = json.dumps(plan.to_state()) + json.dumps(
        [msgspec.to_builtins(e) for e in plan.to_entries()]
    )
    assert secret not in stored
    state = json.loads(json.dumps(plan.to_state()))
    assert state[0]["codon"]["env"] == {"API_KEY": REDACTED, "MODE": REDACTED}
    assert state[1]["codon"]["env"] == {"TOKEN": REDACTED}
    # A restart takes the values from hank.json (today's values, if they changed).
    assert ExecutionPlan.from_state(state, hank) == plan
    rotated = make_hank(
        codon("a", env={"API_KEY": "sk-new", "MODE": "fast"}),
        loop("l", [codon("b", env={"TOKEN": "t"})]),
    )
    restarted = ExecutionPlan.from_state(state, rotated)
    assert restarted["a"].codon.env == {"API_KEY": "sk-new", "MODE": "fast"}
    assert restarted["b#0"].codon.env == {"TOKEN": "t"}
    # A variable hank.json no longer sets cannot be made up: a clear error.
    dropped = make_hank(codon("a", env={"MODE": "fast"}), loop("l", [codon("b")]))
    with pytest.raises(ConfigError, match="needs env API_KEY") as refused:
        ExecutionPlan.from_state(state, dropped)
    assert "add them back" in str(refused.value)


def test_the_compiled_core_stores_the_plan_and_its_extensions_exactly() -> None:
    plan = ExecutionPlan.from_hank(REFINE)
    state = core.Core()
    started = core.RunStarted(
        run_id="r1",
        run_folder="/x/.weft/runs/r1",
        git_branch="run-r1",
        starting_conditions=core.Fresh(),
        server_pid=1,
        start_time="2026-11-21T00:00:00Z",
        execution_plan=plan.to_entries(),
    )
    assert state.apply(core.encode(started)).ok

    for codon_id in ("write#0", "review#0", "write#1", "review#1"):
        change = plan.on_codon_finished(codon_id)
        for transition in plan_transitions(change, "r1"):
            outcome = state.apply(core.encode(transition))
            assert outcome.ok, outcome.message
        plan = change.plan
        stored = json.loads(state.state_json())["executionPlan"]
        assert stored == plan.to_state()
        assert ExecutionPlan.from_state(stored, REFINE) == plan

    assert len(plan) == 8


def test_a_termination_is_recorded_as_a_plan_trim() -> None:
    hank = make_hank(loop("l", [codon("a"), codon("b")], limit=None))
    change = ExecutionPlan.from_hank(hank).on_codon_finished("a#0", context_exceeded=True)

    assert plan_transitions(change, "r1") == [core.PlanTrimmed(run_id="r1", codon_ids=["b#0"])]
    assert plan_transitions(ExecutionPlan.from_hank(hank).on_codon_finished("a#0"), "r1") == []


def _bad_state(mutate: Any) -> list[dict[str, Any]]:
    state = ExecutionPlan.from_hank(REFINE).to_state()
    mutate(state)
    return state


@pytest.mark.parametrize(
    ("mutate", "path", "words"),
    [
        (lambda s: s[1]["loopContext"].update(loopId="gone"), "loopContext.loopId", "'gone'"),
        (
            lambda s: s[2]["loopContext"].update(codonIndexInLoop=5),
            "loopContext.codonIndexInLoop",
            "index 5",
        ),
        (lambda s: s[1].update(codonId="write#3"), "codonId", "iteration 0"),
        (lambda s: s[0].update(codonId="other"), "codonId", "'other'"),
        (lambda s: s[3].pop("codon"), "executionPlan[3]", "codon"),
        (lambda s: s[3]["codon"].update(continuationMode="sideways"), "executionPlan[3]", "$."),
        (lambda s: s.append(dict(s[0])), "executionPlan[4].codonId", "twice"),
    ],
)
def test_a_stored_plan_that_does_not_fit_the_hank_is_a_clear_error(
    mutate: Any, path: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        ExecutionPlan.from_state(_bad_state(mutate), REFINE)

    problem = caught.value.problems[0]
    assert problem.file == "state.json"
    assert path in problem.path
    assert words in problem.message
    assert problem.hint


# ----------------------------------------------------------------------------- properties


@st.composite
def hanks(draw: st.DrawFn) -> Hank:
    """Random hanks of 1-5 items: codons, iterationLimit loops, contextExceeded loops."""
    items: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["codon", "limit", "context"]))
        if kind == "codon":
            items.append(codon(f"c{i}"))
            continue
        inner = [codon(f"c{i}x{j}") for j in range(draw(st.integers(1, 3)))]
        limit = draw(st.integers(1, 4)) if kind == "limit" else None
        items.append(loop(f"l{i}", inner, limit=limit))
    return make_hank(*items)


def reference_run(hank: Hank) -> Generator[str, tuple[bool, bool], None]:
    """The codons a hank runs, eagerly: yields each id, receives its two flags."""
    for item in hank.hank:
        if not isinstance(item, Loop):
            yield item.id
            continue
        term = item.terminate_on
        iteration = 0
        while True:
            ended = False
            for c in item.codons:
                context_exceeded, budget_exceeded = yield f"{c.id}#{iteration}"
                if budget_exceeded or (context_exceeded and isinstance(term, ContextExceeded)):
                    ended = True
                    break
            if ended or (isinstance(term, IterationLimit) and iteration >= term.limit - 1):
                break
            iteration += 1


def check_invariants(plan: ExecutionPlan, hank: Hank) -> None:
    """What every plan of ``hank`` must satisfy, whatever ran before."""
    entries = plan.entries
    assert len({e.codon_id for e in entries}) == len(entries)
    position = {id(item): n for n, item in enumerate(hank.hank)}
    loops = {item.id: item for item in hank.hank if isinstance(item, Loop)}
    keys = []
    for e in entries:
        ctx = e.loop_context
        if ctx is None:
            assert e.codon_id == e.codon.id
            keys.append((position[id(next(i for i in hank.hank if i.id == e.codon.id))], 0, 0))
            continue
        the_loop = loops[ctx.loop_id]
        assert e.codon_id == f"{e.codon.id}#{ctx.iteration}"
        assert the_loop.codons[ctx.codon_index_in_loop].id == e.codon.id
        if isinstance(the_loop.terminate_on, IterationLimit):
            assert ctx.iteration < the_loop.terminate_on.limit
        keys.append((position[id(the_loop)], ctx.iteration, ctx.codon_index_in_loop))
    # Strictly increasing (item, iteration, index): hank order kept, each loop's
    # entries contiguous, iterations in order.
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    # Every top-level codon once; every loop's iterations 0..k, all full but the last.
    for n, item in enumerate(hank.hank):
        mine = [k for k in keys if k[0] == n]
        if not isinstance(item, Loop):
            assert len(mine) == 1
            continue
        last = max(k[1] for k in mine)
        for iteration in range(last + 1):
            indexes = [k[2] for k in mine if k[1] == iteration]
            assert indexes == list(range(len(indexes)))
            assert indexes
            if iteration < last:
                assert len(indexes) == len(item.codons)


def apply_to_state(state: list[dict[str, Any]], transition: Any) -> list[dict[str, Any]]:
    """What the state's executionPlan becomes under one plan transition."""
    if isinstance(transition, core.PlanTrimmed):
        gone = set(transition.codon_ids)
        assert gone <= {e["codonId"] for e in state}
        return [e for e in state if e["codonId"] not in gone]
    data = json.loads(core.encode(transition))["data"]
    at = next(i for i, e in enumerate(state) if e["codonId"] == data["afterCodonId"])
    return state[: at + 1] + data["entries"] + state[at + 1 :]


@settings(max_examples=150)
@given(hank=hanks(), data=st.data())
def test_lazy_expansion_runs_what_an_eager_interpreter_runs(
    hank: Hank, data: st.DataObject
) -> None:
    plan = ExecutionPlan.from_hank(hank)
    check_invariants(plan, hank)
    state = plan.to_state()
    expected = reference_run(hank)
    want: str | None = next(expected)
    cursor: str | None = None
    # contextExceeded loops run until told otherwise; the cap keeps examples finite.
    for _ in range(40):
        entry = plan.next_codon(cursor)
        assert (None if entry is None else entry.codon_id) == want
        if entry is None:
            break
        flags = (
            data.draw(st.booleans(), label="context_exceeded"),
            data.draw(st.sampled_from([False, False, False, True]), label="budget_exceeded"),
        )
        change = plan.on_codon_finished(
            entry.codon_id, context_exceeded=flags[0], budget_exceeded=flags[1]
        )
        assert not (change.inserted and change.dropped)
        check_invariants(change.plan, hank)

        # Recorded as transitions, the state holds exactly the new plan ...
        for transition in plan_transitions(change, "r1"):
            state = apply_to_state(state, transition)
        assert state == change.plan.to_state()
        # ... from which a restart rebuilds the same plan ...
        restarted = ExecutionPlan.from_state(state, hank)
        assert restarted == change.plan
        # ... where replaying the same completion changes nothing.
        replay = restarted.on_codon_finished(
            entry.codon_id, context_exceeded=flags[0], budget_exceeded=flags[1]
        )
        assert not replay.changed
        assert replay.plan == change.plan
        assert replay.termination_reason == change.termination_reason

        plan, cursor = change.plan, entry.codon_id
        try:
            want = expected.send(flags)
        except StopIteration:
            want = None


@settings(max_examples=50)
@given(hank=hanks())
def test_without_early_termination_every_iteration_limit_loop_runs_its_limit(hank: Hank) -> None:
    plan = ExecutionPlan.from_hank(hank)
    cursor: str | None = None
    executed: list[PlannedCodon] = []
    for _ in range(200):
        entry = plan.next_codon(cursor)
        if entry is None:
            break
        executed.append(entry)
        loop_id = entry.loop_context.loop_id if entry.loop_context else None
        the_loop = plan.loops.get(loop_id) if loop_id else None
        # A contextExceeded loop stops when its first codon runs out of context.
        stop = the_loop is not None and isinstance(the_loop.terminate_on, ContextExceeded)
        plan = plan.on_codon_finished(entry.codon_id, context_exceeded=stop).plan
        cursor = entry.codon_id
    else:
        pytest.fail("the plan did not end")

    for item in hank.hank:
        if isinstance(item, Loop) and isinstance(item.terminate_on, IterationLimit):
            ran = [e for e in executed if e.loop_context and e.loop_context.loop_id == item.id]
            assert len(ran) == item.terminate_on.limit * len(item.codons)


@settings(max_examples=60, deadline=None)
@given(picks=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=30))
def test_every_plan_of_a_line_answers_lookups_as_its_own_entries(
    picks: list[tuple[int, int]],
) -> None:
    """Plans made from one another share their id index; an older plan used
    again (looked up, or changed: a branch) still answers for its own entries."""
    plans = [ExecutionPlan.from_hank(REFINE)]
    for which, entry in picks:
        plan = plans[which % len(plans)]
        finished = plan.entries[entry % len(plan)]
        plans.append(plan.on_codon_finished(finished.codon_id).plan)
        for older in (plans[which % len(plans)], plans[-1], plans[0]):
            for at, e in enumerate(older.entries):
                assert older.index(e.codon_id) == at
                assert older.get(e.codon_id) is e
                assert e.codon_id in older
            assert "write#999" not in older
