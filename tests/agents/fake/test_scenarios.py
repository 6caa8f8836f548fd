"""The transport scenarios every flavour plays (§7.3): hangs, crashes, missing
results, malformed lines, huge output, stderr floods, slow starts."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from .support import BASE_ARGS, Fake
from .wire import check_claude, check_codex, check_gemini

FLAVOURS = ["claude", "codex", "gemini"]

Checker = Callable[..., Any]
CHECKERS: dict[str, Checker] = {
    "claude": check_claude,
    "codex": check_codex,
    "gemini": check_gemini,
}
FIRST = {"claude": "system", "codex": "thread.started", "gemini": "init"}


def scenario_env(spec: str, **extra: str) -> dict[str, str]:
    return {"FAKE_AGENT_SCENARIO": spec, **extra}


def run(fake: Fake, flavour: str, spec: str, prompt: str = "go", **extra: str) -> Any:
    return fake.run(flavour, *BASE_ARGS[flavour], stdin=prompt, env=scenario_env(spec, **extra))


def read_for(proc: subprocess.Popen[bytes], seconds: float) -> bytes:
    """Whatever stdout produces within ``seconds`` (stops early at EOF)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    out = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    return out


def lines_of(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in data.split(b"\n") if raw.strip().startswith(b"{")]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_hang_before_init_prints_nothing_until_killed(fake: Fake, flavour: str) -> None:
    proc = fake.spawn(flavour, *BASE_ARGS[flavour], env=scenario_env("hang_before_init"))
    try:
        assert read_for(proc, 0.5) == b""
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_hang_after_init_goes_silent(fake: Fake, flavour: str) -> None:
    proc = fake.spawn(flavour, *BASE_ARGS[flavour], env=scenario_env("hang_after_init"))
    try:
        lines = lines_of(read_for(proc, 1.0))
        assert lines
        assert lines[0]["type"] == FIRST[flavour]
        CHECKERS[flavour](
            lines, **({"terminal": False} if flavour == "codex" else {"expect_result": False})
        )
        assert read_for(proc, 0.3) == b""
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_crash_before_init(fake: Fake, flavour: str) -> None:
    done = run(fake, flavour, "crash_before_init")
    assert done.code == 1
    assert done.out == b""
    assert "Error" in done.stderr or "panicked" in done.stderr
    killed = run(fake, flavour, "crash_before_init,signal=SIGKILL")
    assert killed.code == -signal.SIGKILL
    assert killed.out == b""


def test_crash_by_segfault(fake: Fake) -> None:
    done = run(fake, "claude", "crash_before_init,signal=SIGSEGV")
    assert done.code == -signal.SIGSEGV
    assert not list(fake.cwd.glob("core*"))


def test_claude_crash_mid_run_leaves_a_dangling_tool_and_a_resumable_session(fake: Fake) -> None:
    done = run(fake, "claude", "crash_mid_run", prompt="Remember coral.")
    assert done.code == 1
    assert "TypeError" in done.stderr
    crashed = check_claude(done.lines, expect_result=False, dangling_ok=True)
    assert crashed.result is None
    assert set(crashed.tool_uses) - set(crashed.tool_results), "a tool_use without result"
    resumed = fake.claude("What did I say?", f"--resume={crashed.session_id}")
    assert resumed.code == 0
    assert "coral" in check_claude(resumed.lines).final_text


def test_codex_and_gemini_crash_mid_run(fake: Fake) -> None:
    codex = run(fake, "codex", "crash_mid_run")
    assert codex.code == 1
    items = check_codex(codex.lines, terminal=False)
    assert items.usage is None
    assert items.items[items.order[-1]][-1]["status"] == "in_progress"
    gemini = run(fake, "gemini", "crash_mid_run,code=3")
    assert gemini.code == 3
    tools = check_gemini(gemini.lines, expect_result=False, dangling_ok=True)
    assert tools.result is None
    assert len(tools.tools) == 1
    assert not tools.results


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_exit0_without_a_terminal_event(fake: Fake, flavour: str) -> None:
    done = run(fake, flavour, "exit0_no_result")
    assert done.code == 0
    types = [line["type"] for line in done.lines]
    assert types[0] == FIRST[flavour]
    assert not {"result", "turn.completed", "turn.failed"} & set(types)


