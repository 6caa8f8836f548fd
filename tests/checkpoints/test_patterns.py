"""The checkpointedFiles glob dialect: documented examples, errors, and a reference model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.checkpoints.oracle import covered

from weft.checkpoints import CheckpointPatternError, PatternSet, is_excluded

# (pattern, path, covered?) straight from the rules in docs/checkpoints.md.
DOCUMENTED = [
    ("*.md", "README.md", True),
    ("*.md", "docs/a.md", False),  # slashless patterns are anchored at the root
    ("**/*.md", "docs/a.md", True),
    ("**/*.md", "README.md", True),
    ("src/**/*.py", "src/a.py", True),  # ** matches zero directories
    ("src/**/*.py", "src/x/y/a.py", True),
    ("src/**/*.py", "src/x/y/a.txt", False),
    ("src/**/*.py", "lib/src/a.py", False),
    ("notes/**", "notes/a/b/c.txt", True),
    ("notes/**", "notes", False),
    ("notes", "notes/a.txt", True),  # a directory name covers its content
    ("notes", "notes", True),  # ...or the file of that name
    ("notes/", "notes/a.txt", True),
    ("notes/", "notes", False),  # a trailing slash: directories only
    ("src/*", "src/sub/deep.py", True),  # the match src/sub is a directory
    ("src/*.py", "src/sub/deep.py", False),
    ("*", "anything/at/all", True),
    ("?.txt", "a.txt", True),
    ("?.txt", "ab.txt", False),
    ("[ab].txt", "b.txt", True),
    ("[!ab].txt", "b.txt", False),
    ("[!ab].txt", "c.txt", True),
    ("[a-c]x", "bx", True),
    ("*.{md,txt}", "a.txt", True),
    ("*.{md,txt}", "a.py", False),
    ("{src,lib}/**/*.py", "lib/a.py", True),
    ("./notes/**", "notes/a", True),
    ("/notes/**", "notes/a", True),
    ("notes//a.md", "notes/a.md", True),
    ("*", ".hidden", True),  # dot files are not special
    (r"\*.md", "*.md", True),
    (r"\*.md", "a.md", False),
    ("**", ".weft/state.json", False),  # runtime paths, whatever the patterns say
    ("**", "a/.WEFT/x", False),
    ("**", "rigArchive/x", False),
    ("**", "sub/rigArchive/x", True),  # rigArchive is excluded at the root only
    ("**", "read_only_data_source", False),
    ("**", ".weft.backup-2025-01-01/x", False),
    ("**", "x/.weftcheckpoints-quarantine-1/HEAD", False),
    ("**", "proj/.git/config", False),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), DOCUMENTED)
def test_documented_examples(pattern: str, path: str, expected: bool) -> None:
    assert PatternSet.compile([pattern]).matches(path) is expected


def test_negation_removes_from_the_union_whatever_its_position() -> None:
    early = PatternSet.compile(["!src/gen/**", "src/**"])
    late = PatternSet.compile(["src/**", "!src/gen/**"])
    for pset in (early, late):
        assert pset.matches("src/a.py")
        assert not pset.matches("src/gen/b.py")
        assert not pset.could_cover_under("src/gen")


def test_a_directory_only_exclusion_keeps_direct_children() -> None:
    pset = PatternSet.compile(["a", "!a/a/**/"])
    assert pset.matches("a/a/a")  # a file directly in a/a: not inside a directory under it
    assert not pset.matches("a/a/b/c")
    assert pset.could_cover_under("a/a")
    assert not pset.could_cover_under("a/a/b")


def test_runtime_paths_fold_case_and_unicode() -> None:
    fullwidth = str.maketrans(
        "ACEGHIRVWeft", "\uff21\uff23\uff25\uff27\uff28\uff29\uff32\uff36\uff37\uff45\uff46\uff54"
    )
    assert is_excluded("RIGARCHIVE/x".translate(fullwidth))
    assert is_excluded("a/.Weft/b".translate(fullwidth))
    assert is_excluded("a/.GiT")
    assert not is_excluded("a/.weftish/b")
    assert not is_excluded("a/rigArchive/b")


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        ("", "empty pattern"),
        ("   ", "empty pattern"),
        ("../secrets", "leaves the workspace"),
        ("notes/../../x", "leaves the workspace"),
        ("C:\\data\\x", "absolute Windows path"),
        ("[z-a]", "not a valid glob"),
    ],
)
def test_bad_patterns_are_refused_with_a_reason(pattern: str, needle: str) -> None:
    with pytest.raises(CheckpointPatternError) as info:
        PatternSet.compile([pattern])
    assert needle in str(info.value)
    assert info.value.pattern == pattern


def test_scan_roots_limit_a_full_comparison_to_literal_prefixes() -> None:
    assert PatternSet.compile(["notes/**", "src/a/*.py", "src/b"]).scan_roots() == [
        "notes",
        "src/a",
        "src/b",
    ]
    assert PatternSet.compile(["src/**", "src/a/**"]).scan_roots() == ["src"]
    assert PatternSet.compile(["notes/**", "*.md"]).scan_roots() is None
    assert PatternSet.compile([]).scan_roots() == []


# ------------------------------------------------------------- reference model

NAMES = ["a", "b", "ab", "x.md", "y.py", ".h", "rigArchive", ".weft", "n-1"]
GLOB_PARTS = [*NAMES, "*", "?", "**", "*.md", "*.py", "a*", "[ab]", "[!a]*", "{a,b}", "x.{md,py}"]

names = st.sampled_from(NAMES)
paths = st.lists(names, min_size=1, max_size=4).map("/".join)
glob_components = st.lists(st.sampled_from(GLOB_PARTS), min_size=1, max_size=4)
globs = st.builds(
    lambda comps, slash, neg: ("!" if neg else "") + "/".join(comps) + ("/" if slash else ""),
    glob_components,
    st.booleans(),
    st.booleans(),
)
pattern_lists = st.lists(globs, min_size=0, max_size=4)


@given(pattern_lists, paths)
@settings(max_examples=1000)
def test_matching_agrees_with_the_reference_model(patterns: list[str], path: str) -> None:
    assert PatternSet.compile(patterns).matches(path) == covered(patterns, path)


@given(pattern_lists, paths)
@settings(max_examples=1000)
def test_directory_pruning_never_hides_a_covered_file(patterns: list[str], path: str) -> None:
    pset = PatternSet.compile(patterns)
    if pset.matches(path):
        parts = path.split("/")
        for k in range(len(parts)):
            assert pset.could_cover_under("/".join(parts[:k])), "/".join(parts[:k])


@given(pattern_lists, paths, paths)
@settings(max_examples=1000)
def test_a_pruned_directory_has_no_covered_file(
    patterns: list[str], directory: str, rest: str
) -> None:
    pset = PatternSet.compile(patterns)
    if not pset.could_cover_under(directory):
        assert not covered(patterns, f"{directory}/{rest}")


@given(pattern_lists, paths)
@settings(max_examples=1000)
def test_every_covered_file_lies_under_a_scan_root(patterns: list[str], path: str) -> None:
    pset = PatternSet.compile(patterns)
    roots = pset.scan_roots()
    if pset.matches(path) and roots is not None:
        assert any(path == r or path.startswith(r + "/") for r in roots)
