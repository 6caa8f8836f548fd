"""Live fan-out: envelopes, frames, the ring and the bounded send queue."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.builders import lifecycle, run_started
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from weft.events.stream import AssistantActionEvent, InfoEvent
from weft.server.fanout import Fanout, envelope, frames, text_frame
from weft.server.history import JournalHistory
from weft.state import Processed, StateManager
from weft.store import ExecutionStore


def parse_frames(data: bytes) -> list[Frame]:
    """Frames as a client reads them (websockets' own parser)."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    out = []
    while reader.buffer:
        parser = Frame.parse(reader.read_exact, mask=False)
        try:
            while True:
                next(parser)
        except StopIteration as done:
            out.append(done.value)
    return out


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 200_000])
def test_a_text_frame_of_any_size_parses_back_to_its_payload(size: int) -> None:
    payload = bytes(itertools.islice(itertools.cycle(b"weft{}"), size))
    (frame,) = parse_frames(text_frame(payload))
    assert (frame.opcode, frame.fin, frame.data) == (Opcode.TEXT, True, payload)


def test_frames_are_one_per_payload_in_order() -> None:
    payloads = [b"a" * n for n in (3, 300, 70_000, 0)]
    assert [f.data for f in parse_frames(frames(payloads))] == payloads


async def test_live_envelopes_are_byte_for_byte_the_envelopes_replay_reads(
    tmp_path: Path,
) -> None:
    store = await asyncio.to_thread(ExecutionStore.open, tmp_path / "x")
    manager = store.state_manager()
    live: list[bytes] = []
    manager.add_listener(lambda item: live.append(envelope(item)))
    manager.transition(run_started("r1"))
    for t in lifecycle("r1", "a"):
        manager.transition(t)
    manager.transition(lifecycle("r1", "a")[1])  # refused: journaled as an error event
    manager.emit(AssistantActionEvent(codon_id="a", action="message", content="é ✓"))
    manager.transition_bytes(b'  {"type":"InitialCheckpointSet","data":{"sha":"abc"}}')
    await manager.flush()
    history = JournalHistory(store.journal.path)
    try:
        page = await history.page(0, manager.last_seq, 1000, 1 << 30)
    finally:
        await history.close()
        await store.close(manager)
    assert page.events == b",".join(live)
    docs = [json.loads(e) for e in live]
    assert [d["seq"] for d in docs] == list(range(1, len(live) + 1))
    refused = docs[len(lifecycle("r1", "a")) + 1]
    assert refused["type"] == "error"
    assert refused["data"]["transitionType"] == "CodonTransitioned"
    assert docs[-1]["data"] == {"sha": "abc"}


@dataclass(eq=False)
class Sink:
    """A live client as the fan-out sees it: it keeps what it is written."""

    cursor: int = 0
    live_batches: bool = False
    backlog: int = 0
    """Bytes it pretends are still waiting to be sent."""
    written: list[bytes] = field(default_factory=list)
    dropped: bool = False

    def waiting(self) -> int:
        return self.backlog

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def lagging(self) -> None:
        self.dropped = True

    def seqs(self) -> list[int]:
        out = []
        for frame in parse_frames(b"".join(self.written)):
            doc = json.loads(frame.data)
            events = doc["data"]["events"] if doc["type"] == "live.batch" else [doc]
            out += [e["seq"] for e in events]
        return out


async def fed(fanout: Fanout, n: int, manager: StateManager) -> None:
    for i in range(n):
        manager.emit(InfoEvent(message=f"m{i}"))
    await manager.flush()
    await asyncio.sleep(0)  # the flush is scheduled for the next loop turn


async def test_every_live_subscriber_gets_each_event_once_framed_its_way() -> None:
    manager = StateManager()
    fanout = Fanout(0, ring_size=8)
    manager.add_listener(fanout.on_processed)
    one, batched = Sink(), Sink(live_batches=True)
    fanout.add(one)
    fanout.add(batched)
    await fed(fanout, 30, manager)
    await fed(fanout, 5, manager)
    assert one.seqs() == batched.seqs() == list(range(1, 36))
    assert len(parse_frames(b"".join(one.written))) == 35
    assert len(parse_frames(b"".join(batched.written))) == 2  # one frame per flush
    assert one.cursor == batched.cursor == 35


async def test_a_subscriber_that_caught_up_mid_batch_gets_only_the_rest() -> None:
    manager = StateManager()
    fanout = Fanout(0, ring_size=64)
    manager.add_listener(fanout.on_processed)
    late = Sink(cursor=6)  # it read 1..6 from the ring while the batch was being handed out

    def join_at_six(item: object) -> None:
        if getattr(item, "seq", 0) == 6:
            fanout.add(late)

    manager.add_listener(join_at_six)
    early = Sink()
    fanout.add(early)
    await fed(fanout, 10, manager)
    assert late.seqs() == [7, 8, 9, 10]
    assert early.seqs() == list(range(1, 11))


