"""The subprocess layer: framing, pipes, deadlines, the stop sequence and
reaping, driven with small real child processes and a toy line parser."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import hashlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.agents.events import (
    AgentEvent,
    AssistantText,
    ErrorClass,
    RetryNotice,
    SessionExited,
    SessionResult,
    SessionStarted,
    StderrLine,
)
from weft.agents.harness import AgentStartError, ProcessEnd, StopReason, Timeouts
from weft.agents.process import (
    EVENT_HIGH_WATER,
    PIPE_GRACE,
    STDERR_TAIL_BYTES,
    EnvPolicy,
    LineFramer,
    SubprocessSession,
    _Tee,
    build_env,
    spawn,
)

FAST = Timeouts(first_output=10, idle=10, wall=30, stop_grace=1, flush_grace=1)


class ToyParser:
    """``init`` starts the session, ``retry <ms>`` is a retry notice,
    ``result`` is the result, ``boom`` makes the parser fail, anything else
    is assistant text."""

    def __init__(self) -> None:
        self.stderr_lines: list[str] = []

    def feed(self, line: bytes) -> list[AgentEvent]:
        if line == b"init":
            return [SessionStarted(session_id="s1")]
        if line.startswith(b"retry "):
            return [RetryNotice(attempt=1, delay_ms=int(line.split()[1]))]
        if line == b"result":
            return [SessionResult(ok=True)]
        if line == b"boom":
            raise ValueError("a parser bug")
        return [AssistantText(text=line.decode())]

    def stderr(self, line: str) -> list[AgentEvent]:
        self.stderr_lines.append(line)
        return []

    def finish(self, end: ProcessEnd) -> list[AgentEvent]:
        return [
            SessionExited(
                ok=end.exit_code == 0,
                exit_code=end.exit_code,
                signal=end.signal,
                message=end.stopped.value if end.stopped else None,
                stderr_tail=end.stderr_tail,
            )
        ]


class BatchToyParser(ToyParser):
    """:class:`ToyParser` that also takes batches, recording their sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def feed_many(self, lines: list[bytes]) -> list[AgentEvent]:
        self.batches.append(len(lines))
        return [event for line in lines for event in self.feed(line)]


async def start(
    code: str,
    *,
    timeouts: Timeouts = FAST,
    stdin: bytes | None = None,
    parser: ToyParser | None = None,
    **kw: object,
) -> SubprocessSession:
    return await spawn(
        [sys.executable, "-c", code],
        parser=parser or ToyParser(),
        cwd=Path.cwd(),
        env=dict(os.environ),
        stdin=stdin,
        timeouts=timeouts,
        **kw,  # type: ignore[arg-type]
    )


async def run(code: str, **kw: object) -> list[AgentEvent]:
    session = await start(code, **kw)  # type: ignore[arg-type]
    return [e async for e in session.events()]


def texts(events: list[AgentEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, AssistantText)]


def exited(events: list[AgentEvent]) -> SessionExited:
    last = events[-1]
    assert isinstance(last, SessionExited)
    return last


