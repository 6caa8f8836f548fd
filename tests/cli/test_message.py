"""``weft message`` and the message keys of ``weft attach`` (``codon.message``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import codon, write_hank

from weft.cli import main
from weft.cli.attach import Keys


class StubClient:
    """Records the commands a :class:`Keys` sends."""

    mode = "readandwrite"

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any] | None]] = []

    async def command(self, name: str, data: dict[str, Any] | None = None) -> None:
        self.sent.append((name, data))


async def test_attach_types_a_message_and_sends_it_on_enter() -> None:
    client, notes = StubClient(), []
    keys = Keys(client, notes.append, asyncio.Event())  # type: ignore[arg-type]
    for key in "uhi!x\x7f\n":
        keys.press(key)
    for key in "mlater\x1b":  # Escape cancels: nothing sent
        keys.press(key)
    for key in "mlater\r":
        keys.press(key)
    await asyncio.gather(*keys.tasks)
    assert client.sent == [
        ("codon.message", {"message": "hi!", "urgent": True}),
        ("codon.message", {"message": "later", "urgent": False}),
    ]
    assert "message cancelled" in notes
    assert "urgent message sent: hi!" in notes


async def test_attach_refuses_messages_when_read_only() -> None:
    client, notes = StubClient(), []
    client.mode = "readonly"
    keys = Keys(client, notes.append, asyncio.Event())  # type: ignore[arg-type]
    for key in "mhi\n":
        keys.press(key)
    assert client.sent == []
    assert notes[0].startswith("read-only: messages need")


def test_weft_message_without_a_run_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["message", str(tmp_path), "hello", "--urgent"]) == 2
    assert "not an execution (no .weft/ inside)" in capsys.readouterr().err
    assert main(["message", str(tmp_path), "  "]) == 2
    assert "the message is empty" in capsys.readouterr().err


def test_weft_message_names_its_execution_as_every_command_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hank means its latest execution; with only the text, ./hank.json's.
    hank = write_hank(tmp_path / "project", codon("a"))
    monkeypatch.setenv("WEFT_RUNTIME_EXECUTION_BASE_DIR", str(tmp_path / "managed"))
    assert main(["message", str(hank), "hello"]) == 2
    assert "has no execution under" in capsys.readouterr().err
    monkeypatch.chdir(hank.parent)
    assert main(["message", "hello"]) == 2
    assert "has no execution yet" in capsys.readouterr().err
