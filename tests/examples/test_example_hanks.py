"""Every example hank validates, without warnings, and covers what it is named for."""

from __future__ import annotations

from pathlib import Path

import pytest

from weft.config import CommandOp, CopyOp, Loop, load_hank, validate_hank
from weft.config.schema import ContextExceeded, IterationLimit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/hank.json"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_the_example_validates_cleanly(example: Path) -> None:
    report = validate_hank(example)
    assert report.valid, "\n".join(p.render() for p in report.problems)
    assert report.warnings == []


def test_the_examples_cover_the_features() -> None:
    names = {e.name for e in EXAMPLES}
    assert {
        "three-codons",
        "loop-iteration-limit",
        "loop-context-exceeded",
        "rig-setup",
        "sentinels",
    } <= names

    three = [c for c, _ in load_hank(ROOT / "examples/three-codons").codons()]
    assert [c.continuation_mode for c in three] == ["fresh", "continue-previous", "fresh"]
    assert three[0].model == three[1].model != three[2].model

    limited = load_hank(ROOT / "examples/loop-iteration-limit").hank.hank
    assert any(isinstance(i, Loop) and isinstance(i.terminate_on, IterationLimit) for i in limited)

    exceeded = load_hank(ROOT / "examples/loop-context-exceeded").hank.hank
    assert any(
        isinstance(i, Loop) and isinstance(i.terminate_on, ContextExceeded) for i in exceeded
    )

    rig = [op for c, _ in load_hank(ROOT / "examples/rig-setup").codons() for op in c.rig_setup]
    assert {type(op) for op in rig} == {CopyOp, CommandOp}

    sentinels = load_hank(ROOT / "examples/sentinels")
    assert sum(len(c.sentinels) for c, _ in sentinels.codons()) >= 2
    assert len(sentinels.sentinel_configs) >= 2
