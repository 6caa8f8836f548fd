"""Claude's headless permission rules and tool results, without a process."""

from __future__ import annotations

import random
from pathlib import Path

from weft.agents.fake.claude_tools import DEFAULT_TOOLS, Toolbox
from weft.agents.fake.common import Ids
from weft.agents.fake.directives import Op, Workspace


def toolbox(
    tmp_path: Path,
    mode: str = "default",
    allowed: tuple[str, ...] = (),
    disallowed: tuple[str, ...] = (),
) -> Toolbox:
    rng = random.Random(0)
    return Toolbox(
        Workspace(str(tmp_path)),
        Ids(rng),
        rng,
        tools=list(DEFAULT_TOOLS),
        permission_mode=mode,
        allowed=list(allowed),
        disallowed=list(disallowed),
    )


def test_rules_with_specifiers(tmp_path: Path) -> None:
    box = toolbox(tmp_path, allowed=("Bash(git log:*)", "Edit(src/*.py)"))
    _lead, git = box.op_call(Op("bash", text="git log -1"))
    _lead, other = box.op_call(Op("bash", text="rm -rf /"))
    _lead, edit_ok = box.op_call(Op("edit", path="src/a.py", old="a", new="b"))
    _lead, edit_no = box.op_call(Op("edit", path="docs/a.md", old="a", new="b"))
    assert box.permitted(git)
    assert not box.permitted(other)
    assert box.permitted(edit_ok)
    assert not box.permitted(edit_no)


def test_modes(tmp_path: Path) -> None:
    _lead, write = toolbox(tmp_path).op_call(Op("write", path="f", text="x"))
    _lead, read = toolbox(tmp_path).op_call(Op("read", path="f"))
    _lead, bash = toolbox(tmp_path).op_call(Op("bash", text="ls"))
    assert toolbox(tmp_path).permitted(read)
    assert not toolbox(tmp_path).permitted(write)
    assert toolbox(tmp_path, "acceptEdits").permitted(write)
    assert not toolbox(tmp_path, "acceptEdits").permitted(bash)
    assert toolbox(tmp_path, "bypassPermissions").permitted(bash)
    assert not toolbox(tmp_path, "bypassPermissions", disallowed=("Bash",)).permitted(bash)


def test_a_denied_call_changes_nothing_and_is_recorded(tmp_path: Path) -> None:
    box = toolbox(tmp_path)
    _lead, write = box.op_call(Op("write", path="f", text="x"))
    content, is_error, result = box.run_tool(write)
    assert is_error
    assert "haven't granted it yet" in content
    assert result.startswith("Error:")
    assert not (tmp_path / "f").exists()
    assert box.denials == [
        {"tool_name": "Write", "tool_use_id": write.id, "tool_input": write.input}
    ]
    assert box.outcomes == [False]


def test_edit_result_has_a_structured_patch(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("one\ntwo\nthree\n")
    box = toolbox(tmp_path, "bypassPermissions")
    _lead, edit = box.op_call(Op("edit", path="f", old="two", new="2"))
    content, is_error, result = box.run_tool(edit)
    assert not is_error
    assert "has been updated" in content
    assert result["structuredPatch"][0]["lines"] == [" one", "-two", "+2", " three"]
    assert (tmp_path / "f").read_text() == "one\n2\nthree\n"
