"""How the fakes write: the signal policy (``FAKE_AGENT_SIGTERM``), chunked
writes that split characters, and a line that stalls half-way."""

from __future__ import annotations

import json
import os
import select
import signal
import time

import pytest

from weft.agents.fake.scenarios import EMOJI

from .support import BASE_ARGS, Fake
from .wire import check_claude, check_codex, check_gemini

FLAVOURS = ["claude", "codex", "gemini"]
LONG_RUN = {"FAKE_AGENT_SCENARIO": "sigterm,interval_ms=50,lines=400"}


def wait_for_handler(pid: int, signum: int) -> None:
    """Wait until ``pid`` catches ``signum`` (Linux: the SigCgt mask)."""
    for _ in range(500):
        with open(f"/proc/{pid}/status") as fh:
            caught = next(line for line in fh if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) & (1 << (signum - 1)):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never installed a handler for signal {signum}")


def first_lines(proc: object, count: int) -> list[bytes]:
    stdout = proc.stdout  # type: ignore[attr-defined]
    return [stdout.readline() for _ in range(count)]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_graceful_stop_prints_a_terminal_error(
    fake: Fake, flavour: str, sig: int, code: int
) -> None:
    env = {**LONG_RUN, "FAKE_AGENT_SIGTERM": "graceful"}
    proc = fake.spawn(flavour, *BASE_ARGS[flavour], env=env)
    try:
        head = first_lines(proc, 3)
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    # Claude Code 2.1.330 answers SIGINT with its aborted result and exit 0.
    assert proc.returncode == (0 if flavour == "claude" and sig == signal.SIGINT else code)
    lines = [json.loads(x) for x in b"".join([*head, rest]).splitlines() if x.startswith(b"{")]
    last = lines[-1]
    if flavour == "claude":
        run = check_claude(lines)
        assert run.result is not None
        assert run.result["subtype"] == "error_during_execution"
        assert run.result["terminal_reason"] == "aborted_streaming"
    elif flavour == "codex":
        assert check_codex(lines).failed is not None
        assert last["type"] == "turn.failed"
    else:
        run_g = check_gemini(lines)
        assert run_g.result is not None
        assert run_g.result["status"] == "error"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_exit_policy_dies_by_the_signal_without_a_result(fake: Fake, flavour: str) -> None:
    proc = fake.spawn(flavour, *BASE_ARGS[flavour], env=LONG_RUN)
    try:
        first_lines(proc, 2)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGTERM
    assert b'"result"' not in rest
    assert b"turn." not in rest


def test_ignore_policy_needs_sigkill(fake: Fake) -> None:
    proc = fake.spawn(
        "claude", *BASE_ARGS["claude"], env={**LONG_RUN, "FAKE_AGENT_SIGTERM": "ignore"}
    )
    try:
        first_lines(proc, 2)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
        # Still streaming: more lines keep coming after both signals.
        assert len(first_lines(proc, 3)) == 3
        assert proc.poll() is None
        proc.kill()
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_graceful_stop_also_ends_a_hang(fake: Fake) -> None:
    env = {"FAKE_AGENT_SCENARIO": "hang_after_init", "FAKE_AGENT_SIGTERM": "graceful"}
    proc = fake.spawn("claude", *BASE_ARGS["claude"], env=env)
    try:
        first_lines(proc, 2)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143
    assert json.loads(rest.splitlines()[-1])["terminal_reason"] == "aborted_streaming"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_chunked_writes_split_lines_and_characters(fake: Fake, flavour: str) -> None:
    proc = fake.spawn(flavour, *BASE_ARGS[flavour], env={"FAKE_AGENT_SCENARIO": "chunked_writes"})
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    reads: list[bytes] = []
    try:
        while chunk := os.read(fd, 65536):
            reads.append(chunk)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
    data = b"".join(reads)
    lines = [json.loads(raw) for raw in data.splitlines()]
    assert EMOJI.encode("utf-8") in data
    # Pieces of at most 7 bytes with pauses between them reach the reader as
    # many small reads, far more than there are lines.
    assert len(reads) > 2 * len(lines)
    {"claude": check_claude, "codex": check_codex, "gemini": check_gemini}[flavour](lines)


