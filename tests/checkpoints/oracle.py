"""A deliberately simple reference for the checkpointedFiles glob dialect.

It follows the rules in docs/checkpoints.md one by one, with the standard
library's ``fnmatchcase`` for single components and plain recursion for
``**``: slow, obviously right, and independent of the regex translation in
``weft.checkpoints.patterns``. It supports the subset the tests generate:
``*``, ``?``, ``[...]``/``[!...]``, ``**``, unnested ``{a,b}`` groups, ``!``
negation and a trailing ``/``.
"""

from __future__ import annotations

import unicodedata
from fnmatch import fnmatchcase


def _expand(pattern: str) -> list[str]:
    start = pattern.find("{")
    end = pattern.find("}", start)
    if start < 0 or end < 0 or "," not in pattern[start:end]:
        return [pattern]
    head, body, tail = pattern[:start], pattern[start + 1 : end], pattern[end + 1 :]
    return [out for option in body.split(",") for out in _expand(head + option + tail)]


def _components_match(pat: list[str], parts: list[str]) -> bool:
    if not pat:
        return not parts
    if pat == ["**"]:
        return bool(parts)  # a trailing ** is "everything inside": at least one component
    if pat[0] == "**":
        return _components_match(pat[1:], parts) or (
            bool(parts) and _components_match(pat, parts[1:])
        )
    return bool(parts) and fnmatchcase(parts[0], pat[0]) and _components_match(pat[1:], parts[1:])


def glob_matches(pattern: str, path: str) -> bool:
    """Whether one (brace-free, non-negated) pattern covers the file ``path``."""
    while pattern.startswith("./"):
        pattern = pattern[2:]
    pattern = pattern.lstrip("/")
    dir_only = pattern.endswith("/")
    pat = (pattern.rstrip("/") or "**").split("/")
    parts = path.split("/")
    # The path itself, or one of its directories (a matched directory covers its content).
    for k in range(1, len(parts) + 1):
        if dir_only and k == len(parts):
            continue
        if _components_match(pat, parts[:k]):
            return True
    return False


def _fold(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold()


def runtime_path(path: str) -> bool:
    """The runtime paths that are never checkpointed."""
    parts = [_fold(p) for p in path.split("/")]
    if parts[0] in ("read_only_data_source", "rigarchive"):
        return True
    return any(
        p in (".weft", ".git") or p.startswith((".weft.backup-", ".weftcheckpoints")) for p in parts
    )


def covered(patterns: list[str], path: str) -> bool:
    """Whether the union of ``patterns`` covers the file ``path``."""
    include = [p for p in patterns if not p.startswith("!")]
    exclude = [p[1:] for p in patterns if p.startswith("!")]
    hit = any(glob_matches(alt, path) for p in include for alt in _expand(p))
    if not hit or runtime_path(path):
        return False
    return not any(glob_matches(alt, path) for p in exclude for alt in _expand(p))
