"""``weft diff A B`` end to end on the fake agent: a real execution, two forks of
it at c2 on other models (one with an edited c3), and the comparison of the two
forks: per-codon figures equal to what each fork's ``weft status --json`` says,
the divergence at the fork point, files from the codons' real writes, the text
and ``--files`` output, and refusals of bad input."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    codon,
    scenario,
    subprocess_environment,
    weft_cli,
    write_file,
    write_hank,
)

CODONS = ["c1", "c2", "c3"]


@dataclass(frozen=True)
class Forks:
    root: Path
    env: dict[str, str]
    source: Path
    a: Path
    b: Path


def _hank(folder: Path, c3_writes: str) -> Path:
    codons = [
        codon(
            c,
            write_file(f"{c}.md", c3_writes if c == "c3" else f"{c} was here\n") + f"Do {c}.",
            mode="fresh" if c == "c1" else "continue-previous",
        )
        for c in CODONS
    ]
    return write_hank(folder, *codons)


def weft(forks: Forks | dict[str, str], *args: str | Path) -> Any:
    env = forks.env if isinstance(forks, Forks) else forks
    return weft_cli(*args, env=env, timeout=120)


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Forks:
    root = tmp_path_factory.mktemp("diff")
    env = subprocess_environment(root)
    hank = _hank(root / "hank", "c3 was here\n")
    edited = _hank(root / "edited", "c3 was edited\nby B\n")
    source = root / "x"
    assert weft(env, "run", hank, "--execution", source, "--headless").returncode == 0
    a, b = root / "fork-a", root / "fork-b"
    made = weft(env, "fork", source, "--from", "c2", "-m", "fake/opus", "--to", a, "--headless")
    assert made.returncode == 0, made.stdout + made.stderr
    made = weft(
        env, "fork", source, "--from", "c2", "-m", "fake/haiku", "--hank", edited, "--to", b,
        "--headless",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    return Forks(root=root, env=env, source=source, a=a, b=b)


def status(forks: Forks, execution: Path) -> dict[str, Any]:
    done = weft(forks, "status", execution, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def diff_json(forks: Forks, *args: str | Path) -> dict[str, Any]:
    done = weft(forks, "diff", *args, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def fork_records(forks: Forks, execution: Path) -> dict[str, dict[str, Any]]:
    """The records of the fork's own run (its newest), by codon, as ``weft status`` says them."""
    runs = status(forks, execution)["runs"]
    newest = max(runs, key=lambda r: r["startTime"])
    return {c["codonId"]: c for c in newest["codons"]}


def seconds(record: dict[str, Any]) -> float:
    from weft.clock import ms_from_iso

    start, end = ms_from_iso(record["startTime"]), ms_from_iso(record["endTime"])
    assert start is not None
    assert end is not None
    return (end - start) / 1000


def test_diff_of_two_forks_compares_each_codon_and_finds_the_fork_point(forks: Forks) -> None:
    d = diff_json(forks, forks.a, forks.b)
    assert d["divergedAt"] == "c2"
    assert d["a"]["forkedFrom"] == {"execution": str(forks.source.resolve()), "codonId": "c2"}
    assert d["b"]["forkedFrom"] == d["a"]["forkedFrom"]
    rows = {c["codonId"]: c for c in d["codons"]}
    assert [c["codonId"] for c in d["codons"]] == CODONS
    # c1 is the source's, inherited by both: the same record, the same files.
    assert rows["c1"]["sameRecord"] is True
    assert rows["c1"]["a"] == rows["c1"]["b"]
    assert rows["c1"]["files"] == []
    records = {"a": fork_records(forks, forks.a), "b": fork_records(forks, forks.b)}
    for codon_id in ("c2", "c3"):
        row = rows[codon_id]
        assert row["sameRecord"] is False
        for which in ("a", "b"):
            mine, said = row[which], records[which][codon_id]
            assert mine["status"] == "completed"
            assert mine["cost"] == pytest.approx(said["cost"], abs=1e-9)
            assert mine["seconds"] == pytest.approx(seconds(said), abs=1e-3)
            assert mine["attempts"] == 1
            assert mine["toolCalls"] == 1  # the one Write each codon's prompt asks for
        # Another model, another price: the difference is B's cost less A's.
        assert row["a"]["cost"] != row["b"]["cost"]
        assert row["costDelta"] == pytest.approx(row["b"]["cost"] - row["a"]["cost"], abs=1e-9)
    # c2 wrote the same file on both; only B's edited c3 wrote another c3.md.
    assert rows["c2"]["files"] == []
    assert rows["c3"]["files"] == [{"path": "c3.md", "change": "modified"}]
    for which, execution in (("a", forks.a), ("b", forks.b)):
        said = status(forks, execution)
        totals = d[which]["totals"]
        assert totals["executionCost"] == pytest.approx(said["totalCost"], abs=1e-12)
        assert totals["cost"] == pytest.approx(
            sum(rows[c][which]["cost"] for c in CODONS), abs=1e-9
        )
        assert totals["toolCalls"] == 3
        assert totals["codons"] == 3


def test_diff_of_a_source_and_its_fork_diverges_where_the_fork_was_made(forks: Forks) -> None:
    done = weft(forks, "diff", forks.source, forks.a)
    assert done.returncode == 0, done.stderr
    assert "They diverge at c2, where B was forked from A." in done.stdout
    d = diff_json(forks, forks.source, forks.b)
    assert d["divergedAt"] == "c2"
    assert d["a"]["forkedFrom"] is None


def test_an_execution_compared_with_itself_does_not_diverge(forks: Forks) -> None:
    d = diff_json(forks, forks.a, forks.a)
    assert d["divergedAt"] is None
    assert all(c["sameRecord"] and c["costDelta"] == 0 for c in d["codons"])


