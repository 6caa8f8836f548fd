"""The msgspec transition types agree with the compiled core's decoder."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft import core
from weft.events.transitions import TRANSITION_CLASSES, decode, encode

TOKENS = core.TokenUsage(
    input_tokens=1, output_tokens=2, cache_creation_tokens=3, cache_read_tokens=4
)
META = core.TransitionMetadata(
    claude_pid=1,
    claude_log_path="l",
    previous_session_id="p",
    claude_session_id="s",
    exit_code=0,
    failure_reason=core.FailureReason(kind="timeout", retriable=True, retry_after_ms=5),
    failed_during="running",
    skipped_during="running",
    result_message_received=True,
    checkpoint_sha="abc",
    context_exceeded=False,
    extension_count=2,
    budget_exceeded=core.BudgetExceeded(currency="dollars", limit=1.0, used=1.5),
)
SENTINEL = core.SentinelState(
    id="narrator",
    model="fake/echo",
    loaded_at="t",
    llm_call_count=3,
    failed_llm_calls=1,
    total_cost=0.5,
    status="active",
    unload_reason="codon-complete",
)

ONE_OF_EACH: list[core.Transition] = [
    core.RunStarted(
        run_id="r",
        run_folder="/f",
        git_branch="run-r",
        starting_conditions=core.Continuation(
            source=core.ContinuationSource(run_id="r0", after_codon=None, checkpoint_sha="c"),
            reason="rollback",
        ),
        server_pid=1,
        start_time="t",
        execution_plan=[core.PlanEntry(codon={"id": "a"}, codon_id="a")],
    ),
    core.RunCompleted(run_id="r", end_time="t"),
    core.RunFailed(run_id="r", end_time="t", codon_id="a", reason="it broke"),
    core.RunCrashed(run_id="r", detected_at="t", last_codon_status="unknown"),
    core.CodonStarted(
        run_id="r",
        codon_id="a#0",
        start_time="t",
        loop_context=core.LoopContext(loop_id="a", iteration=0, codon_index_in_loop=0),
    ),
    core.CodonTransitioned(
        run_id="r",
        codon_id="a",
        from_status="running",
        to_status="failed",
        timestamp="t",
        metadata=META,
    ),
    core.CostsUpdated(run_id="r", codon_id="a", cost=0.25, tokens=TOKENS),
    core.CostsIncremented(run_id="r", codon_id="a", cost_delta=0.25, tokens_delta=TOKENS),
    core.AssistantMessageCountUpdated(run_id="r", codon_id="a", new_count=3),
    core.ExtensionCountUpdated(run_id="r", codon_id="a", extension_count=1),
    core.CodonFinalCostSet(run_id="r", codon_id="a", final_cost=1.0, final_tokens=TOKENS),
    core.SentinelStatesUpdated(
        run_id="r", codon_id="a", sentinel_states=[SENTINEL], total_cost=0.5
    ),
    core.CheckpointCreated(
        run_id="r", codon_id="a", checkpoint_type="rig-setup", sha="abc", branch="run-r"
    ),
    core.InitialCheckpointSet(sha="abc"),
    core.PlanExtended(
        run_id="r",
        after_codon_id="a",
        entries=[core.PlanEntry(codon={"id": "b"}, codon_id="b#1")],
    ),
    core.PlanTrimmed(run_id="r", codon_ids=["b#1"]),
    core.RunStopped(
        run_id="r",
        end_time="t",
        by="budget",
        reason="Budget exceeded: the run used $0.0600 of its $0.0500 cap (--max-cost)",
        codon_id="a",
        budget=core.BudgetStop(
            scope="run", kind="dollars", limit=0.05, used=0.06, source="--max-cost"
        ),
    ),
]


def test_there_is_one_sample_of_each_of_the_seventeen_types() -> None:
    assert sorted(type(t).__name__ for t in ONE_OF_EACH) == sorted(core.TRANSITION_TYPES)
    assert sorted(TRANSITION_CLASSES) == sorted(core.TRANSITION_TYPES)


@pytest.mark.parametrize("transition", ONE_OF_EACH, ids=lambda t: type(t).__name__)
def test_every_encoded_type_decodes_in_the_core(transition: core.Transition) -> None:
    outcome = core.Core().apply(encode(transition))
    # On an empty state most are refused for the state's sake, never as malformed.
    assert outcome.code != "malformed", outcome.message
    assert outcome.kind == type(transition).__name__


@pytest.mark.parametrize("transition", ONE_OF_EACH, ids=lambda t: type(t).__name__)
def test_encode_decode_round_trip(transition: core.Transition) -> None:
    payload = encode(transition)
    assert decode(payload) == transition
    envelope = json.loads(payload)
    assert list(envelope) == ["type", "data"]
    assert envelope["type"] == type(transition).__name__


def test_wire_names_are_camel_case_as_in_state_json() -> None:
    data = json.loads(encode(ONE_OF_EACH[5]))["data"]
    assert data["from"] == "running"
    assert data["to"] == "failed"
    assert data["metadata"]["failureReason"] == {
        "type": "timeout",
        "retriable": True,
        "retryAfterMs": 5,
    }
    sentinel = json.loads(encode(ONE_OF_EACH[11]))["data"]["sentinelStates"][0]
    assert "failedLLMCalls" in sentinel
    assert "lastLlmCallAt" not in sentinel  # unset optionals are omitted


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b'{"type":"Nope","data":{}}', "unknown transition type 'Nope'"),
        (b'{"type":"InitialCheckpointSet","data":{"sha":1}}', "Expected `str`, got `int`"),
        (b'{"type":"InitialCheckpointSet","data":{"sha":"a","x":1}}', "unknown field `x`"),
        (b'{"type":"InitialCheckpointSet"}', "missing required field `data`"),
        (b"[1]", "Expected `object`, got `array`"),
    ],
)
def test_decode_names_what_is_wrong(payload: bytes, fragment: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=fragment):
        decode(payload)


@given(
    st.builds(
        core.TokenUsage,
        input_tokens=st.integers(0, 2**63 - 1),
        output_tokens=st.integers(0, 2**63 - 1),
        cache_creation_tokens=st.integers(0, 2**63 - 1),
        cache_read_tokens=st.integers(0, 2**63 - 1),
    ),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_any_valid_cost_update_decodes_in_the_core(tokens: core.TokenUsage, usd: float) -> None:
    event = core.CostsIncremented(run_id="r", codon_id="a", cost_delta=usd, tokens_delta=tokens)
    outcome = core.Core().apply(encode(event))
    assert outcome.code == "unknown_run"
