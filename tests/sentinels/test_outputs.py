"""weft.sentinels.outputs: where outputs go and how they are written."""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson
import pytest

from weft.config.schema import SentinelConfig
from weft.errors import UnsafePathError
from weft.sentinels.outputs import OutputWriter, plan_outputs


def _plan(tmp_path: Path, **output: str) -> OutputWriter:
    config = msgspec.convert(
        {
            "id": "watch",
            "name": "watch",
            "model": "fake/haiku",
            "trigger": {"type": "event", "on": ["*"]},
            "execution": {"strategy": "immediate"},
            "userPromptText": "x",
            "joinString": "\n==\n",
            "output": {"format": "text", **output},
        },
        SentinelConfig,
    )
    plan = plan_outputs(
        config, None, workspace=tmp_path / "agentRoot", managed_dir=tmp_path / "managed"
    )
    return OutputWriter(plan.target("c1", "stamp"), "\n==\n")


def test_a_shared_log_joins_every_text_whoever_wrote_before(tmp_path: Path) -> None:
    """Two writers of one log (two codons of a shared config, the first one's
    second drain writing after the second one loaded): each text is joined to
    what the file holds when it is written."""
    first = _plan(tmp_path, file="log.md")
    second = _plan(tmp_path, file="log.md")  # made before first wrote anything
    first.append("a", {})
    second.append("b", {})
    first.append("c", {})
    assert (tmp_path / "managed/watch/log.md").read_text() == "a\n==\nb\n==\nc"


def test_an_output_never_goes_through_a_link_the_agent_made_after_the_load(
    tmp_path: Path,
) -> None:
    (tmp_path / "agentRoot/reports").mkdir(parents=True)
    writer = _plan(tmp_path, file="reports/log.md", lastValueFile="reports/last.json")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "agentRoot/reports").rmdir()
    (tmp_path / "agentRoot/reports").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="link"):
        writer.append("leaked", {})
    assert list(outside.iterdir()) == []


def test_the_last_value_file_replaces_a_link_in_its_place_and_never_writes_through_it(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "agentRoot"
    workspace.mkdir()
    writer = _plan(tmp_path, file="log.md", lastValueFile="./last.json")
    target = tmp_path / "elsewhere.json"
    target.write_text("untouched")
    (workspace / "last.json").symlink_to(target)  # after the check at load
    writer.append({"n": 1}, {})
    assert target.read_text() == "untouched"
    assert not (workspace / "last.json").is_symlink()
    assert orjson.loads((workspace / "last.json").read_bytes()) == {"n": 1}


def test_a_jsonl_log_gets_one_record_a_line(tmp_path: Path) -> None:
    writer = _plan(tmp_path, file="log.jsonl")
    writer.append("one", {"triggerNumber": 1})
    writer.append({"two": 2}, {"triggerNumber": 2})
    lines = (tmp_path / "managed/watch/log.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line) for line in lines] == [
        {"triggerNumber": 1, "content": "one"},
        {"triggerNumber": 2, "content": {"two": 2}},
    ]
