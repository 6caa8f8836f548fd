"""The rules of one codon: prompt forms, model routing, files, rig operations,
outputs, environment names, sentinels and budget combinations.
"""

from __future__ import annotations

from typing import Any

from weft.agents.harness import route
from weft.config.hints import did_you_mean
from weft.config.problems import JsonPath
from weft.config.rules.context import (
    ENV_NAME,
    RuleContext,
    Slot,
    get_dict,
    get_list,
    get_str,
    refs_of,
)
from weft.config.rules.paths import (
    check_archive_paths,
    check_checkpointed_files,
    check_command,
    check_file_ref,
    check_rig_op,
    leaves_workspace,
)
from weft.config.rules.sentinels import check_sentinels
from weft.config.walk import Sink

__all__ = ["check_codon"]


def check_codon(slot: Slot, ctx: RuleContext) -> None:
    """Every rule of one codon, in the order its problems are listed."""
    sink = ctx.sink
    codon, path = slot.codon, slot.path
    _check_forms(codon, path, sink)
    _check_model(codon, path, sink)
    for key in ("promptFile", "appendSystemPromptFile"):
        for i, ref in refs_of(codon.get(key)):
            ref_path = (*path, key) if i is None else (*path, key, i)
            check_file_ref(ref, ref_path, ctx.root, ctx, prompt=True)
    for i, op in enumerate(get_list(codon, "rigSetup")):
        check_rig_op(op, (*path, "rigSetup", i), slot.loop is not None, ctx)
    _check_before_copy(codon, path, sink)
    check_archive_paths(codon, path, sink)
    check_checkpointed_files(codon, path, sink)
    _check_output_globs(codon, path, sink)
    _check_env_names(codon, path, sink)
    check_sentinels(codon, path, ctx)
    _check_budget(codon, path, sink)
    _check_auto_compact(codon, path, sink)
    if slot.loop is not None and codon.get("onFailure", "abort") == "abort":
        sink.warn(
            (*path, "onFailure"),
            "loop_abort",
            "a failure of this loop codon aborts the whole run",
            hint='set "onFailure" to "retry" or "ignore" if an iteration may fail',
        )


def _check_auto_compact(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """``autoCompact`` switches Claude Code's auto-compaction; other CLIs have no switch."""
    model = get_str(codon, "model")
    if codon.get("autoCompact") is not True or not model:
        return
    try:
        harness = route(model).harness
    except ValueError:
        return  # reported by _check_model
    if harness != "claude":
        sink.warn(
            (*path, "autoCompact"),
            "no_effect",
            f"autoCompact has no effect on {model}: only Claude Code's auto-compaction "
            "can be switched",
            hint="remove autoCompact, or run this codon on a Claude model",
        )


def _check_forms(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """Exactly one prompt form, at most one system-prompt form, retryConfig only with retry."""
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


def _check_model(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """The model must route to an agent harness."""
    model = get_str(codon, "model")
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


def _check_before_copy(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """The commands run before output files are copied (dangerous ones warn)."""
    for i, step in enumerate(get_list(codon, "outputFiles")):
        for j, command in enumerate(get_list(step, "beforeCopy")):
            run = get_str(get_dict(command, "command"), "run")
            if run:
                check_command(
                    run, (*path, "outputFiles", i, "beforeCopy", j, "command", "run"), sink
                )


def _check_output_globs(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """Output globs stay inside the workspace."""
    for i, step in enumerate(get_list(codon, "outputFiles")):
        for j, glob in enumerate(get_list(step, "copy")):
            if isinstance(glob, str) and (why := leaves_workspace(glob, glob=True)):
                sink.add(
                    (*path, "outputFiles", i, "copy", j),
                    "bad_path",
                    f"output glob {why}",
                    hint="write a glob relative to the agent's workspace, such as report/**",
                )


def _check_env_names(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    for key in codon.get("env", {}) if isinstance(codon.get("env"), dict) else {}:
        if not ENV_NAME.match(key):
            sink.add(
                (*path, "env", key),
                "bad_value",
                f'"{key}" is not an environment variable name',
                hint="use letters, digits and underscores, not starting with a digit",
            )


def _check_budget(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    """Budget settings that work against the codon's other settings (warnings)."""
    budget = get_dict(codon, "budget")
    if budget is None:
        return
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
