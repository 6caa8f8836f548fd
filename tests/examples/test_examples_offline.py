"""Every example in examples/ runs to its end offline: ``weft run EXAMPLE -m fake/...``
with one model of each fake agent.

Each runs through the real CLI, in this process, on the fake agent; the
loop that waits for a full context ends because the example's codon env
selects the fake's ``context_full`` scenario (real agents ignore it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.runtime.hanks import codon_records, fake_environment, journal, read_state

from weft.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/hank.json"))


FAMILIES = ["fake/sonnet", "fake/gpt-5", "fake/gemini-2.5-pro"]
"""One model of each fake agent (Claude, Codex, Gemini)."""


@pytest.mark.parametrize("model", FAMILIES)
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_the_example_ends_offline_on_the_fake_agent(
    example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    fake_environment(monkeypatch, tmp_path)
    execution = tmp_path / "x"
    argv = ["run", str(example), "-m", model, "--headless", "--execution", str(execution)]
    code = main([*argv, "-o", str(tmp_path / "out")])
    assert code == 0
    records = codon_records(read_state(execution))
    assert records
    assert all(r["status"] == "completed" for r in records.values())


@pytest.mark.parametrize("model", FAMILIES)
def test_the_context_exceeded_loop_ends_when_the_fake_context_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    # Each fake family fills its context the way its real CLI reports it
    # (Claude's prompt-too-long, Codex's "ran out of room", Gemini's token count).
    fake_environment(monkeypatch, tmp_path)
    execution = tmp_path / "x"
    example = ROOT / "examples/loop-context-exceeded"
    argv = ["run", str(example), "-m", model, "--headless", "--execution", str(execution)]
    assert main(argv) == 0
    # list-tasks is the session's first prompt: the fourth (iteration 2) fills the context.
    assert list(codon_records(read_state(execution))) == [
        "list-tasks",
        "next-task#0",
        "next-task#1",
        "next-task#2",
        "summarise",
    ]
    final = [d for kind, d in journal(execution) if kind == "loop.iteration.completed"][-1]
    assert (final["iteration"], final["isFinal"], final["terminationReason"]) == (
        2,
        True,
        "context_exceeded",
    )


def test_the_hank_file_reference_names_every_example() -> None:
    page = (ROOT / "docs" / "hank-file.md").read_text()
    (line,) = [p for p in page.split("\n\n") if p.startswith("`examples/` holds complete hanks")]
    named = {name for name in line.split("`")[1::2] if name != "examples/"}
    every = {p.name for p in (ROOT / "examples").iterdir() if p.is_dir()}
    assert named >= every - {"__pycache__"}
