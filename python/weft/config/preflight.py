"""The checks a run would otherwise make only when a codon starts.

``weft validate`` and ``weft run`` (before anything is created or spent) run
the same :func:`preflight` on a hank that passed the structural checks:

* every codon's prompt is assembled as the run will assemble it (files read,
  front-matter parsed, comments removed, template variables replaced with
  the run's names), so an unknown ``<%VARIABLE%>`` is reported up front;
* :func:`agent_cli_problems`: every codon that runs on a real agent CLI
  finds it (on ``PATH`` or in its ``WEFT_<HARNESS>_BIN`` variable); the hint
  names the ``-m fake/...`` run that needs no CLI. The loader does not run
  this one (a hank is loaded on machines that will not run it: tests,
  rollback); ``weft validate`` and ``weft run`` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from weft.config.problems import ConfigProblem
from weft.errors import ConfigError

if TYPE_CHECKING:
    from weft.config.loader import LoadedHank

__all__ = ["agent_cli_problems", "preflight"]

_PLACEHOLDER_ROOT = "/agentRoot"
"""Where the agent root stands while prompts are assembled for checking only."""


def preflight(loaded: LoadedHank, *, file: str) -> list[ConfigProblem]:
    """The prompt problems the run would meet when a codon starts (see the module docstring)."""
    from weft.config.prompt import assemble_prompt, template_variables

    problems: list[ConfigProblem] = []
    variables = template_variables(_PLACEHOLDER_ROOT)
    for codon, _loop in loaded.codons():
        try:
            assemble_prompt(codon, loaded.directory, variables, hank=loaded.hank)
        except ConfigError as e:
            # Named as the loader names the hank file (its display path).
            problems.extend(
                msgspec.structs.replace(p, file=file) if p.file == loaded.path.name else p
                for p in e.problems
            )
    return problems


def agent_cli_problems(
    loaded: LoadedHank, *, file: str, env: Mapping[str, str]
) -> list[ConfigProblem]:
    """One problem per agent CLI that codons of ``loaded`` need and ``env`` lacks."""
    from weft.agents.harness import route
    from weft.agents.registry import BIN_ENV, BINARY, real_command
    from weft.config.prompt import _locate

    problems: list[ConfigProblem] = []
    needs: dict[str, list[tuple[str, str]]] = {}  # harness -> (codon id, model)
    for codon, _loop in loaded.codons():
        try:
            target = route(codon.model)
        except ValueError:
            continue  # the model rules report an unroutable id
        if not target.fake:
            needs.setdefault(target.harness, []).append((codon.id, target.model))
    for harness, codons in needs.items():
        if real_command(harness, env) is not None:
            continue
        first, model = codons[0]
        path, where = _locate(loaded.hank, first)
        others = f" (and {len(codons) - 1} more codons)" if len(codons) > 1 else ""
        problems.append(
            ConfigProblem(
                file=file,
                path=f"{path}.model" if path else "$",
                item=path,
                where=where,
                message=(
                    f"model {model!r} runs on the {harness} CLI{others}, but "
                    f"`{BINARY[harness]}` is not on PATH"
                ),
                code="agent_cli_missing",
                hint=(
                    f"install it, set {BIN_ENV[harness]} to its path, or run on the fake "
                    f"agent: weft run -m fake/{model}"
                ),
            )
        )
    return problems