@pytest.mark.parametrize(("flavour", "code"), [("claude", 2), ("codex", 1), ("gemini", 2)])
def test_result_then_nonzero(fake: Fake, flavour: str, code: int) -> None:
    done = run(fake, flavour, "result_then_nonzero")
    assert done.code == code
    CHECKERS[flavour](done.lines)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_malformed_lines_follow_the_framing_rules(fake: Fake, flavour: str) -> None:
    done = run(fake, flavour, "malformed_lines")
    assert done.code == 0
    raw_lines = done.out.split(b"\n")[:-1]
    crlf = [raw for raw in raw_lines if raw.endswith(b"\r")]
    assert len(crlf) == 1
    parsed: list[dict[str, Any]] = []
    corrupt = skipped = blank = 0
    for raw in raw_lines:
        line = raw.rstrip(b"\r")
        if not line.strip():
            blank += 1
            continue
        if not line.lstrip().startswith(b"{"):
            skipped += 1
            continue
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            corrupt += 1
    assert (corrupt, skipped) == (1, 1)
    assert blank >= 2
    assert any(line["type"] == "future_event" for line in parsed)
    kwargs = {"unknown_ok": True} if flavour != "gemini" else {}
    if flavour == "gemini":
        parsed = [line for line in parsed if line["type"] != "future_event"]
    CHECKERS[flavour](parsed, **kwargs)


def test_claude_malformed_lines_include_an_unknown_block(fake: Fake) -> None:
    done = run(fake, "claude", "malformed_lines")
    parsed = []
    for raw in done.out.split(b"\n"):
        try:
            parsed.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    blocks = [
        line["message"]["content"][0]["type"] for line in parsed if line.get("type") == "assistant"
    ]
    assert "future_block" in blocks


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_huge_output_is_one_line_of_the_asked_size(fake: Fake, flavour: str) -> None:
    size = 2 * 1024 * 1024
    # spill=0: Claude sends it whole, as before 2.1.330 (the 64 MiB framer's test input).
    spill = ",spill=0" if flavour == "claude" else ""
    done = run(fake, flavour, f"huge_output,bytes={size},events=500{spill}")
    assert done.code == 0
    raw_lines = done.out.split(b"\n")
    longest = max(raw_lines, key=len)
    # Claude's line has two equal halves (content and stdout): an odd byte may go.
    assert size - 1 <= len(longest) <= size
    huge = json.loads(longest)
    lines = done.lines
    CHECKERS[flavour](lines)
    if flavour == "claude":
        assert huge["type"] == "user"
        content = huge["message"]["content"][0]["content"]
        assert content == huge["tool_use_result"]["stdout"]
        deltas = [
            line
            for line in lines
            if line["type"] == "stream_event" and line["event"]["type"] == "content_block_delta"
        ]
        assert len(deltas) == 500
    elif flavour == "codex":
        assert huge["item"]["type"] == "command_execution"
        assert huge["item"]["status"] == "completed"
        assert sum(1 for line in lines if line["type"] == "item.updated") == 500
    else:
        assert huge["type"] == "tool_result"
        assert huge["status"] == "success"


_PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "sys.stderr.write(f'{code} {peak}\\n')\n"
)