VOLATILE = [
    (re.compile(r"\$\d+\.\d{4}"), "$C"),
    (re.compile(r"\d+\.\ds"), "Ts"),
    (re.compile(r"\d{1,3}(?:,\d{3})+|\d{4,}"), "N"),
]
"""Money, times and token counts: the fake's figures vary from run to run."""


def normalised(text: str, forks: Forks) -> str:
    text = text.replace(str(forks.root.resolve()), "<tmp>").replace(str(forks.root), "<tmp>")
    for pattern, word in VOLATILE:
        text = pattern.sub(word, text)
    # Two runs may take the same tenth of a second (or, rarely, tokens): one value
    # then, not a pair. And the columns' widths follow the figures: compare the
    # words, not the padding.
    text = text.replace("Ts → Ts", "Ts").replace("N → N", "N")
    return "\n".join(re.sub(r" {2,}", "  ", line).rstrip() for line in text.splitlines())


GOLDEN = """\
A  <tmp>/fork-a  (forked from <tmp>/x at c2)
B  <tmp>/fork-b  (forked from <tmp>/x at c2)
They diverge at c2, where both were forked from <tmp>/x.

  codon  state  cost  tokens  time  attempts  tool calls  files
  c1  completed  $C  N  Ts  1  1  same record
*  c2  completed  $C → $C (-$C)  N  Ts  1  1  same
*  c3  completed  $C → $C (-$C)  N  Ts  1  1  1 differ: c3.md

total  codons 3, cost $C → $C (-$C), tokens N, time Ts, attempts 3, tool calls 3
execution total cost (as weft status counts it, superseded records too): $C → $C"""


def test_diff_text_output_is_the_golden_table(forks: Forks) -> None:
    done = weft(forks, "diff", forks.a, forks.b)
    assert done.returncode == 0, done.stderr
    assert normalised(done.stdout, forks) == GOLDEN


def test_diff_files_prints_the_patch_of_what_the_codons_wrote(forks: Forks) -> None:
    done = weft(forks, "diff", forks.a, forks.b, "--files")
    assert done.returncode == 0, done.stderr
    patch = done.stdout.split("c3: c3.md (modified)\n", 1)[1].splitlines()
    assert patch[:2] == ["--- a/c3.md", "+++ b/c3.md"]
    assert patch[3:] == ["-c3 was here", "+c3 was edited", "+by B"]
    d = diff_json(forks, forks.a, forks.b, "--files")
    (c3,) = [c for c in d["codons"] if c["codonId"] == "c3"]
    assert c3["files"][0]["patch"].splitlines()[3:] == patch[3:]
    without = diff_json(forks, forks.a, forks.b)
    assert "patch" not in next(c for c in without["codons"] if c["codonId"] == "c3")["files"][0]


def test_diff_refuses_what_is_not_an_execution(forks: Forks, tmp_path: Path) -> None:
    missing = weft(forks, "diff", forks.a, tmp_path / "nosuch")
    assert missing.returncode == 2
    assert "nosuch: no such execution directory" in missing.stderr
    plain = tmp_path / "plain"
    plain.mkdir()
    not_one = weft(forks, "diff", plain, forks.b)
    assert not_one.returncode == 2
    assert "not an execution" in not_one.stderr
    one = weft(forks, "diff", forks.a)
    assert one.returncode == 2
    assert "B" in one.stderr


def test_diff_refuses_an_execution_whose_meta_is_unreadable(forks: Forks, tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(forks.a, broken, symlinks=True)
    (broken / ".weft" / "execution-meta.json").write_text("{not json")
    done = weft(forks, "diff", forks.a, broken)
    assert done.returncode == 2
    assert "execution-meta.json" in done.stderr
    assert done.stdout == ""


def test_a_retried_codon_counts_every_attempt_and_a_codon_never_run_has_one_side(
    forks: Forks, tmp_path: Path
) -> None:
    env = {**forks.env, "WEFT_RUNTIME_SESSION_MAX_TOTAL_ERRORS": "1"}  # the hank's retry acts
    failing = codon(
        "c2", scenario("crash_mid_run"), mode="continue-previous", onFailure="retry",
        retryConfig={"maxAttempts": 2, "delayMs": 10},
    )  # fmt: skip
    first = codon("c1", write_file("c1.md", "c1 was here\n") + "Do c1.")
    hank = write_hank(tmp_path / "hank", first, failing, codon("c3", mode="continue-previous"))
    other = tmp_path / "y"
    assert weft(env, "run", hank, "--execution", other, "--headless").returncode != 0
    d = diff_json(forks, forks.source, other)
    assert d["divergedAt"] == "c1"  # unrelated executions: no record is shared
    rows = {c["codonId"]: c for c in d["codons"]}
    assert list(rows) == CODONS
    assert (rows["c2"]["a"]["status"], rows["c2"]["b"]["status"]) == ("completed", "failed")
    assert (rows["c2"]["a"]["attempts"], rows["c2"]["b"]["attempts"]) == (1, 2)
    said = [
        c for run in status(forks, other)["runs"] for c in run["codons"] if c["codonId"] == "c2"
    ]
    assert len(said) == 2
    assert rows["c2"]["b"]["cost"] == pytest.approx(sum(c["cost"] for c in said), abs=1e-9)
    assert rows["c2"]["files"] is None  # a failed codon has no completion checkpoint
    assert rows["c3"]["b"] is None  # y never ran c3
    assert rows["c3"]["a"]["status"] == "completed"
    assert d["b"]["totals"]["attempts"] == 3
