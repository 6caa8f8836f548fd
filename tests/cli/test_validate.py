"""``weft validate``: the tree, the problems, the JSON form and the exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.config.hankfiles import codon, hank, loop, write_hank

from weft.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_a_valid_hank_prints_its_tree_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = hank(
        codon(
            "survey",
            rigSetup=[
                {"type": "copy", "copy": {"from": "tpl", "to": "work"}},
                {"type": "command", "command": {"run": "ls", "workingDirectory": "lastCopied"}},
            ],
        ),
        loop(
            "refine",
            codon("write", continuationMode="continue-previous", onFailure="retry"),
            terminateOn={"type": "iterationLimit", "limit": 2},
        ),
        codon("report", model="google/gemini-2.5-pro"),
        meta={"name": "demo", "version": "2.0"},
    )
    write_hank(tmp_path, doc, {"tpl/a.txt": "x"})
    # The gemini CLI is "installed" (validate checks that a codon's CLI is there).
    monkeypatch.setenv("WEFT_GEMINI_BIN", "gemini-stand-in")
    assert main(["validate", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith('hank "demo" 2.0  (')
    assert out[1] == '├── codon survey "Codon survey"  fresh  fake/sonnet (claude, fake agent)'
    assert out[2] == "│   ├── rig copy tpl -> work"
    assert out[3] == '│   └── rig command "ls" in lastCopied'
    assert out[4] == '├── loop refine "Loop refine"  iterationLimit 2'
    assert out[5].startswith("│   └── codon write ")
    assert out[6] == ('└── codon report "Codon report"  fresh  google/gemini-2.5-pro (gemini)')
    assert out[-1] == "valid: 3 codons, 1 loop"


def test_an_invalid_hank_lists_every_error_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = hank(codon("a", onFailure="skip"), codon("a", trackedFiles=[]))
    write_hank(tmp_path, doc)
    assert main(["validate", str(tmp_path / "hank.json")]) == 2
    out = capsys.readouterr().out
    assert "3 errors:" in out
    assert '.onFailure: expected "abort", "retry" or "ignore", got "skip"' in out
    assert 'hint: did you mean "checkpointedFiles"?' in out
    assert 'duplicate id "a"' in out
    assert out.rstrip().endswith("invalid: " + str(tmp_path / "hank.json"))


def test_json_output_carries_problems_and_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_hank(tmp_path, hank(codon("a", name="N"), codon("b", name="N")))
    assert main(["validate", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert report["errors"] == []
    assert [(w["code"], w["path"], w["severity"]) for w in report["warnings"]] == [
        ("duplicate_name", "hank[1].name", "warning")
    ]
    assert [i["id"] for i in report["tree"]["items"]] == ["a", "b"]
    assert report["tree"]["items"][0]["harness"] == "claude"


def test_json_output_of_an_invalid_hank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_hank(tmp_path, '{"hank": [')
    assert main(["validate", str(tmp_path), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert report["tree"] is None
    (error,) = report["errors"]
    assert (error["code"], error["path"], error["line"]) == ("bad_json", "$", 1)


def test_the_model_option_applies_to_every_codon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_hank(tmp_path, hank(codon("a", model="llama")))
    assert main(["validate", str(tmp_path)]) == 2
    assert main(["validate", str(tmp_path), "--model", "fake/opus"]) == 0
    assert "fake/opus (claude, fake agent)" in capsys.readouterr().out


def test_a_missing_hank_is_a_clean_failure_without_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "weft", "validate", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert "no hank file at" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_the_current_directory_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_hank(tmp_path, hank())
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 0
    assert "(hank.json)" in capsys.readouterr().out.splitlines()[0]


def test_validate_reports_what_the_run_would_refuse_when_a_codon_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("WEFT_CLAUDE_BIN", raising=False)
    write_hank(tmp_path, hank(codon("a", model="fake/sonnet", promptText="See <%DATA_DIRR%>.")))
    assert main(["validate", str(tmp_path), "--json"]) == 2
    (problem,) = json.loads(capsys.readouterr().out)["errors"]
    assert problem["code"] == "unknown_variable"
    assert "did you mean <%DATA_DIR%>" in problem["hint"]
    write_hank(tmp_path, hank(codon("a", model="sonnet", promptText="See <%DATA_DIR%>.")))
    assert main(["validate", str(tmp_path), "--json"]) == 2
    (problem,) = json.loads(capsys.readouterr().out)["errors"]
    assert problem["code"] == "agent_cli_missing"
    assert "weft run -m fake/sonnet" in problem["hint"]
    assert main(["validate", str(tmp_path), "-m", "fake/sonnet"]) == 0


def test_no_environment_skips_the_checks_of_this_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("WEFT_CLAUDE_BIN", raising=False)
    write_hank(tmp_path, hank(codon("a", model="sonnet")))
    assert main(["validate", str(tmp_path)]) == 2
    assert main(["validate", str(tmp_path), "--no-environment"]) == 0
    assert "valid: 1 codon" in capsys.readouterr().out


def test_every_problem_is_reported_in_one_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A template error and a missing agent CLI are independent: neither hides the other.
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("WEFT_CLAUDE_BIN", raising=False)
    write_hank(tmp_path, hank(codon("a", model="sonnet", promptText="See <%DATA_DIRR%>.")))
    assert main(["validate", str(tmp_path), "--json"]) == 2
    codes = [p["code"] for p in json.loads(capsys.readouterr().out)["errors"]]
    assert sorted(codes) == ["agent_cli_missing", "unknown_variable"]


def test_a_structure_error_does_not_hide_a_missing_agent_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("WEFT_CLAUDE_BIN", raising=False)
    broken = codon("b", model="fake/sonnet", continuationMode="contine")
    write_hank(tmp_path, hank(codon("a", model="sonnet"), loop("l", broken)))
    assert main(["validate", str(tmp_path), "--json"]) == 2
    errors = json.loads(capsys.readouterr().out)["errors"]
    missing = [p for p in errors if p["code"] == "agent_cli_missing"]
    assert len(missing) == 1
    assert missing[0]["path"] == "hank[0].model"
    assert len(errors) == 2
    assert main(["validate", str(tmp_path)]) == 2
    text = capsys.readouterr().out
    assert "2 errors:" in text
    assert "`claude` is not on PATH" in text


def test_a_hint_with_two_choices_quotes_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_hank(tmp_path, hank(codon("a", model="fake/sonnet", prompt="Do it.")))
    assert main(["validate", str(tmp_path), "--json"]) == 2
    hints = [p.get("hint") or "" for p in json.loads(capsys.readouterr().out)["errors"]]
    assert 'did you mean "promptFile" or "promptText"?' in hints
