"""The checks a schema cannot express (reference hankweave §3.15).

They run on the parsed document after the structural walk, in the same
pass, and look only at values of the right type, so a hank with a typo in
one codon still gets every other codon checked: duplicate ids, the rules of
``continue-previous`` and of loops, file references, sentinel configs,
budgets, requirements, model routing, and the warnings.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
import orjson

from weft.agents.harness import route
from weft.checkpoints.errors import CheckpointPatternError
from weft.checkpoints.patterns import PatternSet
from weft.config.copies import executions_inside
from weft.config.hints import did_you_mean
from weft.config.problems import ConfigProblem, JsonPath
from weft.config.refs import RefChecker, RefKind, RefProblem
from weft.config.schema import SentinelConfig
from weft.config.walk import Sink, check_value
from weft.terminal import printable

__all__ = ["RuleContext", "check_rules", "load_sentinel_file"]

MAX_PROMPT_BYTES = 1_000_000
"""A prompt file larger than this is probably a mistake (a warning)."""

_DANGEROUS = [
    (
        re.compile(r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-\S+\s+)*(/|/\*)(\s|;|&|$)"),
        "deletes the root directory",
    ),
    (
        re.compile(
            r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(-\S+\s+)*(~|\$HOME)/?(\s|;|&|$)"
        ),
        "deletes the home directory",
    ),
    (re.compile(r">\s*/dev/(sd|nvme|hd|disk)"), "writes to a raw disk"),
    (re.compile(r"(^|[;&|]\s*)format\s+[a-zA-Z]:", re.IGNORECASE), "formats a drive"),
    (re.compile(r"\bdel\s+/s\s+/q\s+[a-zA-Z]:", re.IGNORECASE), "deletes a whole drive"),
]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_TARGETS = (".weft", ".hankweave", ".git")


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
    sentinel_files: dict[Path, _SentinelFile] = field(default_factory=dict)
    refs: RefChecker = field(init=False)

    def __post_init__(self) -> None:
        self.refs = RefChecker(self.root)


@dataclass(frozen=True, slots=True)
class _Slot:
    """A codon in pipeline order, with where it sits."""

    path: JsonPath
    codon: dict[str, Any]
    loop: dict[str, Any] | None
    loop_path: JsonPath | None
    index_in_loop: int


def _str(d: Any, key: str) -> str | None:
    v = d.get(key) if type(d) is dict else None
    return v if type(v) is str else None


def _dict(d: Any, key: str) -> dict[str, Any] | None:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, dict) else None


def _list(d: Any, key: str) -> list[Any]:
    v = d.get(key) if type(d) is dict else None
    return v if type(v) is list else []


def _num(d: Any, key: str) -> float | None:
    v = d.get(key) if isinstance(d, dict) else None
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _by_id(items: list[Any]) -> dict[str, dict[str, Any]]:
    return {i["id"]: i for i in items if isinstance(i, dict) and isinstance(i.get("id"), str)}


def _refs(value: Any) -> Iterator[tuple[int | None, str]]:
    """The references of a ``ref | ref[]`` field, with their index in the list."""
    if isinstance(value, str):
        yield None, value
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, str):
                yield i, v


def check_rules(doc: Any, ctx: RuleContext) -> None:
    """Runs every rule on the document ``doc`` (a parsed hank file)."""
    if not isinstance(doc, dict):
        return
    sink = ctx.sink
    _check_root(doc, ctx)
    slots = list(_slots(doc))
    top_ids: list[str] = []
    for i, item in enumerate(_list(doc, "hank")):
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            top_ids.append(item["id"])
        if isinstance(item, dict) and item.get("type") == "loop":
            _check_loop(item, ("hank", i), ctx)
    for slot in slots:
        _check_codon(slot, ctx)
    _check_ids(doc, sink)
    _check_continuations(doc, slots, sink)
    budget = _dict(_dict(doc, "overrides"), "budget")
    if budget is not None:
        children = _by_id(_list(doc, "hank"))
        _check_container_budget(budget, ("overrides", "budget"), children, sink)


def _slots(doc: dict[str, Any]) -> Iterator[_Slot]:
    for i, item in enumerate(_list(doc, "hank")):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "loop":
            for j, codon in enumerate(_list(item, "codons")):
                if isinstance(codon, dict) and codon.get("type", "codon") == "codon":
                    yield _Slot(("hank", i, "codons", j), codon, item, ("hank", i), j)
        elif item.get("type", "codon") == "codon":
            yield _Slot(("hank", i), item, None, None, 0)


# --------------------------------------------------------------------------- root


def _check_root(doc: dict[str, Any], ctx: RuleContext) -> None:
    sink = ctx.sink
    if "globalSystemPromptFile" in doc and "globalSystemPromptText" in doc:
        sink.warn(
            ("globalSystemPromptText",),
            "both_forms",
            "globalSystemPromptFile and globalSystemPromptText are both set; the text wins",
            hint="keep one of them",
        )
    for i, ref in _refs(doc.get("globalSystemPromptFile")):
        path: JsonPath = ("globalSystemPromptFile",) if i is None else ("globalSystemPromptFile", i)
        _check_file_ref(ref, path, ctx.root, ctx, prompt=True)
    requirements = _dict(doc, "requirements")
    if requirements is not None:
        _check_requirements(requirements, ctx)


def _check_requirements(requirements: dict[str, Any], ctx: RuleContext) -> None:
    sink = ctx.sink
    for i, name in enumerate(_list(requirements, "env")):
        if not isinstance(name, str) or not name:
            continue
        path: JsonPath = ("requirements", "env", i)
        if not _ENV_NAME.match(name):
            sink.add(path, "bad_value", f'"{name}" is not an environment variable name')
        elif ctx.check_environment and not (ctx.env.get(name) or ctx.env.get(f"WEFT_{name}")):
            sink.add(
                path,
                "missing_env",
                f"required environment variable {name} is not set",
                hint=f"export {name} (or WEFT_{name}) before running",
            )
    for i, tool in enumerate(_list(requirements, "tools")):
        if not isinstance(tool, str) or not tool:
            continue
        path = ("requirements", "tools", i)
        if "/" in tool or "\\" in tool:
            sink.add(
                path,
                "bad_value",
                f'"{tool}" is a path; requirements.tools lists bare program names',
                hint=f'write "{PurePosixPath(tool).name}" and put its directory on PATH',
            )
        elif ctx.check_environment and shutil.which(tool, path=ctx.env.get("PATH", "")) is None:
            sink.add(
                path,
                "missing_tool",
                f"required tool {tool} is not on PATH",
                hint=f"install {tool} or add its directory to PATH",
            )


# --------------------------------------------------------------------------- codons


def _check_codon(slot: _Slot, ctx: RuleContext) -> None:
    sink = ctx.sink
    codon, path = slot.codon, slot.path
    has_file, has_text = "promptFile" in codon, "promptText" in codon
    if not has_file and not has_text:
        sink.add(
            path,
            "missing_prompt",
            "a codon needs a prompt",
            hint='add "promptFile" (a file relative to the hank) or "promptText"',
        )
    elif has_file and has_text:
        sink.add(
            (*path, "promptText"),
            "both_forms",
            "promptFile and promptText are both set",
            hint="keep one of them",
        )
    if "appendSystemPromptFile" in codon and "appendSystemPromptText" in codon:
        sink.add(
            (*path, "appendSystemPromptText"),
            "both_forms",
            "appendSystemPromptFile and appendSystemPromptText are both set",
            hint="keep one of them",
        )
    if "retryConfig" in codon and codon.get("onFailure") != "retry":
        sink.add(
            (*path, "retryConfig"),
            "bad_combination",
            'retryConfig is only used when onFailure is "retry"',
            hint='set "onFailure": "retry" or remove retryConfig',
        )
    model = _str(codon, "model")
    if model:
        try:
            route(model)
        except ValueError as e:
            sink.add(
                (*path, "model"),
                "unroutable_model",
                str(e).replace("no harness runs", "no agent harness runs"),
                hint=did_you_mean(model, ("sonnet", "opus", "haiku", "fake/sonnet")),
            )
    for key in ("promptFile", "appendSystemPromptFile"):
        for i, ref in _refs(codon.get(key)):
            ref_path = (*path, key) if i is None else (*path, key, i)
            _check_file_ref(ref, ref_path, ctx.root, ctx, prompt=True)
    for i, op in enumerate(_list(codon, "rigSetup")):
        _check_rig_op(op, (*path, "rigSetup", i), slot.loop is not None, ctx)
    for i, step in enumerate(_list(codon, "outputFiles")):
        for j, command in enumerate(_list(step, "beforeCopy")):
            run = _str(_dict(command, "command"), "run")
            if run:
                _check_command(
                    run, (*path, "outputFiles", i, "beforeCopy", j, "command", "run"), sink
                )
    _check_archive_paths(codon, path, sink)
    _check_checkpointed_files(codon, path, sink)
    for i, step in enumerate(_list(codon, "outputFiles")):
        for j, glob in enumerate(_list(step, "copy")):
            if isinstance(glob, str) and (why := _leaves_workspace(glob, glob=True)):
                sink.add(
                    (*path, "outputFiles", i, "copy", j),
                    "bad_path",
                    f"output glob {why}",
                    hint="write a glob relative to the agent's workspace, such as report/**",
                )
    for key in codon.get("env", {}) if isinstance(codon.get("env"), dict) else {}:
        if not _ENV_NAME.match(key):
            sink.add(
                (*path, "env", key),
                "bad_value",
                f'"{key}" is not an environment variable name',
                hint="use letters, digits and underscores, not starting with a digit",
            )
    _check_sentinels(codon, path, ctx)
    budget = _dict(codon, "budget")
    if budget is not None:
        if "exhaustWithPrompt" in codon and "maxTimeSeconds" in budget:
            sink.warn(
                (*path, "budget", "maxTimeSeconds"),
                "budget",
                "a time budget ends an exhaustWithPrompt codon early, whatever its context",
            )
        if budget.get("onExceeded") == "fail" and codon.get("onFailure") == "retry":
            sink.warn(
                (*path, "budget", "onExceeded"),
                "budget",
                'onExceeded "fail" with onFailure "retry" retries a codon that will exceed '
                "its budget again",
            )
    if slot.loop is not None and codon.get("onFailure", "abort") == "abort":
        sink.warn(
            (*path, "onFailure"),
            "loop_abort",
            "a failure of this loop codon aborts the whole run",
            hint='set "onFailure" to "retry" or "ignore" if an iteration may fail',
        )


def _check_rig_op(op: Any, path: JsonPath, in_loop: bool, ctx: RuleContext) -> None:
    sink = ctx.sink
    if not isinstance(op, dict):
        return
    kind = op.get("type")
    if kind == "copy":
        spec = _dict(op, "copy")
        source = _str(spec, "from")
        if source:
            found = ctx.refs.check(source, None, "file-or-dir")
            if isinstance(found, RefProblem):
                sink.add((*path, "copy", "from"), "bad_ref", found.message, hint=found.hint)
            elif found.path.is_dir():
                _check_copied_executions(source, found.path, (*path, "copy", "from"), ctx)
        target = _str(spec, "to")
        if target:
            why = _workspace_path_problem(target)
            first = next((part for part in target.split("/") if part not in ("", ".")), "")
            if why is None and first in _RESERVED_TARGETS:
                why = f'"{target}" is inside {first}/, which Weft and git manage'
            if why is not None:
                sink.add(
                    (*path, "copy", "to"),
                    "bad_value",
                    why,
                    hint="give a path relative to the agent's workspace",
                )
    elif kind == "command":
        run = _str(_dict(op, "command"), "run")
        if run:
            _check_command(run, (*path, "command", "run"), sink)
    if in_loop and kind in ("copy", "command") and op.get("allowFailure") is not True:
        sink.warn(
            (*path, "allowFailure"),
            "loop_rig",
            "a rig operation in a loop codon that fails in a later iteration fails the codon",
            hint='set "allowFailure": true if it may fail in some iterations',
        )


def _check_copied_executions(source: str, folder: Path, path: JsonPath, ctx: RuleContext) -> None:
    """A copied folder holding an execution of this hank would copy that execution
    into itself without end (:mod:`weft.config.copies`)."""
    for execution, hank in executions_inside(folder):
        shown = printable(str(execution))
        ours = hank is not None and Path(hank).resolve().parent == ctx.root
        if ours:
            ctx.sink.add(
                path,
                "unbounded_copy",
                f'the copy source "{printable(source)}" holds this hank\'s execution {shown}: '
                "the copy would copy itself without end",
                hint="move the execution out of the copied folder (weft run --execution DIR)",
            )
        else:
            ctx.sink.warn(
                path,
                "copies_execution",
                f'the copy source "{printable(source)}" holds the Weft execution {shown}, '
                "which would be copied too",
                hint="move it out of the copied folder",
            )


def _check_command(run: str, path: JsonPath, sink: Sink) -> None:
    for pattern, what in _DANGEROUS:
        if pattern.search(run):
            sink.warn(path, "dangerous_command", f"this command {what}: {run!r}")
            return


def _workspace_path_problem(target: str) -> str | None:
    if any(unicodedata.category(ch) == "Cc" for ch in target):
        return f'"{printable(target)}" contains a control character'
    if "\\" in target:
        return f'"{target}" uses backslashes'
    if target.startswith(("/", "~")):
        return f'"{target}" is absolute'
    depth = 0
    for part in target.split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            return f'"{target}" leaves the workspace'
    if depth == 0:
        return f'"{target}" is the workspace itself'
    return None


def _leaves_workspace(value: str, *, glob: bool = False) -> str | None:
    """Why ``value``, a path (or with ``glob`` a glob, where ``\\`` escapes) relative
    to the agent's workspace, would name something outside it (``None`` when it
    stays inside)."""
    shown = f'"{printable(value)}"'
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        return f"{shown} contains a control character"
    if value.startswith(("/", "~", "\\\\")) or re.match(r"^[A-Za-z]:", value):
        return f"{shown} is absolute"
    if not glob and "\\" in value:
        return f"{shown} uses backslashes"
    if ".." in value.split("/"):
        return f'{shown} contains "..", which leaves the workspace'
    return None


def _check_checkpointed_files(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """Checkpoints hold workspace files only: an absolute or escaping pattern is
    refused here rather than silently re-rooted by the checkpoint module."""
    for i, pattern in enumerate(_list(codon, "checkpointedFiles")):
        if not isinstance(pattern, str):
            continue
        where: JsonPath = (*path, "checkpointedFiles", i)
        body = pattern[1:] if pattern.startswith("!") else pattern
        why = _leaves_workspace(body, glob=True)
        if why is not None:
            sink.add(
                where,
                "bad_path",
                f"checkpointedFiles pattern {why}",
                hint="checkpoints hold files inside the agent's workspace: write a pattern "
                "relative to it, such as notes/** or *.md",
            )
            continue
        try:
            PatternSet.compile([pattern])
        except CheckpointPatternError as e:
            sink.add(where, "bad_path", printable(str(e)))


def _check_archive_paths(obj: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    for i, p in enumerate(_list(obj, "archiveOnSuccess")):
        if not isinstance(p, str) or not p:
            continue
        if ".." in p.split("/") or p.startswith("/") or "\\" in p:
            sink.add(
                (*path, "archiveOnSuccess", i),
                "bad_value",
                f'"{p}" must be relative to the workspace, without ".." or a leading "/"',
            )


def _check_file_ref(
    ref: str,
    path: JsonPath,
    base: Path,
    ctx: RuleContext,
    *,
    prompt: bool = False,
    kind: RefKind = "file",
    sink: Sink | None = None,
) -> Path | None:
    """Checks a file reference; returns the file when it is safe."""
    out = sink or ctx.sink
    found = ctx.refs.check(ref, base, kind)
    if isinstance(found, RefProblem):
        out.add(path, "bad_ref", found.message, hint=found.hint)
        return None
    if prompt:
        size = found.size
        if size == 0:
            out.warn(path, "empty_prompt", f'prompt file "{ref}" is empty')
        elif size > MAX_PROMPT_BYTES:
            out.warn(
                path,
                "large_prompt",
                f'prompt file "{ref}" is {size:,} bytes (over {MAX_PROMPT_BYTES:,})',
            )
    return found.path


# --------------------------------------------------------------------------- sentinels


def _check_sentinels(codon: dict[str, Any], path: JsonPath, ctx: RuleContext) -> None:
    sink = ctx.sink
    seen: dict[str, int] = {}
    for i, entry in enumerate(_list(codon, "sentinels")):
        if not isinstance(entry, dict):
            continue
        entry_path = (*path, "sentinels", i)
        required = (
            _dict(entry, "settings") is not None
            and (_dict(entry, "settings") or {}).get("failCodonIfNotLoaded") is True
        )
        output_paths = _dict(_dict(entry, "settings"), "outputPaths")
        for key in ("logFile", "lastValueFile"):
            _check_sentinel_output_path(
                output_paths, key, (*entry_path, "settings", "outputPaths"), sink
            )
        config = entry.get("sentinelConfig")
        sentinel_id: str | None = None
        if isinstance(config, dict):
            check_sentinel_config(config, (*entry_path, "sentinelConfig"), ctx.root, ctx, sink)
            sentinel_id = _str(config, "id")
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
    value = _str(spec, key)
    if value and (why := _leaves_workspace(value)) is not None:
        sink.add(
            (*path, key),
            "bad_path",
            f"sentinel output path {why}",
            hint="give a file name, or a path relative to the agent's workspace",
        )


@dataclass
class _SentinelFile:
    """A sentinel config file, checked once however many codons use it."""

    config: SentinelConfig | None
    problems: list[ConfigProblem]
    errors: int
    reported: bool = False
    reported_as_errors: bool = False


def _check_sentinel_file(ref: str, path: JsonPath, required: bool, ctx: RuleContext) -> str | None:
    """Checks a sentinel config file; returns its id when it has one."""
    target = _check_file_ref(ref, path, ctx.root, ctx)
    if target is None:
        return None
    checked = ctx.sentinel_files.get(target)
    if checked is None:
        display = os.path.join(ctx.display_dir, ref) if ctx.display_dir else ref
        file_sink = Sink(display)
        config = load_sentinel_file(target, file_sink, ctx)
        checked = _SentinelFile(config, file_sink.in_order(), file_sink.error_count)
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
        for i, ref in _refs(config.get(key)):
            ref_path = (*path, key) if i is None else (*path, key, i)
            _check_file_ref(ref, ref_path, base, ctx, prompt=True, sink=sink)
    for key in ("file", "lastValueFile"):
        _check_sentinel_output_path(_dict(config, "output"), key, (*path, "output"), sink)
    model = _str(config, "model")
    if model and "/" not in model:
        sink.add(
            (*path, "model"),
            "bad_value",
            f'sentinel model "{model}" is not a full provider/model id',
            hint='write it as "anthropic/claude-...", "openai/gpt-..." or "google/gemini-..."',
        )
    structured = _dict(config, "structuredOutput")
    if structured is not None:
        _check_structured_output(structured, (*path, "structuredOutput"), base, ctx, sink)
        if "joinString" in config:
            sink.add(
                (*path, "joinString"),
                "bad_combination",
                "joinString is only for text output, not structuredOutput",
                hint="remove joinString",
            )
        if _str(_dict(config, "output"), "format") == "text":
            sink.add(
                (*path, "output", "format"),
                "bad_combination",
                'output.format "text" cannot hold structured output',
                hint='use "jsonl" or "json", or leave format out',
            )
    trigger = _dict(config, "trigger")
    if trigger is not None:
        for i, condition in enumerate(_list(trigger, "conditions")):
            _check_condition(condition, (*path, "trigger", "conditions", i), sink)
        for i, step in enumerate(_list(trigger, "pattern")):
            for j, condition in enumerate(_list(step, "conditions")):
                _check_condition(condition, (*path, "trigger", "pattern", i, "conditions", j), sink)


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
        target = _check_file_ref(ref, (*path, "schemaFile"), base, ctx, sink=sink)
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


def _check_condition(condition: Any, path: JsonPath, sink: Sink) -> None:
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
        try:
            re.compile(value)
        except re.error as e:
            sink.add((*path, "value"), "bad_value", f"not a valid regular expression: {e}")


# --------------------------------------------------------------------------- loops and budgets


def _check_loop(loop: dict[str, Any], path: JsonPath, ctx: RuleContext) -> None:
    sink = ctx.sink
    terminate = _dict(loop, "terminateOn")
    codons = _list(loop, "codons")
    if terminate is not None and terminate.get("type") == "contextExceeded":
        for j, codon in enumerate(codons):
            if isinstance(codon, dict) and codon.get("continuationMode") == "fresh":
                sink.add(
                    (*path, "codons", j, "continuationMode"),
                    "fresh_in_context_loop",
                    "a contextExceeded loop runs one session until its context is full, "
                    "so its codons cannot start fresh",
                    hint='use "continue-previous", or end the loop with iterationLimit',
                )
    _check_archive_paths(loop, path, sink)
    budget = _dict(loop, "budget")
    if budget is not None:
        children = _by_id(codons)
        _check_container_budget(budget, (*path, "budget"), children, sink)


def _check_container_budget(
    budget: dict[str, Any], path: JsonPath, children: dict[str, dict[str, Any]], sink: Sink
) -> None:
    allocation = budget.get("allocation", "shared")
    shares = _dict(budget, "shares")
    max_dollars = _num(budget, "maxDollars")
    if allocation in ("proportional", "proportional-strict") and max_dollars is None:
        sink.add(
            (*path, "allocation"),
            "budget",
            f'allocation "{allocation}" divides a dollar budget, and maxDollars is not set',
            hint='add "maxDollars" or use allocation "shared"',
        )
    if shares is not None:
        if allocation == "shared":
            sink.add(
                (*path, "shares"),
                "budget",
                'shares need allocation "proportional" or "proportional-strict"',
                hint='set "allocation": "proportional"',
            )
        numbers = [v for v in shares.values() if isinstance(v, int | float)]
        total = math.fsum(numbers)
        if total > 1.0 + 1e-9:
            sink.add((*path, "shares"), "budget", f"shares add up to {total:g}, more than 1")
        ids = list(children)
        for key in shares:
            if key not in children:
                sink.add(
                    (*path, "shares", key),
                    "budget",
                    f'"{key}" is not the id of a codon or loop here',
                    hint=did_you_mean(key, ids) or f"ids here: {', '.join(ids)}",
                )
    container_time = _num(budget, "maxTimeSeconds")
    for child_id, child in children.items():
        child_budget = _dict(child, "budget")
        if child_budget is None:
            continue
        child_dollars = _num(child_budget, "maxDollars")
        if max_dollars is not None and child_dollars is not None and child_dollars > max_dollars:
            sink.warn(
                (*path, "maxDollars"),
                "budget",
                f'"{child_id}" has its own cap of ${child_dollars:g}, above this budget '
                f"(${max_dollars:g})",
            )
        child_time = _num(child_budget, "maxTimeSeconds")
        if container_time is not None and child_time is not None and child_time > container_time:
            sink.warn(
                (*path, "maxTimeSeconds"),
                "budget",
                f'"{child_id}" has its own time cap of {child_time:g}s, above this budget '
                f"({container_time:g}s)",
            )


# --------------------------------------------------------------------------- sequence rules


def _check_ids(doc: dict[str, Any], sink: Sink) -> None:
    ids: dict[str, JsonPath] = {}
    names: dict[str, JsonPath] = {}

    def note(obj: Any, path: JsonPath) -> None:
        if not isinstance(obj, dict):
            return
        ident, name = _str(obj, "id"), _str(obj, "name")
        if ident:
            # The id's own rule (weft.config.ids) is checked by the walk.
            if ident in ids:
                from weft.config.problems import format_path

                sink.add(
                    (*path, "id"),
                    "duplicate_id",
                    f'duplicate id "{ident}" (also at {format_path(ids[ident])})',
                    hint="ids must be unique across the hank, loops included",
                )
            else:
                ids[ident] = path
        if name:
            if name in names:
                from weft.config.problems import format_path

                sink.warn(
                    (*path, "name"),
                    "duplicate_name",
                    f'name "{name}" is also used at {format_path(names[name])}',
                )
            else:
                names[name] = path

    for i, item in enumerate(_list(doc, "hank")):
        note(item, ("hank", i))
        if isinstance(item, dict) and item.get("type") == "loop":
            for j, codon in enumerate(_list(item, "codons")):
                note(codon, ("hank", i, "codons", j))


def _iterates_more_than_once(loop: dict[str, Any]) -> bool:
    terminate = _dict(loop, "terminateOn")
    if terminate is None:
        return True
    limit = terminate.get("limit")
    return not (terminate.get("type") == "iterationLimit" and limit == 1)


def _check_continuations(doc: dict[str, Any], slots: list[_Slot], sink: Sink) -> None:
    items = _list(doc, "hank")
    for n, slot in enumerate(slots):
        codon, path = slot.codon, slot.path
        if codon.get("continuationMode") != "continue-previous":
            continue
        previous: list[tuple[_Slot, str]] = []
        before = slots[n - 1] if n > 0 else None
        if slot.loop is not None and slot.index_in_loop == 0:
            # Iteration 0 continues the codon before the loop; later iterations
            # continue the loop's own last codon.
            if before is not None and before.loop is not slot.loop:
                previous.append((before, "the codon before the loop"))
            if _iterates_more_than_once(slot.loop):
                loop_codons = [s for s in slots if s.loop is slot.loop]
                previous.append((loop_codons[-1], "the loop's last codon (in the next iteration)"))
            if before is None or before.loop is slot.loop:
                sink.add(
                    (*path, "continuationMode"),
                    "no_previous",
                    "continue-previous in the first codon: the first iteration has no session "
                    "to continue",
                    hint='use "fresh" for the first codon',
                )
        elif before is not None:
            previous.append((before, "the previous codon"))
        else:
            sink.add(
                (*path, "continuationMode"),
                "no_previous",
                "continue-previous in the first codon: there is no session to continue",
                hint='use "fresh" for the first codon',
            )
        if slot.loop is None and before is not None and before.loop is not None:
            terminate = _dict(before.loop, "terminateOn")
            if terminate is not None and terminate.get("type") == "contextExceeded":
                sink.add(
                    (*path, "continuationMode"),
                    "continue_after_context_loop",
                    "this codon follows a contextExceeded loop, whose session ended with a "
                    "full context",
                    hint='use "fresh"',
                )
                continue
        model = _str(codon, "model")
        for prev, which in previous:
            prev_model = _str(prev.codon, "model")
            prev_id = _str(prev.codon, "id") or "?"
            if model and prev_model and model != prev_model:
                sink.add(
                    (*path, "model"),
                    "model_mismatch",
                    f'continue-previous resumes the session of {which} "{prev_id}", which uses '
                    f'"{prev_model}", not "{model}"',
                    hint=f'use model "{prev_model}" here, or "continuationMode": "fresh"',
                )
            if "exhaustWithPrompt" in prev.codon:
                sink.add(
                    (*path, "continuationMode"),
                    "continue_after_exhaust",
                    f'{which} "{prev_id}" runs until its context is exhausted '
                    "(exhaustWithPrompt), so there is no room to continue its session",
                    hint='use "fresh"',
                )
            if prev.codon.get("onFailure") == "ignore":
                sink.warn(
                    (*path, "continuationMode"),
                    "continue_after_ignore",
                    f'{which} "{prev_id}" may fail and be ignored, leaving no session to continue',
                )
            if not prev.codon.get("checkpointedFiles"):
                sink.warn(
                    (*path, "continuationMode"),
                    "previous_without_checkpoints",
                    f'{which} "{prev_id}" has no checkpointedFiles, so a rollback cannot '
                    "restore the files this session relies on",
                )
    del items