async def test_a_subscriber_that_would_miss_events_is_refused() -> None:
    manager = StateManager()
    fanout = Fanout(0)
    manager.add_listener(fanout.on_processed)
    await fed(fanout, 5, manager)
    with pytest.raises(ValueError, match=r"miss events 3\.\.5"):
        fanout.add(Sink(cursor=2))


async def test_a_subscriber_behind_by_more_than_the_limit_is_dropped_alone() -> None:
    manager = StateManager()
    fanout = Fanout(0, send_limit=1000)
    manager.add_listener(fanout.on_processed)
    slow, fast = Sink(), Sink()
    fanout.add(slow)
    fanout.add(fast)
    await fed(fanout, 3, manager)
    slow.backlog = 1001  # it has not taken what it was sent
    await fed(fanout, 3, manager)
    assert slow.dropped
    assert slow.seqs() == [1, 2, 3]
    assert fast.seqs() == list(range(1, 7))
    assert fanout.subscribers == 1
    await fed(fanout, 1, manager)
    assert slow.seqs() == [1, 2, 3]


@given(
    ring=st.integers(1, 40),
    events=st.integers(0, 80),
    after=st.integers(0, 90),
    upto=st.one_of(st.none(), st.integers(0, 90)),
)
def test_the_ring_serves_a_range_exactly_or_says_it_cannot(
    ring: int, events: int, after: int, upto: int | None
) -> None:
    fanout = Fanout(0, ring_size=ring)
    for seq in range(1, events + 1):
        fanout.head = seq
        fanout._ring.append((seq, b'{"seq":%d}' % seq))
    end = events if upto is None else min(upto, events)
    got = fanout.since(after, upto)
    wanted = list(range(after + 1, end + 1))
    oldest_kept = max(events - ring + 1, 1)
    if wanted and wanted[0] < oldest_kept:
        assert got is None
    else:
        assert got is not None
        assert [seq for seq, _ in got] == wanted
    assert [s for s, _ in fanout.last(5)] == list(
        range(max(events - min(ring, 5) + 1, 1), events + 1)
    )


async def test_seeding_puts_journal_events_in_front_only_when_they_join_up() -> None:
    fanout = Fanout(10, ring_size=8)
    fanout.seed([(9, b"9"), (10, b"10")])
    assert [s for s, _ in fanout.last(8)] == [9, 10]
    fanout.seed([(3, b"3")])  # does not join the ring: ignored
    assert [s for s, _ in fanout.last(8)] == [9, 10]


@given(steps=st.lists(st.sampled_from(["event", "join", "leave"]), max_size=60))
def test_the_ring_serves_the_same_envelopes_whether_or_not_a_client_was_live(
    steps: list[str],
) -> None:
    """With no live client the ring keeps what makes an envelope and makes it on
    demand; a client that joins later must read exactly the eager envelopes."""

    async def scenario() -> None:
        manager = StateManager()
        fanout = Fanout(0, ring_size=16)
        manager.add_listener(fanout.on_processed)
        made: dict[int, bytes] = {}
        manager.add_listener(lambda item: made.__setitem__(item.seq, envelope(item)))
        live: list[Sink] = []
        for n, step in enumerate(steps):
            if step == "event":
                manager.emit(InfoEvent(message=f"m{n}"))
                await manager.flush()
                await asyncio.sleep(0)
            elif step == "join":
                sink = Sink(cursor=fanout.head)
                fanout.add(sink)
                live.append(sink)
            elif live:
                fanout.remove(live.pop())
            for after in range(max(fanout.head - 16, 0), fanout.head + 1):
                got = fanout.since(after)
                assert got == [(seq, made[seq]) for seq in range(after + 1, fanout.head + 1)]
            assert fanout.last(3) == [
                (s, made[s]) for s in range(max(fanout.head - 2, 1), fanout.head + 1)
            ]
        await manager.close()

    asyncio.run(scenario())


async def test_a_client_leaving_before_the_flush_leaves_no_stale_pending_events() -> None:
    """Found in review: events pending for a client that left, then one seen with no
    one live, made ``add`` count the pending ones as not yet flushed, so a client
    at an older cursor was accepted and never sent the newest event."""

    def item(seq: int) -> Processed:
        return Processed(seq, b'{"type":"info","data":{"message":"m"}}', None, None, 10**18 + seq)  # type: ignore[arg-type]

    fanout = Fanout(9, ring_size=8)
    first = Sink(cursor=9)
    fanout.add(first)
    fanout.on_processed(item(10))  # pending for the next loop turn's flush
    fanout.remove(first)  # the client leaves before it
    fanout.on_processed(item(11))  # no one live
    with pytest.raises(ValueError, match=r"would miss events 11\.\.11"):
        fanout.add(Sink(cursor=10))
    late = Sink(cursor=fanout.head)
    fanout.add(late)
    fanout.on_processed(item(12))
    await asyncio.sleep(0)
    assert late.seqs() == [12]
