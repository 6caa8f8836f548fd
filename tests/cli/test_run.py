"""``weft run`` as a real subprocess: exit codes, SIGINT, SIGKILL and continuing.

Every test runs ``python -m weft run`` on a small hank on the fake agent and
checks the exit code, the output, and what the run left in the execution's
store, checkpoints and workspace.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    checkpoint_tree,
    codon,
    codon_records,
    journal,
    pid_running,
    read_state,
    runs_oldest_first,
    scenario,
    subprocess_environment,
    wait_for,
    workspace_files,
    write_file,
    write_hank,
)

from weft.store.lock import read_lock

TIMEOUT = 60.0


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of the ``weft`` children."""
    return subprocess_environment(tmp_path)


@pytest.fixture
def children() -> Iterator[list[int]]:
    """Pids of agent processes a test left orphaned on purpose; killed at the end
    if they still run (a SIGKILLed weft cannot stop its agent)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if pid_running(pid):
            os.kill(pid, signal.SIGKILL)


def weft(*args: str | Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m weft`` to the end."""
    return subprocess.run(
        [sys.executable, "-m", "weft", *map(str, args)],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def start_weft(*args: str | Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """Starts ``python -m weft`` in the background (output to files in ``cwd``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "weft", *map(str, args)],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=(cwd / "weft.out").open("w"),
        stderr=(cwd / "weft.err").open("w"),
        text=True,
    )


def codon_state(execution: Path, codon_id: str) -> dict[str, Any] | None:
    """The newest record of ``codon_id`` in the newest run, if the store has one yet."""
    if not (execution / ".weft" / "weft.db").exists():
        return None
    state = read_state(execution)
    if not state["runs"]:
        return None
    return {c["codonId"]: c for c in state["runs"][0]["codons"]}.get(codon_id)


def wait_until_working(execution: Path, codon_id: str, marker: str) -> dict[str, Any]:
    """Waits until ``codon_id`` runs and its agent has written ``marker``; returns its record."""
    record: dict[str, Any] = wait_for(
        lambda: (
            (execution / "agentRoot" / marker).exists()
            and (rec := codon_state(execution, codon_id)) is not None
            and rec["status"] == "running"
            and rec
        ),
        timeout=TIMEOUT,
        what=f"{codon_id} running with {marker} written",
    )
    return record


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr


def interrupt_hank(tmp_path: Path) -> Path:
    """a writes a.md; b writes b/partial.md and then hangs; c writes c.md. b's prompt is
    a file, so a test can let b succeed next time without changing the hank. Only b's
    patterns cover b/partial.md."""
    return write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a"), files=["a.md"]),
        codon("b", prompt_file="prompts/b.md", files=["b/**"]),
        codon("c", write_file("c.md", "c")),
        files={"prompts/b.md": write_file("b/partial.md", "half") + scenario("hang_after_init")},
    )


# --------------------------------------------------------------------------- exit codes


def test_a_successful_run_exits_0_and_a_second_run_has_nothing_to_do(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a")),
        codon("b", write_file("b.md", "b"), mode="continue-previous"),
    )
    execution = tmp_path / "x"
    result = weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    no_traceback(result)
    assert workspace_files(execution) == {"a.md": "a", "b.md": "b"}

    status = weft("status", "--json", execution, env=env, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert [r["status"] for r in doc["runs"]] == ["completed"]
    assert [(c["codonId"], c["status"]) for c in doc["runs"][0]["codons"]] == [
        ("a", "completed"),
        ("b", "completed"),
    ]

    again = weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to do" in again.stdout + again.stderr
    assert len(read_state(execution)["runs"]) == 1


def test_a_failed_run_exits_1(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a")),
        codon("b", scenario("auth_error")),
        codon("c"),
    )
    execution = tmp_path / "x"
    result = weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    no_traceback(result)
    assert "Not logged in" in result.stdout + result.stderr  # the auth_error text of 2.1.330
    state = read_state(execution)
    assert runs_oldest_first(state)[0]["status"] == "failed"
    records = codon_records(state)
    assert records["b"]["failureReason"]["type"] == "auth"
    assert "c" not in records


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ('{"hank": [{"id": "a", "name": "A", "onFailur": "abort"}]}', "onFailur"),
        ('{"hank": [', "invalid JSON"),
        ('{"hank": []}', "hank"),
    ],
    ids=["unknown-key", "broken-json", "empty"],
)
def test_a_config_error_exits_2_with_a_message_and_no_execution(
    tmp_path: Path, env: dict[str, str], doc: str, expected: str
) -> None:
    (tmp_path / "hank").mkdir()
    (tmp_path / "hank" / "hank.json").write_text(doc)
    execution = tmp_path / "x"
    result = weft("run", "hank", "--execution", execution, "--headless", env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    no_traceback(result)
    assert result.stderr.startswith("weft: error:")
    assert "hank.json" in result.stderr
    assert expected in result.stderr
    assert not (execution / ".weft").exists()


def test_a_missing_hank_exits_2(tmp_path: Path, env: dict[str, str]) -> None:
    result = weft("run", tmp_path / "nowhere", "--headless", env=env, cwd=tmp_path)
    assert result.returncode == 2
    no_traceback(result)
    assert "nowhere" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- SIGINT


def test_sigint_stops_the_codon_gracefully_and_the_same_command_continues(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = interrupt_hank(tmp_path)
    execution = tmp_path / "x"
    args = ("run", hank, "--execution", execution, "--headless")
    proc = start_weft(*args, env=env, cwd=tmp_path)
    try:
        b = wait_until_working(execution, "b", "b/partial.md")
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Stopped by its own hand, not killed by the signal.
    assert code > 0, (tmp_path / "weft.err").read_text()
    assert "Traceback" not in (tmp_path / "weft.err").read_text()

    state = read_state(execution)
    (run,) = state["runs"]
    assert (run["status"], run["stop"]["by"], run["stop"]["codonId"]) == ("stopped", "user", "b")
    b = codon_records(state)["b"]
    assert b["status"] == "failed"
    assert b["failureReason"]["type"] == "interrupted"
    assert b["failureReason"]["retriable"] is True
    assert b["failedDuring"] == "running"
    assert checkpoint_tree(execution, b["errorCheckpoint"]) == {
        "a.md": b"a",
        "b/partial.md": b"half",
    }
    assert not pid_running(b["claudePid"]), "the agent must be stopped"
    assert "c" not in codon_records(state)
    assert read_lock(execution / ".weft" / "runtime.lock") is None

    (tmp_path / "hank" / "prompts" / "b.md").write_text(write_file("b/done.md", "whole"))
    again = weft(*args, env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    state = read_state(execution)
    second = runs_oldest_first(state)[1]
    assert second["startingConditions"]["source"]["afterCodon"] == "a"
    assert [c["codonId"] for c in second["codons"]] == ["b", "c"]
    assert workspace_files(execution) == {"a.md": "a", "b/done.md": "whole", "c.md": "c"}


def test_sigint_in_the_middle_of_a_codon_exits_130(tmp_path: Path, env: dict[str, str]) -> None:
    hank = interrupt_hank(tmp_path)
    execution = tmp_path / "x"
    proc = start_weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    try:
        wait_until_working(execution, "b", "b/partial.md")
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 128 + signal.SIGINT
    # Said at once, before the agent's stop sequence and the checkpoint.
    out = (tmp_path / "weft.out").read_text()
    assert "Stopping: the agent is asked to stop and a checkpoint is taken" in out
    assert out.index("Stopping:") < out.index("b: stopped during running")
    assert "b: FAILED" not in out
    assert "Run stopped (exit 130)" in out


# --------------------------------------------------------------------------- SIGKILL


def test_after_sigkill_the_next_run_marks_the_crash_and_continues_after_the_last_codon(
    tmp_path: Path, env: dict[str, str], children: list[int]
) -> None:
    hank = interrupt_hank(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    # No --execution: the second run must find the managed execution by itself.
    proc = start_weft("run", hank, "--headless", env=env, cwd=work)
    managed = Path(env["WEFT_RUNTIME_EXECUTION_BASE_DIR"])
    try:
        execution = wait_for(
            lambda: next(iter(managed.glob("*/.weft/weft.db")), None), what="the execution"
        ).parent.parent
        b = wait_until_working(execution, "b", "b/partial.md")
        children.append(b["claudePid"])
        proc.kill()
    finally:
        proc.wait(timeout=TIMEOUT)  # reaped: a zombie's pid would still look alive
    assert proc.returncode == -signal.SIGKILL
    lock = read_lock(execution / ".weft" / "runtime.lock")
    assert lock is not None, "a killed weft leaves its lock behind"
    assert lock.pid == proc.pid
    a_checkpoint = codon_records(read_state(execution))["a"]["completionCheckpoint"]

    (tmp_path / "hank" / "prompts" / "b.md").write_text(write_file("b/done.md", "whole"))
    again = weft("run", hank, "--headless", env=env, cwd=work)
    assert again.returncode == 0, again.stdout + again.stderr
    no_traceback(again)
    assert [p.parent.parent for p in managed.glob("*/.weft/weft.db")] == [execution]

    state = read_state(execution)
    first, second = runs_oldest_first(state)
    assert first["status"] == "crashed"
    crashed_b = {c["codonId"]: c for c in first["codons"]}["b"]
    assert crashed_b["status"] == "failed"
    assert crashed_b["failedDuring"] == "running"
    assert crashed_b["failureReason"]["type"] == "crash"
    assert second["status"] == "completed"
    assert second["startingConditions"]["type"] == "continuation"
    assert second["startingConditions"]["source"] == {
        "runId": first["runId"],
        "afterCodon": "a",
        "checkpointSha": a_checkpoint,
    }
    # a is not run again; b starts from a's files (its half-done work is gone).
    assert [c["codonId"] for c in second["codons"]] == ["b", "c"]
    assert workspace_files(execution) == {"a.md": "a", "b/done.md": "whole", "c.md": "c"}
    infos = [d["message"] for kind, d in journal(execution) if kind == "info"]
    assert any(first["runId"] in m and "crashed" in m for m in infos), infos
    assert read_lock(execution / ".weft" / "runtime.lock") is None


def test_a_port_that_is_taken_exits_2_before_anything_runs(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")))
    execution = tmp_path / "x"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = weft(
            "run", hank, "--execution", execution, "--headless", "--port", str(port),
            env=env, cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    no_traceback(result)
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "--port" in result.stderr
    assert read_state(execution)["runs"] == []
    assert not (execution / ".weft" / "runtime.lock").exists()
    # The same execution runs once the port is free.
    again = weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error(
    tmp_path: Path, env: dict[str, str], port: str
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")))
    result = weft("run", hank, "--port", port, env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "is not a port (0-65535" in result.stderr
    no_traceback(result)


def test_the_run_prints_its_server_and_writes_the_port_to_the_lock(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(
        tmp_path / "hank", codon("a", write_file("a.md", "a") + scenario("hang_after_init"))
    )
    execution = tmp_path / "x"
    child = start_weft("run", hank, "--execution", execution, "--headless", env=env, cwd=tmp_path)
    try:
        out = tmp_path / "weft.out"
        deadline = time.monotonic() + TIMEOUT
        while "WebSocket server on" not in out.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        url = out.read_text().split("WebSocket server on ", 1)[1].split()[0]
        lock = read_lock(execution / ".weft" / "runtime.lock")
        assert lock is not None
        assert url == f"ws://127.0.0.1:{lock.port}"
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=TIMEOUT)
    assert child.returncode == 130


def test_anonymous_reads_are_an_opt_in_said_at_start(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", write_file("a.md", "a")))
    plain = weft("run", hank, "--execution", tmp_path / "x", "--headless", env=env, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "anonymous reads are on" not in plain.stdout
    for how, extra in (("flag", {}), ("setting", {"WEFT_RUNTIME_ALLOW_ANONYMOUS_READ": "1"})):
        args = ["--allow-anonymous-read"] if how == "flag" else []
        result = weft(
            "run", hank, "--execution", tmp_path / how, "--headless", *args,
            env={**env, **extra}, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "warning: anonymous reads are on" in result.stdout, how
        no_traceback(result)


# --------------------------------------------------------------------------- words


def test_help_and_docs_say_the_same_true_thing_about_read_only_data(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The linked data is read-only by convention only; --copy protects the files,
    not the folders. Nothing may promise more (an agent wrote through the link)."""
    result = weft("run", "--help", env=env, cwd=tmp_path)
    assert result.returncode == 0
    help_text = " ".join(result.stdout.split())
    docs = " ".join(
        (Path(__file__).resolve().parents[2] / "docs" / "running.md").read_text().split()
    )
    for text in (help_text, docs):
        assert "linked read-only" not in text
        assert "through the link" in text
    assert "read-only by convention only" in help_text
    assert "its folders are not" in help_text
    assert "its folders stay writable" in docs


def test_keys_q_stops_in_both_modes_and_the_others_only_steer_a_manual_run() -> None:
    from weft.cli.run import Keys

    said: list[str] = []
    auto = Keys(None, manual=False, say=said.append, busy=lambda: True)  # type: ignore[arg-type]
    manual = Keys(None, manual=True, say=said.append, busy=lambda: False)  # type: ignore[arg-type]
    assert [auto.command_of(k) for k in "q\rns"] == ["server.shutdown", None, None, None]
    assert [manual.command_of(k) for k in "Q\r\nnsx"] == [
        "server.shutdown",
        "codon.next",
        "codon.next",
        "codon.next",
        "codon.skip",
        None,
    ]
    manual.stopping = True  # after q, only a second q (which kills) does anything
    assert [manual.command_of(k) for k in "\rsq"] == [None, None, "server.shutdown"]