def test_a_stalled_line_arrives_in_two_halves(fake: Fake) -> None:
    env = {"FAKE_AGENT_SCENARIO": "partial_line_stall,stall_ms=600"}
    proc = fake.spawn("claude", *BASE_ARGS["claude"], env=env)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    try:
        buffered = b""
        while b"\n" not in buffered:
            buffered += os.read(fd, 65536)
        init, _, partial = buffered.partition(b"\n")
        assert json.loads(init)["subtype"] == "init"
        while not partial:
            partial += os.read(fd, 65536)
        # The half line sits there with no newline while the fake stalls.
        ready, _, _ = select.select([fd], [], [], 0.2)
        assert b"\n" not in partial
        assert not ready
        rest = b""
        while b"\n" not in rest:
            rest += os.read(fd, 65536)
        line = json.loads(partial + rest.partition(b"\n")[0])
        assert line["type"] == "assistant"
        tail = rest.partition(b"\n")[2] + proc.stdout.read()
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
    check_claude([json.loads(init), line, *(json.loads(x) for x in tail.splitlines())])


def test_a_signal_during_the_start_delay_is_handled(fake: Fake) -> None:
    env = {"FAKE_AGENT_START_DELAY_MS": "30000", "FAKE_AGENT_SIGTERM": "graceful"}
    proc = fake.spawn("claude", *BASE_ARGS["claude"], env=env)
    try:
        wait_for_handler(proc.pid, signal.SIGTERM)
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        assert not ready
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143
    assert b"Traceback" not in err
    assert json.loads(out.splitlines()[-1])["terminal_reason"] == "aborted_streaming"


def test_a_graceful_stop_with_the_default_line_delay_prints_its_lines(fake: Fake) -> None:
    # The abort's lines pause like any other (5 ms by default): the pending
    # stop once escaped from that pause as a StopRequestedError traceback.
    env = {**LONG_RUN, "FAKE_AGENT_LINE_DELAY_MS": "5"}
    proc = fake.spawn("claude", *BASE_ARGS["claude"], env=env)
    try:
        head = first_lines(proc, 2)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
    lines = [json.loads(x) for x in b"".join([*head, rest]).splitlines() if x.startswith(b"{")]
    result = lines[-1]
    assert (result["type"], result["terminal_reason"]) == ("result", "aborted_streaming")
    assert result["errors"] == [
        "[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"
    ]
    assert lines[-2]["message"]["content"][0]["text"] == "[Request interrupted by user]"


def test_a_stop_before_the_result_line_is_out_reports_the_whole_spend(fake: Fake) -> None:
    # The success result is built, then the stop lands in the pause before its
    # line: that result was never said, so the aborted result carries the whole
    # process's share, as 2.1.330's does (direct_sigint: model_usage_since_last_result
    # costUSD == total_cost_usd on a fresh session), never $0.
    env = {"FAKE_AGENT_LINE_DELAY_MS": "600"}
    proc = fake.spawn("claude", *BASE_ARGS["claude"], env=env)
    try:
        head = first_lines(proc, 2)
        assert json.loads(head[1])["type"] == "assistant"
        time.sleep(0.2)  # well inside the 600 ms pause before the result's line
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    lines = [json.loads(x) for x in b"".join([*head, rest]).splitlines() if x.startswith(b"{")]
    results = [line for line in lines if line["type"] == "result"]
    assert [r["terminal_reason"] for r in results] == ["aborted_streaming"]
    (result,) = results
    own = sum(m["costUSD"] for m in result["model_usage_since_last_result"].values())
    assert result["total_cost_usd"] > 0
    assert own == pytest.approx(result["total_cost_usd"])
