"""The rules of the document's root: the global system prompt and ``requirements``
(environment variables and tools, checked against this machine when asked).
"""

from __future__ import annotations

import shutil
from pathlib import PurePosixPath
from typing import Any

from weft.config.problems import JsonPath
from weft.config.rules.context import ENV_NAME, RuleContext, get_dict, get_list, refs_of
from weft.config.rules.paths import check_file_ref

__all__ = ["check_root"]


def check_root(doc: dict[str, Any], ctx: RuleContext) -> None:
    """The global system prompt (one form, files that exist) and the requirements."""
    sink = ctx.sink
    if "globalSystemPromptFile" in doc and "globalSystemPromptText" in doc:
        sink.warn(
            ("globalSystemPromptText",),
            "both_forms",
            "globalSystemPromptFile and globalSystemPromptText are both set; the text wins",
            hint="keep one of them",
        )
    for i, ref in refs_of(doc.get("globalSystemPromptFile")):
        path: JsonPath = ("globalSystemPromptFile",) if i is None else ("globalSystemPromptFile", i)
        check_file_ref(ref, path, ctx.root, ctx, prompt=True)
    requirements = get_dict(doc, "requirements")
    if requirements is not None:
        _check_requirements(requirements, ctx)
    _check_inert_overrides(doc, ctx)


_INERT_SENTINEL_SETTINGS = {
    "healthCheckGracePeriodMs": 2000,
    "waitForAllHealthChecks": False,
}
"""``overrides.sentinel`` keys accepted for Hankweave's hanks, with their
defaults (see :mod:`weft.config.inert`)."""


def _check_inert_overrides(doc: dict[str, Any], ctx: RuleContext) -> None:
    """Overrides Weft accepts but cannot honour are named, not silently kept."""
    overrides = get_dict(doc, "overrides")
    sentinel = get_dict(overrides, "sentinel") if overrides is not None else None
    if sentinel is None:
        return
    for key, default in _INERT_SENTINEL_SETTINGS.items():
        if key in sentinel and sentinel[key] != default:
            ctx.sink.warn(
                ("overrides", "sentinel", key),
                "no_effect",
                f"overrides.sentinel.{key} has no effect: Weft loads a codon's sentinels "
                "before its agent starts, so there is no health check to wait for",
                hint=f"remove {key}",
            )


def _check_requirements(requirements: dict[str, Any], ctx: RuleContext) -> None:
    sink = ctx.sink
    for i, name in enumerate(get_list(requirements, "env")):
        if not isinstance(name, str) or not name:
            continue
        path: JsonPath = ("requirements", "env", i)
        if not ENV_NAME.match(name):
            sink.add(path, "bad_value", f'"{name}" is not an environment variable name')
        elif ctx.check_environment and not (ctx.env.get(name) or ctx.env.get(f"WEFT_{name}")):
            sink.add(
                path,
                "missing_env",
                f"required environment variable {name} is not set",
                hint=f"export {name} (or WEFT_{name}) before running",
            )
    for i, tool in enumerate(get_list(requirements, "tools")):
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
