"""The prompt directive language and the workspace's file operations."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.agents.fake.common import FakeConfigError
from weft.agents.fake.directives import ToolError, Workspace, parse, plain_text, structured_patch


def test_block_and_inline_directives_in_order() -> None:
    prompt = (
        "Please work.\n"
        "@@fake:write path=notes.md@@\n# Notes\nline\n@@end@@\n"
        '@@fake:edit path=a.py old="x = 1" new="x = 2"@@\n'
        "@@fake:edit path=b.py@@\nold\n@@with@@\nnew\n@@end@@\n"
        '@@fake:append path=notes.md content="more\\n"@@'
        "@@fake:delete path=gone.txt@@ @@fake:read path=notes.md@@"
        "@@fake:bash ls -la@@ @@fake:bash@@\nmake test\n@@end@@"
        "@@fake:sleep ms=5@@ @@fake:say The end.@@ @@fake:scenario=tool_use,turns=2@@"
    )
    parsed = parse(prompt)
    assert [op.verb for op in parsed.ops] == [
        "write",
        "edit",
        "edit",
        "append",
        "delete",
        "read",
        "bash",
        "bash",
        "sleep",
        "say",
    ]
    write, edit, block, append, delete, read, bash, bash2, sleep, say = parsed.ops
    assert (write.path, write.text) == ("notes.md", "# Notes\nline\n")
    assert (edit.old, edit.new) == ("x = 1", "x = 2")
    assert (block.old, block.new) == ("old", "new")
    assert append.text == "more\n"
    assert (delete.path, read.path) == ("gone.txt", "notes.md")
    assert (bash.text, bash2.text) == ("ls -la", "make test\n")
    assert sleep.ms == 5
    assert say.text == "The end."
    assert parsed.scenario == "tool_use,turns=2"
    assert parsed.says == ["The end."]
    assert "Please work." in parsed.plain
    assert "@@" not in parsed.plain


def test_first_scenario_directive_wins() -> None:
    assert parse("@@fake:scenario=a@@ @@fake:scenario=b@@").scenario == "a"


@pytest.mark.parametrize(
    ("prompt", "needle"),
    [
        ("@@fake:write path=a@@ no end", "no closing @@end@@"),
        ("@@fake:write content=x@@", "missing path="),
        ("@@fake:frobnicate@@", "unknown directive"),
        ("@@fake:scenario@@", "@@fake:scenario=<name>"),
        ("@@fake:sleep ms=soon@@", "not a number"),
        ("@@fake:edit path=a@@ x @@end@@", "@@with@@"),
        ('@@fake:edit path=a old="unterminated@@', "cannot read attributes"),
    ],
)
def test_malformed_directives_say_what_and_where(prompt: str, needle: str) -> None:
    with pytest.raises(FakeConfigError, match="at character") as err:
        parse(prompt)
    assert needle in str(err.value)


def test_plain_text_tolerates_broken_directives() -> None:
    assert plain_text("before @@fake:write path=a@@ after") == "before  after"


@given(old=st.text(min_size=1), new=st.text())
def test_quoted_attributes_round_trip(old: str, new: str) -> None:
    quoted = f"@@fake:edit path=f old={json.dumps(old)} new={json.dumps(new)}@@"
    if "@@" in quoted[len("@@fake:edit") : -2]:
        return  # "@@" always ends a header; such texts need the block form.
    (op,) = parse(quoted).ops
    assert (op.old, op.new) == (old, new)


def test_workspace_refuses_paths_outside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret").write_text("s")
    (root / "link").symlink_to(tmp_path)
    ws = Workspace(str(root))
    for path in ("../secret", str(tmp_path / "secret"), "link/secret", "a/../../secret"):
        with pytest.raises(ToolError) as err:
            ws.write(path, "x")
        assert err.value.kind == "escape"
    assert (tmp_path / "secret").read_text() == "s"
    full, original = ws.write("sub/dir/f.txt", "ok")
    assert full == str(root / "sub" / "dir" / "f.txt")
    assert original is None


def test_edit_rules_follow_claude_code(tmp_path: Path) -> None:
    ws = Workspace(str(tmp_path))
    ws.write("f", "a a b")
    with pytest.raises(ToolError) as many:
        ws.edit("f", "a", "c", replace_all=False)
    assert many.value.kind == "many_matches"
    with pytest.raises(ToolError) as none:
        ws.edit("f", "zzz", "c", replace_all=False)
    assert none.value.kind == "no_match"
    with pytest.raises(ToolError) as same:
        ws.edit("f", "b", "b", replace_all=False)
    assert same.value.kind == "no_change"
    ws.edit("f", "a", "c", replace_all=True)
    assert (tmp_path / "f").read_text() == "c c b"
    with pytest.raises(ToolError) as missing:
        ws.edit("nope", "a", "b", replace_all=False)
    assert missing.value.kind == "missing"


def test_delete_append_read_and_bash(tmp_path: Path) -> None:
    ws = Workspace(str(tmp_path))
    assert ws.append("log", "1\n")[1] is None
    assert ws.append("log", "2\n") == (str(tmp_path / "log"), "1\n", "1\n2\n")
    assert ws.read("log")[1] == "1\n2\n"
    ws.delete("log")
    assert not (tmp_path / "log").exists()
    with pytest.raises(ToolError):
        ws.delete("log")
    out, err, code, timed_out = ws.bash("echo out; echo err >&2; exit 3", 10)
    assert (out, err, code, timed_out) == ("out\n", "err\n", 3, False)
    assert ws.bash("pwd", 10)[0].strip() == os.path.realpath(tmp_path)


lines = st.lists(st.sampled_from(["a", "b", "c", "d", ""]), max_size=12)


@given(before=lines, after=lines)
def test_structured_patch_turns_the_old_text_into_the_new(
    before: list[str], after: list[str]
) -> None:
    old, new = "\n".join(before), "\n".join(after)
    hunks = structured_patch(old, new)
    if old.splitlines() == new.splitlines():
        assert hunks == []
        return
    (hunk,) = hunks
    a = old.splitlines()
    start = hunk["oldStart"] - 1
    kept = [line[1:] for line in hunk["lines"] if line[0] in " +"]
    removed = [line[1:] for line in hunk["lines"] if line[0] in " -"]
    assert removed == a[start : start + hunk["oldLines"]]
    assert a[:start] + kept + a[start + hunk["oldLines"] :] == new.splitlines()
    assert len(kept) == hunk["newLines"]
