"""Hostile input, hank side: path-escaping ids and values are refused, and
nothing a valid hank names can land outside the execution.

The corpus runs ``weft validate`` through the CLI's own entry point (exit code,
the whole output, no traceback); the properties check the id rule against
the schema pattern, the loader and the paths the runtime builds from ids.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.config.hankfiles import DROP, codon, hank, loop, write_hank
from tests.runtime.hanks import subprocess_environment

from weft.agents.harness import session_log_path
from weft.cli import main
from weft.config import validate_hank
from weft.config.ids import ID_PATTERN, MAX_ID_LENGTH, id_problem
from weft.errors import UnsafePathError
from weft.paths import contains
from weft.terminal import printable

_HOSTILE_IDS = [
    "../x",
    "../../../../../outside/pwned",
    "a/b",
    "/abs",
    "..",
    ".",
    "a\x00b",
    "a\nb",
    "\x1b[31mred",
    "\x1b]0;title\x07",
    "a\u202eb",
    "a\u2066b",
    "zero\u200bwidth",
    "x" * (MAX_ID_LENGTH + 1),
    "a\\b",
    "C:\\x",
    "a#1",
    " a",
    "tab\tid",
    ".hidden",
    "-rf",
    "naïve",
]


def _codon_with(**fields: Any) -> dict[str, Any]:
    return hank(codon("a", **fields))


def _sentinel(ident: str) -> dict[str, Any]:
    config = {
        "id": ident,
        "name": "S",
        "model": "anthropic/claude-haiku",
        "trigger": {"type": "event", "on": ["*"]},
        "execution": {"strategy": "immediate"},
        "userPromptText": "x",
    }
    return {"sentinelConfig": config}


# (document, JSON path of the problem, a word the message must hold)
_VALUES: dict[str, tuple[dict[str, Any], str, str]] = {
    "checkpointed-dotdot": (_codon_with(checkpointedFiles=["../x"]), "checkpointedFiles[0]", ".."),
    "checkpointed-absolute": (
        _codon_with(checkpointedFiles=["/etc/*"]),
        "checkpointedFiles[0]",
        "absolute",
    ),
    "checkpointed-deep-escape": (
        _codon_with(checkpointedFiles=["notes/../../x"]),
        "checkpointedFiles[0]",
        "..",
    ),
    "checkpointed-negated-escape": (
        _codon_with(checkpointedFiles=["notes/**", "!../x"]),
        "checkpointedFiles[1]",
        "..",
    ),
    "checkpointed-home": (
        _codon_with(checkpointedFiles=["~/.ssh/*"]),
        "checkpointedFiles[0]",
        "absolute",
    ),
    "checkpointed-drive": (
        _codon_with(checkpointedFiles=["C:/x"]),
        "checkpointedFiles[0]",
        "absolute",
    ),
    "checkpointed-control": (
        _codon_with(checkpointedFiles=["a\x1bb"]),
        "checkpointedFiles[0]",
        "control",
    ),
    "copy-from-escape": (
        _codon_with(rigSetup=[{"type": "copy", "copy": {"from": "../outside", "to": "w"}}]),
        "copy.from",
        "",
    ),
    "copy-from-absolute": (
        _codon_with(rigSetup=[{"type": "copy", "copy": {"from": "/etc", "to": "w"}}]),
        "copy.from",
        "",
    ),
    "copy-to-escape": (
        _codon_with(rigSetup=[{"type": "copy", "copy": {"from": "tpl", "to": "../x"}}]),
        "copy.to",
        "leaves the workspace",
    ),
    "copy-to-deep-escape": (
        _codon_with(rigSetup=[{"type": "copy", "copy": {"from": "tpl", "to": "a/../../x"}}]),
        "copy.to",
        "leaves the workspace",
    ),
    "copy-to-absolute": (
        _codon_with(rigSetup=[{"type": "copy", "copy": {"from": "tpl", "to": "/tmp/x"}}]),
        "copy.to",
        "absolute",
    ),
    "copy-to-weft": (
        _codon_with(rigSetup=[{"type": "copy", "copy": {"from": "tpl", "to": ".weft/x"}}]),
        "copy.to",
        ".weft",
    ),
    "copy-to-control": (
        _codon_with(rigSetup=[{"type": "copy", "copy": {"from": "tpl", "to": "a\x1b[2Jb"}}]),
        "copy.to",
        "control",
    ),
    "output-glob-escape": (
        _codon_with(outputFiles=[{"copy": ["../x/**"]}]),
        "outputFiles[0].copy[0]",
        "..",
    ),
    "archive-escape": (_codon_with(archiveOnSuccess=["../x"]), "archiveOnSuccess[0]", ".."),
    "prompt-file-escape": (
        _codon_with(promptText=DROP, promptFile="../secret.md"),
        "promptFile",
        "",
    ),
    "prompt-file-absolute": (
        _codon_with(promptText=DROP, promptFile="/etc/passwd"),
        "promptFile",
        "",
    ),
    "sentinel-id-escape": (_codon_with(sentinels=[_sentinel("../x")]), "sentinelConfig.id", "/"),
    "sentinel-output-escape": (
        _codon_with(
            sentinels=[{**_sentinel("s"), "settings": {"outputPaths": {"logFile": "../../x.md"}}}]
        ),
        "outputPaths.logFile",
        "..",
    ),
    "loop-id-escape": (hank(loop("../l", codon("c"))), '(loop "../l") .id', "separator"),
}


def _validate(tmp_path: Path, doc: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    directory = write_hank(tmp_path / "hank", doc, files={"tpl/f.txt": "x", "secret.md": "s"})
    (tmp_path / "secret.md").write_text("outside")
    code = main(["validate", str(directory)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, text
    assert "Traceback" not in text
    # Whatever the hank held, the terminal gets no raw control character.
    assert all(
        ch == "\n" or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp") for ch in text
    ), repr(text)
    return text


@pytest.mark.parametrize("ident", _HOSTILE_IDS, ids=lambda i: printable(i)[:24])
def test_a_hostile_codon_id_is_refused_by_weft_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ident: str
) -> None:
    text = _validate(tmp_path, hank(codon(ident)), capsys)
    problem = next(line for line in text.splitlines() if ".id:" in line)
    assert "hank[0]" in problem
    assert "hint: use ASCII letters" in text
    assert "invalid:" in text


@pytest.mark.parametrize("case", sorted(_VALUES))
def test_a_path_escaping_value_is_refused_by_weft_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    doc, where, word = _VALUES[case]
    text = _validate(tmp_path, copy.deepcopy(doc), capsys)
    lines = [line for line in text.splitlines() if where in line and "warning" not in line]
    assert lines, text
    assert word in lines[0], lines[0]


def test_ids_the_reference_examples_use_stay_valid(tmp_path: Path) -> None:
    ids = ["survey", "codon-1", "c_2", "draft.v2", "A1", "_private", "x" * MAX_ID_LENGTH]
    doc = hank(*(codon(i) for i in ids[:-1]), loop("refine-loop", codon(ids[-1])))
    report = validate_hank(write_hank(tmp_path / "hank", doc))
    assert report.valid, [p.render() for p in report.errors]


def test_the_error_says_what_where_and_how(tmp_path: Path) -> None:
    doc = hank(codon("ok"), codon("../../../../../outside/pwned"))
    report = validate_hank(write_hank(tmp_path / "hank", doc))
    [problem] = report.errors
    assert problem.path == "hank[1].id"
    assert problem.where == 'codon "../../../../../outside/pwned"'
    assert "path separator" in problem.message
    assert "at most 128" in (problem.hint or "")


# --------------------------------------------------------------------------- properties

_ANY_TEXT = st.text(
    alphabet=st.characters(codec="utf-8"), min_size=1, max_size=MAX_ID_LENGTH + 8
) | st.from_regex(r"[A-Za-z0-9_.#/\\ -]{1,12}", fullmatch=True)
_PROPERTY = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_PROPERTY
@given(ident=_ANY_TEXT)
def test_an_accepted_id_is_one_file_name_inside_the_execution(tmp_path: Path, ident: str) -> None:
    accepted = id_problem(ident) is None
    # The words and the schema's pattern agree (Python's $ would allow a final "\n").
    assert accepted == (
        re.fullmatch(ID_PATTERN.rstrip("$"), ident) is not None and len(ident) <= MAX_ID_LENGTH
    )
    weft_dir = tmp_path / "exec" / ".weft"
    for runtime_id in (ident, f"{ident}#3"):
        try:
            log = session_log_path(weft_dir, "1795255200000-abcde", runtime_id, "claude")
        except UnsafePathError:
            assert not accepted
            continue
        # Every log, even of an id validation refuses, stays in the run's folder.
        assert log.parent == weft_dir / "runs" / "1795255200000-abcde"
        assert contains(weft_dir, log)
        if accepted:
            assert printable(log.name) == log.name


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ident=_ANY_TEXT)
def test_validation_accepts_exactly_the_ids_the_rule_accepts(tmp_path: Path, ident: str) -> None:
    report = validate_hank(write_hank(tmp_path / "hank", hank(codon(ident))))
    assert report.valid == (id_problem(ident) is None), [p.render() for p in report.errors]


# --------------------------------------------------------------------------- weft run


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _weft(*args: str | Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weft", *map(str, args)],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _raw_controls(text: str) -> list[str]:
    return [
        ch for ch in text if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")
    ]


def test_weft_run_with_a_path_escaping_id_writes_nothing_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "root"
    directory = write_hank(root / "hank", hank(codon("../../../../../outside/pwned")))
    env = subprocess_environment(tmp_path)
    before = _tree(tmp_path)
    result = _weft("run", directory, "--execution", root / "x", "--headless", env=env, cwd=root)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert 'hank[0] (codon "../../../../../outside/pwned") .id: ' in result.stderr
    assert _tree(tmp_path) == before


def test_weft_run_keeps_every_file_inside_and_escapes_what_it_prints(tmp_path: Path) -> None:
    """A valid hank whose names, agent text, file names and rig output carry
    terminal escapes: every file the run writes is inside the execution (or the
    agent's config folder), and the headless output holds no raw control."""
    root = tmp_path / "root"
    evil = "\x1b[31mred\x1b]0;title\x07 \u202erev"
    say = f"@@fake:say {evil} done@@\n"
    ansi = "\\033[31mred \\342\\200\\256r\\n"  # printf escapes: ESC, U+202E
    write = '@@fake:write path="e\\u001b[1mvil.md" content="x"@@\n'
    doc = hank(
        codon("a.b_1", name=f"A {evil}", promptText=say + write),
        loop(
            "l",
            codon("x" * MAX_ID_LENGTH, onFailure="ignore"),
            terminateOn={"type": "iterationLimit", "limit": 2},
        ),
        codon(
            "z",
            rigSetup=[
                {
                    "type": "command",
                    "command": {"run": f"printf '{ansi}'; exit 3"},
                }
            ],
        ),
    )
    directory = write_hank(root / "hank", doc)
    env = subprocess_environment(tmp_path)
    before = _tree(tmp_path)
    execution = root / "x"
    result = _weft("run", directory, "--execution", execution, "--headless", env=env, cwd=root)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output
    assert _raw_controls(output) == []
    assert "\\x1b[31mred \\u202er" in output  # the rig's output, escaped
    status = _weft("status", execution, env=env, cwd=root)
    assert status.returncode == 0, status.stderr
    assert "\\x1b[31mred" in status.stdout
    assert _raw_controls(status.stdout + status.stderr) == []
    new = {p for p in _tree(tmp_path) - before if not p.startswith("claude-config")}
    assert new, "the run wrote nothing"
    assert all(p == "root/x" or p.startswith("root/x/") for p in new), sorted(new)
    logs = sorted(p.name for p in (execution / ".weft" / "runs").glob("*/*.log"))
    assert logs == sorted(
        [
            "a.b_1-claude.log",
            f"{'x' * MAX_ID_LENGTH}-0-claude.log",
            f"{'x' * MAX_ID_LENGTH}-1-claude.log",
        ]
    )
