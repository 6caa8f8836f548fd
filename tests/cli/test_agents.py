"""``weft agents``: installed CLIs, fake agents and model routing, run as the
real command with a temporary PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def weft(*args: str, path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    return subprocess.run(
        [sys.executable, "-m", "weft", "agents", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**clean, "PATH": str(path), **env},
    )


def fake_cli(directory: Path, name: str, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!{sys.executable}\nprint({version!r})\n")
    path.chmod(0o755)
    return path


def test_json_report_lists_installed_clis_fakes_and_routing(tmp_path: Path) -> None:
    claude = fake_cli(tmp_path / "bin", "claude", "2.1.30 (Claude Code)")
    codex = fake_cli(tmp_path / "elsewhere", "my-codex", "codex-cli 0.58.0")
    done = weft("--json", "fake/gpt-5", path=tmp_path / "bin", WEFT_CODEX_BIN=str(codex))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    agents = {a["name"]: a for a in report["agents"]}
    assert agents["claude"]["installed"]
    assert agents["claude"]["command"] == [str(claude)]
    assert agents["claude"]["version"] == "2.1.30 (Claude Code)"
    assert (agents["codex"]["version"], agents["codex"]["source"]) == ("codex-cli 0.58.0", "env")
    assert not agents["gemini"]["installed"]
    assert [f["name"] for f in report["fakeAgents"]] == ["claude", "codex", "gemini"]
    assert {r["harness"] for r in report["routing"]} >= {"claude", "codex", "gemini"}
    assert report["models"] == [
        {
            "model": "fake/gpt-5",
            "harness": "codex",
            "cliModel": "gpt-5",
            "fake": True,
            "pricedAs": "gpt-5",
        }
    ]


def test_text_report_routes_the_given_models(tmp_path: Path) -> None:
    done = weft("sonnet", "anthropic/claude-opus-4-5", "gemini-9-ultra", path=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert "  claude  not installed (put claude on PATH or set WEFT_CLAUDE_BIN)" in out
    models = out[out.index("Models") + 1 :]
    assert models[0].split() == [
        "sonnet",
        "->",
        "claude,",
        "--model",
        "sonnet;",
        "an",
        "alias:",
        "priced",
        "as",
        "the",
        "model",
        "the",
        "CLI",
        "reports",
    ]
    assert "--model claude-opus-4-5; priced as claude-opus-4-5" in models[1]
    assert models[2].endswith("-> gemini, --model gemini-9-ultra; unpriced")


def test_a_model_no_harness_runs_is_a_usage_error(tmp_path: Path) -> None:
    done = weft("llama-3", path=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("weft agents: no harness runs model 'llama-3'")
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_a_bad_model_id_is_named_and_the_others_are_still_reported(tmp_path: Path) -> None:
    done = weft("sonnet", "llama-3", "fake/haiku", "--json", path=tmp_path)
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert [m["model"] for m in report["models"]] == ["sonnet", "fake/haiku"]
    assert [b["model"] for b in report["unroutable"]] == ["llama-3"]
    assert done.stderr.startswith("weft agents: no harness runs model 'llama-3'")
    text = weft("llama-3", "sonnet", path=tmp_path)
    assert text.returncode == 2
    assert "  sonnet " in text.stdout
