"""The keys of ``weft attach`` (:class:`weft.cli.attach.Keys`), whatever is typed.

The end-to-end tests (a real run, a real server, keys through a pty) are in
tests/server/test_attach.py; here the key handling alone is driven with
arbitrary key sequences against a stand-in for the client's three calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from weft.cli.attach import Keys, waiting_for

ROWS = [
    {"sha": f"{n}" * 40, "codonId": c, "codonName": c, "checkpointType": "completed", "onThread": t}
    for n, c, t in ((1, "draft", True), (2, "polish", True), (3, "greet", True), (4, "old", False))
]
STEERING = {"rollback.toCheckpoint", "rollback.toLastSuccess", "codon.redo", "server.shutdown"}


class Client:
    """What :class:`Keys` uses of :class:`weft.client.Client`, recording the commands."""

    mode = "readandwrite"

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def command(self, name: str, data: Any = None) -> None:
        self.sent.append((name, data))

    async def checkpoint_list(self) -> dict[str, Any]:
        return {"checkpoints": ROWS, "currentBranch": "main"}


async def _drive(keys_typed: str) -> tuple[list[tuple[str, Any]], list[str], list[int]]:
    client, notes, after = Client(), [], []
    keys = Keys(client, notes.append, asyncio.Event())  # type: ignore[arg-type]
    for index, key in enumerate(keys_typed):
        before = len(client.sent)
        keys.press(key)
        while keys.tasks:
            await asyncio.gather(*keys.tasks)
        after += [index] * (len(client.sent) - before)
    return client.sent, notes, after


KEYS = st.text(alphabet="nsfdlrxqy0123456789\r\x1bc\x7fZmu ", max_size=40)


@given(KEYS)
def test_no_key_sequence_raises_and_nothing_destructive_is_sent_without_y(typed: str) -> None:
    sent, _, sent_at = asyncio.run(_drive(typed))
    for (name, data), index in zip(sent, sent_at, strict=True):
        if name in STEERING:
            assert typed[index] == "y"
        if name == "rollback.toCheckpoint":
            on_thread = {r["sha"] for r in ROWS if r["onThread"]}
            assert data["checkpointSha"] in on_thread
            assert data["autoRestart"] is False
        if name == "codon.message":  # never empty, never a key that steered instead
            assert typed[index] == "\r"
            assert data["message"]
            assert data["message"] == data["message"].strip()


def test_l_numbers_the_thread_s_checkpoints_and_rolls_back_to_the_one_picked() -> None:
    sent, notes, _ = asyncio.run(_drive("l3\ry"))
    assert [n for n in notes if n.startswith("   ")] == [
        "   1. draft (draft) completed 1111111111",
        "   2. polish (polish) completed 2222222222",
        "   3. greet (greet) completed 3333333333",
    ]
    assert sent == [("rollback.toCheckpoint", {"checkpointSha": "3" * 40, "autoRestart": False})]


def test_a_number_out_of_range_is_said_and_esc_cancels() -> None:
    sent, notes, _ = asyncio.run(_drive("l9\r\x1bn"))
    assert any("no checkpoint 9: type 1-3" in n for n in notes)
    assert "rollback cancelled" in notes
    assert sent == [("codon.next", None)]  # after Esc, keys steer again


def test_waiting_for_says_which_key_the_run_waits_for() -> None:
    assert waiting_for(
        {"reason": "codon-completed", "message": "Waiting for codon.next to start polish"}
    ).startswith("waiting for next (n): polish")
    assert waiting_for({"reason": "all-codons-completed", "message": "x"}).startswith(
        "all codons done"
    )


def test_u_types_an_urgent_message_that_enter_sends_and_m_a_queued_one() -> None:
    # Backspace edits; keys that steer elsewhere are text while typing.
    sent, notes, _ = asyncio.run(_drive("uSay hi nx\x7fow.\rmrun the tests \r"))
    assert sent == [
        ("codon.message", {"message": "Say hi now.", "urgent": True}),
        ("codon.message", {"message": "run the tests", "urgent": False}),
    ]
    assert "type the urgent message (interrupts the agent); Enter sends, Esc cancels" in notes
    assert "urgent message sent: Say hi now." in notes
    assert "message sent: run the tests" in notes


def test_an_empty_or_cancelled_message_is_not_sent() -> None:
    sent, notes, _ = asyncio.run(_drive("u  \rmhello\x1bn"))
    assert sent == [("codon.next", None)]  # after Esc, keys steer again
    assert "empty message: not sent" in notes
    assert "message cancelled" in notes


def test_a_read_only_attach_cannot_send_a_message() -> None:
    client, notes = Client(), []
    client.mode = "readonly"
    keys = Keys(client, notes.append, asyncio.Event())  # type: ignore[arg-type]
    for key in "uhi\r":
        keys.press(key)
    assert client.sent == []
    assert notes[0].startswith("read-only: messages need the execution's token")
