"""The finished-codon deltas of ``state.snapshot``: a client folding every
snapshot of a journal holds the runtime's list, whatever codons finish,
rollbacks cut and processes restart in between."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weft.events.completed import EMPTY_DIGEST, CompletedCodons, digest, fold, mark_of
from weft.events.stream import CodonSummary, StateSnapshotEvent
from weft.state import encode_stream


def codon(i: int, run: str = "r1", status: str = "completed") -> CodonSummary:
    return CodonSummary(codon_id=f"c{i}", run_id=run, status=status, cost=0.25)


def snapshot(tracker: CompletedCodons) -> StateSnapshotEvent:
    keep, added, count, value = tracker.delta()
    return StateSnapshotEvent(
        completed_codons=added,
        completed_from=keep,
        completed_count=count,
        completed_digest=value,
        total_cost=0.0,
        total_time=0,
    )


def test_each_snapshot_carries_only_the_codon_that_finished() -> None:
    tracker = CompletedCodons()
    tracker.reset([])
    sizes = []
    for i in range(200):
        tracker.append(codon(i))
        sizes.append(len(encode_stream(snapshot(tracker))))
    # Only digits grow, not the history: the codon id, completedFrom and
    # completedCount each gain two from c1 to c199 (the first omits completedFrom=0).
    assert max(sizes) - sizes[1] <= 3 * 2


def test_a_rollback_keeps_the_shared_prefix_and_sends_the_rest() -> None:
    tracker = CompletedCodons()
    tracker.reset([codon(0), codon(1), codon(2)])
    first = snapshot(tracker)
    assert (first.completed_from, len(first.completed_codons)) == (0, 3)
    tracker.reset([codon(0), codon(1, run="r2")])
    second = snapshot(tracker)
    assert (second.completed_from, [c.run_id for c in second.completed_codons]) == (1, ["r2"])
    assert fold(fold([], first), second) == [codon(0), codon(1, run="r2")]


def test_a_new_process_sends_only_what_the_journal_lacks() -> None:
    before = CompletedCodons()
    before.reset([codon(0), codon(1)])
    payload = encode_stream(snapshot(before))
    after = CompletedCodons()
    after.expect(mark_of(payload))
    after.reset([codon(0), codon(1), codon(2)])  # c2 finished, then the process died
    assert snapshot(after).completed_from == 2


def test_a_journal_that_disagrees_gets_the_whole_list_once() -> None:
    before = CompletedCodons()
    before.reset([codon(0), codon(1, status="failed")])
    after = CompletedCodons()
    after.expect(mark_of(encode_stream(snapshot(before))))
    after.reset([codon(0), codon(1)])
    assert snapshot(after).completed_from == 0


def test_an_old_whole_list_snapshot_is_read_as_a_mark_and_folds_as_a_replacement() -> None:
    old = b'{"type":"state.snapshot","data":{"completedCodons":[{"codonId":"c0","runId":"r1",'
    old += b'"status":"completed"}],"totalCost":0.0,"totalTime":1,"fileTree":[]}}'
    mark = mark_of(old)
    assert mark is not None
    assert (mark.count, mark.digest) == (1, digest([codon(0)]))
    data = msgspec.json.decode(old)["data"]
    event = msgspec.convert(data, StateSnapshotEvent)
    assert [c.codon_id for c in fold([codon(7), codon(8)], event)] == ["c0"]


def test_folding_from_a_list_shorter_than_kept_says_events_were_missed() -> None:
    tracker = CompletedCodons()
    tracker.reset([codon(0), codon(1)])
    snapshot(tracker)
    tracker.append(codon(2))
    with pytest.raises(ValueError, match=r"history\.sync"):
        fold([], snapshot(tracker))


def test_the_empty_list_has_the_empty_digest() -> None:
    assert digest([]) == EMPTY_DIGEST


# One step of a run: a codon finishes (append), the thread is re-read after a
# rollback to a prefix plus new codons (reset), a snapshot is sent, or the
# process restarts (a new tracker told the journal's last snapshot).
_step = st.one_of(
    st.tuples(st.just("finish"), st.integers(0, 3)),
    st.tuples(st.just("rollback"), st.integers(0, 12)),
    st.tuples(st.just("snapshot"), st.just(0)),
    st.tuples(st.just("restart"), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_step, max_size=40))
def test_folding_every_journaled_snapshot_gives_the_runtime_list(
    steps: list[tuple[str, int]],
) -> None:
    truth: list[CodonSummary] = []
    tracker = CompletedCodons()
    tracker.reset([])
    journal: list[bytes] = []
    serial = 0
    for action, n in steps:
        if action == "finish":
            serial += 1
            truth.append(codon(serial, status=("completed", "failed", "skipped", "completed")[n]))
            tracker.append(truth[-1])
        elif action == "rollback":
            serial += 1
            truth = [*truth[: min(n, len(truth))], codon(serial, run=f"r{serial}")]
            tracker.reset(list(truth))
        elif action == "snapshot":
            journal.append(encode_stream(snapshot(tracker)))
        else:
            tracker = CompletedCodons()
            tracker.expect(mark_of(journal[-1]) if journal else None)
            tracker.reset(list(truth))
        folded: list[CodonSummary] = []
        for payload in journal:
            data = msgspec.json.decode(payload)["data"]
            folded = fold(folded, msgspec.convert(data, StateSnapshotEvent))
        if journal and action == "snapshot":
            assert folded == truth
            assert msgspec.json.decode(journal[-1])["data"]["completedDigest"] == digest(truth)


def test_an_unreadable_journaled_snapshot_means_the_whole_list_is_sent() -> None:
    assert mark_of(b'{"type":"state.snapshot","data":{"completedCodons":7}}') is None
    tracker = CompletedCodons()
    tracker.expect(None)
    tracker.reset([codon(0)])
    assert snapshot(tracker).completed_from == 0
