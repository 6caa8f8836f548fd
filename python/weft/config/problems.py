"""Problems found in a hank file, as data.

A :class:`ConfigProblem` says what is wrong, where (the file, the JSON path,
the codon or loop it belongs to, and for syntax errors the line and column)
and how to fix it (``hint``). ``weft validate --json`` prints them as they
are; :class:`weft.errors.ConfigError` carries a list of them.

The text form reads like a compiler's::

    hank.json: hank[2] (codon "review") .continuationMode: expected "fresh" or
      "continue-previous", got "contine"
        hint: did you mean "continue-previous"?

(on one line; wrapped here).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from weft.terminal import printable

__all__ = [
    "ConfigProblem",
    "JsonPath",
    "format_path",
    "item_label",
    "render_problems",
]

JsonPath = tuple[str | int, ...]
"""A location in a JSON document: keys and array indexes from the root."""

Severity = Literal["error", "warning"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class ConfigProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One thing wrong (or doubtful, for a warning) in a configuration file."""

    file: str
    """The file, as shown to the user (``hank.json``, ``sentinels/narrator.json``)."""
    path: str
    """The JSON path of the offending value (``hank[2].continuationMode``); ``$``
    is the whole document."""
    message: str
    code: str
    """A stable, machine-readable kind: ``unknown_key``, ``wrong_type``,
    ``missing_key``, ``bad_value``, ``duplicate_id``, ``bad_ref``, ..."""
    severity: Severity = "error"
    item: str | None = None
    """The JSON path of the codon or loop the problem is in (``hank[2]``)."""
    where: str | None = None
    """That codon or loop, named: ``codon "review"``, ``loop "refine" > codon "write"``."""
    hint: str | None = None
    """How to fix it."""
    line: int | None = None
    column: int | None = None

    @property
    def is_error(self) -> bool:
        """Whether this problem makes the file invalid."""
        return self.severity == "error"

    def location(self) -> str:
        """``file``, the codon or loop, and the path inside it."""
        if self.line is not None:
            col = f":{self.column}" if self.column is not None else ""
            return f"{self.file}:{self.line}{col}"
        if self.item is not None and self.where is not None:
            rest = self.path[len(self.item) :]
            head = f"{self.file}: {self.item} ({self.where})"
            return f"{head} {rest}" if rest else head
        return f"{self.file}: {self.path}"

    def __str__(self) -> str:
        # One line, whatever the hank held: ids, keys and values reach the
        # message and the label raw, and a control character in them must not
        # reach the terminal (weft.terminal).
        label = "warning: " if self.severity == "warning" else ""
        return printable(f"{self.location()}: {label}{self.message}")

    def render(self) -> str:
        """The problem with its hint on an indented second line."""
        text = str(self)
        return f"{text}\n    hint: {printable(self.hint)}" if self.hint else text

    def to_json(self) -> dict[str, Any]:
        """The problem as a JSON-ready dictionary (no null fields)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return {k: v for k, v in out.items() if v is not None}


def format_path(path: JsonPath) -> str:
    """``("hank", 2, "model")`` -> ``hank[2].model``; the empty path is ``$``."""
    if not path:
        return "$"
    parts: list[str] = []
    for part in path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif _IDENTIFIER.match(part):
            parts.append(f".{part}" if parts else part)
        else:
            parts.append(f"[{msgspec.json.encode(part).decode()}]")
    return "".join(parts)


def _label(kind: str, obj: Any) -> str:
    ident = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(ident, str) and ident:
        return f'{kind} "{ident}"'
    return kind


def item_label(doc: Any, path: JsonPath) -> tuple[JsonPath, str] | None:
    """The codon or loop that ``path`` is inside, as (its path, its label).

    ``None`` for a path outside the ``hank`` array.
    """
    if len(path) < 2 or path[0] != "hank" or not isinstance(path[1], int):
        return None
    items = doc.get("hank") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not 0 <= path[1] < len(items):
        return None
    item = items[path[1]]
    is_loop = isinstance(item, dict) and item.get("type") == "loop"
    label = _label("loop" if is_loop else "codon", item)
    if (
        is_loop
        and len(path) >= 4
        and path[2] == "codons"
        and isinstance(path[3], int)
        and isinstance(item.get("codons"), list)
        and 0 <= path[3] < len(item["codons"])
    ):
        inner = item["codons"][path[3]]
        kind = "loop" if isinstance(inner, dict) and inner.get("type") == "loop" else "codon"
        return path[:4], f"{label} > {_label(kind, inner)}"
    return path[:2], label


def render_problems(problems: Sequence[ConfigProblem]) -> str:
    """Every problem, errors first, one per line (hints indented below)."""
    ordered = [p for p in problems if p.is_error] + [p for p in problems if not p.is_error]
    return "\n".join(p.render() for p in ordered)
