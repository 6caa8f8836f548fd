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
  rollback); ``weft validate`` and ``weft run`` do. :func:`document_cli_problems`
  makes the same check on a document whose structure has errors, so that
  ``weft validate`` reports a missing CLI in the same pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from weft.config.problems import ConfigProblem
from weft.errors import ConfigError

if TYPE_CHECKING:
    from weft.config.loader import LoadedHank

__all__ = ["agent_cli_problems", "document_cli_problems", "machine_problems", "preflight"]

_PLACEHOLDER_ROOT = "/agentRoot"
"""Where the agent root stands while prompts are assembled for checking only."""


def preflight(loaded: LoadedHank, *, file: str) -> list[ConfigProblem]:
    """The prompt problems the run would meet when a codon starts (see the module docstring)."""
    from weft.config.prompt import ReadFiles, assemble_prompt, template_variables

    problems: list[ConfigProblem] = []
    variables = template_variables(_PLACEHOLDER_ROOT)
    read_before = ReadFiles()
    for codon, _loop in loaded.codons():
        try:
            assemble_prompt(
                codon, loaded.directory, variables, hank=loaded.hank, read_before=read_before
            )
        except ConfigError as e:
            # Named as the loader names the hank file (its display path).
            problems.extend(
                msgspec.structs.replace(p, file=file) if p.file == loaded.path.name else p
                for p in e.problems
            )
    return problems


def machine_problems(
    loaded: LoadedHank,
    *,
    file: str,
    env: Mapping[str, str],
    sentinel_model: str | None = None,
) -> list[ConfigProblem]:
    """What this machine would refuse of ``loaded`` when a codon starts, after
    the codons before it spent money: :func:`agent_cli_problems`, then whether
    each sentinel would load (its provider and key, its prompts and schema:
    an error for a ``failCodonIfNotLoaded`` one, else a warning). What
    ``weft run`` and ``weft batch`` check before anything runs."""
    problems = agent_cli_problems(loaded, file=file, env=env)
    if any(codon.sentinels for codon, _ in loaded.codons()):
        # Imported only then: the sentinel modules cost about 50 ms before the
        # first agent starts, and most hanks have no sentinel to check.
        from weft.sentinels.checks import load_problems

        problems += load_problems(loaded, file=file, model_override=sentinel_model, env=env)
    return problems


def agent_cli_problems(
    loaded: LoadedHank, *, file: str, env: Mapping[str, str]
) -> list[ConfigProblem]:
    """One problem per agent CLI that codons of ``loaded`` need and ``env`` lacks."""
    from weft.config.prompt import _locate

    def located() -> Iterator[_Need]:
        for codon, _loop in loaded.codons():
            path, where = _locate(loaded.hank, codon.id)
            yield _Need(codon.model, path, where)

    return _cli_problems(located(), file=file, env=env)


def document_cli_problems(doc: Any, *, file: str, env: Mapping[str, str]) -> list[ConfigProblem]:
    """:func:`agent_cli_problems` of a hank document whose structure has errors (no
    hank could be built): each codon with a ``model`` string is checked where it stands,
    so a structure error does not hide a missing CLI until the next pass."""

    def located() -> Iterator[_Need]:
        items = doc.get("hank") if isinstance(doc, dict) else None
        for i, item in enumerate(items if isinstance(items, list) else ()):
            if not isinstance(item, dict):
                continue
            if item.get("type") == "loop":
                codons = item.get("codons")
                for j, inner in enumerate(codons if isinstance(codons, list) else ()):
                    if isinstance(inner, dict):
                        label = f'loop "{item.get("id")}" > codon "{inner.get("id")}"'
                        yield _Need(inner.get("model"), f"hank[{i}].codons[{j}]", label)
            else:
                yield _Need(item.get("model"), f"hank[{i}]", f'codon "{item.get("id")}"')

    return _cli_problems(located(), file=file, env=env)


@dataclass(frozen=True, slots=True)
class _Need:
    """A codon's model, where the codon stands (its JSON path) and its label."""

    model: object
    path: str | None
    where: str


def _cli_problems(
    needs_of: Iterable[_Need], *, file: str, env: Mapping[str, str]
) -> list[ConfigProblem]:
    from weft.agents.harness import route
    from weft.agents.registry import BIN_ENV, BINARY, real_command

    problems: list[ConfigProblem] = []
    needs: dict[str, list[tuple[_Need, str]]] = {}  # harness -> (codon, routed model)
    for need in needs_of:
        if not isinstance(need.model, str):
            continue  # the schema reports a missing or mistyped model
        try:
            target = route(need.model)
        except ValueError:
            continue  # the model rules report an unroutable id
        if not target.fake:
            needs.setdefault(target.harness, []).append((need, target.model))
    for harness, codons in needs.items():
        if real_command(harness, env) is not None:
            continue
        first, model = codons[0]
        others = f" (and {len(codons) - 1} more codons)" if len(codons) > 1 else ""
        problems.append(
            ConfigProblem(
                file=file,
                path=f"{first.path}.model" if first.path else "$",
                item=first.path,
                where=first.where,
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