def test_huge_output_streams_with_bounded_memory(fake: Fake) -> None:
    # A small wrapper process spawns the fake and reports its peak RSS: a
    # child forked straight from pytest would inherit pytest's own size.
    size = 48 * 1024 * 1024
    proc = subprocess.Popen(
        [sys.executable, "-c", _PEAK, *fake.command("claude"), *BASE_ARGS["claude"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=fake.environ(scenario_env(f"huge_output,bytes={size},events=0,spill=0")),
        cwd=fake.cwd,
    )
    out, err = proc.communicate(b"go", timeout=120)
    code, peak_kib = (int(x) for x in err.decode().split()[-2:])
    assert code == 0
    assert size - 1 <= max(len(line) for line in out.split(b"\n")) <= size
    assert peak_kib * 1024 < size // 2, f"peak RSS {peak_kib} KiB for a {size} byte line"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_stderr_flood_blocks_a_reader_that_does_not_drain_stderr(fake: Fake, flavour: str) -> None:
    total = 1024 * 1024
    proc = fake.spawn(flavour, *BASE_ARGS[flavour], env=scenario_env(f"stderr_flood,bytes={total}"))
    assert proc.stderr is not None
    try:
        early = read_for(proc, 1.0)
        # Stuck writing stderr: the terminal event cannot have come.
        assert early
        assert proc.poll() is None
        assert not {"result", "turn.completed"} & {line["type"] for line in lines_of(early)}
        drained: list[bytes] = []
        reader = threading.Thread(
            target=lambda: drained.append(proc.stderr.read() if proc.stderr else b"")
        )
        reader.start()
        rest = read_for(proc, 30.0)
        reader.join(30)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert len(drained[0]) == total
    CHECKERS[flavour](lines_of(early + rest))


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_slow_start_delays_the_first_line(fake: Fake, flavour: str) -> None:
    proc = fake.spawn(flavour, *BASE_ARGS[flavour], env=scenario_env("slow_start,delay_ms=400"))
    try:
        assert read_for(proc, 0.1) == b""
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    lines = lines_of(out)
    CHECKERS[flavour](lines)
    if flavour == "claude":
        assert [line["subtype"] for line in lines[:3]] == ["hook_started", "hook_response", "init"]


def test_start_delay_knob_applies_to_any_scenario(fake: Fake) -> None:
    proc = fake.spawn("claude", *BASE_ARGS["claude"], env={"FAKE_AGENT_START_DELAY_MS": "400"})
    try:
        assert read_for(proc, 0.1) == b""
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    check_claude(lines_of(out))


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_empty_prompt_scenario_mimics_the_real_error(fake: Fake, flavour: str) -> None:
    done = run(fake, flavour, "empty_prompt")
    assert done.code in (1, 42)
    assert done.out == b""
    assert done.stderr


def test_claude_resume_missing_and_session_in_use_as_scenarios(fake: Fake) -> None:
    missing = run(fake, "claude", "resume_missing")
    assert missing.code == 1
    assert "No conversation found" in missing.stderr
    in_use = run(fake, "claude", "session_in_use")
    assert in_use.code == 1
    assert "is already in use" in in_use.stderr


def test_prompt_directive_wins_over_the_environment(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=auth_error@@", env=scenario_env("crash_before_init"))
    assert done.code == 1
    assert check_claude(done.lines).assistants[0]["error"] == "authentication_failed"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        (scenario_env("no_such_thing"), "unknown scenario 'no_such_thing'"),
        (scenario_env("success,colour=red"), "unknown scenario parameter(s) colour"),
        (scenario_env("crash_before_init,code=x"), "code='x' is not a non-negative integer"),
        ({"FAKE_AGENT_LINE_DELAY_MS": "fast"}, "FAKE_AGENT_LINE_DELAY_MS='fast'"),
        ({"FAKE_AGENT_SIGTERM": "maybe"}, "FAKE_AGENT_SIGTERM='maybe'"),
        ({"FAKE_AGENT_RESUME_MODE": "fork"}, "FAKE_AGENT_RESUME_MODE='fork'"),
    ],
)
def test_bad_fake_configuration_exits_2_with_a_clear_message(
    fake: Fake, env: dict[str, str], needle: str
) -> None:
    done = fake.claude("go", env=env)
    assert done.code == 2
    assert done.out == b""
    assert done.stderr.startswith("fake-claude: ")
    assert needle in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_directive_exits_2(fake: Fake) -> None:
    done = fake.codex("@@fake:write path=a.txt@@ never closed")
    assert done.code == 2
    assert "fake-codex: " in done.stderr
    assert "@@end@@" in done.stderr


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_seed_makes_the_whole_stream_repeatable(fake: Fake, flavour: str) -> None:
    env = {"FAKE_AGENT_SEED": "42", "FAKE_AGENT_SCENARIO": "sigterm,lines=3,interval_ms=1"}
    extra = {"claude": ["--no-session-persistence"], "codex": ["--ephemeral"], "gemini": []}
    runs = [
        fake.run(flavour, *BASE_ARGS[flavour], *extra[flavour], stdin="same", env=env)
        for _ in range(2)
    ]
    other = fake.run(
        flavour,
        *BASE_ARGS[flavour],
        *extra[flavour],
        stdin="same",
        env={**env, "FAKE_AGENT_SEED": "43"},
    )
    assert runs[0].out == runs[1].out
    assert runs[0].out != other.out
    CHECKERS[flavour](runs[0].lines)
