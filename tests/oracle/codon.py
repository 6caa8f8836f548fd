"""Reference model of the codon state machine (seed ``000``).

Mirrors ``rust_core/src/machine/codon.rs`` and the Python binding in
``rust_core/src/py/codon.rs``: the graph, the metadata guards, and the exact
text of every error, so a differential test can compare them verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from weft.errors import InvalidTransitionError, MetadataValidationError

#: Every status, in lifecycle order (the order the "unknown status" error lists).
STATUSES: tuple[str, ...] = (
    "preparing",
    "starting",
    "initializing",
    "running",
    "completing-sentinels",
    "completed",
    "failed",
    "skipped",
)

#: The graph: the only edges a codon may take, in the seed's order.
TARGETS: dict[str, tuple[str, ...]] = {
    "preparing": ("starting", "failed", "skipped"),
    "starting": ("initializing", "failed", "skipped"),
    "initializing": ("running", "failed", "skipped"),
    "running": ("completing-sentinels", "completed", "failed", "skipped"),
    "completing-sentinels": ("completed", "failed", "skipped"),
    "completed": (),
    "failed": (),
    "skipped": (),
}

TERMINAL = frozenset({"completed", "failed", "skipped"})
#: States in which an agent is alive and spends money.
LIVE = frozenset({"running", "completing-sentinels"})

#: What each target's guard requires, in the order missing fields are reported.
REQUIRED: dict[str, tuple[str, ...]] = {
    "initializing": ("claudePid", "claudeLogPath"),
    "running": ("claudeSessionId",),
    "completed": ("checkpointSha",),
    "failed": ("exitCode", "failureReason", "failedDuring"),
    "skipped": ("skippedDuring",),
}

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def check_metadata(
    frm: str, to: str, meta: Mapping[str, Any], type_errors: Mapping[str, str] | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """The guard of ``to`` for a codon leaving ``frm``: (missing fields,
    (field, what it should be) pairs).

    ``meta`` holds already-typed values (absent keys mean absent). ``type_errors``
    are fields the caller gave with the wrong kind; like the Rust guard, they are
    reported only for fields this target requires. ``failedDuring`` and
    ``skippedDuring`` must name ``frm``: they say where the codon stopped.
    """
    type_errors = type_errors or {}
    missing: list[str] = []
    invalid: list[tuple[str, str]] = []
    for field in REQUIRED.get(to, ()):
        if field in type_errors:
            invalid.append((field, type_errors[field]))
            continue
        value = meta.get(field)
        if field == "checkpointSha":
            present = bool(value)  # an empty sha counts as missing
        elif field in ("failedDuring", "skippedDuring"):
            present = value is not None
            if present and value not in STATUSES:
                invalid.append((field, "a codon status"))
            elif present and value != frm:
                invalid.append((field, frm))
        else:
            present = value is not None
        if not present:
            missing.append(field)
    # A completed codon's exit code is 0 by definition (seed table).
    exit_code = meta.get("exitCode")
    if to == "completed":
        if "exitCode" in type_errors:
            invalid.append(("exitCode", type_errors["exitCode"]))
        elif exit_code is not None and exit_code != 0:
            invalid.append(("exitCode", "0"))
    return missing, invalid


def metadata_message(to: str, missing: list[str], invalid: list[tuple[str, str]]) -> str:
    """The exact text of a metadata rejection (``MetadataError``'s Display)."""
    bad = ", ".join(f"{field} must be {want}" for field, want in invalid)
    if not missing:
        return f"Invalid metadata for transition to {to}: {bad}"
    text = f"Missing required metadata for transition to {to}: {', '.join(missing)}"
    return f"{text}; invalid: {bad}" if invalid else text


def invalid_transition_message(from_status: str, to_status: str) -> str:
    """The exact text of a refused graph edge."""
    return f"Invalid transition from {from_status} to {to_status}"


def _parse_status(name: str) -> str:
    if name not in STATUSES:
        raise ValueError(f"unknown codon status '{name}'; expected one of: {', '.join(STATUSES)}")
    return name


def _read_metadata(to: str, metadata: Mapping[Any, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """What the binding reads from a metadata dict: only the fields the guard
    of ``to`` looks at (plus ``exitCode`` for ``completed``), noting wrong kinds.
    ``None`` counts as absent."""
    meta: dict[str, Any] = {}
    bad: dict[str, str] = {}
    fields = list(REQUIRED.get(to, ()))
    if to == "completed":
        fields.append("exitCode")
    for field in fields:
        value = metadata.get(field)
        if value is None:
            continue
        if field in ("claudePid", "exitCode"):
            is_int = isinstance(value, int) and not isinstance(value, bool)
            if is_int and _I64_MIN <= value <= _I64_MAX:
                meta[field] = value
            else:
                bad[field] = "an integer"
        elif field == "failureReason":
            if isinstance(value, dict):
                meta[field] = value
            else:
                bad[field] = "an object"
        elif isinstance(value, str):
            meta[field] = value
        else:
            bad[field] = "a string"
    return meta, bad


def validate_transition(
    from_status: str, to_status: str, metadata: dict[str, Any] | None = None
) -> None:
    """Reference ``weft._core.validate_transition``: the graph first, then the
    guard of the target. Raises exactly what the Rust binding raises."""
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"'{type(metadata).__name__}' object is not an instance of 'dict'")
    frm = _parse_status(from_status)
    to = _parse_status(to_status)
    if to not in TARGETS[frm]:
        raise InvalidTransitionError(
            invalid_transition_message(frm, to), from_status=frm, to_status=to
        )
    meta, bad = _read_metadata(to, metadata or {})
    missing, invalid = check_metadata(frm, to, meta, bad)
    if missing or invalid:
        raise MetadataValidationError(
            metadata_message(to, missing, invalid),
            from_status=frm,
            to_status=to,
            missing=tuple(missing),
            invalid=tuple(invalid),
        )
