"""The prompt directive language and the file operations behind it.

A prompt may carry directives; everything else is ordinary prompt text::

    @@fake:scenario=tool_use,turns=3@@          choose a scenario (first one wins)
    @@fake:write path=notes.md@@                create or overwrite a file
    # Notes
    @@end@@
    @@fake:append path=notes.md@@ more text @@end@@
    @@fake:edit path=app.py old="x = 1" new="x = 2"@@
    @@fake:edit path=app.py@@ old text @@with@@ new text @@end@@
    @@fake:edit path=app.py old=a new=b all=true@@   replace every occurrence
    @@fake:delete path=old.txt@@
    @@fake:read path=notes.md@@
    @@fake:bash@@ make test @@end@@              (or inline: @@fake:bash ls -la@@)
    @@fake:sleep ms=500@@
    @@fake:say The final reply.@@               (or block: @@fake:say@@ ... @@end@@)

Attribute values are bare words or JSON-style double-quoted strings. A block
body starts after the header (one leading newline dropped) and ends at
``@@end@@``; in an edit block each side also drops one trailing newline.

Paths are relative to the working directory; a path that leaves it (``..``,
an absolute path elsewhere, a symlink pointing out) is refused with a tool
error and nothing is touched.
"""

from __future__ import annotations

import json
import os
import re

from weft.agents.fake.common import FakeConfigError, JsonObj

_HEADER = re.compile(r"@@fake:([A-Za-z_]+)(.*?)@@", re.S)
_ATTR = re.compile(r'\s*([A-Za-z_]+)=("(?:[^"\\]|\\.)*"|[^\s"]+)')
_END = "@@end@@"
_WITH = "@@with@@"

VERBS = ("scenario", "write", "append", "edit", "delete", "read", "bash", "sleep", "say")


class Op:
    """One directive, in prompt order."""

    __slots__ = ("ms", "new", "old", "path", "replace_all", "text", "verb")

    def __init__(
        self,
        verb: str,
        *,
        path: str | None = None,
        text: str = "",
        old: str = "",
        new: str = "",
        replace_all: bool = False,
        ms: float = 0.0,
    ) -> None:
        self.verb = verb
        self.path = path
        self.text = text
        self.old = old
        self.new = new
        self.replace_all = replace_all
        self.ms = ms

    @property
    def is_tool(self) -> bool:
        """Whether the op becomes a tool call (say and sleep do not)."""
        return self.verb in ("write", "append", "edit", "delete", "read", "bash")


class Directives:
    """What a prompt asks of the fake."""

    def __init__(self) -> None:
        self.scenario: str | None = None
        """The first ``@@fake:scenario=...@@`` spec (``name[,key=val...]``)."""
        self.ops: list[Op] = []
        self.plain = ""
        """The prompt with every directive removed."""

    @property
    def says(self) -> list[str]:
        """The texts of the ``say`` directives."""
        return [op.text for op in self.ops if op.verb == "say"]


def parse(prompt: str) -> Directives:
    """Parse the directives of ``prompt``.

    Raises :class:`FakeConfigError` for a malformed directive, saying where
    it is and what was expected.
    """
    out = Directives()
    plain: list[str] = []
    pos = 0
    while True:
        match = _HEADER.search(prompt, pos)
        if match is None:
            plain.append(prompt[pos:])
            break
        plain.append(prompt[pos : match.start()])
        verb, rest = match.group(1), match.group(2)
        where = f"prompt directive @@fake:{verb}...@@ at character {match.start()}"
        pos = match.end()
        if verb not in VERBS:
            raise FakeConfigError(f"{where}: unknown directive; use one of {', '.join(VERBS)}")
        if verb == "scenario":
            if not rest.startswith("=") or not rest[1:].strip():
                raise FakeConfigError(f"{where}: write it as @@fake:scenario=<name>[,key=val]@@")
            if out.scenario is None:
                out.scenario = rest[1:].strip()
            continue
        body: str | None = None
        if verb in ("say", "bash"):
            if not rest.strip():
                body, pos = _body(prompt, pos, where)
            text = rest.strip() if body is None else body
            out.ops.append(Op(verb, text=text))
            continue
        attrs = _attrs(rest, where)
        if verb in ("write", "append"):
            path = _need(attrs, "path", where)
            content = attrs.get("content")
            if content is None:
                content, pos = _body(prompt, pos, where)
            out.ops.append(Op(verb, path=path, text=content))
        elif verb == "edit":
            path = _need(attrs, "path", where)
            replace_all = attrs.get("all", "false").lower() in ("1", "true", "yes")
            if "old" in attrs:
                old, new = attrs["old"], attrs.get("new", "")
            else:
                block, pos = _body(prompt, pos, where)
                if _WITH not in block:
                    raise FakeConfigError(
                        f"{where}: an edit block needs old text, {_WITH}, new text, {_END}"
                    )
                old, new = block.split(_WITH, 1)
                old, new = _trim(old), _trim(new)
            if not old:
                raise FakeConfigError(f"{where}: the text to replace is empty")
            out.ops.append(Op(verb, path=path, old=old, new=new, replace_all=replace_all))
        elif verb in ("delete", "read"):
            out.ops.append(Op(verb, path=_need(attrs, "path", where)))
        else:  # sleep
            raw = _need(attrs, "ms", where)
            try:
                ms = float(raw)
            except ValueError:
                ms = -1.0
            if not ms >= 0:
                raise FakeConfigError(f"{where}: ms={raw!r} is not a number of milliseconds")
            out.ops.append(Op(verb, ms=ms))
    out.plain = "".join(plain)
    return out


