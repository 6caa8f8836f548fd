"""How a run ended, end to end: a run ceiling never completes work, and "All
codons completed" is said only when it is true.

Real ``weft run`` subprocesses on the fake agent. Each case was a lie on the
main branch before the run machine: a loop cut by the ceiling lost its
remaining iterations and exited 0 or 1 as "completed"; a codon stopped by
``--max-time`` counted as completed and never ran again; a run whose codons
all failed under ``onFailure: ignore`` said "All codons completed".
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    codon,
    codon_records,
    journal,
    loop,
    read_state,
    runs_oldest_first,
    scenario,
    subprocess_environment,
    wait_for,
    weft_cli,
    workspace_files,
    write_file,
    write_hank,
)

TIMEOUT = 120.0
ITERATIONS = 24
"""A loop long enough that a small ceiling cuts it well before its end."""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


def weft(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return weft_cli(*args, env=env, timeout=TIMEOUT)


def surfaces(execution: Path, env: dict[str, str]) -> tuple[str, str]:
    """What ``weft status --json`` says of the newest run and ``weft ls --json`` of
    the execution."""
    status = json.loads(weft("status", execution, "--json", env=env).stdout)
    listed = json.loads(weft("ls", "--json", env=env).stdout)
    (entry,) = [e for e in listed if Path(e["path"]).resolve() == execution.resolve()]
    newest = max(status["runs"], key=lambda r: str(r["startTime"]))
    return newest["status"], entry["state"]


def only_execution(tmp_path: Path) -> Path:
    """The one managed execution the test's runs made (``weft ls`` lists managed ones)."""
    (execution,) = (tmp_path / "managed").iterdir()
    return execution


def completed_per_codon(execution: Path) -> dict[str, int]:
    """How many times each codon reached ``completed``, over every run."""
    counts: dict[str, int] = {}
    for kind, data in journal(execution):
        if kind == "CodonTransitioned" and data["to"] == "completed":
            counts[data["codonId"]] = counts.get(data["codonId"], 0) + 1
    return counts


def test_a_loop_cut_by_the_ceiling_keeps_its_iterations_and_a_higher_cap_finishes_them(
    tmp_path: Path, env: dict[str, str]
) -> None:
    step = codon(
        "step",
        '@@fake:append path=log.md content="line\\n"@@\n',
        model="fake/haiku",
        files=["log.md"],
        onFailure="retry",
    )
    hank = write_hank(
        tmp_path / "grind",
        loop("grind", step, limit=ITERATIONS),
        codon("last", write_file("done.md", "done"), files=["done.md"]),
    )
    capped = {**env, "WEFT_RUNTIME_BUDGET_MAX_DOLLARS": "0.004"}
    first = weft("run", hank, "--headless", env=capped)
    execution = only_execution(tmp_path)
    assert first.returncode == 3, first.stdout  # stopped by the budget, not failed
    assert "Run stopped by its budget (exit 3)" in first.stdout
    assert "All codons completed" not in first.stdout
    assert "(WEFT_RUNTIME_BUDGET_MAX_DOLLARS)" in first.stdout
    # It says what was cut: the loop's place, and that its remaining iterations are left.
    (left,) = [line for line in first.stdout.splitlines() if line.strip().startswith("left")]
    assert "(loop grind, iteration" in left
    assert "its remaining iterations too" in left
    done_first = completed_per_codon(execution)
    assert 1 <= len(done_first) < ITERATIONS
    assert "last" not in done_first
    # No surface calls it completed.
    assert surfaces(execution, env) == ("budget-stopped", "budget-stopped")
    run = runs_oldest_first(read_state(execution))[0]
    assert (run["status"], run["stop"]["by"]) == ("stopped", "budget")
    assert run["stop"]["budget"]["source"] == "WEFT_RUNTIME_BUDGET_MAX_DOLLARS"

    # The same command under the same ceiling starts nothing and says so.
    again = weft("run", hank, "--headless", env=capped)
    assert again.returncode == 3, again.stdout
    assert "is not started" in again.stdout
    assert completed_per_codon(execution) == done_first

    # A higher cap goes on exactly there: every iteration ran once, none twice.
    rest = weft("run", hank, "--headless", "--max-cost", "5", env=env)
    assert rest.returncode == 0, rest.stdout
    assert "All codons completed" in rest.stdout
    done = completed_per_codon(execution)
    assert done == {**{f"step#{i}": 1 for i in range(ITERATIONS)}, "last": 1}
    files = workspace_files(execution)
    assert files["log.md"] == "line\n" * ITERATIONS
    assert files["done.md"] == "done"
    assert surfaces(execution, env) == ("completed", "completed")


