"""Claude Code's tools as the fake plays them: the tool_use inputs of the
directives (Write, Edit, Read, Bash), what running them returns (content,
``is_error``, ``tool_use_result``), and the headless permission rules
(``--permission-mode``, ``--allowedTools``, ``--disallowedTools``)."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from typing import Any

from weft.agents.fake import directives as dirs
from weft.agents.fake.common import Ids, JsonObj, quote
from weft.agents.fake.directives import Op, ToolError, Workspace

TOOLS_2_1_330 = (
    "Task",
    "Bash",
    "CronCreate",
    "CronDelete",
    "CronList",
    "DesignSync",
    "Edit",
    "EnterWorktree",
    "ExitWorktree",
    "ListAgents",
    "Monitor",
    "NotebookEdit",
    "Read",
    "ReportFindings",
    "ScheduleWakeup",
    "SendMessage",
    "Skill",
    "TaskStop",
    "ToolSearch",
    "WebFetch",
    "WebSearch",
    "Workflow",
    "Write",
)
"""The init ``tools`` of Claude Code 2.1.330 (23 names: no Glob, Grep or
TodoWrite; searching is done with Bash)."""

DEFAULT_TOOLS = (
    "Task",
    "Bash",
    "Glob",
    "Grep",
    "ExitPlanMode",
    "Read",
    "Edit",
    "Write",
    "NotebookEdit",
    "WebFetch",
    "TodoWrite",
    "WebSearch",
    "BashOutput",
    "KillShell",
    "Skill",
    "SlashCommand",
)
"""The init ``tools`` before 2.1.330 (``FAKE_AGENT_VERSION`` below it)."""
READ_ONLY_TOOLS = frozenset(
    {"Read", "Glob", "Grep", "LS", "TodoWrite", "Task", "ExitPlanMode", "BashOutput"}
)
EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})


class ToolCall:
    """A tool_use block and what running it does."""

    def __init__(
        self,
        tool_id: str,
        name: str,
        tool_input: JsonObj,
        perform: Callable[[], tuple[Any, bool, Any]],
        *,
        target: str = "",
        read_only: bool = False,
    ) -> None:
        self.id = tool_id
        self.name = name
        self.input = tool_input
        self.perform = perform
        """Returns ``(content, is_error, tool_use_result)``."""
        self.target = target
        """The path or command that permission rules match against."""
        self.read_only = read_only
        """A Bash command that only reads (``ls``, ``find``): Claude Code runs
        those without asking, in every permission mode."""

    def block(self) -> JsonObj:
        """The tool_use content block."""
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


def shell_quote(path: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./@%+=:,-]+", path):
        return path
    return "'" + path.replace("'", "'\"'\"'") + "'"


def failure(message: str) -> tuple[str, bool, str]:
    return f"<tool_use_error>{message}</tool_use_error>", True, f"Error: {message}"


def bash_result(stdout: str, stderr: str) -> JsonObj:
    return {"stdout": stdout, "stderr": stderr, "interrupted": False, "isImage": False}


def write_result(full: str, content: str, original: str | None) -> tuple[Any, bool, Any]:
    if original is None:
        return (
            f"File created successfully at: {full}",
            False,
            {
                "type": "create",
                "filePath": full,
                "content": content,
                "structuredPatch": [],
                "originalFile": None,
            },
        )
    snippet = dirs.numbered(content, limit=40)
    return (
        f"The file {full} has been updated. Here's the result of running `cat -n` on a "
        f"snippet of the edited file:\n{snippet}",
        False,
        {
            "type": "update",
            "filePath": full,
            "content": content,
            "structuredPatch": dirs.structured_patch(original, content),
            "originalFile": original,
        },
    )


class Toolbox:
    """The tools of one run: what each directive calls, whether headless
    Claude Code may run it without asking, and what running it returns."""

    def __init__(
        self,
        workspace: Workspace,
        ids: Ids,
        rng: random.Random,
        *,
        tools: list[str],
        permission_mode: str,
        allowed: list[str],
        disallowed: list[str],
    ) -> None:
        self.workspace = workspace
        self.cwd = workspace.cwd
        self.ids = ids
        self.rng = rng
        self.tools = tools
        self.permission_mode = permission_mode
        self.allowed = allowed
        self.disallowed = disallowed
        self.denials: list[JsonObj] = []
        """``permission_denials`` of the result."""
        self.outcomes: list[bool] = []
        """Whether each tool call of the current turn succeeded."""

    def _rule_matches(self, rule: str, call: ToolCall) -> bool:
        name, _, spec = rule.partition("(")
        if name != call.name:
            return False
        if not spec:
            return True
        spec = spec.rstrip(")")
        if spec.endswith(":*"):
            return call.target.startswith(spec[:-2])
        import fnmatch

        rel = os.path.relpath(call.target, self.cwd) if os.path.isabs(call.target) else call.target
        return call.target == spec or fnmatch.fnmatch(rel, spec)

    def permitted(self, call: ToolCall) -> bool:
        """Whether headless Claude Code may run ``call`` without asking."""
        if any(self._rule_matches(rule, call) for rule in self.disallowed):
            return False
        mode = self.permission_mode
        if mode == "bypassPermissions":
            return True
        if call.name in READ_ONLY_TOOLS or call.read_only:
            return True
        if mode == "acceptEdits" and call.name in EDIT_TOOLS:
            return True
        return any(self._rule_matches(rule, call) for rule in self.allowed)

    def run_tool(self, call: ToolCall) -> tuple[Any, bool, Any]:
        """Run a tool call, or refuse it the way Claude Code does."""
        if call.name not in self.tools:
            outcome: tuple[Any, bool, Any] = failure(f"Error: No such tool available: {call.name}")
        elif not self.permitted(call):
            if call.name in EDIT_TOOLS:
                message = (
                    f"Claude requested permissions to write to {call.target}, "
                    "but you haven't granted it yet."
                )
            else:
                message = (
                    f"Claude requested permissions to use {call.name}, "
                    "but you haven't granted it yet."
                )
            self.denials.append(
                {"tool_name": call.name, "tool_use_id": call.id, "tool_input": call.input}
            )
            outcome = (message, True, f"Error: {message}")
        else:
            outcome = call.perform()
        self.outcomes.append(not outcome[1])
        return outcome

    def op_call(self, op: Op) -> tuple[str, ToolCall]:
        """The lead text and tool call for one directive."""
        tool_id = self.ids.tool()
        path = op.path or ""
        shown = self.workspace.display(path) if path else ""
        build = {
            "write": self._write_call,
            "append": self._append_call,
            "edit": self._edit_call,
            "read": self._read_call,
            "delete": self._delete_call,
        }.get(op.verb, self._bash_call)
        return build(op, tool_id, path, shown)

    def _write_call(self, op: Op, tool_id: str, path: str, shown: str) -> tuple[str, ToolCall]:
        """Write a file with the directive's text."""
        ws = self.workspace

        def write() -> tuple[Any, bool, Any]:
            try:
                full, original = ws.write(path, op.text)
            except ToolError as exc:
                return failure(exc.message)
            return write_result(full, op.text, original)

        lead = f"I'll write `{path}`."
        return lead, ToolCall(
            tool_id, "Write", {"file_path": shown, "content": op.text}, write, target=shown
        )

    def _append_call(self, op: Op, tool_id: str, path: str, shown: str) -> tuple[str, ToolCall]:
        """Write the file's current text plus the directive's (Claude has no append tool)."""
        ws = self.workspace
        try:
            current = ws.read(path)[1] if os.path.exists(ws.resolve(path)) else ""
        except ToolError:
            current = ""
        content = current + op.text

        def append() -> tuple[Any, bool, Any]:
            try:
                full, original = ws.write(path, content)
            except ToolError as exc:
                return failure(exc.message)
            return write_result(full, content, original)

        lead = f"I'll add to `{path}`."
        return lead, ToolCall(
            tool_id, "Write", {"file_path": shown, "content": content}, append, target=shown
        )

    def _edit_call(self, op: Op, tool_id: str, path: str, shown: str) -> tuple[str, ToolCall]:
        """Edit: replace ``old`` with ``new``."""
        ws = self.workspace

        def edit() -> tuple[Any, bool, Any]:
            try:
                full, original, updated = ws.edit(path, op.old, op.new, op.replace_all)
            except ToolError as exc:
                return failure(exc.message)
            snippet = dirs.numbered(updated, limit=40)
            content = (
                f"The file {full} has been updated. Here's the result of running `cat -n` "
                f"on a snippet of the edited file:\n{snippet}"
            )
            return (
                content,
                False,
                {
                    "filePath": full,
                    "oldString": op.old,
                    "newString": op.new,
                    "originalFile": original,
                    "structuredPatch": dirs.structured_patch(original, updated),
                    "userModified": False,
                    "replaceAll": op.replace_all,
                },
            )

        tool_input = {
            "file_path": shown,
            "old_string": op.old,
            "new_string": op.new,
            "replace_all": op.replace_all,
        }
        return f"I'll edit `{path}`.", ToolCall(tool_id, "Edit", tool_input, edit, target=shown)

    def _read_call(self, op: Op, tool_id: str, path: str, shown: str) -> tuple[str, ToolCall]:
        """Read a file; the result is ``cat -n`` text."""
        ws = self.workspace

        def read() -> tuple[Any, bool, Any]:
            try:
                full, text = ws.read(path)
            except ToolError as exc:
                return failure(exc.message)
            lines = text.splitlines()
            return (
                dirs.numbered(text),
                False,
                {
                    "type": "text",
                    "file": {
                        "filePath": full,
                        "content": text,
                        "numLines": len(lines),
                        "startLine": 1,
                        "totalLines": len(lines),
                    },
                },
            )

        lead = f"Let me read `{path}`."
        return lead, ToolCall(tool_id, "Read", {"file_path": shown}, read, target=shown)

    def _delete_call(self, op: Op, tool_id: str, path: str, shown: str) -> tuple[str, ToolCall]:
        """Delete a file through Bash ``rm``."""
        ws = self.workspace
        command = f"rm {shell_quote(path)}"

        def delete() -> tuple[Any, bool, Any]:
            try:
                ws.delete(path)
            except ToolError as exc:
                text = f"Exit code 1\n{exc.message}"
                return text, True, f"Error: {text}"
            return "", False, bash_result("", "")

        tool_input = {"command": command, "description": f"Delete {path}"}
        return f"I'll delete `{path}`.", ToolCall(
            tool_id, "Bash", tool_input, delete, target=command
        )

    def _bash_call(self, op: Op, tool_id: str, path: str, shown: str) -> tuple[str, ToolCall]:
        """Run the directive's command through Bash."""
        ws = self.workspace
        command = op.text.strip()

        def bash() -> tuple[Any, bool, Any]:
            timeout = float(os.environ.get("BASH_DEFAULT_TIMEOUT_MS") or 120_000) / 1000
            out, err, code, timed_out = ws.bash(command, timeout)
            text = "\n".join(part for part in (out.rstrip("\n"), err.rstrip("\n")) if part)
            if code != 0:
                text = f"Exit code {code}\n{text}".rstrip("\n")
                return text, True, f"Error: {text}"
            result = bash_result(out, err)
            result["interrupted"] = timed_out
            return text, False, result

        first = command.splitlines()[0] if command else ""
        tool_input = {"command": command, "description": f"Run {quote(first, 60)}"}
        return f"I'll run `{quote(first, 60)}`.", ToolCall(
            tool_id, "Bash", tool_input, bash, target=command
        )

    def ls_call(self) -> ToolCall:
        listing = self.workspace.listing()

        def ls() -> tuple[Any, bool, Any]:
            out = "\n".join(listing)
            return out, False, bash_result(out, "")

        return ToolCall(
            self.ids.tool(),
            "Bash",
            {"command": "ls", "description": "List files in the working directory"},
            ls,
            target="ls",
            read_only=True,
        )

    def glob_call(self, pattern: str) -> ToolCall:
        import fnmatch

        matches = [
            os.path.join(self.cwd, name)
            for name in self.workspace.listing()
            if fnmatch.fnmatch(name, pattern)
        ]

        if "Glob" not in self.tools:
            return self._find_call(pattern, matches)

        def glob() -> tuple[Any, bool, Any]:
            text = "\n".join(matches) if matches else "No files found"
            return (
                text,
                False,
                {
                    "filenames": matches,
                    "durationMs": self.rng.randint(3, 40),
                    "numFiles": len(matches),
                    "truncated": False,
                },
            )

        return ToolCall(self.ids.tool(), "Glob", {"pattern": pattern}, glob, target=pattern)

    def _find_call(self, pattern: str, matches: list[str]) -> ToolCall:
        # Without a Glob tool (2.1.330) the model searches with Bash.
        command = f"find . -maxdepth 1 -name {shell_quote(pattern)}"

        def find() -> tuple[Any, bool, Any]:
            out = "".join(f"./{os.path.basename(m)}\n" for m in matches)
            return out.rstrip("\n"), False, bash_result(out, "")

        return ToolCall(
            self.ids.tool(),
            "Bash",
            {"command": command, "description": f"Find files matching {pattern}"},
            find,
            target=command,
            read_only=True,
        )
