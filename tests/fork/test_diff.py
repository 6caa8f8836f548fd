"""The comparison of :mod:`weft.fork.diff` on its own values: how codons only
one thread has are aligned, where two sides diverge, what an unknown price does
to a difference, and the files two checkpoints hold differently (with their
patches). End to end on real forks: ``tests/cli/test_diff.py``."""

from __future__ import annotations

from weft.fork.diff import CodonFigures, Side, checkpoints_to_read, compare, file_changes


def figures(run_id: str, index: int, cost: float = 0.01, *, checkpoint: str | None = None,
            unpriced: bool = False) -> CodonFigures:  # fmt: skip
    return CodonFigures(
        run_id=run_id, index=index, status="completed", cost=cost, unpriced=unpriced, tokens=10,
        seconds=0.5, attempts=1, tool_calls=1, checkpoint=checkpoint,
    )  # fmt: skip


def a_side(name: str, **codons: CodonFigures) -> Side:
    return Side(execution=name, codons=codons, total_cost=0.0, unpriced_codons=0)


def test_codons_only_one_thread_has_are_placed_after_the_codon_before_them() -> None:
    a = a_side("A", c1=figures("r1", 0), c2=figures("r1", 1), c4=figures("r1", 2))
    b = a_side("B", c1=figures("r1", 0), c3=figures("r2", 0), c4=figures("r2", 1))
    d = compare(a, b, {}, {})
    assert [c.codon_id for c in d.codons] == ["c1", "c2", "c3", "c4"]
    assert [(c.a is None, c.b is None) for c in d.codons] == [
        (False, False), (False, True), (True, False), (False, False),
    ]  # fmt: skip
    assert d.diverged_at == "c2"  # the first codon whose record is not shared


def test_sides_sharing_every_record_do_not_diverge() -> None:
    a = a_side("A", c1=figures("r1", 0, checkpoint="s1"), c2=figures("r1", 1, checkpoint="s2"))
    d = compare(a, a, {}, {})
    assert d.diverged_at is None
    assert checkpoints_to_read(a, a) == (set(), set())  # one commit: nothing to read
    assert all(c.files == () for c in d.codons)


def test_an_unpriced_codon_has_no_cost_difference() -> None:
    a = a_side("A", c1=figures("r1", 0, 0.02))
    b = a_side("B", c1=figures("r2", 0, 0.0, unpriced=True))
    (row,) = compare(a, b, {}, {}).codons
    assert row.to_json()["costDelta"] is None
    assert row.to_json()["b"]["cost"] is None  # unknown, never $0
    priced = a_side("B", c1=figures("r2", 0, 0.05))
    (row,) = compare(a, priced, {}, {}).codons
    assert row.to_json()["costDelta"] == 0.03


def test_files_are_compared_from_the_checkpoints_read_and_unknown_otherwise() -> None:
    a = a_side("A", c1=figures("r1", 0, checkpoint="aaa"))
    b = a_side("B", c1=figures("r2", 0, checkpoint="bbb"))
    assert checkpoints_to_read(a, b) == ({"aaa"}, {"bbb"})
    (row,) = compare(a, b, {"aaa": {"x.md": b"1\n"}}, {"bbb": {"x.md": b"2\n"}}).codons
    assert [(f.path, f.change) for f in row.files or ()] == [("x.md", "modified")]
    (row,) = compare(a, b, {}, {"bbb": {"x.md": b"2\n"}}).codons
    assert row.files is None  # A's checkpoint could not be read: unknown, not "same"


def test_file_changes_name_each_path_with_its_patch() -> None:
    old = {"same.md": b"s\n", "gone.md": b"bye\n", "edit.md": b"one\ntwo", "bin": b"\0\1"}
    new = {"same.md": b"s\n", "new.md": b"hi\n", "edit.md": b"one\nthree\n", "bin": b"\0\2"}
    changes = {c.path: c for c in file_changes(old, new)}
    assert {p: c.change for p, c in changes.items()} == {
        "bin": "modified", "edit.md": "modified", "gone.md": "removed", "new.md": "added",
    }  # fmt: skip
    assert changes["new.md"].patch.splitlines()[:2] == ["--- /dev/null", "+++ b/new.md"]
    assert changes["gone.md"].patch.splitlines()[-1] == "-bye"
    assert changes["edit.md"].patch.splitlines()[3:] == [
        " one", "-two", "\\ No newline at end of file", "+three",
    ]  # fmt: skip
    assert changes["bin"].patch == "Binary files a/bin and b/bin differ\n"
