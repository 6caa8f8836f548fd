"""A corpus of malformed hank files: each is refused with a ConfigError naming
what is wrong and where (a stable code at a JSON path), and nothing else escapes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.config.hankfiles import DROP, codon, hank, loop, write_hank

from weft.config import load_hank
from weft.errors import ConfigError, WeftError


@dataclass
class Case:
    """One malformed hank and the problems it must produce."""

    name: str
    doc: Any
    expect: list[tuple[str, str]]
    """(code, JSON path) pairs that must all be among the errors."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    hint: str | None = None
    """A substring one of the expected problems' hints must contain."""


def _symlinked_prompt(d: Path) -> None:
    outside = d.parent / f"{d.name}-secret.md"
    outside.write_text("secret")
    (d / "prompts").mkdir(exist_ok=True)
    (d / "prompts" / "link.md").symlink_to(outside)


def _symlinked_dir(d: Path) -> None:
    real = d.parent / f"{d.name}-elsewhere"
    real.mkdir(exist_ok=True)
    (real / "p.md").write_text("x")
    (d / "linked").symlink_to(real, target_is_directory=True)


def _fifo(d: Path) -> None:
    os.mkfifo(d / "pipe.md")


def _outside_file(d: Path) -> None:
    (d.parent / "outside.md").write_text("x")


def _event_cond(operator: str, value: Any) -> dict[str, Any]:
    return {
        "id": "watch",
        "name": "Watch",
        "model": "anthropic/claude-haiku-4-5",
        "trigger": {
            "type": "event",
            "on": ["token.usage"],
            "conditions": [{"path": "totalCost", "operator": operator, "value": value}],
        },
        "execution": {"strategy": "immediate"},
        "userPromptText": "x",
    }


def _sentinel(**fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "s",
        "name": "S",
        "model": "anthropic/claude-haiku-4-5",
        "trigger": {"type": "event", "on": ["*"]},
        "execution": {"strategy": "immediate"},
        "userPromptText": "x",
    }
    for key, value in fields.items():
        if value is DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _with_sentinel(config: Any, **settings: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"sentinelConfig": config}
    if settings:
        entry["settings"] = settings
    return hank(codon(sentinels=[entry]))


S0 = "hank[0].sentinels[0].sentinelConfig"

