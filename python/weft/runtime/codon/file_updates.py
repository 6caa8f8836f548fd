"""``file.updated`` events from the agent's own file-writing tool calls.

A StateManager listener (it sees committed events only, in journal order):
an ``assistant.action`` that calls a file-writing tool (:data:`WRITE_TOOLS`:
Claude's ``Write``/``Edit``/``MultiEdit``/``NotebookEdit``, Codex's
``apply_patch``, Gemini's ``write_file``/``replace``) names its paths; when
the matching ``tool.result`` says it succeeded, each path is looked at (size
and SHA-256, off the event loop) and a
:class:`~weft.events.stream.FileUpdatedEvent` is journaled: ``created`` when
the file did not exist when the call was seen, ``modified`` otherwise,
``deleted`` when it is gone (a deletion made by a shell command is not a
file-writing tool call, so it is not seen). Deduplicated per codon: the same path with the
same content is reported once. Paths outside the agent's workspace are not
reported (a tool call that names one is refused by the agent anyway).

Why tool calls and not a file watcher: the tool call says which file the
agent meant to change and when, at no cost while nothing is written; a
watcher would also report the agent's build outputs and rig copies.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Final

from weft.events.stream import (
    AssistantActionEvent,
    FileUpdatedEvent,
    FileUpdateSource,
    ToolResultEvent,
)
from weft.state import Processed, StateManager

__all__ = ["WRITE_TOOLS", "FileUpdates", "tool_paths"]

WRITE_TOOLS: Final = frozenset(
    ("Write", "Edit", "MultiEdit", "NotebookEdit", "apply_patch", "write_file", "replace")
)
"""Tools whose success means a file changed."""
_PATH_KEYS: Final = ("file_path", "path", "notebook_path", "filePath")
# `(.*\S)`, not `(.+?)\s*$`: the lazy form retried the trailing whitespace
# from every position, quadratic in a line the agent writes (20,000 spaces
# took 7 s holding the interpreter).
_PATCH_LINE: Final = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.*\S)", re.M)
_MOVE_LINE: Final = re.compile(r"^\*\*\* Move to: (.*\S)", re.M)
_CHUNK: Final = 1 << 20
_CREATED: Final = "File created successfully"


def tool_paths(tool_input: dict[str, Any] | None) -> list[str]:
    """The paths a file-writing tool call names (its path argument, or the
    file headers of an ``apply_patch`` patch)."""
    if not tool_input:
        return []
    found: list[str] = []
    for key in _PATH_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            found.append(value)
    if not found:
        for value in tool_input.values():
            if isinstance(value, str) and "*** " in value:
                found.extend(_PATCH_LINE.findall(value))
                found.extend(_MOVE_LINE.findall(value))
    return list(dict.fromkeys(found))


def _look(path: Path) -> tuple[str, int] | None:
    """The file's SHA-256 and size; None when it is not a regular file."""
    try:
        with open(path, "rb") as f:
            if not os.path.isfile(path):
                return None
            digest = hashlib.sha256()
            size = 0
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except OSError:
        return None
    return digest.hexdigest(), size


class FileUpdates:
    """Turns committed file-writing tool calls into ``file.updated`` events."""

    def __init__(self, state: StateManager, workspace: Path) -> None:
        self._state = state
        self._workspace = workspace.resolve()
        self._calls: dict[str, tuple[list[tuple[str, bool]], str | None]] = {}
        """Tool-use id -> (its paths with whether each existed, its run)."""
        self._seen: dict[str, str | None] = {}
        """Path -> the SHA-256 last reported in this codon (None: deleted)."""
        self._codon: str | None = None
        self._tail: asyncio.Task[None] | None = None
        self._unsubscribe = state.add_listener(
            self._on_processed, types=(AssistantActionEvent.TYPE, ToolResultEvent.TYPE)
        )

    async def settle(self) -> None:
        """Waits until every successful call seen so far was reported."""
        while self._tail is not None and not self._tail.done():
            await asyncio.shield(self._tail)

    def close(self) -> None:
        """Stops listening."""
        self._unsubscribe()

    def _relative(self, name: str) -> str | None:
        full = Path(os.path.normpath(self._workspace / name))
        try:
            rel = full.relative_to(self._workspace)
        except ValueError:
            return None
        text = PurePosixPath(*rel.parts).as_posix()
        return None if text in ("", ".") else text

    def _on_processed(self, item: Processed) -> None:
        event = item.event
        if isinstance(event, AssistantActionEvent):
            if event.codon_id != self._codon:
                self._codon, self._seen = event.codon_id, {}
            if event.action != "tool_use" or event.tool_name not in WRITE_TOOLS:
                return
            if event.tool_use_id is None:
                return
            paths = [
                (rel, (self._workspace / rel).exists())
                for rel in map(self._relative, tool_paths(event.tool_input))
                if rel is not None
            ]
            if paths:
                run_id = None if item.stream is None else item.stream.run_id
                self._calls[event.tool_use_id] = (paths, run_id)
        elif isinstance(event, ToolResultEvent):
            call = self._calls.pop(event.tool_use_id, None)
            if call is None or event.is_error:
                return
            paths, run_id = call
            previous = self._tail
            self._tail = asyncio.get_running_loop().create_task(
                self._report(previous, paths, run_id, event)
            )

    async def _report(
        self,
        previous: asyncio.Task[None] | None,
        paths: list[tuple[str, bool]],
        run_id: str | None,
        result: ToolResultEvent,
    ) -> None:
        if previous is not None:  # one order: a call's events after the previous call's
            await asyncio.wait([previous])
        for rel, existed in paths:
            looked = await asyncio.to_thread(_look, self._workspace / rel)
            for event in self._events(rel, existed, looked, result):
                self._state.emit(event, run_id=run_id, codon_id=result.codon_id)

    def _events(
        self,
        rel: str,
        existed: bool,
        looked: tuple[str, int] | None,
        result: ToolResultEvent,
    ) -> Iterator[FileUpdatedEvent]:
        sha = None if looked is None else looked[0]
        if rel in self._seen and self._seen[rel] == sha:
            return  # reported already, unchanged since
        if looked is None and not existed and rel not in self._seen:
            return  # never there: nothing changed
        # Claude's Write says when it created the file; otherwise whether the
        # file existed when the call was committed decides (the agent may
        # already have written it by then: best effort).
        new = existed is False or result.result.startswith(_CREATED)
        created = looked is not None and new and self._seen.get(rel) is None
        self._seen[rel] = sha
        yield FileUpdatedEvent(
            path=rel,
            filename=PurePosixPath(rel).name,
            action="deleted" if looked is None else "created" if created else "modified",
            source=FileUpdateSource(kind="tool_use", tool_use_id=result.tool_use_id),
            sha256=sha,
            bytes=0 if looked is None else looked[1],
            codon_id=result.codon_id,
        )
