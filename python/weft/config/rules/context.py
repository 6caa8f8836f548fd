"""What every rule reads: the :class:`RuleContext`, the codons in pipeline order
(:class:`Slot`), and typed accessors that return ``None`` (or ``[]``) for a
value of the wrong type, so a rule never trips over a typo the walk reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weft.config.problems import ConfigProblem, JsonPath
from weft.config.refs import RefChecker
from weft.config.schema import SentinelConfig
from weft.config.walk import Sink

__all__ = [
    "ENV_NAME",
    "RuleContext",
    "SentinelFile",
    "Slot",
    "by_id",
    "get_dict",
    "get_list",
    "get_num",
    "get_str",
    "refs_of",
    "slots_of",
]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class RuleContext:
    """What the rules need besides the document."""

    sink: Sink
    root: Path
    """The hank directory (absolute, symlinks resolved)."""
    display_dir: str
    """The hank directory as shown to the user ('' for the current directory)."""
    env: Mapping[str, str]
    check_environment: bool = True
    sentinel_configs: dict[Path, SentinelConfig] = field(default_factory=dict)
    """Sentinel config files that loaded cleanly, by absolute path."""
    sentinel_files: dict[Path, SentinelFile] = field(default_factory=dict)
    refs: RefChecker = field(init=False)

    def __post_init__(self) -> None:
        self.refs = RefChecker(self.root)


@dataclass(frozen=True, slots=True)
class Slot:
    """A codon in pipeline order, with where it sits."""

    path: JsonPath
    codon: dict[str, Any]
    loop: dict[str, Any] | None
    loop_path: JsonPath | None
    index_in_loop: int


def get_str(d: Any, key: str) -> str | None:
    """The string at ``d[key]``, else None (also when ``d`` is not a dict)."""
    v = d.get(key) if type(d) is dict else None
    return v if type(v) is str else None


def get_dict(d: Any, key: str) -> dict[str, Any] | None:
    """The object at ``d[key]``, else None."""
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, dict) else None


def get_list(d: Any, key: str) -> list[Any]:
    """The array at ``d[key]``, else an empty list."""
    v = d.get(key) if type(d) is dict else None
    return v if type(v) is list else []


def get_num(d: Any, key: str) -> float | None:
    """The number (not a bool) at ``d[key]`` as a float, else None."""
    v = d.get(key) if isinstance(d, dict) else None
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def by_id(items: list[Any]) -> dict[str, dict[str, Any]]:
    """The objects of ``items`` that have a string id, by id."""
    return {i["id"]: i for i in items if isinstance(i, dict) and isinstance(i.get("id"), str)}


def refs_of(value: Any) -> Iterator[tuple[int | None, str]]:
    """The references of a ``ref | ref[]`` field, with their index in the list."""
    if isinstance(value, str):
        yield None, value
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, str):
                yield i, v


def slots_of(doc: dict[str, Any]) -> Iterator[Slot]:
    """The codons of ``doc`` in pipeline order, loop codons included."""
    for i, item in enumerate(get_list(doc, "hank")):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "loop":
            for j, codon in enumerate(get_list(item, "codons")):
                if isinstance(codon, dict) and codon.get("type", "codon") == "codon":
                    yield Slot(("hank", i, "codons", j), codon, item, ("hank", i), j)
        elif item.get("type", "codon") == "codon":
            yield Slot(("hank", i), item, None, None, 0)


@dataclass
class SentinelFile:
    """A sentinel config file, checked once however many codons use it."""

    config: SentinelConfig | None
    problems: list[ConfigProblem]
    errors: int
    reported: bool = False
    reported_as_errors: bool = False
