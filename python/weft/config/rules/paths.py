"""Paths and commands a codon names: rig operations, file references, workspace
paths, checkpoint patterns, archive paths, and commands that look dangerous.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from pathlib import Path
from typing import Any

from weft.checkpoints.errors import CheckpointPatternError
from weft.checkpoints.patterns import PatternSet
from weft.config.copies import executions_inside
from weft.config.problems import JsonPath
from weft.config.refs import RefKind, RefProblem
from weft.config.rules.context import RuleContext, get_dict, get_list, get_str
from weft.config.walk import Sink
from weft.terminal import printable

__all__ = [
    "ARCHIVE_NEVER",
    "MAX_PROMPT_BYTES",
    "archive_refusal",
    "check_archive_paths",
    "check_checkpointed_files",
    "check_command",
    "check_file_ref",
    "check_rig_op",
    "leaves_workspace",
]

MAX_PROMPT_BYTES = 1_000_000
"""A prompt file larger than this is probably a mistake (a warning)."""

_DANGEROUS = [
    (
        re.compile(r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-\S+\s+)*(/|/\*)(\s|;|&|$)"),
        "deletes the root directory",
    ),
    (
        re.compile(
            r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-\S+\s+)*(~|\$HOME)/?(\s|;|&|$)"
        ),
        "deletes the home directory",
    ),
    (re.compile(r">\s*/dev/(sd|nvme|hd|disk)"), "writes to a raw disk"),
    (re.compile(r"(^|[;&|]\s*)format\s+[a-zA-Z]:", re.IGNORECASE), "formats a drive"),
    (re.compile(r"\bdel\s+/s\s+/q\s+[a-zA-Z]:", re.IGNORECASE), "deletes a whole drive"),
]
_RESERVED_TARGETS = (".weft", ".hankweave", ".git")


def check_rig_op(op: Any, path: JsonPath, in_loop: bool, ctx: RuleContext) -> None:
    """One rig operation: a copy source inside the hank, a target inside the workspace, a
    command that does not look dangerous; in a loop, a failure should be allowed."""
    sink = ctx.sink
    if not isinstance(op, dict):
        return
    kind = op.get("type")
    if kind == "copy":
        spec = get_dict(op, "copy")
        source = get_str(spec, "from")
        if source:
            found = ctx.refs.check(source, None, "file-or-dir")
            if isinstance(found, RefProblem):
                sink.add((*path, "copy", "from"), "bad_ref", found.message, hint=found.hint)
            elif found.path.is_dir():
                _check_copied_executions(source, found.path, (*path, "copy", "from"), ctx)
        target = get_str(spec, "to")
        if target:
            why = _workspace_path_problem(target)
            first = next((part for part in target.split("/") if part not in ("", ".")), "")
            if why is None and first in _RESERVED_TARGETS:
                why = f'"{target}" is inside {first}/, which Weft and git manage'
            if why is not None:
                sink.add(
                    (*path, "copy", "to"),
                    "bad_value",
                    why,
                    hint="give a path relative to the agent's workspace",
                )
    elif kind == "command":
        run = get_str(get_dict(op, "command"), "run")
        if run:
            check_command(run, (*path, "command", "run"), sink)
    if in_loop and kind in ("copy", "command") and op.get("allowFailure") is not True:
        sink.warn(
            (*path, "allowFailure"),
            "loop_rig",
            "a rig operation in a loop codon that fails in a later iteration fails the codon",
            hint='set "allowFailure": true if it may fail in some iterations',
        )


def _check_copied_executions(source: str, folder: Path, path: JsonPath, ctx: RuleContext) -> None:
    """A copied folder holding an execution of this hank would copy that execution
    into itself without end (:mod:`weft.config.copies`)."""
    for execution, hank in executions_inside(folder):
        shown = printable(str(execution))
        ours = hank is not None and Path(hank).resolve().parent == ctx.root
        if ours:
            ctx.sink.add(
                path,
                "unbounded_copy",
                f'the copy source "{printable(source)}" holds this hank\'s execution {shown}: '
                "the copy would copy itself without end",
                hint="move the execution out of the copied folder (weft run --execution DIR)",
            )
        else:
            ctx.sink.warn(
                path,
                "copies_execution",
                f'the copy source "{printable(source)}" holds the Weft execution {shown}, '
                "which would be copied too",
                hint="move it out of the copied folder",
            )


def check_command(run: str, path: JsonPath, sink: Sink) -> None:
    """Warns about a command that looks destructive (deletes the root or home, formats a drive)."""
    for pattern, what in _DANGEROUS:
        if pattern.search(run):
            sink.warn(path, "dangerous_command", f"this command {what}: {run!r}")
            return


def _workspace_path_problem(target: str) -> str | None:
    if any(unicodedata.category(ch) == "Cc" for ch in target):
        return f'"{printable(target)}" contains a control character'
    if "\\" in target:
        return f'"{target}" uses backslashes'
    if target.startswith(("/", "~")):
        return f'"{target}" is absolute'
    depth = 0
    for part in target.split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            return f'"{target}" leaves the workspace'
    if depth == 0:
        return f'"{target}" is the workspace itself'
    return None


@functools.lru_cache(maxsize=4096)
def leaves_workspace(value: str, *, glob: bool = False) -> str | None:
    """Why ``value``, a path (or with ``glob`` a glob, where ``\\`` escapes) relative
    to the agent's workspace, would name something outside it (``None`` when it
    stays inside)."""
    shown = f'"{printable(value)}"'
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        return f"{shown} contains a control character"
    if value.startswith(("/", "~", "\\\\")) or re.match(r"^[A-Za-z]:", value):
        return f"{shown} is absolute"
    if not glob and "\\" in value:
        return f"{shown} uses backslashes"
    if ".." in value.split("/"):
        return f'{shown} contains "..", which leaves the workspace'
    return None


def check_checkpointed_files(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """Checkpoints hold workspace files only: an absolute or escaping pattern is
    refused here rather than silently re-rooted by the checkpoint module."""
    for i, pattern in enumerate(get_list(codon, "checkpointedFiles")):
        if not isinstance(pattern, str):
            continue
        where: JsonPath = (*path, "checkpointedFiles", i)
        body = pattern[1:] if pattern.startswith("!") else pattern
        why = leaves_workspace(body, glob=True)
        if why is not None:
            sink.add(
                where,
                "bad_path",
                f"checkpointedFiles pattern {why}",
                hint="checkpoints hold files inside the agent's workspace: write a pattern "
                "relative to it, such as notes/** or *.md",
            )
            continue
        problem = _pattern_problem(pattern)
        if problem is not None:
            sink.add(where, "bad_path", problem)


@functools.lru_cache(maxsize=4096)
def _pattern_problem(pattern: str) -> str | None:
    """Why the checkpoint module refuses ``pattern``, or None. Cached: a hank
    repeats the same few patterns over its codons, and compiling one is the
    costliest check of a hank (it was half of loading a 1,000-codon hank)."""
    try:
        PatternSet.compile([pattern])
    except CheckpointPatternError as e:
        return printable(str(e))
    return None


def check_archive_paths(obj: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """``archiveOnSuccess`` paths stay inside the workspace."""
    for i, p in enumerate(get_list(obj, "archiveOnSuccess")):
        if not isinstance(p, str) or not p:
            continue
        if ".." in p.split("/") or p.startswith("/") or "\\" in p:
            sink.add(
                (*path, "archiveOnSuccess", i),
                "bad_value",
                f'"{p}" must be relative to the workspace, without ".." or a leading "/"',
            )
        elif (top := archive_refusal(p)) is not None:
            sink.add(
                (*path, "archiveOnSuccess", i),
                "bad_value",
                f'"{p}" would move {top} out of the workspace',
                hint="name a file or folder inside the workspace that the codon made",
            )


ARCHIVE_NEVER = {
    "read_only_data_source": "the input data",
    ".weft": "Weft's state",
    ".git": "a git repository's folder",
}
"""Top-level workspace entries archiveOnSuccess may not move."""


def archive_refusal(value: str) -> str | None:
    """What an archive path would wrongly move (the workspace itself, the data, ...)."""
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if not parts:
        return "the whole workspace"
    return ARCHIVE_NEVER.get(parts[0])


def check_file_ref(
    ref: str,
    path: JsonPath,
    base: Path,
    ctx: RuleContext,
    *,
    prompt: bool = False,
    kind: RefKind = "file",
    sink: Sink | None = None,
) -> Path | None:
    """Checks a file reference; returns the file when it is safe."""
    out = sink or ctx.sink
    found = ctx.refs.check(ref, base, kind)
    if isinstance(found, RefProblem):
        out.add(path, "bad_ref", found.message, hint=found.hint)
        return None
    if prompt:
        size = found.size
        if size == 0:
            out.warn(path, "empty_prompt", f'prompt file "{ref}" is empty')
        elif size > MAX_PROMPT_BYTES:
            out.warn(
                path,
                "large_prompt",
                f'prompt file "{ref}" is {size:,} bytes (over {MAX_PROMPT_BYTES:,})',
            )
    return found.path
