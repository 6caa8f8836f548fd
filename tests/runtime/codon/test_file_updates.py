"""The paths a file-writing tool call names, read from a patch in time linear
in the patch (the agent writes it)."""

from __future__ import annotations

import time

from weft.runtime.codon.file_updates import tool_paths

PATCH = (
    "*** Begin Patch\n"
    "*** Add File: docs/new notes.md  \n"
    "+hello\n"
    "*** Update File: src/app.py\r\n"
    "*** Move to: src/main.py\t\n"
    "@@\n"
    "*** Delete File: old.txt\n"
    "*** Add File:    \n"
    "*** End Patch\n"
)


def test_a_patch_names_its_files_without_trailing_whitespace() -> None:
    assert tool_paths({"input": PATCH}) == [
        "docs/new notes.md",
        "src/app.py",
        "old.txt",
        "src/main.py",
    ]


def test_a_path_argument_wins_over_a_patch() -> None:
    assert tool_paths({"file_path": "a.md", "content": PATCH}) == ["a.md"]


def test_a_hostile_patch_line_is_read_in_linear_time() -> None:
    """A header line of 200,000 spaces ended by a letter: the lazy pattern
    before retried the whitespace from every position (20,000 spaces took
    7 s, this about 11 minutes, holding the interpreter)."""
    line = "*** Add File: x" + " " * 200_000 + "y"
    spaces_only = "*** Update File: " + " " * 200_000
    started = time.perf_counter()
    found = tool_paths({"input": f"{line}\n{spaces_only}\n"})
    elapsed = time.perf_counter() - started
    assert found == ["x" + " " * 200_000 + "y"]
    assert elapsed < 2.0, f"{elapsed:.2f}s"  # a hang detector: linear takes milliseconds
