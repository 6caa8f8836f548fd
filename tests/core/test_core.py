"""The embedding API ``weft.core``: the compiled core as Python callers see it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from weft import core
from weft.errors import (
    InvalidTransitionError,
    MetadataValidationError,
    StateValidationError,
    TransitionRejectedError,
    WeftError,
)

FAILED_META = {
    "exitCode": 1,
    "failureReason": {"type": "unknown", "retriable": False},
    "failedDuring": "running",
}


def payload(kind: str, **data: Any) -> bytes:
    return json.dumps({"type": kind, "data": data}).encode()


def run_started(run_id: str = "r1") -> bytes:
    return payload(
        "RunStarted",
        runId=run_id,
        runFolder=f"/x/{run_id}",
        gitBranch=f"run-{run_id}",
        startingConditions={"type": "fresh"},
        serverPid=7,
        startTime="t0",
    )


def move(codon: str, frm: str, to: str, run_id: str = "r1", **meta: Any) -> bytes:
    return payload(
        "CodonTransitioned",
        runId=run_id,
        codonId=codon,
        **{"from": frm, "to": to},
        timestamp="t",
        metadata=meta or None,
    )


def running_codon(core_: core.Core, codon: str = "a", run_id: str = "r1") -> None:
    for event in [
        payload("CodonStarted", runId=run_id, codonId=codon, startTime="t"),
        move(codon, "preparing", "starting", run_id),
        move(codon, "starting", "initializing", run_id, claudePid=3, claudeLogPath="l"),
        move(codon, "initializing", "running", run_id, claudeSessionId="s"),
    ]:
        assert core_.apply(event).ok


class TestValidateTransition:
    def test_the_seed_messages(self) -> None:
        with pytest.raises(InvalidTransitionError) as invalid:
            core.validate_transition("completed", "running")
        assert str(invalid.value) == "Invalid transition from completed to running"
        assert invalid.value.from_status == "completed"
        assert invalid.value.to_status == "running"
        with pytest.raises(MetadataValidationError) as missing:
            core.validate_transition("initializing", "running")
        assert str(missing.value) == (
            "Missing required metadata for transition to running: claudeSessionId"
        )
        assert missing.value.missing == ("claudeSessionId",)
        assert missing.value.from_status == "initializing"

    def test_both_errors_share_the_weft_error_tree(self) -> None:
        for args in [("failed", "running", None), ("running", "skipped", {})]:
            with pytest.raises(WeftError) as err:
                core.validate_transition(*args)
            assert isinstance(err.value, TransitionRejectedError)

    @pytest.mark.parametrize(
        ("frm", "to", "meta"),
        [
            ("preparing", "starting", None),
            ("starting", "initializing", {"claudePid": 1, "claudeLogPath": "x"}),
            ("initializing", "running", {"claudeSessionId": "s"}),
            ("running", "completing-sentinels", None),
            ("running", "completed", {"checkpointSha": "abc", "exitCode": 0}),
            ("completing-sentinels", "completed", {"checkpointSha": "abc"}),
            ("preparing", "failed", {**FAILED_META, "failedDuring": "preparing"}),
            ("initializing", "skipped", {"skippedDuring": "initializing"}),
        ],
    )
    def test_valid_moves_pass(self, frm: str, to: str, meta: dict[str, Any] | None) -> None:
        core.validate_transition(frm, to, meta)

    def test_wrongly_typed_fields_are_named_with_what_they_should_be(self) -> None:
        with pytest.raises(MetadataValidationError) as err:
            core.validate_transition(
                "starting", "initializing", {"claudePid": "12", "claudeLogPath": None}
            )
        assert err.value.missing == ("claudeLogPath",)
        assert err.value.invalid == (("claudePid", "an integer"),)
        assert str(err.value) == (
            "Missing required metadata for transition to initializing: claudeLogPath; "
            "invalid: claudePid must be an integer"
        )
        with pytest.raises(MetadataValidationError, match="claudePid must be an integer"):
            core.validate_transition(
                "starting", "initializing", {"claudePid": True, "claudeLogPath": "l"}
            )
        with pytest.raises(MetadataValidationError, match="failureReason must be an object"):
            core.validate_transition("running", "failed", {**FAILED_META, "failureReason": "x"})
        with pytest.raises(MetadataValidationError, match="exitCode must be 0"):
            core.validate_transition("running", "completed", {"checkpointSha": "a", "exitCode": 2})

    def test_failed_during_must_name_the_state_being_left(self) -> None:
        with pytest.raises(MetadataValidationError) as err:
            core.validate_transition("starting", "failed", FAILED_META)
        assert str(err.value) == (
            "Invalid metadata for transition to failed: failedDuring must be starting"
        )
        assert err.value.invalid == (("failedDuring", "starting"),)

    def test_a_mistyped_exit_code_on_completion_is_named(self) -> None:
        for bad in ["0", True, 1.5]:
            with pytest.raises(MetadataValidationError) as err:
                core.validate_transition(
                    "running", "completed", {"checkpointSha": "a", "exitCode": bad}
                )
            assert err.value.invalid == (("exitCode", "an integer"),)

    def test_an_empty_checkpoint_is_missing(self) -> None:
        with pytest.raises(MetadataValidationError) as err:
            core.validate_transition("running", "completed", {"checkpointSha": ""})
        assert err.value.missing == ("checkpointSha",)

    def test_unknown_status_names_are_a_value_error_listing_the_valid_ones(self) -> None:
        with pytest.raises(ValueError, match="unknown codon status 'runing'; expected one of"):
            core.validate_transition("runing", "completed")

    def test_tables(self) -> None:
        assert core.CODON_STATUSES == (
            "preparing",
            "starting",
            "initializing",
            "running",
            "completing-sentinels",
            "completed",
            "failed",
            "skipped",
        )
        assert core.allowed_transitions("running") == [
            "completing-sentinels",
            "completed",
            "failed",
            "skipped",
        ]
        assert [core.is_terminal(s) for s in core.CODON_STATUSES] == [False] * 5 + [True] * 3
        assert len(core.TRANSITION_TYPES) == 17


class TestCore:
    def test_apply_batch_counts_and_returns_only_rejections(self) -> None:
        c = core.Core()
        events = [run_started(), move("ghost", "preparing", "starting"), b"{}"]
        result = c.apply_batch(b"[" + b",".join(events) + b"]")
        assert (result.first_seq, result.count, result.applied) == (1, 3, 1)
        assert [o.seq for o in result.rejected] == [2, 3]
        assert [o.code for o in result.rejected] == ["unknown_codon", "malformed"]
        assert c.next_seq == 4

    def test_a_metadata_rejection_names_both_ends_of_the_move(self) -> None:
        c = core.Core()
        c.apply(run_started())
        running_codon(c, "a")
        outcome = c.apply(move("a", "running", "completed"))
        assert (outcome.code, outcome.from_status, outcome.to_status) == (
            "invalid_metadata",
            "running",
            "completed",
        )
        assert outcome.missing == ["checkpointSha"]

    def test_apply_batch_needs_a_json_array(self) -> None:
        with pytest.raises(ValueError, match="JSON array of transitions"):
            core.Core().apply_batch(b'{"type": "RunStarted"}')

    def test_direct_application_is_refused_while_transitions_are_queued(self) -> None:
        c = core.Core()
        c.submit(run_started())
        with pytest.raises(RuntimeError, match="drain"):
            c.apply(run_started("r2"))
        assert [o.seq for o in c.drain()] == [1]
        assert c.apply(run_started("r2")).code == "run_still_active"

    def test_submit_many_keeps_order_and_drain_respects_its_limit(self) -> None:
        c = core.Core(next_seq=10)
        first = c.submit_many([run_started(), payload("InitialCheckpointSet", sha="a")])
        assert first == 10
        assert c.pending == 2
        assert [o.seq for o in c.drain(1)] == [10]
        assert [o.kind for o in c.drain()] == ["InitialCheckpointSet"]
        assert c.drain() == []

    def test_costs_are_exact_and_follow_the_seed(self) -> None:
        c = core.Core()
        c.apply(run_started())
        running_codon(c, "a")
        for _ in range(10):
            c.apply(
                payload("CostsIncremented", runId="r1", codonId="a", costDelta=0.1, tokensDelta={})
            )
        assert c.codon_cost("r1", "a") == 1.0
        assert c.apply(move("a", "running", "skipped", skippedDuring="running")).ok
        # The seed: a skipped codon costs nothing.
        assert c.codon_cost("r1", "a") == 0.0
        assert c.total_cost() == 0.0
        state = json.loads(c.state_json())
        assert state["runs"][0]["codons"][0]["partialCost"] == 1.0
        assert c.codon_cost("r1", "nope") is None
        assert c.run_cost("nope") is None

    def test_a_big_batch_applies_with_the_interpreter_released(self) -> None:
        c = core.Core()
        c.apply(run_started())
        running_codon(c, "a")
        inc = payload("CostsIncremented", runId="r1", codonId="a", costDelta=0.001, tokensDelta={})
        c.submit_many([inc] * 5000)
        outcomes = c.drain()
        assert len(outcomes) == 5000
        assert all(o.ok for o in outcomes)
        assert c.codon_cost("r1", "a") == pytest.approx(5.0, abs=0)


class TestStateDocuments:
    def make_state(self) -> bytes:
        c = core.Core()
        c.apply(run_started())
        running_codon(c, "a")
        c.apply(move("a", "running", "completed", checkpointSha="sha-a"))
        return c.state_json()

    def test_round_trip_through_state_json(self) -> None:
        doc = self.make_state()
        again = core.Core(doc)
        assert again.state_json() == doc
        assert again.codon_status("r1", "a") == "completed"
        assert again.current_run_id == "r1"

    @pytest.mark.parametrize(
        ("document", "kind", "fragment"),
        [
            (b"", "corrupted_data", "EOF while parsing"),
            (b"{not json", "corrupted_data", "key must be a string"),
            (b'{"runs": {}, "currentRunId": null}', "corrupted_data", "invalid type: map"),
            (b'{"runs": [], "currentRunId": null, "extra": 1}', "corrupted_data", "unknown field"),
            (b'{"runs": [], "currentRunId": "gone"}', "missing_run", "names no run"),
        ],
    )
    def test_malformed_documents_are_refused_with_a_clear_error(
        self, document: bytes, kind: str, fragment: str
    ) -> None:
        with pytest.raises(StateValidationError) as err:
            core.Core(document)
        assert [i.kind for i in err.value.errors] == [kind]
        assert fragment in str(err.value)
        assert str(err.value).startswith("invalid state document: ")

    def test_a_torn_document_is_refused(self) -> None:
        doc = self.make_state()
        with pytest.raises(StateValidationError, match="corrupted_data"):
            core.Core(doc[: len(doc) // 2])

    def test_a_codon_lacking_what_its_status_promises_is_invalid(self) -> None:
        state = json.loads(self.make_state())
        del state["runs"][0]["codons"][0]["completionCheckpoint"]
        with pytest.raises(StateValidationError) as err:
            core.Core(json.dumps(state).encode())
        (issue,) = err.value.errors
        assert issue.kind == "invalid_codon"
        assert issue.path == "runs[0].codons[0]"
        assert "lacks completionCheckpoint" in issue.message

    def test_warnings_need_the_outside_facts_and_do_not_block(self) -> None:
        doc = self.make_state()
        c = core.Core(doc, checkpoints=["other"], run_folders=["r1", "r0"])
        kinds = sorted(i.kind for i in c.warnings)
        assert kinds == ["missing_checkpoint", "orphaned_folder"]
        assert core.Core(doc).warnings == []
        report = core.validate_state(doc, checkpoints=["sha-a"])
        assert report.valid
        assert report.warnings == []
        bad = core.validate_state(b"[]")
        assert not bad.valid
        assert bad.errors[0].kind == "corrupted_data"
