"""Checkpoint commit messages: the format, and reading them back into records.

The first line is the reference runtime's subject,
``<type>:<codonId> [run:<runId>] <codonName>``; the body has one ``Key: value``
line per field (``Codon``, ``Codon-Id``, ``Run``, ``Status``, ``Timestamp``,
``Duration``, ``Patterns``). The body is what :func:`parse_message` trusts,
so ids with spaces or brackets read back exactly; the subject is for people
reading ``git log``.
"""

from __future__ import annotations

import functools
import json
from typing import get_args

import msgspec

from weft.events.transitions import CheckpointType

CHECKPOINT_TYPES: tuple[str, ...] = get_args(CheckpointType)
RECOVERY_TYPE = "recovery"

#: The fixed commit identity of every checkpoint.
AUTHOR_NAME = "Weft Runtime"
AUTHOR_EMAIL = "runtime@weft.invalid"


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One checkpoint commit, as read back from the shadow repository."""

    sha: str
    checkpoint_type: str
    codon_id: str
    codon_name: str
    run_id: str
    timestamp: str
    branch: str
    duration_ms: int | None = None
    parent: str | None = None
    patterns: list[str] | None = None


def _one_line(text: str) -> str:
    return " ".join(text.split())


@functools.lru_cache(maxsize=1024)
def _quoted(value: str | tuple[str, ...]) -> str:
    """``value`` as JSON (a run's id and patterns recur at every checkpoint)."""
    return json.dumps(value if isinstance(value, str) else list(value))


def format_message(
    *,
    checkpoint_type: str,
    codon_id: str,
    run_id: str,
    codon_name: str,
    timestamp: str,
    duration_ms: int | None,
    patterns: list[str] | None,
) -> str:
    """The commit message of a checkpoint."""
    name = _one_line(codon_name)
    lines = [
        f"{checkpoint_type}:{_one_line(codon_id)} [run:{_one_line(run_id)}] {name}".rstrip(),
        "",
        f"Codon: {name}",
        f"Codon-Id: {_quoted(codon_id)}",
        f"Run: {_quoted(run_id)}",
        f"Status: {checkpoint_type}",
        f"Timestamp: {timestamp}",
    ]
    if duration_ms is not None:
        lines.append(f"Duration: {int(duration_ms)}ms")
    if patterns is not None:
        lines.append(f"Patterns: {_quoted(tuple(patterns))}")
    return "\n".join(lines) + "\n"


def format_recovery_message(*, run_id: str | None, reason: str, timestamp: str) -> str:
    """The commit message of a recovery snapshot (not a codon checkpoint)."""
    run = _one_line(run_id) if run_id else "-"
    lines = [
        f"{RECOVERY_TYPE}: work tree saved [run:{run}] {_one_line(reason)}".rstrip(),
        "",
        f"Status: {RECOVERY_TYPE}",
        f"Timestamp: {timestamp}",
    ]
    if run_id:
        lines.append(f"Run: {json.dumps(run_id)}")
    return "\n".join(lines) + "\n"


def _fields(message: str) -> dict[str, str]:
    _subject, _, body = message.partition("\n")
    fields: dict[str, str] = {}
    for line in body.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key and key not in fields:
            fields[key] = value
    return fields


def _json_str(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except ValueError:
        return value
    return decoded if isinstance(decoded, str) else value


def parse_message(message: str, *, sha: str, branch: str, parent: str | None) -> Checkpoint | None:
    """The checkpoint a commit message describes, or ``None`` if it is not a checkpoint."""
    fields = _fields(message)
    status = fields.get("Status")
    codon_id = _json_str(fields.get("Codon-Id"))
    run_id = _json_str(fields.get("Run"))
    if status not in CHECKPOINT_TYPES or codon_id is None or run_id is None:
        return None
    duration: int | None = None
    raw_duration = fields.get("Duration", "")
    if raw_duration.endswith("ms") and raw_duration[:-2].isdigit():
        duration = int(raw_duration[:-2])
    patterns: list[str] | None = None
    if "Patterns" in fields:
        try:
            loaded = json.loads(fields["Patterns"])
        except ValueError:
            loaded = None
        if isinstance(loaded, list) and all(isinstance(p, str) for p in loaded):
            patterns = loaded
    return Checkpoint(
        sha=sha,
        checkpoint_type=status,
        codon_id=codon_id,
        codon_name=fields.get("Codon", ""),
        run_id=run_id,
        timestamp=fields.get("Timestamp", ""),
        branch=branch,
        duration_ms=duration,
        parent=parent,
        patterns=patterns,
    )
