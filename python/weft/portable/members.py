"""What an execution archive may hold: member names and kinds, checked before
anything is extracted (pure: names and kinds in, a reason out).

Every member lives under one of :data:`TOPS`, is a regular file, a folder or
a symbolic link, has a relative name without ``..``, NUL or a backslash, and a
link may only be the data link of the work tree (``agentRoot/read_only_data_source``,
which names the user's data wherever it is) or point inside its own top folder.
"""

from __future__ import annotations

import posixpath
from typing import Literal

__all__ = ["MANIFEST", "MAX_MEMBERS", "TOPS", "Kind", "member_problem"]

MANIFEST = "weft-archive.json"
"""The archive's manifest (format, Weft version, execution, members' sha256)."""
TOPS = ("weft", "agentRoot", "rigArchive", "hank", "claude-projects")
"""The folders an archive holds: ``.weft/`` (as ``weft/``), the work tree, the
archived paths, the hank's folder and the Claude Code transcripts."""
MAX_MEMBERS = 1_000_000
DATA_LINK = "agentRoot/read_only_data_source"

Kind = Literal["file", "dir", "symlink", "other"]


def member_problem(name: str, kind: Kind, link: str | None = None) -> str | None:
    """Why member ``name`` (of ``kind``; ``link``: a symlink's target) may not
    be imported, or None when it may."""
    if not name or "\x00" in name or "\\" in name:
        return "a member name is empty or holds NUL or a backslash"
    if name.startswith("/") or posixpath.isabs(name):
        return f"{name!r} is an absolute path"
    parts = name.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        return f"{name!r} is not a plain relative path (no '.', '..' or empty parts)"
    if name == MANIFEST:
        return None if kind == "file" else f"{name!r} must be a file"
    if parts[0] not in TOPS:
        return f"{name!r} is outside the folders an archive holds ({', '.join(TOPS)})"
    if kind == "other":
        return f"{name!r} is a device, FIFO or hard link: only files, folders and links"
    if kind == "symlink":
        if link is None or "\x00" in link:
            return f"{name!r} is a link without a target"
        if name.rstrip("/") == DATA_LINK:
            return None  # the user's data, wherever it is: checked when the data is used
        if posixpath.isabs(link):
            return f"{name!r} links to an absolute path ({link!r})"
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
        if target.startswith("../") or target == ".." or target.split("/")[0] != parts[0]:
            return f"{name!r} links outside its folder ({link!r})"
    return None