CASES = [
    # --- broken JSON
    Case("trailing comma", '{"hank": [],}', [("bad_json", "$")]),
    Case("empty file", "", [("bad_json", "$")]),
    Case("unclosed brace", '{"hank": [', [("bad_json", "$")]),
    Case("single quotes", "{'hank': []}", [("bad_json", "$")]),
    Case("comments", '{"hank": [] // no\n}', [("bad_json", "$")]),
    Case("not UTF-8", b'{"hank": ["\xff"]}', [("bad_json", "$")]),
    # --- wrong shape at the root
    Case("top-level array", [codon()], [("wrong_type", "$")]),
    Case("top-level string", '"hank"', [("wrong_type", "$")]),
    Case("missing hank", {"meta": {"name": "x", "version": "1"}}, [("missing_key", "hank")]),
    Case("empty hank", {"hank": []}, [("bad_value", "hank")]),
    Case("hank is an object", {"hank": codon()}, [("wrong_type", "hank")]),
    Case("hank item is a number", {"hank": [3]}, [("wrong_type", "hank[0]")]),
    Case("unknown root key", hank(codons=[]), [("unknown_key", "codons")], hint="valid keys"),
    Case(
        "codon field at the root",
        hank(model="sonnet"),
        [("unknown_key", "model")],
        hint="per-codon field",
    ),
    Case("$schema not a string", hank(**{"$schema": 3}), [("wrong_type", '["$schema"]')]),
    Case(
        "meta without version",
        hank(meta={"name": "x"}),
        [("missing_key", "meta.version")],
    ),
    Case(
        "meta typo",
        hank(meta={"name": "x", "version": "1", "autor": "me"}),
        [("unknown_key", "meta.autor")],
        hint='"author"',
    ),
    Case(
        "overrides typo",
        hank(overrides={"modle": "sonnet"}),
        [("unknown_key", "overrides.modle")],
        hint='"model"',
    ),
    # --- unknown keys and typos in codons
    Case(
        "trackedFiles",
        hank(codon(trackedFiles=["x"])),
        [("unknown_key", "hank[0].trackedFiles")],
        hint='"checkpointedFiles"',
    ),
    Case(
        "prompt",
        hank(codon(promptText=DROP, prompt="x")),
        [("unknown_key", "hank[0].prompt"), ("missing_prompt", "hank[0]")],
        hint='"promptFile" or "promptText"',
    ),
    Case(
        "continuation",
        hank(codon(continuationMode=DROP, continuation="fresh")),
        [("unknown_key", "hank[0].continuation"), ("missing_key", "hank[0].continuationMode")],
        hint='"continuationMode"',
    ),
    Case(
        "maxCost",
        hank(codon(maxCost=2)),
        [("unknown_key", "hank[0].maxCost")],
        hint="budget.maxDollars",
    ),
    Case(
        "misspelt promptFile",
        hank(codon(promptText=DROP, promtFile="p.md")),
        [("unknown_key", "hank[0].promtFile")],
        hint='"promptFile"',
    ),
    Case(
        "upper-case ID",
        hank(codon(id=DROP, ID="a")),
        [("unknown_key", "hank[0].ID"), ("missing_key", "hank[0].id")],
        hint='"id"',
    ),
    Case(
        "loop key typo",
        hank(loop("l", codon(continuationMode="fresh", onFailure="retry"), codons=DROP, codns=[])),
        [("unknown_key", "hank[0].codns")],
        hint='"codons"',
    ),
    Case(
        "copy spec typo",
        hank(codon(rigSetup=[{"type": "copy", "copy": {"form": "a", "to": "b"}}])),
        [
            ("unknown_key", "hank[0].rigSetup[0].copy.form"),
            ("missing_key", "hank[0].rigSetup[0].copy.from"),
        ],
        hint='"from"',
    ),
    Case(
        "sentinel entry typo",
        hank(codon(sentinels=[{"sentinel": "s.json"}])),
        [("unknown_key", "hank[0].sentinels[0].sentinel")],
        hint='"sentinelConfig"',
    ),
    # --- wrong types and values
    Case("numeric id", hank(codon(id=7)), [("wrong_type", "hank[0].id")]),
    Case("empty name", hank(codon(name="")), [("bad_value", "hank[0].name")]),
    Case(
        "continuationMode typo",
        hank(codon(continuationMode="contine")),
        [("bad_value", "hank[0].continuationMode")],
        hint='"continue-previous"',
    ),
    Case(
        "continuationMode number",
        hank(codon(continuationMode=1)),
        [("bad_value", "hank[0].continuationMode")],
    ),
    Case(
        "promptFile number",
        hank(codon(promptText=DROP, promptFile=3)),
        [("wrong_type", "hank[0].promptFile")],
    ),
    Case(
        "promptFile list with a number",
        hank(codon(promptText=DROP, promptFile=["a.md", 2])),
        [("wrong_type", "hank[0].promptFile[1]")],
        files={"a.md": "x"},
    ),
    Case(
        "checkpointedFiles string",
        hank(codon(checkpointedFiles="notes/**")),
        [("wrong_type", "hank[0].checkpointedFiles")],
    ),
    Case("env value number", hank(codon(env={"A": 1})), [("wrong_type", "hank[0].env.A")]),
    Case(
        "env bad name", hank(codon(env={"BAD-NAME": "1"})), [("bad_value", "hank[0].env.BAD-NAME")]
    ),
    Case("onFailure skip", hank(codon(onFailure="skip")), [("bad_value", "hank[0].onFailure")]),
    Case(
        "retry attempts 11",
        hank(codon(onFailure="retry", retryConfig={"maxAttempts": 11})),
        [("bad_value", "hank[0].retryConfig.maxAttempts")],
    ),
    Case(
        "retryConfig without retry",
        hank(codon(retryConfig={"maxAttempts": 2})),
        [("bad_combination", "hank[0].retryConfig")],
    ),
    Case("maxExtensions 0", hank(codon(maxExtensions=0)), [("bad_value", "hank[0].maxExtensions")]),
    Case(
        "maxExtensions float",
        hank(codon(maxExtensions=2.5)),
        [("wrong_type", "hank[0].maxExtensions")],
    ),
    Case(
        "autoCompact string",
        hank(codon(autoCompact="yes")),
        [("wrong_type", "hank[0].autoCompact")],
    ),
    Case(
        "shimIdleTimeout too big",
        hank(codon(shimIdleTimeout=5000)),
        [("bad_value", "hank[0].shimIdleTimeout")],
    ),
    Case(
        "null description",
        hank(codon(description=None)),
        [("wrong_type", "hank[0].description")],
        hint="leave the key out",
    ),
    Case(
        "negative budget",
        hank(codon(budget={"maxDollars": -1})),
        [("bad_value", "hank[0].budget.maxDollars")],
    ),
    Case(
        "budget onExceeded stop",
        hank(codon(budget={"onExceeded": "stop"})),
        [("bad_value", "hank[0].budget.onExceeded")],
    ),
    Case(
        "item type typo", hank(codon(type="codn")), [("bad_value", "hank[0].type")], hint='"codon"'
    ),
    Case(
        "huge integer", hank(codon(maxExtensions=10**30)), [("wrong_type", "hank[0].maxExtensions")]
    ),
    Case(
        "key with spaces",
        hank(codon(**{"prompt file": "a.md"})),
        [("unknown_key", 'hank[0]["prompt file"]')],
    ),
    # --- missing fields
    Case("missing id", hank(codon(id=DROP)), [("missing_key", "hank[0].id")]),
    Case("missing name", hank(codon(name=DROP)), [("missing_key", "hank[0].name")]),
    Case(
        "missing continuationMode",
        hank(codon(continuationMode=DROP)),
        [("missing_key", "hank[0].continuationMode")],
    ),
    Case(
        "missing model",
        hank(codon(model=DROP)),
        [("missing_key", "hank[0].model")],
        hint="overrides.model",
    ),
    Case("no prompt", hank(codon(promptText=DROP)), [("missing_prompt", "hank[0]")]),
    Case(
        "two prompts",
        hank(codon(promptFile="p.md")),
        [("both_forms", "hank[0].promptText")],
        files={"p.md": "x"},
    ),
    Case(
        "two system prompts",
        hank(codon(appendSystemPromptFile="s.md", appendSystemPromptText="x")),
        [("both_forms", "hank[0].appendSystemPromptText")],
        files={"s.md": "x"},
    ),
    # --- loops
    Case(
        "nested loop",
        hank(codon(), loop("outer", loop("inner", codon("x")))),
        [("bad_value", "hank[1].codons[0].type")],
        hint="cannot be nested",
    ),
    Case(
        "loop without terminateOn",
        hank(loop("l", codon(), terminateOn=DROP)),
        [("missing_key", "hank[0].terminateOn")],
    ),
    Case(
        "terminateOn forever",
        hank(loop("l", codon(), terminateOn={"type": "forever"})),
        [("bad_value", "hank[0].terminateOn.type")],
    ),
    Case(
        "iteration limit 0",
        hank(loop("l", codon(), terminateOn={"type": "iterationLimit", "limit": 0})),
        [("bad_value", "hank[0].terminateOn.limit")],
    ),
    Case("empty loop", hank(loop("l")), [("bad_value", "hank[0].codons")]),
    Case(
        "fresh codon in a contextExceeded loop",
        hank(
            codon("a"),
            loop("l", codon("b", onFailure="retry"), terminateOn={"type": "contextExceeded"}),
        ),
        [("fresh_in_context_loop", "hank[1].codons[0].continuationMode")],
    ),
    # --- semantic rules
    Case("duplicate ids", hank(codon("a"), codon("a")), [("duplicate_id", "hank[1].id")]),
    Case(
        "loop codon id reused",
        hank(codon("a"), loop("l", codon("a", onFailure="retry"))),
        [("duplicate_id", "hank[1].codons[0].id")],
    ),
    Case("hash in id", hank(codon("a#1")), [("bad_value", "hank[0].id")]),
    Case(
        "first codon continues",
        hank(codon(continuationMode="continue-previous")),
        [("no_previous", "hank[0].continuationMode")],
    ),
    Case(
        "model changes under continue-previous",
        hank(codon("a"), codon("b", continuationMode="continue-previous", model="fake/opus")),
        [("model_mismatch", "hank[1].model")],
    ),
    Case(
        "continue after exhaust",
        hank(
            codon("a", exhaustWithPrompt="more"), codon("b", continuationMode="continue-previous")
        ),
        [("continue_after_exhaust", "hank[1].continuationMode")],
    ),
    Case(
        "continue after a contextExceeded loop",
        hank(
            codon("a"),
            loop(
                "l",
                codon("b", continuationMode="continue-previous", onFailure="retry"),
                terminateOn={"type": "contextExceeded"},
            ),
            codon("c", continuationMode="continue-previous"),
        ),
        [("continue_after_context_loop", "hank[2].continuationMode")],
    ),
    Case("unroutable model", hank(codon(model="llama-3")), [("unroutable_model", "hank[0].model")]),
    # --- references
    Case(
        "missing prompt file",
        hank(codon(promptText=DROP, promptFile="prompts/none.md")),
        [("bad_ref", "hank[0].promptFile")],
    ),
    Case(
        "escaping prompt file",
        hank(codon(promptText=DROP, promptFile="../outside.md")),
        [("bad_ref", "hank[0].promptFile")],
        setup=_outside_file,
    ),
    Case(
        "absolute prompt file",
        hank(codon(promptText=DROP, promptFile="/etc/hostname")),
        [("bad_ref", "hank[0].promptFile")],
    ),
    Case(
        "symlinked prompt file",
        hank(codon(promptText=DROP, promptFile="prompts/link.md")),
        [("bad_ref", "hank[0].promptFile")],
        setup=_symlinked_prompt,
        hint="symbolic link",
    ),
    Case(
        "prompt through a symlinked dir",
        hank(codon(promptText=DROP, promptFile="linked/p.md")),
        [("bad_ref", "hank[0].promptFile")],
        setup=_symlinked_dir,
    ),
    Case(
        "prompt is a directory",
        hank(codon(promptText=DROP, promptFile="prompts")),
        [("bad_ref", "hank[0].promptFile")],
        files={"prompts/a.md": "x"},
    ),
    Case(
        "prompt is a FIFO",
        hank(codon(promptText=DROP, promptFile="pipe.md")),
        [("bad_ref", "hank[0].promptFile")],
        setup=_fifo,
    ),
    Case(
        "prompt list with an escape",
        hank(codon(promptText=DROP, promptFile=["a.md", "x/../../b.md"])),
        [("bad_ref", "hank[0].promptFile[1]")],
        files={"a.md": "x"},
    ),
    Case(
        "backslash path",
        hank(codon(promptText=DROP, promptFile="prompts\\a.md")),
        [("bad_ref", "hank[0].promptFile")],
    ),
    Case(
        "global prompt missing",
        hank(globalSystemPromptFile="global.md"),
        [("bad_ref", "globalSystemPromptFile")],
    ),
    Case(
        "copy from outside",
        hank(codon(rigSetup=[{"type": "copy", "copy": {"from": "../", "to": "x"}}])),
        [("bad_ref", "hank[0].rigSetup[0].copy.from")],
    ),
    Case(
        "copy the hank root",
        hank(codon(rigSetup=[{"type": "copy", "copy": {"from": ".", "to": "x"}}])),
        [("bad_ref", "hank[0].rigSetup[0].copy.from")],
    ),
    Case(
        "copy to an absolute path",
        hank(codon(rigSetup=[{"type": "copy", "copy": {"from": "t", "to": "/etc"}}])),
        [("bad_value", "hank[0].rigSetup[0].copy.to")],
        files={"t/a": "x"},
    ),
    Case(
        "copy into .git",
        hank(codon(rigSetup=[{"type": "copy", "copy": {"from": "t", "to": ".git/hooks"}}])),
        [("bad_value", "hank[0].rigSetup[0].copy.to")],
        files={"t/a": "x"},
    ),
    Case(
        "copy out of the workspace",
        hank(codon(rigSetup=[{"type": "copy", "copy": {"from": "t", "to": "../x"}}])),
        [("bad_value", "hank[0].rigSetup[0].copy.to")],
        files={"t/a": "x"},
    ),
    Case(
        "archive escape",
        hank(codon(archiveOnSuccess=["../x"])),
        [("bad_value", "hank[0].archiveOnSuccess[0]")],
    ),
    # --- rig and output
    Case(
        "rig op move",
        hank(codon(rigSetup=[{"type": "move", "from": "a"}])),
        [("bad_value", "hank[0].rigSetup[0].type")],
    ),
    Case(
        "rig op without type",
        hank(codon(rigSetup=[{"command": {"run": "ls"}}])),
        [("missing_key", "hank[0].rigSetup[0].type")],
    ),
    Case(
        "empty rig command",
        hank(codon(rigSetup=[{"type": "command", "command": {"run": ""}}])),
        [("bad_value", "hank[0].rigSetup[0].command.run")],
    ),
    Case(
        "rig working directory home",
        hank(
            codon(
                rigSetup=[{"type": "command", "command": {"run": "ls", "workingDirectory": "home"}}]
            )
        ),
        [("bad_value", "hank[0].rigSetup[0].command.workingDirectory")],
    ),
    Case(
        "empty outputFiles copy",
        hank(codon(outputFiles=[{"copy": []}])),
        [("bad_value", "hank[0].outputFiles[0].copy")],
    ),
    Case(
        "beforeCopy in lastCopied",
        hank(
            codon(
                outputFiles=[
                    {
                        "copy": ["a"],
                        "beforeCopy": [
                            {
                                "type": "command",
                                "command": {"run": "ls", "workingDirectory": "lastCopied"},
                            }
                        ],
                    }
                ]
            )
        ),
        [("bad_value", "hank[0].outputFiles[0].beforeCopy[0].command.workingDirectory")],
    ),
    # --- sentinels
    Case("missing sentinel file", _with_sentinel("sentinels/none.json"), [("bad_ref", S0)]),
    Case("bad sentinel id", _with_sentinel(_sentinel(id="Bad_ID")), [("bad_value", f"{S0}.id")]),
    Case(
        "sentinel without user prompt",
        _with_sentinel(_sentinel(userPromptText=DROP)),
        [("missing_prompt", S0)],
    ),
    Case(
        "unknown sentinel strategy",
        _with_sentinel(_sentinel(execution={"strategy": "often"})),
        [("bad_value", f"{S0}.execution.strategy")],
    ),
    Case(
        "debounce too long",
        _with_sentinel(_sentinel(execution={"strategy": "debounce", "milliseconds": 10**7})),
        [("bad_value", f"{S0}.execution.milliseconds")],
    ),
    Case(
        "Zod schema text",
        _with_sentinel(
            _sentinel(
                structuredOutput={"output": "object", "schemaStr": "z.object({a: z.string()})"}
            )
        ),
        [("bad_schema", f"{S0}.structuredOutput.schemaStr")],
        hint="JSON Schema",
    ),
    Case(
        "greaterThan a string",
        _with_sentinel(_event_cond("greaterThan", "big")),
        [("bad_value", f"{S0}.trigger.conditions[0].value")],
    ),
    Case(
        "bad regex",
        _with_sentinel(_event_cond("matches", "(")),
        [("bad_value", f"{S0}.trigger.conditions[0].value")],
    ),
    Case(
        "required broken sentinel file",
        _with_sentinel("s.json", failCodonIfNotLoaded=True),
        [("bad_sentinel", S0), ("bad_json", "$")],
        files={"s.json": "{nope"},
    ),
    Case(
        "sentinel attached twice",
        hank(codon(sentinels=[{"sentinelConfig": _sentinel()}, {"sentinelConfig": _sentinel()}])),
        [("duplicate_id", "hank[0].sentinels[1].sentinelConfig")],
    ),
    Case(
        "conversational without system prompt",
        _with_sentinel(
            _sentinel(conversational={"trimmingStrategy": {"type": "maxTurns", "maxTurns": 5}})
        ),
        [("missing_prompt", f"{S0}.conversational")],
    ),
    Case(
        "sentinel model without provider",
        _with_sentinel(_sentinel(model="haiku")),
        [("bad_value", f"{S0}.model")],
    ),
    # --- budgets
    Case(
        "proportional without dollars",
        hank(codon("a"), overrides={"budget": {"allocation": "proportional"}}),
        [("budget", "overrides.budget.allocation")],
    ),
    Case(
        "shares over 1",
        hank(
            codon("a"),
            codon("b"),
            overrides={
                "budget": {
                    "maxDollars": 5,
                    "allocation": "proportional",
                    "shares": {"a": 0.7, "b": 0.6},
                }
            },
        ),
        [("budget", "overrides.budget.shares")],
    ),
    Case(
        "share of an unknown child",
        hank(
            codon("alpha"),
            overrides={
                "budget": {"maxDollars": 5, "allocation": "proportional", "shares": {"alpah": 0.5}}
            },
        ),
        [("budget", "overrides.budget.shares.alpah")],
        hint='"alpha"',
    ),
    Case(
        "shares with shared allocation",
        hank(codon("a"), overrides={"budget": {"maxDollars": 5, "shares": {"a": 0.5}}}),
        [("budget", "overrides.budget.shares")],
    ),
    # --- requirements
    Case(
        "missing env var",
        hank(requirements={"env": ["WEFT_TEST_NOT_SET_ANYWHERE"]}),
        [("missing_env", "requirements.env[0]")],
    ),
    Case(
        "missing tool",
        hank(requirements={"tools": ["weft-no-such-tool-xyz"]}),
        [("missing_tool", "requirements.tools[0]")],
        env={"PATH": "/nonexistent"},
    ),
    Case(
        "tool given as a path",
        hank(requirements={"tools": ["/usr/bin/git"]}),
        [("bad_value", "requirements.tools[0]")],
    ),
]


