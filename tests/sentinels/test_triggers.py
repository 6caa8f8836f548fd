"""The trigger engine against the reference model, and its limits."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.sentinels.reference import Fired, run_reference

from weft.config.schema import (
    Condition,
    CountExecution,
    DebounceExecution,
    EventTrigger,
    ImmediateExecution,
    InterestFilter,
    PatternStep,
    SentinelExecution,
    SentinelTrigger,
    SequenceOptions,
    SequenceTrigger,
    TimeWindowExecution,
)
from weft.sentinels.triggers import SentinelSpec, TriggerEngine

TYPES = ["tool.result", "token.usage", "assistant.action", "file.updated"]

values = st.one_of(
    st.sampled_from(["a", "b", "err", ""]),
    st.integers(-2, 3),
    st.sampled_from([0.5, 1.5]),
    st.booleans(),
    st.none(),
)
datas = st.fixed_dictionaries(
    {},
    optional={
        "k": values,
        "n": st.fixed_dictionaries({}, optional={"m": values, "l": st.lists(values, max_size=2)}),
        "l": st.lists(values, max_size=3),
    },
)
conditions = st.builds(
    Condition,
    path=st.sampled_from(["k", "n.m", "l.0", "n.l.1", "missing", "n"]),
    operator=st.sampled_from(
        ["equals", "notEquals", "in", "notIn", "contains", "greaterThan", "lessThan"]
    ),
    value=st.one_of(values, st.lists(st.sampled_from(["a", "err", 1, 2, 0.5]), max_size=3)),
)
on_lists = st.one_of(
    st.just(["*"]), st.lists(st.sampled_from(TYPES), min_size=1, max_size=2, unique=True)
)
triggers: st.SearchStrategy[SentinelTrigger] = st.one_of(
    st.builds(EventTrigger, on=on_lists, conditions=st.lists(conditions, max_size=2)),
    st.builds(
        SequenceTrigger,
        interest_filter=st.builds(InterestFilter, on=on_lists),
        pattern=st.lists(
            st.builds(
                PatternStep,
                type=st.sampled_from([*TYPES, "*"]),
                conditions=st.lists(conditions, max_size=1),
            ),
            min_size=1,
            max_size=3,
        ),
        options=st.one_of(st.none(), st.builds(SequenceOptions, consecutive=st.booleans())),
    ),
)
executions: st.SearchStrategy[SentinelExecution] = st.one_of(
    st.builds(ImmediateExecution),
    st.builds(CountExecution, threshold=st.integers(1, 5)),
    st.builds(DebounceExecution, milliseconds=st.integers(1, 50)),
    st.builds(TimeWindowExecution, milliseconds=st.integers(1, 50)),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[SentinelSpec], list[tuple[Any, ...]], int]:
    n = draw(st.integers(1, 4))
    specs = [
        SentinelSpec(id=f"s{i}", trigger=draw(triggers), execution=draw(executions))
        for i in range(n)
    ]
    ops: list[tuple[Any, ...]] = []
    now = 0
    for seq in range(draw(st.integers(0, 40))):
        now += draw(st.integers(0, 30))
        kind = draw(st.sampled_from(["event"] * 6 + ["tick", "flush"]))
        if kind == "event":
            ops.append(("event", draw(st.sampled_from(TYPES)), draw(datas), seq, now))
        else:
            ops.append((kind, now))
    return specs, ops, draw(st.integers(5, 8))


def run_engine(
    specs: list[SentinelSpec],
    ops: list[tuple[Any, ...]],
    buffer_limit: int,
    *,
    compiled: bool = True,
) -> list[Fired]:
    engine = TriggerEngine(specs, buffer_limit=buffer_limit, queue_limit=1000)
    feed = engine.feed if compiled else engine.feed_interpreted
    fired: list[Fired] = []
    for op in ops:
        if op[0] == "event":
            feed(op[1], op[2], op[3], op[4])
        elif op[0] == "tick":
            engine.tick(op[1])
        else:
            engine.tick(op[1])
            engine.flush(op[1])
        # Triggers are taken in the order they were queued, sentinel by sentinel
        # within one step; the reference lists them in the same order.
        for spec in specs:
            while (t := engine.pop(spec.id)) is not None:
                fired.append((t.sentinel, tuple(e.seq for e in t.events), t.at))
    return fired


def _by_sentinel(fired: list[Fired]) -> dict[str, list[Fired]]:
    out: dict[str, list[Fired]] = {}
    for f in fired:
        out.setdefault(f[0], []).append(f)
    return out


@settings(max_examples=400)
@given(scenarios())
def test_engine_fires_what_the_reference_model_fires(
    scenario: tuple[list[SentinelSpec], list[tuple[Any, ...]], int],
) -> None:
    specs, ops, limit = scenario
    expected = _by_sentinel(run_reference(specs, ops, limit))
    assert _by_sentinel(run_engine(specs, ops, limit)) == expected
    assert _by_sentinel(run_engine(specs, ops, limit, compiled=False)) == expected


@settings(max_examples=100)
@given(scenarios())
def test_next_deadline_is_exactly_when_a_tick_first_fires(
    scenario: tuple[list[SentinelSpec], list[tuple[Any, ...]], int],
) -> None:
    specs, ops, limit = scenario
    engine = TriggerEngine(specs, buffer_limit=limit)
    for op in ops:
        if op[0] == "event":
            engine.feed(op[1], op[2], op[3], op[4])
    deadline = engine.next_deadline()
    if deadline is None:
        assert engine.tick(10**9) == 0
    else:
        assert engine.tick(deadline - 1) == 0
        assert engine.tick(deadline) >= 1


def _spec(sid: str, trigger: SentinelTrigger, execution: SentinelExecution) -> SentinelSpec:
    return SentinelSpec(id=sid, trigger=trigger, execution=execution)


def test_queue_keeps_the_newest_triggers_and_counts_the_dropped() -> None:
    engine = TriggerEngine(
        [_spec("s", EventTrigger(on=["*"]), ImmediateExecution())], queue_limit=3
    )
    for seq in range(10):
        engine.feed("info", {}, seq, seq)
    route = engine.routes["s"]
    assert (route.triggered, route.dropped, engine.pending("s")) == (10, 7, 3)
    assert [t.events[0].seq for t in route.queue] == [7, 8, 9]
    assert [t.number for t in route.queue] == [8, 9, 10]


def test_buffer_keeps_the_newest_events() -> None:
    spec = _spec("s", EventTrigger(on=["*"]), DebounceExecution(milliseconds=100))
    engine = TriggerEngine([spec], buffer_limit=4)
    for seq in range(10):
        engine.feed("info", {}, seq, 0)
    assert engine.buffered("s") == 4
    assert engine.routes["s"].buffer_dropped == 6
    assert engine.tick(100) == 1
    trigger = engine.pop("s")
    assert trigger is not None
    assert [e.seq for e in trigger.events] == [6, 7, 8, 9]


def test_debounce_waits_for_quiet_and_time_window_does_not() -> None:
    engine = TriggerEngine(
        [
            _spec("quiet", EventTrigger(on=["*"]), DebounceExecution(milliseconds=10)),
            _spec("window", EventTrigger(on=["*"]), TimeWindowExecution(milliseconds=10)),
        ]
    )
    for seq, now in enumerate([0, 5, 9, 14, 18]):
        engine.feed("e", {}, seq, now)
    window = engine.pop("window")
    assert window is not None
    assert [e.seq for e in window.events] == [0, 1, 2]
    assert window.at == 14
    assert engine.pop("quiet") is None
    assert engine.next_deadline() == 24  # the window opened at 14
    assert engine.tick(24) == 1
    assert engine.tick(28) == 1  # the debounce: 18 + 10
    quiet = engine.pop("quiet")
    assert quiet is not None
    assert [e.seq for e in quiet.events] == [0, 1, 2, 3, 4]


def test_consecutive_sequence_needs_the_steps_in_a_row() -> None:
    error = PatternStep(
        type="tool.result", conditions=[Condition(path="isError", operator="equals", value=True)]
    )
    trigger = SequenceTrigger(
        interest_filter=InterestFilter(on=["tool.result"]),
        pattern=[error, error, error],
        options=SequenceOptions(consecutive=True),
    )
    engine = TriggerEngine([_spec("errors", trigger, ImmediateExecution())])
    flags = [True, True, False, True, True, True, True]
    for seq, flag in enumerate(flags):
        engine.feed("tool.result", {"isError": flag}, seq, seq)
        engine.feed("assistant.action", {"action": "message"}, 100 + seq, seq)  # not of interest
    fired = engine.pop("errors")
    assert fired is not None
    assert [e.seq for e in fired.events] == [3, 4, 5]
    assert engine.pop("errors") is None  # seq 6 starts a new run


def test_a_sequence_is_consecutive_unless_options_say_otherwise() -> None:
    """The reference's default: without ``options`` (or without
    ``consecutive`` in them) three errors must come in a row."""
    error = PatternStep(
        type="tool.result", conditions=[Condition(path="isError", operator="equals", value=True)]
    )
    flags = [True, False, True, False, True]  # three errors, never in a row
    for options, fires in (
        (None, False),
        (SequenceOptions(), False),
        (SequenceOptions(consecutive=False), True),
    ):
        trigger = SequenceTrigger(
            interest_filter=InterestFilter(on=["tool.result"]),
            pattern=[error, error, error],
            options=options,
        )
        engine = TriggerEngine([_spec("errors", trigger, ImmediateExecution())])
        for seq, flag in enumerate(flags):
            engine.feed("tool.result", {"isError": flag}, seq, seq)
        assert (engine.pop("errors") is not None) is fires, options


def test_matches_operator_and_unrouted_types() -> None:
    trigger = EventTrigger(
        on=["assistant.action"],
        conditions=[Condition(path="content", operator="matches", value=r"stuck|loop(ing)?")],
    )
    engine = TriggerEngine([_spec("stuck", trigger, ImmediateExecution())])
    assert engine.feed("assistant.action", {"content": "I am looping"}, 1, 0) == 1
    assert engine.feed("assistant.action", {"content": "fine"}, 2, 0) == 0
    assert engine.feed("assistant.action", {"content": 3}, 3, 0) == 0
    assert engine.feed("token.usage", {"content": "stuck"}, 4, 0) == 0


def test_remove_stops_routing() -> None:
    specs = [_spec(s, EventTrigger(on=["*"]), ImmediateExecution()) for s in ("a", "b")]
    engine = TriggerEngine(specs)
    engine.feed("x", {}, 1, 0)
    engine.remove("a")
    assert engine.feed("x", {}, 2, 0) == 1
    assert engine.pending("a") == 0
    assert engine.pending("b") == 2


def test_configs_convert_from_reference_json() -> None:
    raw = {
        "type": "event",
        "on": ["token.usage"],
        "conditions": [{"path": "totalCost", "operator": "greaterThan", "value": 0.5}],
    }
    trigger = msgspec.convert(raw, EventTrigger)
    engine = TriggerEngine([_spec("cost", trigger, CountExecution(threshold=2))])
    for seq, cost in enumerate([0.1, 0.6, 0.7, 0.9]):
        engine.feed("token.usage", {"totalCost": cost}, seq, 0)
    fired = engine.pop("cost")
    assert fired is not None
    assert [e.seq for e in fired.events] == [1, 2]
    assert engine.buffered("cost") == 1