def plain_text(prompt: str) -> str:
    """``prompt`` without its directives (best effort for malformed ones)."""
    try:
        return parse(prompt).plain
    except FakeConfigError:
        return _HEADER.sub("", prompt)


def _body(prompt: str, pos: int, where: str) -> tuple[str, int]:
    end = prompt.find(_END, pos)
    if end < 0:
        raise FakeConfigError(f"{where}: the block has no closing {_END}")
    body = prompt[pos:end]
    if body.startswith("\n"):
        body = body[1:]
    return body, end + len(_END)


def _trim(side: str) -> str:
    side = side.removeprefix("\n")
    return side.removesuffix("\n")


def _attrs(rest: str, where: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        if not rest[pos:].strip():
            break
        match = _ATTR.match(rest, pos)
        if match is None:
            raise FakeConfigError(
                f"{where}: cannot read attributes at {rest[pos:].strip()[:40]!r}; "
                'write key=value or key="quoted value"'
            )
        key, raw = match.group(1), match.group(2)
        if raw.startswith('"'):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise FakeConfigError(f"{where}: bad quoted value for {key}: {exc.msg}") from exc
        attrs[key] = raw
        pos = match.end()
    return attrs


def _need(attrs: dict[str, str], key: str, where: str) -> str:
    value = attrs.get(key)
    if not value:
        raise FakeConfigError(f"{where}: missing {key}=...")
    return value


def parse_scenario(spec: str, source: str) -> tuple[str, dict[str, str]]:
    """Split ``name,key=val,...`` into the name and its parameters."""
    name, *pairs = [part.strip() for part in spec.split(",")]
    params: dict[str, str] = {}
    for pair in pairs:
        if not pair:
            continue
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise FakeConfigError(f"{source}: scenario parameter {pair!r} is not key=value")
        params[key.strip()] = value.strip()
    if not name:
        raise FakeConfigError(f"{source}: the scenario name is empty")
    return name, params


# -- file operations ---------------------------------------------------------------------------


class ToolError(Exception):
    """A tool call that fails the way the agent's tool would."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Workspace:
    """Performs file operations inside one directory, refusing to leave it."""

    def __init__(self, cwd: str) -> None:
        self.cwd = os.path.abspath(cwd)
        self.root = os.path.realpath(cwd)

    def resolve(self, path: str) -> str:
        """The absolute path of ``path``; :class:`ToolError` when it escapes."""
        full = os.path.normpath(os.path.join(self.cwd, path))
        real = os.path.realpath(full)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise ToolError(
                "escape",
                f"Refusing to touch {path}: it is outside the working directory {self.cwd}",
            )
        return full

    def display(self, path: str) -> str:
        """The absolute form of ``path`` without checking it (for tool inputs)."""
        return os.path.normpath(os.path.join(self.cwd, path))

    def read(self, path: str) -> tuple[str, str]:
        """``(abs path, content)``."""
        full = self.resolve(path)
        return full, self._read(full)

    def _read(self, full: str) -> str:
        if os.path.isdir(full):
            raise ToolError("is_dir", "EISDIR: illegal operation on a directory, read")
        try:
            with open(full, encoding="utf-8", errors="replace", newline="") as fh:
                return fh.read()
        except FileNotFoundError:
            raise ToolError("missing", "File does not exist.") from None

    def write(self, path: str, content: str) -> tuple[str, str | None]:
        """Create or overwrite; returns ``(abs path, previous content or None)``."""
        full = self.resolve(path)
        if os.path.isdir(full):
            raise ToolError("is_dir", f"EISDIR: {path} is a directory")
        original = self._read(full) if os.path.exists(full) else None
        parent = os.path.dirname(full)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(full, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)
        return full, original

    def append(self, path: str, text: str) -> tuple[str, str | None, str]:
        """Append; returns ``(abs path, previous content or None, new content)``."""
        full = self.resolve(path)
        original = self._read(full) if os.path.exists(full) else None
        updated = (original or "") + text
        self.write(path, updated)
        return full, original, updated

    def edit(self, path: str, old: str, new: str, replace_all: bool) -> tuple[str, str, str]:
        """Replace ``old`` by ``new`` (exactly once unless ``replace_all``);
        returns ``(abs path, previous content, new content)``."""
        full = self.resolve(path)
        original = self._read(full)
        if old == new:
            raise ToolError(
                "no_change",
                "No changes to make: old_string and new_string are exactly the same.",
            )
        count = original.count(old)
        if count == 0:
            raise ToolError("no_match", f"String to replace not found in file.\nString: {old}")
        if count > 1 and not replace_all:
            raise ToolError(
                "many_matches",
                f"Found {count} matches of the string to replace, but replace_all is false. "
                "To replace all occurrences, set replace_all to true. To replace only one "
                "occurrence, please provide more context to uniquely identify the instance.\n"
                f"String: {old}",
            )
        updated = original.replace(old, new) if replace_all else original.replace(old, new, 1)
        with open(full, "w", encoding="utf-8", newline="") as fh:
            fh.write(updated)
        return full, original, updated

    def delete(self, path: str) -> str:
        """Delete a file; returns its absolute path."""
        full = self.resolve(path)
        try:
            os.remove(full)
        except FileNotFoundError:
            raise ToolError(
                "missing", f"rm: cannot remove '{path}': No such file or directory"
            ) from None
        except IsADirectoryError:
            raise ToolError("is_dir", f"rm: cannot remove '{path}': Is a directory") from None
        return full

    def bash(self, command: str, timeout_s: float) -> tuple[str, str, int, bool]:
        """Run ``command`` with ``/bin/sh -c`` in the working directory;
        returns ``(stdout, stderr, exit code, timed out)``."""
        import subprocess

        try:
            done = subprocess.run(
                ["/bin/sh", "-c", command],
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else ""
            return out, f"Command timed out after {timeout_s:g}s", 124, True
        return (
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
            done.returncode,
            False,
        )

    def listing(self) -> list[str]:
        """The visible entries of the working directory, sorted (what ``ls`` prints)."""
        try:
            return sorted(name for name in os.listdir(self.cwd) if not name.startswith("."))
        except OSError:
            return []


def structured_patch(before: str, after: str) -> list[JsonObj]:
    """One unified-diff hunk (three lines of context) between two texts, in
    the shape of Claude Code's ``structuredPatch``."""
    a = before.splitlines()
    b = after.splitlines()
    if a == b:
        return []
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < min(len(a), len(b)) - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]
    ):
        suffix += 1
    a_end, b_end = len(a) - suffix, len(b) - suffix
    start = max(0, prefix - 3)
    tail = min(len(a), a_end + 3)
    lines = (
        [" " + line for line in a[start:prefix]]
        + ["-" + line for line in a[prefix:a_end]]
        + ["+" + line for line in b[prefix:b_end]]
        + [" " + line for line in a[a_end:tail]]
    )
    return [
        {
            "oldStart": start + 1,
            "oldLines": tail - start,
            "newStart": start + 1,
            "newLines": (prefix - start) + (b_end - prefix) + (tail - a_end),
            "lines": lines,
        }
    ]


def numbered(text: str, start: int = 1, limit: int = 2000) -> str:
    """``text`` with line numbers, as Claude Code's Read tool shows a file."""
    lines = text.splitlines()[:limit]
    return "\n".join(f"{n:>6}\u2192{line}" for n, line in enumerate(lines, start))