def open_fds() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def process_state(pid: int) -> str | None:
    """The /proc state letter of ``pid``, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def is_dead(pid: int) -> bool:
    return process_state(pid) in (None, "Z", "X")


# -- the line framer -----------------------------------------------------------------------


@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=30),
)
def test_framing_does_not_depend_on_chunk_boundaries(lines: list[bytes], sizes: list[int]) -> None:
    data = b"".join(line + b"\n" for line in lines)
    framer = LineFramer()
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(data):
        size = sizes[i % len(sizes)]
        out += framer.push(data[pos : pos + size])
        pos, i = pos + size, i + 1
    assert out == lines
    assert framer.close() is None


@given(
    st.lists(st.integers(min_value=0, max_value=60), max_size=15),
    st.integers(min_value=1, max_value=17),
)
def test_overlong_lines_are_counted_and_never_buffered(lengths: list[int], chunk: int) -> None:
    cap = 20
    lines = [bytes([65 + i % 26]) * n for i, n in enumerate(lengths)]
    data = b"".join(line + b"\n" for line in lines)
    framer = LineFramer(max_line=cap)
    out: list[bytes] = []
    for pos in range(0, len(data), chunk):
        out += framer.push(data[pos : pos + chunk])
        assert len(framer._buf) <= cap
    assert out == [line for line in lines if len(line) <= cap]
    assert framer.oversized == sum(len(line) > cap for line in lines)


def test_an_unterminated_last_line_is_returned_at_close() -> None:
    framer = LineFramer()
    assert framer.push(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert framer.close() == b'{"b"'


# -- environment -----------------------------------------------------------------------------


def test_build_env_allows_listed_variables_and_maps_weft_prefix() -> None:
    parent = {
        "PATH": "/bin",
        "LC_CTYPE": "C",
        "SECRET": "x",
        "MINE_TOKEN": "t",
        "DROP": "d",
        "WEFT_EXTRA": "1",
        "WEFT_DROP": "unset",
        "WEFT_PATH": "/weft/bin",
        "WEFT_RUNTIME_PORT": "80",
        "WEFT_SENTINEL_MODEL": "m",
        "WEFT_CODEX_BIN": "/x",
        "WEFT_": "empty",
    }
    policy = EnvPolicy(names=frozenset({"DROP"}), prefixes=("MINE_",), remove=frozenset({"GONE"}))
    env = build_env(policy, {"GONE": "1", "CODON": "c", "LC_CTYPE": "unset"}, parent)
    assert env == {"PATH": "/weft/bin", "MINE_TOKEN": "t", "EXTRA": "1", "CODON": "c"}


# -- pipes -------------------------------------------------------------------------------------


async def test_prompt_goes_to_stdin_which_is_then_closed() -> None:
    prompt = ("ünïcode prompt " * 70_000).encode()  # ~1 MiB, more than a pipe buffer
    code = (
        "import sys, hashlib\n"
        "print('init', flush=True)\n"
        "data = sys.stdin.buffer.read()\n"
        "print(len(data)); print(hashlib.sha256(data).hexdigest())\n"
    )
    events = await run(code, stdin=prompt)
    assert texts(events) == [str(len(prompt)), hashlib.sha256(prompt).hexdigest()]
    assert exited(events).exit_code == 0


async def test_stderr_flood_cannot_deadlock_and_keeps_a_bounded_tail() -> None:
    code = (
        "import sys\n"
        "print('init', flush=True)\n"
        "for i in range(64 * 1024):\n"
        "    sys.stderr.write(f'{i:063d}\\n')\n"  # 4 MiB in 64-byte lines
        "sys.stderr.flush()\n"
        "print('result', flush=True)\n"
    )
    parser = ToyParser()
    events = await run(code, parser=parser)
    verdict = exited(events)
    assert verdict.ok
    assert any(isinstance(e, SessionResult) for e in events)
    assert len(verdict.stderr_tail) == STDERR_TAIL_BYTES
    assert verdict.stderr_tail.endswith(f"{64 * 1024 - 1:063d}\n")
    assert len(parser.stderr_lines) == 64 * 1024  # the parser sees every line
    stderr_events = [e for e in events if isinstance(e, StderrLine)]
    assert 0 < len(stderr_events) <= 64 * 1024


async def test_long_stderr_lines_are_split_and_stdout_is_teed(tmp_path: Path) -> None:
    log = tmp_path / "runs" / "r1" / "c-claude.log"
    code = (
        "import sys\n"
        "sys.stdout.buffer.write(b'init\\nhello\\nunterminated')\n"
        "sys.stderr.write('x' * 20000)\n"
    )
    events = await run(code, log_path=log)
    assert texts(events) == ["hello", "unterminated"]
    pieces = [e.line for e in events if isinstance(e, StderrLine)]
    assert "".join(pieces) == "x" * 20000
    assert max(map(len, pieces)) <= 8192
    assert log.read_bytes() == b"init\nhello\nunterminated"
    assert Path(str(log) + ".stderr").read_text() == "x" * 20000


async def test_a_log_whose_flush_fails_at_close_still_lets_close_return() -> None:
    # /dev/full takes the buffered writes and fails the flush at close with
    # ENOSPC: the error path once swallowed the stop sentinel and hung.
    tee = _Tee(Path("/dev/full"))
    tee.write(b"x" * 1000)
    await asyncio.wait_for(tee.close(), 5)
    assert tee.error is not None
    assert tee.error.errno == errno.ENOSPC


async def test_a_log_write_failing_mid_stream_reports_once_and_drains_to_the_end() -> None:
    reported: list[OSError] = []
    tee = _Tee(Path("/dev/full"), reported.append)
    for _ in range(40):
        tee.write(b"y" * 100_000)  # past the 1 MiB buffer: a write fails, not the close
    await asyncio.wait_for(tee.close(), 5)
    assert [e.errno for e in reported] == [errno.ENOSPC]
    assert tee.error is reported[0]


async def test_a_session_whose_log_cannot_be_written_is_stopped_and_fails(tmp_path: Path) -> None:
    log = tmp_path / "c-claude.log"
    log.symlink_to("/dev/full")
    # Enough output to overflow the tee's buffer at once, then a long sleep:
    # the failure must stop the agent instead of waiting for it.
    code = (
        "import sys, time\n"
        "sys.stdout.write('init\\n' + ('z' * 1000 + '\\n') * 2000)\n"
        "sys.stdout.flush()\n"
        "time.sleep(30)\n"
    )
    started = time.monotonic()
    session = await start(code, log_path=log)
    verdict = await asyncio.wait_for(session.wait(), 10)
    assert time.monotonic() - started < 10
    assert session.stop_reason is StopReason.LOG_FAILED
    assert not verdict.ok
    assert not verdict.retriable
    assert verdict.log_error is not None
    assert str(log) in verdict.log_error
    assert "No space left on device" in verdict.log_error
    assert verdict.message == verdict.log_error
    assert is_dead(session.pid)


async def test_lines_over_the_cap_are_skipped_but_kept_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    code = (
        "import sys\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'init\\n')\n"
        "for _ in range(48): out.write(b'y' * 65536)\n"  # a 3 MiB line
        "out.write(b'\\nafter\\n')\n"
    )
    events = await run(code, log_path=log, max_line_bytes=1024 * 1024)
    assert texts(events) == ["after"]
    assert exited(events).oversized_lines == 1
    assert log.stat().st_size == len(b"init\n") + 48 * 65536 + len(b"\nafter\n")


async def test_a_parser_bug_on_one_line_does_not_end_the_session() -> None:
    events = await run("print('init'); print('boom'); print('fine')")
    assert texts(events) == ["fine"]
    assert exited(events).ok


class NoVerdictParser(ToyParser):
    def finish(self, end: ProcessEnd) -> list[AgentEvent]:
        raise RuntimeError("a parser bug at the end")


async def test_a_parser_that_gives_no_verdict_still_ends_the_session() -> None:
    events = await run("print('init'); print('hello')", parser=NoVerdictParser())
    assert texts(events) == ["hello"]
    verdict = exited(events)
    assert not verdict.ok
    assert verdict.error_class is ErrorClass.ERROR_RESULT
    assert verdict.message is not None
    assert "a parser bug at the end" in verdict.message


async def test_backpressure_delivers_every_event_in_order() -> None:
    n = EVENT_HIGH_WATER * 3
    code = f"import sys\nsys.stdout.write(''.join(f'{{i}}\\n' for i in range({n})))\n"
    session = await start(code)
    seen: list[str] = []
    async for event in session.events():
        if isinstance(event, AssistantText):
            seen.append(event.text)
            if len(seen) % 1000 == 0:
                await asyncio.sleep(0.01)  # a slow consumer
    assert seen == [str(i) for i in range(n)]


async def test_wait_without_consuming_discards_and_returns_the_verdict() -> None:
    session = await start("print('init'); print('x' * 100, flush=True)")
    verdict = await session.wait()
    assert verdict.ok
    with pytest.raises(RuntimeError, match="only once"):
        async for _ in session.events():
            pass


async def test_leaving_the_event_loop_early_discards_the_rest() -> None:
    n = EVENT_HIGH_WATER * 2  # enough to pause reading if nobody discarded
    session = await start(f"print('init'); print('\\n'.join(map(str, range({n}))))")
    async for event in session.events():
        if isinstance(event, SessionStarted):
            break
    verdict = await asyncio.wait_for(session.wait(), 10)
    assert verdict.ok


async def test_events_can_be_iterated_once() -> None:
    session = await start("print('init')")
    events = [e async for e in session.events()]
    assert exited(events).ok
    with pytest.raises(RuntimeError):
        async for _ in session.events():
            pass


# -- deadlines --------------------------------------------------------------------------------


async def test_first_output_deadline_stops_a_silent_process() -> None:
    began = time.monotonic()
    events = await run(
        "import time; time.sleep(30)",
        timeouts=Timeouts(first_output=0.4, idle=None, stop_grace=1),
    )
    verdict = exited(events)
    assert verdict.message == StopReason.FIRST_OUTPUT_TIMEOUT
    assert verdict.signal == signal.SIGTERM
    assert time.monotonic() - began < 5


async def test_output_before_the_session_starts_does_not_meet_the_first_output_deadline() -> None:
    code = "import time\nfor _ in range(20):\n    print('hook', flush=True); time.sleep(0.05)\n"
    events = await run(code, timeouts=Timeouts(first_output=0.4, idle=5, stop_grace=1))
    assert exited(events).message == StopReason.FIRST_OUTPUT_TIMEOUT


async def test_a_slow_start_below_the_deadline_is_fine() -> None:
    events = await run(
        "import time; time.sleep(0.3); print('init'); print('result')",
        timeouts=Timeouts(first_output=3, idle=3),
    )
    assert exited(events).ok


async def test_idle_deadline_stops_a_stream_gone_silent() -> None:
    events = await run(
        "import time; print('init', flush=True); print('partial', flush=True); time.sleep(30)",
        timeouts=Timeouts(first_output=5, idle=0.4, stop_grace=1),
    )
    verdict = exited(events)
    assert verdict.message == StopReason.IDLE_TIMEOUT
    assert texts(events) == ["partial"]  # what came before is kept


async def test_a_retry_notice_extends_the_idle_deadline_by_its_delay() -> None:
    code = (
        "import time\n"
        "print('init', flush=True)\n"
        "print('retry 1500', flush=True)\n"
        "time.sleep(1.0)\n"
        "print('result', flush=True)\n"
    )
    events = await run(code, timeouts=Timeouts(first_output=5, idle=0.5, stop_grace=1))
    assert exited(events).ok
    assert any(isinstance(e, SessionResult) for e in events)


async def test_a_partial_line_is_not_parsed_early_and_its_bytes_count_as_activity() -> None:
    code = (
        "import sys, time\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'init\\nfirst half'); out.flush()\n"
        "time.sleep(0.5)\n"
        "out.write(b' second half\\n'); out.flush()\n"
    )
    events = await run(code, timeouts=Timeouts(first_output=5, idle=0.8))
    assert texts(events) == ["first half second half"]
    assert exited(events).ok


async def test_wall_deadline_stops_a_busy_process() -> None:
    code = (
        "import time\n"
        "print('init', flush=True)\n"
        "while True:\n"
        "    print('tick', flush=True); time.sleep(0.05)\n"
    )
    events = await run(code, timeouts=Timeouts(first_output=5, idle=5, wall=0.5, stop_grace=1))
    assert exited(events).message == StopReason.WALL_TIMEOUT


# -- stop sequence and reaping ------------------------------------------------------------


async def test_sigterm_is_escalated_to_sigkill_after_the_grace() -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('init', flush=True)\n"
        "time.sleep(30)\n"
    )
    session = await start(code, timeouts=Timeouts(first_output=5, idle=None, stop_grace=0.3))
    events: list[AgentEvent] = []

    async def consume() -> None:
        async for e in session.events():
            events.append(e)
            if isinstance(e, SessionStarted):
                await session.stop()

    began = time.monotonic()
    await asyncio.wait_for(consume(), 10)
    verdict = exited(events)
    assert verdict.signal == signal.SIGKILL
    assert verdict.message == StopReason.OPERATOR
    assert 0.3 <= time.monotonic() - began < 5


async def test_a_graceful_child_exits_on_sigterm_with_its_last_words() -> None:
    code = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    print('aborted', flush=True); sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('init', flush=True)\n"
        "time.sleep(30)\n"
    )
    session = await start(code)
    async for event in session.events():
        if isinstance(event, SessionStarted):
            await session.stop(StopReason.SHUTDOWN)
            await session.stop(StopReason.OPERATOR)  # idempotent: the first reason stays
    verdict = await session.wait()
    assert verdict.exit_code == 143
    assert verdict.message == StopReason.SHUTDOWN
    assert session.stop_reason is StopReason.SHUTDOWN


async def test_a_finishing_cli_gets_the_flush_grace_before_sigterm() -> None:
    code = "import time\nprint('init'); print('result', flush=True)\ntime.sleep(0.4)\n"
    session = await start(code, timeouts=Timeouts(first_output=5, idle=5, flush_grace=3))
    async for event in session.events():
        if isinstance(event, SessionResult):
            await session.stop()
    verdict = await session.wait()
    assert verdict.exit_code == 0  # it ended on its own
    assert verdict.signal is None


async def test_kill_is_immediate() -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('init', flush=True)\n"
        "time.sleep(30)\n"
    )
    session = await start(code, timeouts=Timeouts(first_output=5, idle=None, stop_grace=30))
    async for event in session.events():
        if isinstance(event, SessionStarted):
            began = time.monotonic()
            await session.kill()
            assert time.monotonic() - began < 2
    assert (await session.wait()).signal == signal.SIGKILL


async def test_processes_left_in_the_group_die_with_the_cli() -> None:
    code = (
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '60'])\n"
        "print('init'); print(p.pid, flush=True)\n"
    )
    events = await run(code)
    (grandchild,) = texts(events)
    assert exited(events).ok
    for _ in range(50):
        if is_dead(int(grandchild)):
            break
        await asyncio.sleep(0.02)
    assert is_dead(int(grandchild))


async def test_a_grandchild_outside_the_group_cannot_hold_the_session_open() -> None:
    code = (
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "print('init'); print(p.pid, flush=True)\n"
    )
    began = time.monotonic()
    events = await run(code)
    (escaped,) = texts(events)
    try:
        assert exited(events).ok
        assert time.monotonic() - began < PIPE_GRACE + 3
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(escaped), signal.SIGKILL)


async def test_no_zombies_and_no_leaked_descriptors() -> None:
    # uvloop opens /dev/null once, on the loop's first spawn: not a leak.
    await (await start("pass")).wait()
    before = open_fds()
    pids = []
    for code in (
        "print('init'); print('result')",
        "import sys; print('init', flush=True); sys.exit(3)",
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    ):
        session = await start(code)
        pids.append(session.pid)
        await session.wait()
    hung = await start("import time; time.sleep(30)", timeouts=Timeouts(first_output=0.2))
    pids.append(hung.pid)
    await hung.wait()
    await asyncio.sleep(0)
    assert open_fds() == before
    for pid in pids:
        assert process_state(pid) is None, f"pid {pid} was not reaped"
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


async def test_exit_code_and_signal_are_reported_apart() -> None:
    assert exited(await run("import sys; sys.exit(7)")).exit_code == 7
    verdict = exited(await run("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    assert verdict.exit_code is None
    assert verdict.signal == signal.SIGSEGV


# -- start failures ----------------------------------------------------------------------


async def test_a_missing_binary_is_a_start_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(AgentStartError, match="no-such-agent-cli"):
        await spawn(
            [str(tmp_path / "no-such-agent-cli")],
            parser=ToyParser(),
            cwd=tmp_path,
            env={},
            stdin=b"",
            timeouts=FAST,
        )


async def test_a_missing_working_directory_is_a_start_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(AgentStartError, match="does not exist"):
        await spawn(
            [sys.executable, "-c", "pass"],
            parser=ToyParser(),
            cwd=tmp_path / "gone",
            env={},
            stdin=b"",
            timeouts=FAST,
        )


def test_the_session_works_on_the_stdlib_event_loop_too() -> None:
    async def main() -> list[AgentEvent]:
        return await run("import sys; print('init'); print(sys.stdin.read())", stdin=b"hi")

    events = asyncio.run(main())
    assert texts(events) == ["hi"]
    assert exited(events).ok


async def test_a_batch_parser_gets_the_lines_of_a_read_in_one_call() -> None:
    parser = BatchToyParser()
    code = (
        "import sys; sys.stdout.write('init\\n' + "
        "''.join(f'line {i}\\n' for i in range(200)) + 'result\\n')"
    )
    events = await run(code, parser=parser)
    assert texts(events) == [f"line {i}" for i in range(200)]
    assert max(parser.batches) > 1
    assert exited(events).ok


async def test_a_batch_parser_failure_drops_that_batch_only() -> None:
    parser = BatchToyParser()
    code = (
        "import sys, time; sys.stdout.write('init\\na\\nboom\\n'); sys.stdout.flush(); "
        "time.sleep(0.2); sys.stdout.write('b\\nresult\\n')"
    )
    events = await run(code, parser=parser)
    # The batch with the failing line is lost (whichever lines it held); the
    # session goes on.
    assert texts(events)[-1] == "b"
    assert exited(events).ok