def test_a_codon_stopped_mid_work_by_max_time_runs_again_when_raised(
    tmp_path: Path, env: dict[str, str]
) -> None:
    slow = write_file("one.md", "one") + "@@fake:sleep ms=6000@@\n" + write_file("two.md", "two")
    hank = write_hank(tmp_path / "slow", codon("work", slow))
    first = weft("run", hank, "--headless", "--max-time", "2", env=env)
    execution = only_execution(tmp_path)
    assert first.returncode == 3, first.stdout
    assert "work: stopped during running" in first.stdout
    assert "it stays to do" in first.stdout
    record = codon_records(read_state(execution))["work"]
    assert (record["status"], record["failureReason"]["type"]) == ("failed", "interrupted")
    assert "two.md" not in workspace_files(execution)
    assert surfaces(execution, env) == ("budget-stopped", "budget-stopped")
    # The continue line raises the cap it reached rather than repeat it.
    (resume,) = [line for line in first.stdout.splitlines() if line.strip().startswith("resume")]
    assert "--max-time 4" in resume
    rest = weft("run", hank, "--headless", "--max-time", "60", env=env)
    assert rest.returncode == 0, rest.stdout
    assert workspace_files(execution) == {"one.md": "one", "two.md": "two"}


def test_a_run_whose_codons_all_failed_under_ignore_does_not_say_all_completed(
    tmp_path: Path, env: dict[str, str]
) -> None:
    broken: dict[str, Any] = {"onFailure": "ignore"}
    hank = write_hank(
        tmp_path / "ignored",
        codon("a", scenario("auth_error"), **broken),
        codon("b", scenario("auth_error"), **broken),
    )
    done = weft("run", hank, "--headless", env=env)
    execution = only_execution(tmp_path)
    assert done.returncode == 0, done.stdout  # ignore: the run goes on and ends
    assert "All codons completed" not in done.stdout
    assert "2 codon(s) failed and were ignored (onFailure ignore): a, b" in done.stdout
    records = codon_records(read_state(execution))
    assert {c: r["status"] for c, r in records.items()} == {"a": "failed", "b": "failed"}
    again = weft("run", hank, "--new", "--json", env=env)
    summary = json.loads(again.stdout.strip().splitlines()[-1])["data"]
    assert summary["codons"]["failed"] == 2
    assert summary["message"].startswith("Completed; 2 codon(s) failed")


def test_sigterm_is_a_stop_by_you_on_every_surface(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(tmp_path / "hang", codon("a", scenario("hang_after_init")), codon("b"))
    out = (tmp_path / "run.out").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "weft", "run", str(hank), "--headless"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(
            lambda: "a: running" in (tmp_path / "run.out").read_text(),
            timeout=TIMEOUT,
            what="a running",
        )
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    printed = (tmp_path / "run.out").read_text()
    assert code == 128 + signal.SIGTERM, printed
    assert "Run stopped (exit 143)" in printed
    assert "a: stopped during running" in printed
    assert "FAILED" not in printed
    execution = only_execution(tmp_path)
    run = runs_oldest_first(read_state(execution))[0]
    assert (run["status"], run["stop"]["by"], run["stop"]["codonId"]) == ("stopped", "user", "a")
    assert run["stop"]["reason"] == "stopped by SIGTERM"
    assert surfaces(execution, env) == ("stopped", "stopped")


def test_skip_gets_a_run_past_a_codon_that_failed(tmp_path: Path, env: dict[str, str]) -> None:
    """The seed's recovery "or skip the step", in ``weft run``: the failed codon
    is recorded as skipped in the next run, and the codons after it run."""
    hank = write_hank(
        tmp_path / "stuck",
        codon("a"),
        codon("b", scenario("auth_error")),
        codon("c"),
    )
    execution = tmp_path / "x"
    first = weft("run", hank, "--execution", execution, "--headless", env=env)
    assert first.returncode == 1, first.stdout
    refused = weft("run", hank, "--execution", execution, "--skip", "nosuch", env=env)
    assert refused.returncode == 2
    assert "--skip nosuch: the hank has no such codon; its codons are a, b, c" in refused.stderr
    again = weft("run", hank, "--execution", execution, "--headless", "--skip", "b", env=env)
    assert again.returncode == 0, again.stdout
    runs = runs_oldest_first(read_state(execution))
    assert [(c["codonId"], c["status"]) for c in runs[-1]["codons"]] == [
        ("b", "skipped"),
        ("c", "completed"),
    ]
    status = json.loads(weft("status", execution, "--json", env=env).stdout)
    assert max(status["runs"], key=lambda r: str(r["startTime"]))["status"] == "completed"
