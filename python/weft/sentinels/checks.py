"""What ``weft validate`` checks of sentinels beyond their schema.

* :func:`check_trigger`: the event types a trigger names and its condition
  paths, against the events a sentinel is fed (:data:`EVENT_FIELDS`, made
  from the typed events of :mod:`weft.events`). A type Weft never feeds
  (a sentinel or connection event, or one Weft does not emit) is a warning:
  the trigger never fires on it. A condition whose path starts with a field
  none of the watched events has is an error: it never matches. Paths below
  a free-form field (``toolInput.command``, ``content.x``) are not checked.
* :func:`check_pattern`: a ``matches`` condition's pattern translates and
  compiles for linear-time matching (:mod:`weft.sentinels.jsregex`); a
  refused one (a backreference, look-around, too large) is an error naming
  the sentinel, the condition and the pattern, with why and how to fix.
* :func:`load_problems`: whether each sentinel of a loaded hank would load
  now, by the manager's own load steps without a network call: its model's
  provider is known and its API key is set (after the ``--sentinel-model``
  override), its prompts read and parse, its schema loads. Problems of a
  ``failCodonIfNotLoaded`` sentinel are errors (the codon would fail), the
  others warnings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import orjson

from weft.config.hints import did_you_mean
from weft.config.loader import LoadedHank
from weft.config.problems import ConfigProblem, JsonPath, format_path
from weft.config.walk import Sink
from weft.events.stream import SENTINEL_EVENT_TYPES, STREAM_CLASSES
from weft.sentinels.manager import AttachedSentinel
from weft.sentinels.providers import PROVIDERS, ProviderError, ProviderRegistry

__all__ = ["EVENT_FIELDS", "TRANSITION_EVENT", "check_pattern", "check_trigger", "load_problems"]

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


def check_pattern(pattern: str, target: Any, path: JsonPath, sink: Sink, sentinel: str) -> None:
    """Checks a ``matches`` condition's ``pattern`` (on the field ``target``)
    compiles as Weft matches it, in linear time."""
    from weft.sentinels.jsregex import PatternError, compile_js_pattern

    try:
        compile_js_pattern(pattern)
    except PatternError as e:
        on = f' on "{target}"' if isinstance(target, str) else ""
        sink.add(
            path,
            "bad_value",
            f'sentinel "{sentinel}": the matches condition{on} cannot use the pattern '
            f"{_quote(pattern)}: {e.reason}",
            hint=e.hint,
        )


def _quote(pattern: str) -> str:
    """The pattern as a JSON string (as the config holds it), cut when long."""
    text = orjson.dumps(pattern).decode()
    return text if len(text) <= 120 else text[:117] + '..."'


_FIX_TEMPLATE: Final = (
    "fix the template at that line: prompts are Eta templates whose code is the JavaScript "
    "subset of docs/sentinels.md (Templates)"
)
_FIX_PROMPT_FILE: Final = (
    "the prompt file must be UTF-8 text inside the folder of the sentinel config "
    "(or of the hank, for an inline config)"
)
_FIX_SCHEMA: Final = (
    "describe structured output with a JSON Schema object (schema, schemaFile, a JSON "
    "schemaStr, or enumValues for an enum)"
)
_FIX_OFFLINE: Final = "or run its sentinels offline with --sentinel-model fake/haiku"


def load_problems(
    loaded: LoadedHank,
    *,
    file: str,
    model_override: str | None = None,
    env: Mapping[str, str] | None = None,
) -> list[ConfigProblem]:
    """Whether each attached sentinel would load now, as problems of the hank
    file ``file`` (its name as shown) or of the sentinel's config file.

    Runs the steps :meth:`~weft.sentinels.manager.SentinelManager.load` runs,
    with no network call: the model's provider is known and has its API key
    (after the ``--sentinel-model`` override), the prompts read and parse as
    templates, the structured-output schema loads (output paths are checked
    with the config: where they lead depends on the run's folders). Each
    problem names the sentinel, what fails and how to fix it; it is an error
    for a ``failCodonIfNotLoaded`` sentinel (the codon would fail), a warning
    otherwise (it would run without it)."""
    from weft.sentinels.config import attach_entry
    from weft.sentinels.manager import LoadFailure

    registry = ProviderRegistry(dict(os.environ if env is None else env))
    problems: list[ConfigProblem] = []
    for codon, item_path in _codons(loaded):
        for i, entry in enumerate(codon.sentinels):
            attached = attach_entry(entry, loaded.directory, loaded.sentinel_configs)
            if isinstance(attached, LoadFailure):
                continue  # its file's problems are reported already
            entry_path: JsonPath = (*item_path, "sentinels", i)
            config_file, config_at = file, (*entry_path, "sentinelConfig")
            if attached.source == "file" and attached.source_path is not None:
                config_file = os.path.join(os.path.dirname(file), attached.source_path)
                config_at = ()
            for in_hank, path, message, hint in _load_steps(
                attached, registry, model_override, config_at, entry_path
            ):
                problems.append(
                    ConfigProblem(
                        file=file if in_hank else config_file,
                        path=format_path(path) if path else "$",
                        code="sentinel_unloadable",
                        message=f'sentinel "{attached.config.id}" will not load: {message}',
                        severity="error" if attached.required else "warning",
                        hint=hint,
                    )
                )
    return problems


def _load_steps(
    attached: AttachedSentinel,
    registry: ProviderRegistry,
    model_override: str | None,
    at: JsonPath,
    entry_path: JsonPath,
) -> list[tuple[bool, JsonPath, str, str]]:
    """What fails in the manager's load steps for ``attached``: (in the hank
    file rather than the config's, JSON path, what, how to fix) each. ``at``
    is the config's path in its file, ``entry_path`` the entry's in the hank."""
    from weft.errors import UnsafePathError
    from weft.sentinels.manager import compile_prompt, prompt_source
    from weft.sentinels.outputs import SchemaError, load_schema
    from weft.sentinels.template import TemplateError

    config = attached.config
    out: list[tuple[bool, JsonPath, str, str]] = []
    model_at: JsonPath = (*entry_path, "sentinelConfig") if model_override else (*at, "model")
    try:
        missing = registry.missing_key(model_override or config.model)
    except ProviderError as e:
        known = ", ".join(sorted(PROVIDERS))
        hint = f"the provider is unknown: name one of {known} (anthropic/claude-haiku-4-5), "
        out.append((model_override is not None, model_at, str(e), hint + _FIX_OFFLINE))
    else:
        if missing is not None:
            hint = "set the key, " + _FIX_OFFLINE
            out.append((model_override is not None, model_at, missing, hint))
    for which in ("system", "user"):
        from_file = (
            config.system_prompt_file if which == "system" else config.user_prompt_file
        ) is not None
        field = f"{which}Prompt{'File' if from_file else 'Text'}"
        try:
            source = prompt_source(config, attached.base_dir, which)
        except (TemplateError, UnsafePathError) as e:
            out.append((False, (*at, field), str(e), _FIX_PROMPT_FILE))
            continue
        try:
            if source:
                compile_prompt(source, config.id, which)
        except TemplateError as e:
            out.append((False, (*at, field), str(e), _FIX_TEMPLATE))
    try:
        load_schema(config, attached.base_dir)
    except (SchemaError, UnsafePathError) as e:
        out.append((False, (*at, "structuredOutput"), str(e), _FIX_SCHEMA))
    return out


def _codons(loaded: LoadedHank) -> list[tuple[Any, JsonPath]]:
    from weft.config.schema import Loop

    out: list[tuple[Any, JsonPath]] = []
    for i, item in enumerate(loaded.hank.hank):
        if isinstance(item, Loop):
            out.extend((c, ("hank", i, "codons", j)) for j, c in enumerate(item.codons))
        else:
            out.append((item, ("hank", i)))
    return out