def test_the_corpus_is_large_and_its_names_unique() -> None:
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_malformed_hank_is_refused_with_located_problems(case: Case, tmp_path: Path) -> None:
    directory = write_hank(tmp_path / "hank", case.doc, case.files)
    if case.setup is not None:
        case.setup(directory)
    with pytest.raises(ConfigError) as raised:
        load_hank(directory, env=case.env)
    error = raised.value
    assert isinstance(error, WeftError)
    found = {(p.code, p.path) for p in error.errors}
    for expected in case.expect:
        assert expected in found, f"{expected} not in {sorted(found)}\n{error}"
    for problem in error.problems:
        assert problem.path, problem
        assert problem.file.endswith(".json"), problem
        assert problem.message
        assert str(problem) in str(error)
    if case.hint is not None:
        hints = [p.hint or "" for p in error.problems]
        assert any(case.hint in h for h in hints), hints


def test_a_syntax_error_reports_its_line_and_column(tmp_path: Path) -> None:
    text = '{\n  "hank": [\n    {"id": "a",}\n  ]\n}\n'
    directory = write_hank(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_hank(directory)
    (problem,) = raised.value.problems
    # orjson points at the offending trailing comma.
    assert (problem.line, problem.column) == (3, text.splitlines()[2].index(",}") + 1)
    assert str(problem).startswith(f"{problem.file}:3:")
