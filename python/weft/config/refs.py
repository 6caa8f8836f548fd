"""Reference safety: paths in a hank file stay inside the hank's directory.

A reference (``promptFile``, ``appendSystemPromptFile``, a sentinel config
file, a rig copy's ``from``, ...) is a relative POSIX path resolved against
a base directory (the hank file's, or a sentinel config's own). It must not
be absolute, must not climb out of the hank directory with ``..``, must not
pass through a symbolic link (a link inside the hank could point anywhere),
and must name a regular file (or a directory where the field means one; a
FIFO or a device is refused).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["RefChecker", "RefKind", "RefProblem", "RefTarget", "check_ref"]

RefKind = Literal["file", "dir", "file-or-dir"]


@dataclass(frozen=True, slots=True)
class RefProblem:
    """Why a reference is refused, and how to fix it."""

    message: str
    hint: str


@dataclass(frozen=True, slots=True)
class RefTarget:
    """A safe reference: where it points, and what ``lstat`` said about it."""

    path: Path
    size: int
    is_dir: bool


class RefChecker:
    """Checks references against one hank directory, remembering what it saw.

    A hank often names the same prompt file or directory many times; each
    path component is examined once per checker.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._root_str = str(root)
        self._results: dict[tuple[str, str, str], RefTarget | RefProblem] = {}
        self._lstat: dict[str, os.stat_result | OSError] = {}
        self._base_parts: dict[str, list[str]] = {}

    def check(
        self, ref: str, base: Path | None = None, kind: RefKind = "file"
    ) -> RefTarget | RefProblem:
        """The target of ``ref`` (relative to ``base``, default the root), or why not."""
        base_str = self._root_str if base is None else str(base)
        key = (ref, base_str, kind)
        found = self._results.get(key)
        if found is None:
            found = self._check(ref, base_str, kind)
            self._results[key] = found
        return found

    def targets(self) -> list[RefTarget]:
        """Every safe target checked so far, each once, by path (what ``weft pack`` bundles)."""
        found = {r.path: r for r in self._results.values() if isinstance(r, RefTarget)}
        return [found[p] for p in sorted(found)]

    def _parts_of(self, base: str) -> list[str]:
        parts = self._base_parts.get(base)
        if parts is None:
            rel = os.path.relpath(base, self._root_str)
            parts = [] if rel == "." else rel.split(os.sep)
            self._base_parts[base] = parts
        return parts

    def _stat(self, path: str) -> os.stat_result | OSError:
        st = self._lstat.get(path)
        if st is None:
            try:
                st = os.lstat(path)
            except OSError as e:
                st = e
            self._lstat[path] = st
        return st

    def _check(self, ref: str, base: str, kind: RefKind) -> RefTarget | RefProblem:
        q = f'"{ref}"'
        if "\\" in ref:
            return RefProblem(f"{q} uses backslashes", "write paths with forward slashes (a/b.md)")
        if "\x00" in ref:
            return RefProblem(f"{q} contains a NUL character", "remove it")
        if ref.startswith(("/", "~")):
            return RefProblem(
                f"{q} is absolute", "write it relative to the hank directory and keep it inside"
            )
        # Lexical climb first: a path that leaves the hank through '..' is
        # refused even when the target exists.
        parts = list(self._parts_of(base))
        for part in ref.split("/"):
            if part == "..":
                if not parts:
                    return RefProblem(
                        f"{q} leaves the hank directory",
                        "keep referenced files inside the directory of the hank file",
                    )
                parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        if not parts:
            return RefProblem(
                f"{q} is the hank directory itself", "name a file or a subdirectory inside it"
            )
        current = self._root_str
        st: os.stat_result | OSError = OSError()
        for i, part in enumerate(parts):
            current = f"{current}/{part}"
            st = self._stat(current)
            if isinstance(st, FileNotFoundError):
                return RefProblem(f"{q} does not exist ({current})", "check the path and the name")
            if isinstance(st, NotADirectoryError):
                return RefProblem(f"{q} goes through a file as if it were a directory", "check it")
            if isinstance(st, OSError):
                return RefProblem(f"{q} cannot be read: {st.strerror}", "check permissions")
            if stat.S_ISLNK(st.st_mode):
                inside = "/".join(parts[: i + 1])
                return RefProblem(
                    f"{q} goes through a symbolic link ({inside})",
                    "references may not use symbolic links: copy the file into the hank directory",
                )
            if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
                return RefProblem(f"{q} goes through a file as if it were a directory", "check it")
        assert not isinstance(st, OSError)
        if stat.S_ISREG(st.st_mode):
            if kind == "dir":
                return RefProblem(f"{q} is a file, not a directory", "name a directory")
            return RefTarget(Path(current), st.st_size, is_dir=False)
        if stat.S_ISDIR(st.st_mode):
            if kind == "file":
                return RefProblem(f"{q} is a directory, not a file", "name a file")
            return RefTarget(Path(current), st.st_size, is_dir=True)
        return RefProblem(
            f"{q} is not a regular file (a FIFO, socket or device)", "reference regular files only"
        )


def check_ref(ref: str, base: Path, root: Path, kind: RefKind = "file") -> RefProblem | None:
    """Checks one reference (relative to ``base``, inside ``root``; both absolute
    and free of symlinks). ``None`` when it is safe and of the right kind."""
    found = RefChecker(root).check(ref, base, kind)
    return found if isinstance(found, RefProblem) else None
