"""``weft run``'s run-shaping settings on a resumed execution, as real subprocesses.

A different ``--model`` on an execution that already ran is handled like a
changed hank (refused without a person to ask, with the choices; ``--yes``
re-plans the codons not yet run); the model, the sentinel model and the
ceilings given as flags are kept with the execution, so a later run without
the flag goes on with them; the printed continue line gives what is in force
and never repeats a cap the run just reached.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from tests.cli.test_run import TIMEOUT, no_traceback, start_weft, wait_until_working, weft
from tests.runtime.hanks import (
    codon,
    journal,
    read_state,
    runs_oldest_first,
    scenario,
    subprocess_environment,
    workspace_files,
    write_file,
    write_hank,
)

from weft.outcome import EXIT_BUDGET, EXIT_USAGE


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


def meta(execution: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((execution / ".weft" / "execution-meta.json").read_text())
    return doc


def models_started(execution: Path) -> list[tuple[str, str]]:
    """(codon id, model) of every ``codon.started`` in the journal, in order; the model
    as the fake agent names it, reduced to ``sonnet`` or ``gpt-5``."""
    return [
        (d["codonId"], next((m for m in ("sonnet", "gpt-5") if m in d["model"]), d["model"]))
        for kind, d in journal(execution)
        if kind == "codon.started"
    ]


def continue_line(output: str) -> str:
    (line,) = [x for x in output.splitlines() if x.strip().startswith(("continue ", "resume "))]
    return line.strip().split(None, 1)[1]


def interrupt(args: tuple[Any, ...], env: dict[str, str], cwd: Path, codon_id: str) -> None:
    """Runs ``weft`` with ``args`` until ``codon_id`` hangs, then stops it with SIGINT."""
    proc = start_weft(*args, env=env, cwd=cwd)
    try:
        wait_until_working(args[args.index("--execution") + 1], codon_id, f"{codon_id}/partial.md")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=TIMEOUT) == 128 + signal.SIGINT
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def hanging(ident: str) -> dict[str, Any]:
    """A codon whose prompt file makes it write ``<id>/partial.md`` and hang; a test
    rewrites the file (not the hank) to let it finish."""
    return codon(ident, prompt_file=f"prompts/{ident}.md", files=[f"{ident}/**"])


def hang_prompt(ident: str) -> str:
    return write_file(f"{ident}/partial.md", "half") + scenario("hang_after_init")


# --------------------------------------------------------------------------- --model


def test_another_model_on_a_complete_execution_is_refused_with_the_choices(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")))
    execution = tmp_path / "x"
    first = weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr

    again = weft(
        "run", hank, "--execution", execution, "--headless", "-m", "fake/gpt-5",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    no_traceback(again)
    assert again.returncode == EXIT_USAGE, again.stdout + again.stderr
    assert "Nothing to do" not in again.stdout
    assert "ran on fake/sonnet" in again.stderr
    assert "--new" in again.stderr
    assert len(read_state(execution)["runs"]) == 1
    assert "model" not in meta(execution).get("runSettings", {})

    # --new runs the hank on the asked model, in a new execution.
    fresh = weft("run", hank, "--new", "--headless", "-m", "fake/gpt-5", env=env, cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    (made,) = Path(env["WEFT_RUNTIME_EXECUTION_BASE_DIR"]).iterdir()
    assert models_started(made) == [("a", "gpt-5")]


def test_an_interrupted_run_resumed_with_another_model_asks_and_yes_replans_the_rest(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a"), files=["a.md"]),
        hanging("b"),
        hanging("c"),
        files={"prompts/b.md": hang_prompt("b"), "prompts/c.md": hang_prompt("c")},
    )
    execution = tmp_path / "x"
    args: tuple[Any, ...] = ("run", hank, "--execution", execution, "--headless")
    interrupt(args, env, tmp_path, "b")
    (tmp_path / "hank" / "prompts" / "b.md").write_text(write_file("b/done.md", "whole"))

    # Without a person to ask: refused, with the choices, nothing run.
    refused = weft(*args, "-m", "fake/gpt-5", env=env, cwd=tmp_path)
    no_traceback(refused)
    assert refused.returncode == EXIT_USAGE, refused.stdout + refused.stderr
    for choice in ("--yes", "--new", "drop --model", "fake/sonnet"):
        assert choice in refused.stderr, refused.stderr
    assert len(read_state(execution)["runs"]) == 1

    # --yes: a keeps its run on fake/sonnet; b (interrupted) and c run on fake/gpt-5,
    # until c hangs and is interrupted in turn.
    interrupt((*args, "-m", "fake/gpt-5", "--yes"), env, tmp_path, "c")
    out = (tmp_path / "weft.out").read_text()
    assert "now run on fake/gpt-5" in out, out
    assert models_started(execution) == [
        ("a", "sonnet"),
        ("b", "sonnet"),
        ("b", "gpt-5"),
        ("c", "gpt-5"),
    ]
    assert meta(execution)["runSettings"]["model"] == "fake/gpt-5"
    assert continue_line(out) == f"weft run --execution {execution} --model fake/gpt-5"

    # The next resume without --model keeps fake/gpt-5 and says so.
    (tmp_path / "hank" / "prompts" / "c.md").write_text(write_file("c/done.md", "whole"))
    last = weft(*args, env=env, cwd=tmp_path)
    no_traceback(last)
    assert last.returncode == 0, last.stdout + last.stderr
    assert "codons run on fake/gpt-5, kept with execution" in last.stdout
    assert models_started(execution)[-1] == ("c", "gpt-5")
    assert continue_line(last.stdout) == f"weft run --execution {execution} --model fake/gpt-5"
    assert workspace_files(execution) == {"a.md": "a", "b/done.md": "whole", "c/done.md": "whole"}
    assert [r["status"] for r in runs_oldest_first(read_state(execution))][-1] == "completed"


def test_the_same_model_again_is_no_change(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")))
    execution = tmp_path / "x"
    first = weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    again = weft(
        "run", hank, "--execution", execution, "--headless", "-m", "fake/sonnet",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Nothing to do" in again.stdout


# --------------------------------------------------------------------------- ceilings


def test_a_max_cost_is_kept_with_the_execution_and_a_new_one_replaces_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a")),
        codon("b", write_file("b.md", "b")),
        codon("c", write_file("c.md", "c")),
    )
    execution = tmp_path / "x"
    args: tuple[Any, ...] = ("run", hank, "--execution", execution, "--headless")
    first = weft(*args, "--max-cost", "0.001", env=env, cwd=tmp_path)
    no_traceback(first)
    assert first.returncode == EXIT_BUDGET, first.stdout + first.stderr
    assert meta(execution)["runSettings"] == {"maxDollars": 0.001}
    # The cap just reached is not repeated: the line says to raise it.
    line = continue_line(first.stdout)
    assert line == f"weft run --execution {execution} --max-cost 0.002"

    # No flag: the kept cap still holds (the codons left are not run).
    kept = weft(*args, env=env, cwd=tmp_path)
    no_traceback(kept)
    assert kept.returncode == EXIT_BUDGET, kept.stdout + kept.stderr
    assert "--max-cost $0.001 is kept with execution" in kept.stdout
    assert "c.md" not in workspace_files(execution)
    assert continue_line(kept.stdout) == line

    # A new flag replaces it, says so, and is kept in turn.
    raised = weft(*args, "--max-cost", "5", env=env, cwd=tmp_path)
    no_traceback(raised)
    assert raised.returncode == 0, raised.stdout + raised.stderr
    assert "--max-cost $5 replaces the $0.001 kept with execution" in raised.stdout
    assert meta(execution)["runSettings"] == {"maxDollars": 5.0}
    assert workspace_files(execution) == {"a.md": "a", "b.md": "b", "c.md": "c"}
    assert continue_line(raised.stdout) == f"weft run --execution {execution} --max-cost 5"


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"maxDollars": "lots"}, "runSettings.maxDollars"),
        ({"maxDollars": -1}, "runSettings.maxDollars"),
        ({"maxSeconds": 0}, "runSettings.maxSeconds"),
        ({"model": ""}, "runSettings.model"),
        ({"model": "nonsense-model"}, "runSettings.model 'nonsense-model', kept with the"),
        ("cheap", "runSettings"),
    ],
)
def test_a_garbage_setting_kept_in_the_metadata_is_a_clear_error(
    tmp_path: Path, env: dict[str, str], settings: Any, said: str
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")))
    execution = tmp_path / "x"
    path = execution / ".weft" / "execution-meta.json"
    first = weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    doc = meta(execution)
    doc["runSettings"] = settings
    path.write_text(json.dumps(doc))

    again = weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    no_traceback(again)
    assert again.returncode == EXIT_USAGE, again.stdout + again.stderr
    assert said in again.stderr
    assert "execution-meta.json" in again.stderr


# --------------------------------------------------------------------------- the continue line


def test_the_continue_line_gives_the_settings_in_force_and_raises_a_reached_cap(
    tmp_path: Path,
) -> None:
    from weft.cli import build_parser
    from weft.cli.run import continue_command
    from weft.runtime.execution.meta import RunSettings

    args = build_parser().parse_args(["run", "-m", "fake/gpt-5", "--max-time", "30"])
    root = tmp_path / "x"
    # As typed, without settings kept with the execution.
    assert (
        continue_command(args, root)
        == f"weft run --execution {root} --model fake/gpt-5 --max-time 30"
    )
    # The settings in force win over the flags as typed (a kept cost cap included).
    kept = RunSettings(model="fake/gpt-5", max_dollars=0.25, max_seconds=30)
    assert continue_command(args, root, kept) == (
        f"weft run --execution {root} --model fake/gpt-5 --max-cost 0.25 --max-time 30"
    )
    # A cap the run reached is never repeated: the line says to raise it.
    assert continue_command(args, root, kept, reached={"dollars": 0.25}) == (
        f"weft run --execution {root} --model fake/gpt-5 --max-time 30 --max-cost 0.5"
    )
    assert continue_command(args, root, RunSettings(), reached={"timeSeconds": 30.0}) == (
        f"weft run --execution {root} --max-time 60"
    )
