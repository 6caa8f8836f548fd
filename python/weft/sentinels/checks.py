"""What ``weft validate`` checks of sentinels beyond their schema.

* :func:`check_trigger`: the event types a trigger names and its condition
  paths, against the events a sentinel is fed (:data:`EVENT_FIELDS`, made
  from the typed events of :mod:`weft.events`). A type Weft never feeds
  (a sentinel or connection event, or one Weft does not emit) is a warning:
  the trigger never fires on it. A condition whose path starts with a field
  none of the watched events has is an error: it never matches. Paths below
  a free-form field (``toolInput.command``, ``content.x``) are not checked.
* :func:`load_problems`: whether each sentinel of a loaded hank would load
  now: its model's provider is known and its API key is set (after the
  ``--sentinel-model`` override). Problems of a ``failCodonIfNotLoaded``
  sentinel are errors (the codon would fail), the others warnings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from weft.config.hints import did_you_mean
from weft.config.loader import LoadedHank
from weft.config.problems import ConfigProblem, JsonPath, format_path
from weft.config.schema import SentinelConfig
from weft.config.walk import Sink
from weft.events.stream import SENTINEL_EVENT_TYPES, STREAM_CLASSES
from weft.sentinels.providers import ProviderError, ProviderRegistry

__all__ = ["EVENT_FIELDS", "TRANSITION_EVENT", "check_trigger", "load_problems"]

TRANSITION_EVENT: Final = "state.transition"
"""The type a sentinel sees a state transition as (the reference's name):
data ``{transitionType, runId, codonId, transition: {type, data}}``."""
_TRANSITION_FIELDS: Final = frozenset(("transitionType", "runId", "codonId", "transition"))
VIRTUAL_FIELDS: Final[dict[str, frozenset[str]]] = {"file.updated": frozenset(("content",))}
"""Fields conditions may test that the journaled event does not hold."""
_CONNECTION: Final = frozenset(
    ("server.ready", "handshake.response", "pong", "history.batch", "incomplete.codon")
)


def _fields() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Event type -> (its data fields, those holding free-form values)."""
    out: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for kind, cls in STREAM_CLASSES.items():
        if kind in SENTINEL_EVENT_TYPES:
            continue
        names: set[str] = set(VIRTUAL_FIELDS.get(kind, ()))
        free: set[str] = set()
        for f in msgspec.structs.fields(cls):
            names.add(f.encode_name)
            if f.type is Any or "dict" in str(f.type) or "Any" in str(f.type):
                free.add(f.encode_name)
        out[kind] = (frozenset(names), frozenset(free))
    out[TRANSITION_EVENT] = (_TRANSITION_FIELDS, frozenset(("transition",)))
    return out


EVENT_FIELDS: Final = _fields()
"""Every event type a sentinel can be fed -> (data fields, free-form fields)."""


def _never_fed(kind: str) -> str | None:
    if kind in SENTINEL_EVENT_TYPES:
        return "sentinels are never fed sentinel events (one could wake itself for ever)"
    if kind in _CONNECTION:
        return "connection events are not journaled, so sentinels never see them"
    if kind not in EVENT_FIELDS:
        known = ", ".join(sorted(EVENT_FIELDS))
        return f"Weft does not emit this event (sentinels are fed: {known})"
    return None


def check_trigger(trigger: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """Checks a trigger's event types and condition paths (raw JSON of a config)."""
    kind = trigger.get("type")
    if kind == "event":
        on = trigger.get("on")
        types = [t for t in on if isinstance(t, str)] if isinstance(on, list) else []
        for i, t in enumerate(types):
            _check_type(t, (*path, "on", i), sink)
        _check_conditions(trigger.get("conditions"), types, (*path, "conditions"), sink)
    elif kind == "sequence":
        flt = trigger.get("interestFilter")
        on = flt.get("on") if isinstance(flt, dict) else None
        for i, t in enumerate(on if isinstance(on, list) else []):
            if isinstance(t, str):
                _check_type(t, (*path, "interestFilter", "on", i), sink)
        pattern = trigger.get("pattern")
        for i, step in enumerate(pattern if isinstance(pattern, list) else []):
            if not isinstance(step, dict) or not isinstance(step.get("type"), str):
                continue
            step_path = (*path, "pattern", i)
            _check_type(step["type"], (*step_path, "type"), sink)
            _check_conditions(
                step.get("conditions"), [step["type"]], (*step_path, "conditions"), sink
            )


def _check_type(kind: str, path: JsonPath, sink: Sink) -> None:
    if kind == "*":
        return
    why = _never_fed(kind)
    if why is not None:
        sink.add(
            path,
            "unknown_event",
            f'the trigger never fires on "{kind}": {why}',
            severity="warning",
        )


def _check_conditions(conditions: Any, types: list[str], path: JsonPath, sink: Sink) -> None:
    if not isinstance(conditions, list) or "*" in types:
        return
    watched = [EVENT_FIELDS[t] for t in types if t in EVENT_FIELDS]
    if not watched:
        return
    for i, condition in enumerate(conditions):
        target = condition.get("path") if isinstance(condition, dict) else None
        if not isinstance(target, str) or not target:
            continue
        head, _, rest = target.partition(".")
        fits = [(names, free) for names, free in watched if head in names]
        if not fits:
            fields = sorted(set().union(*(names for names, _ in watched)))
            sink.add(
                (*path, i, "path"),
                "bad_path",
                f'condition path "{target}" is not a field of '
                f"{' or '.join(t for t in types if t in EVENT_FIELDS)} (it never matches)",
                hint=did_you_mean(head, fields) or f"the data has: {', '.join(fields)}",
            )
        elif rest and not any(head in free for _, free in fits):
            sink.add(
                (*path, i, "path"),
                "bad_path",
                f'condition path "{target}": "{head}" holds no fields (it never matches)',
                hint=f'test "{head}" itself',
            )


def load_problems(
    loaded: LoadedHank,
    *,
    file: str,
    model_override: str | None = None,
    env: Mapping[str, str] | None = None,
) -> list[ConfigProblem]:
    """Whether each attached sentinel would load now (provider and key), as
    problems of the hank file ``file`` (its name as shown)."""
    registry = ProviderRegistry(dict(os.environ if env is None else env))
    problems: list[ConfigProblem] = []
    for codon, item_path in _codons(loaded):
        for i, entry in enumerate(codon.sentinels):
            ref = entry.sentinel_config
            config: SentinelConfig | None
            if isinstance(ref, SentinelConfig):
                config = ref
            else:
                config = loaded.sentinel_configs.get(loaded.resolve(ref))
            if config is None:
                continue  # its file's problems are reported already
            model = model_override or config.model
            try:
                registry.get(model)
            except ProviderError as e:
                required = bool(entry.settings and entry.settings.fail_codon_if_not_loaded)
                at = (*item_path, "sentinels", i, "sentinelConfig")
                problems.append(
                    ConfigProblem(
                        file=file,
                        path=format_path(at),
                        code="sentinel_unloadable",
                        message=f'sentinel "{config.id}" will not load: {e}',
                        severity="error" if required else "warning",
                        hint=(
                            "set the key, or run its sentinels offline with "
                            "--sentinel-model fake/haiku"
                        ),
                    )
                )
    return problems


def _codons(loaded: LoadedHank) -> list[tuple[Any, JsonPath]]:
    from weft.config.schema import Loop

    out: list[tuple[Any, JsonPath]] = []
    for i, item in enumerate(loaded.hank.hank):
        if isinstance(item, Loop):
            out.extend((c, ("hank", i, "codons", j)) for j, c in enumerate(item.codons))
        else:
            out.append((item, ("hank", i)))
    return out
