"""The rules of sentinels: attached configs (inline or a file, each file checked
once), their prompts, output paths, structured output and trigger conditions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import orjson

from weft.config.problems import JsonPath
from weft.config.rules.context import (
    RuleContext,
    SentinelFile,
    get_dict,
    get_list,
    get_str,
    refs_of,
)
from weft.config.rules.paths import check_file_ref, leaves_workspace
from weft.config.schema import SentinelConfig
from weft.config.walk import Sink, check_value

__all__ = ["check_sentinel_config", "check_sentinels", "load_sentinel_file"]


def check_sentinels(codon: dict[str, Any], path: JsonPath, ctx: RuleContext) -> None:
    """The sentinels attached to one codon: output paths, inline or file configs, no sentinel
    attached twice."""
    sink = ctx.sink
    seen: dict[str, int] = {}
    for i, entry in enumerate(get_list(codon, "sentinels")):
        if not isinstance(entry, dict):
            continue
        entry_path = (*path, "sentinels", i)
        required = (
            get_dict(entry, "settings") is not None
            and (get_dict(entry, "settings") or {}).get("failCodonIfNotLoaded") is True
        )
        output_paths = get_dict(get_dict(entry, "settings"), "outputPaths")
        for key in ("logFile", "lastValueFile"):
            _check_sentinel_output_path(
                output_paths, key, (*entry_path, "settings", "outputPaths"), sink
            )
        config = entry.get("sentinelConfig")
        sentinel_id: str | None = None
        if isinstance(config, dict):
            check_sentinel_config(config, (*entry_path, "sentinelConfig"), ctx.root, ctx, sink)
            sentinel_id = get_str(config, "id")
        elif isinstance(config, str) and config:
            loaded = _check_sentinel_file(config, (*entry_path, "sentinelConfig"), required, ctx)
            sentinel_id = loaded
        if sentinel_id:
            if sentinel_id in seen:
                sink.add(
                    (*entry_path, "sentinelConfig"),
                    "duplicate_id",
                    f'sentinel "{sentinel_id}" is attached twice to this codon '
                    f"(also sentinels[{seen[sentinel_id]}])",
                    hint="remove one, or give the second config another id",
                )
            else:
                seen[sentinel_id] = i


def _check_sentinel_output_path(
    spec: dict[str, Any] | None, key: str, path: JsonPath, sink: Sink
) -> None:
    """A sentinel output path resolves under the workspace (or, a bare name, the
    managed sentinel folder): it may not leave them."""
    value = get_str(spec, key)
    if value and (why := leaves_workspace(value)) is not None:
        sink.add(
            (*path, key),
            "bad_path",
            f"sentinel output path {why}",
            hint="give a file name, or a path relative to the agent's workspace",
        )


def _check_sentinel_file(ref: str, path: JsonPath, required: bool, ctx: RuleContext) -> str | None:
    """Checks a sentinel config file; returns its id when it has one."""
    target = check_file_ref(ref, path, ctx.root, ctx)
    if target is None:
        return None
    checked = ctx.sentinel_files.get(target)
    if checked is None:
        display = os.path.join(ctx.display_dir, ref) if ctx.display_dir else ref
        file_sink = Sink(display)
        config = load_sentinel_file(target, file_sink, ctx)
        checked = SentinelFile(config, file_sink.in_order(), file_sink.error_count)
        ctx.sentinel_files[target] = checked
    if checked.config is None or checked.errors:
        ctx.sink.add(
            path,
            "bad_sentinel",
            f'sentinel config "{ref}" is invalid ({checked.errors} problem'
            f"{'s' if checked.errors != 1 else ''}, listed with its file)",
            hint=None
            if required
            else "the codon runs without this sentinel (failCodonIfNotLoaded is not set)",
            severity="error" if required else "warning",
        )
    # The file's own problems are listed once; a broken optional sentinel only
    # warns (the codon runs without it), a required one is an error.
    if not checked.reported or (required and not checked.reported_as_errors):
        found = checked.problems
        if not required:
            found = [msgspec.structs.replace(p, severity="warning") for p in found]
        ctx.sink.extend(found, path)
        checked.reported = True
        checked.reported_as_errors = checked.reported_as_errors or required
    if checked.config is not None and not checked.errors:
        ctx.sentinel_configs[target] = checked.config
    return checked.config.id if checked.config is not None else None


def load_sentinel_file(target: Path, sink: Sink, ctx: RuleContext) -> SentinelConfig | None:
    """Reads, checks and converts one sentinel config file (problems go to ``sink``)."""
    try:
        data = orjson.loads(target.read_bytes())
    except orjson.JSONDecodeError as e:
        sink.add((), "bad_json", f"invalid JSON: {e.msg}", line=e.lineno, column=e.colno)
        return None
    except OSError as e:
        sink.add((), "unreadable", f"cannot read the file: {e.strerror}")
        return None
    sink.doc = data
    if isinstance(data, dict):
        data.pop("$schema", None)
    check_value(data, SentinelConfig, (), sink)
    check_sentinel_config(data, (), target.parent, ctx, sink)
    if sink.error_count:
        return None
    try:
        return msgspec.convert(data, SentinelConfig)
    except msgspec.ValidationError as e:
        sink.add((), "internal", f"could not build the sentinel config: {e}")
        return None


def check_sentinel_config(
    config: dict[str, Any], path: JsonPath, base: Path, ctx: RuleContext, sink: Sink
) -> None:
    """The cross-field rules of one sentinel config; its refs resolve against ``base``."""
    if "userPromptFile" not in config and "userPromptText" not in config:
        sink.add(
            path,
            "missing_prompt",
            "a sentinel needs a user prompt",
            hint='add "userPromptFile" or "userPromptText"',
        )
    if "conversational" in config and not (
        "systemPromptFile" in config or "systemPromptText" in config
    ):
        sink.add(
            (*path, "conversational"),
            "missing_prompt",
            "a conversational sentinel needs a system prompt",
            hint='add "systemPromptFile" or "systemPromptText"',
        )
    for key in ("systemPromptFile", "userPromptFile"):
        for i, ref in refs_of(config.get(key)):
            ref_path = (*path, key) if i is None else (*path, key, i)
            check_file_ref(ref, ref_path, base, ctx, prompt=True, sink=sink)
    for key in ("file", "lastValueFile"):
        _check_sentinel_output_path(get_dict(config, "output"), key, (*path, "output"), sink)
    model = get_str(config, "model")
    if model and "/" not in model:
        sink.add(
            (*path, "model"),
            "bad_value",
            f'sentinel model "{model}" is not a full provider/model id',
            hint='write it as "anthropic/claude-...", "openai/gpt-..." or "google/gemini-..."',
        )
    structured = get_dict(config, "structuredOutput")
    if structured is not None:
        _check_structured_output(structured, (*path, "structuredOutput"), base, ctx, sink)
        if "joinString" in config:
            sink.add(
                (*path, "joinString"),
                "bad_combination",
                "joinString is only for text output, not structuredOutput",
                hint="remove joinString",
            )
        if get_str(get_dict(config, "output"), "format") == "text":
            sink.add(
                (*path, "output", "format"),
                "bad_combination",
                'output.format "text" cannot hold structured output',
                hint='use "jsonl" or "json", or leave format out',
            )
    trigger = get_dict(config, "trigger")
    if trigger is not None:
        # Imported here: the sentinel package imports this one.
        from weft.sentinels.checks import check_trigger

        check_trigger(trigger, (*path, "trigger"), sink)
        sentinel = get_str(config, "id") or "?"
        for i, condition in enumerate(get_list(trigger, "conditions")):
            _check_condition(condition, (*path, "trigger", "conditions", i), sink, sentinel)
        for i, step in enumerate(get_list(trigger, "pattern")):
            for j, condition in enumerate(get_list(step, "conditions")):
                at = (*path, "trigger", "pattern", i, "conditions", j)
                _check_condition(condition, at, sink, sentinel)


def _check_structured_output(
    structured: dict[str, Any], path: JsonPath, base: Path, ctx: RuleContext, sink: Sink
) -> None:
    output = structured.get("output")
    sources = [k for k in ("schema", "schemaStr", "schemaFile") if k in structured]
    if output == "enum":
        if "enumValues" not in structured:
            sink.add(path, "missing_key", 'output "enum" needs "enumValues"')
        for key in sources:
            sink.add((*path, key), "bad_combination", f'output "enum" takes enumValues, not {key}')
    elif output in ("object", "array"):
        if "enumValues" in structured:
            sink.add((*path, "enumValues"), "bad_combination", f'output "{output}" takes a schema')
        if not sources:
            sink.add(
                path,
                "missing_key",
                f'output "{output}" needs a JSON Schema',
                hint='add "schema" (inline), "schemaStr" (JSON text) or "schemaFile" (a file)',
            )
        elif len(sources) > 1:
            sink.add(
                (*path, sources[1]),
                "bad_combination",
                f"give the schema once: {' and '.join(sources)} are both set",
            )
    text = structured.get("schemaStr")
    if isinstance(text, str):
        _check_schema_text(text.encode(), (*path, "schemaStr"), sink, "schemaStr")
    ref = structured.get("schemaFile")
    if isinstance(ref, str) and ref:
        target = check_file_ref(ref, (*path, "schemaFile"), base, ctx, sink=sink)
        if target is not None:
            try:
                _check_schema_text(target.read_bytes(), (*path, "schemaFile"), sink, f'"{ref}"')
            except OSError as e:
                sink.add((*path, "schemaFile"), "unreadable", f"cannot read {ref}: {e.strerror}")


def _check_schema_text(text: bytes, path: JsonPath, sink: Sink, what: str) -> None:
    try:
        schema = orjson.loads(text)
    except orjson.JSONDecodeError:
        sink.add(
            path,
            "bad_schema",
            f"{what} is not JSON: structured output is described by JSON Schema, never by code",
            hint="write the schema as JSON Schema (Zod source is not evaluated)",
        )
        return
    if not isinstance(schema, dict):
        sink.add(path, "bad_schema", f"{what} must hold a JSON Schema object")


_VALUE_KINDS = {
    "in": "list",
    "notIn": "list",
    "contains": "string",
    "matches": "string",
    "greaterThan": "number",
    "lessThan": "number",
}


def _check_condition(condition: Any, path: JsonPath, sink: Sink, sentinel: str) -> None:
    if not isinstance(condition, dict) or "value" not in condition:
        return
    operator, value = condition.get("operator"), condition["value"]
    need = _VALUE_KINDS.get(operator) if isinstance(operator, str) else None
    ok = True
    if need == "list":
        ok = isinstance(value, list) and bool(value)
    elif need == "string":
        ok = isinstance(value, str)
    elif need == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif operator in ("equals", "notEquals"):
        ok = not isinstance(value, list)
    if not ok:
        what = {"list": "a non-empty array", "string": "a string", "number": "a number"}.get(
            need or "", "a string, number, boolean or null"
        )
        sink.add((*path, "value"), "bad_value", f'operator "{operator}" needs {what} as value')
    elif operator == "matches" and isinstance(value, str):
        from weft.sentinels.checks import check_pattern

        check_pattern(value, condition.get("path"), (*path, "value"), sink, sentinel)
