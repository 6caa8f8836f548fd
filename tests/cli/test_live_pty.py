"""``weft run``'s live view on a real terminal (a pty) at 80 and 160 columns.

The child's output is played on a small terminal model (:class:`Screen`) that
wraps a line at the right margin as a terminal does and moves the cursor as the
live table's redraws ask. A table row the terminal had to wrap, or an echoed
key, shows up there as a stale copy of the table (a second header) or as a row
continued on the next line: what a person would see.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from tests.runtime.hanks import codon, scenario, subprocess_environment, write_file, write_hank

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "hello"
HELLO_CODONS = ("greet", "polish", "draft#0", "draft#1", "draft#2", "review")
HEIGHT = 50
TIMEOUT = 60.0
HEADER = re.compile(r"^\s*codon\s+status\s+time\s+tokens\s+cost\s+last action")
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "JENKINS_URL", "CIRCLECI", "TRAVIS")


class Screen:
    """A terminal of ``width`` x ``height`` with unlimited scrollback: printable
    characters, CR, LF, and the CSI sequences rich writes (cursor moves, erase in
    line; colours and cursor visibility are ignored). It wraps at the margin the
    way xterm does (the wrap happens at the next character) and remembers which
    rows a wrap continued."""

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self.rows: list[list[str]] = [[" "] * width for _ in range(height)]
        self.continued = [False] * height
        self.row = 0
        self.col = 0
        self.wrap_pending = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    @property
    def top(self) -> int:
        return len(self.rows) - self.height

    def feed(self, data: bytes) -> None:
        text = self._pending + self._decoder.decode(data)
        self._pending = ""
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\x1b":
                end = self._escape(text, i)
                if end is None:  # an escape cut in two by a read: wait for the rest
                    self._pending = text[i:]
                    return
                i = end
                continue
            self._char(ch)
            i += 1

    def _escape(self, text: str, i: int) -> int | None:
        if i + 1 >= len(text):
            return None
        kind = text[i + 1]
        if kind == "[":
            match = re.compile(r"\x1b\[([?0-9;]*)([@-~])").match(text, i)
            if match is None:
                return None if len(text) - i < 32 else i + 2
            self._csi(match.group(1), match.group(2))
            return match.end()
        if kind == "]":  # OSC: up to BEL or ST
            for end in (text.find("\x07", i), text.find("\x1b\\", i)):
                if end != -1:
                    return end + (1 if text[end] == "\x07" else 2)
            return None
        return i + 2

    def _csi(self, params: str, final: str) -> None:
        if params.startswith("?"):
            return  # cursor visibility, bracketed paste, ...
        numbers = [int(p) if p else 0 for p in params.split(";")] if params else []
        n = max(numbers[0], 1) if numbers else 1
        self.wrap_pending = False
        if final == "A":
            self.row = max(self.top, self.row - n)
        elif final == "B":
            self.row = min(len(self.rows) - 1, self.row + n)
        elif final == "C":
            self.col = min(self.width - 1, self.col + n)
        elif final == "D":
            self.col = max(0, self.col - n)
        elif final == "G":
            self.col = min(self.width - 1, n - 1)
        elif final == "K":
            mode = numbers[0] if numbers else 0
            line = self.rows[self.row]
            if mode == 2:
                self.rows[self.row] = [" "] * self.width
                self.continued[self.row] = False
            elif mode == 0:
                line[self.col :] = [" "] * (self.width - self.col)
            elif mode == 1:
                line[: self.col + 1] = [" "] * (self.col + 1)

    def _newline(self) -> None:
        if self.row == len(self.rows) - 1:
            self.rows.append([" "] * self.width)
            self.continued.append(False)
        self.row += 1

    def _char(self, ch: str) -> None:
        if ch == "\r":
            self.col, self.wrap_pending = 0, False
        elif ch == "\n":
            self._newline()
            self.wrap_pending = False
        elif ch == "\b":
            self.col = max(0, self.col - 1)
        elif ch == "\t":
            self.col = min(self.width - 1, (self.col // 8 + 1) * 8)
        elif ch >= " ":
            if self.wrap_pending:
                self._newline()
                self.col, self.wrap_pending = 0, False
                self.continued[self.row] = True
            self.rows[self.row][self.col] = ch
            if self.col == self.width - 1:
                self.wrap_pending = True
            else:
                self.col += 1

    def lines(self) -> list[str]:
        return ["".join(row).rstrip() for row in self.rows]

    def text(self) -> str:
        return "\n".join(line for line in self.lines())


class Terminal:
    """``python -m weft ARGS`` on a pty of ``width`` columns, its output played on a
    :class:`Screen`."""

    def __init__(self, args: list[str], *, width: int, env: dict[str, str], cwd: Path) -> None:
        self.screen = Screen(width, HEIGHT)
        self.raw = b""
        self.status: int | None = None
        pid, fd = pty.fork()
        if pid == 0:  # the child: weft on a terminal of this size
            try:
                os.chdir(cwd)
                winsize = struct.pack("HHHH", HEIGHT, width, 0, 0)
                fcntl.ioctl(0, termios.TIOCSWINSZ, winsize)
                os.execvpe(sys.executable, [sys.executable, "-m", "weft", *args], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd

    def read(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            ready, _, _ = select.select(
                [self.fd], [], [], max(0.0, min(0.05, end - time.monotonic()))
            )
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    return
                if not data:
                    return
                self.raw += data
                self.screen.feed(data)
            elif time.monotonic() >= end:
                return

    def until(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not check():
            assert time.monotonic() < deadline, f"no {what} after {TIMEOUT}s:\n{self.screen.text()}"
            self.read(0.1)

    def shows(self, text: str) -> bool:
        return text in self.screen.text()

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def wait(self) -> int:
        deadline = time.monotonic() + TIMEOUT
        while self.status is None:
            self.read(0.1)
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.status = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                raise AssertionError(f"weft did not end:\n{self.screen.text()}")
        self.read(0.3)
        return self.status

    def modes(self) -> int:
        """The terminal's local modes as the child left them."""
        return int(termios.tcgetattr(self.fd)[3])

    def close(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


def live_environment(tmp_path: Path, line_delay_ms: int = 0) -> dict[str, str]:
    env = subprocess_environment(tmp_path)
    for name in (*CI_VARIABLES, "COLUMNS", "LINES", "NO_COLOR"):
        env.pop(name, None)
    env.update(
        HOME=str(tmp_path), TERM="xterm-256color", FAKE_AGENT_LINE_DELAY_MS=str(line_delay_ms)
    )
    return env


def table(screen: Screen) -> tuple[int, int]:
    """Where the (one) codon table is: the header's row and the totals line's."""
    lines = screen.lines()
    headers = [i for i, line in enumerate(lines) if HEADER.match(line)]
    assert len(headers) == 1, f"{len(headers)} table headers on the screen:\n{screen.text()}"
    footer = next(i for i in range(headers[0], len(lines)) if lines[i].startswith("run "))
    return headers[0], footer


def assert_one_line_per_row(screen: Screen, codons: tuple[str, ...]) -> None:
    header, footer = table(screen)
    lines = screen.lines()
    shown = "\n".join(lines[header : footer + 1])
    assert not any(screen.continued[header : footer + 1]), f"a table line wrapped:\n{shown}"
    assert footer - header - 1 == len(codons), f"not one line per codon:\n{shown}"
    for codon_id in codons:
        rows = [line for line in lines[header:footer] if f" {codon_id} " in f"{line} "]
        assert len(rows) == 1, f"{codon_id} is on {len(rows)} lines:\n{shown}"
    assert all(len(line) <= screen.width for line in lines)


@pytest.mark.parametrize("width", [80, 160])
def test_every_codon_row_is_one_line_at_80_and_160_columns(tmp_path: Path, width: int) -> None:
    term = Terminal(
        ["run", str(HELLO), "--execution", str(tmp_path / "x")],
        width=width,
        env=live_environment(tmp_path, line_delay_ms=2),
        cwd=tmp_path,
    )
    try:
        assert term.wait() == 0, term.screen.text()
    finally:
        term.close()
    screen = term.screen
    assert_one_line_per_row(screen, HELLO_CODONS)
    lines = screen.lines()
    _, footer = table(screen)
    assert lines[footer].startswith("run ")
    assert "6/6 completed" in lines[footer]
    # The panel's title is one line of its border; the continue command is whole below it.
    title = next(i for i, line in enumerate(lines) if line.startswith("╭─ Run completed (exit 0)"))
    bottom = next(i for i in range(title, len(lines)) if lines[i].startswith("╰"))
    assert not any(screen.continued[title : bottom + 1]), "\n".join(lines[title : bottom + 1])
    assert f"continue: weft run --execution {tmp_path / 'x'}" in screen.text().replace("\n", "")
    if width == 160:  # room enough: nothing of a row is cut
        greet = next(line for line in lines[footer - 6 : footer] if line[3:].startswith("greet "))
        assert "greet Write a greeting " in greet, greet
        assert "…" not in greet, greet


def test_manual_mode_waits_with_a_line_saying_which_key_and_keys_leave_no_trace(
    tmp_path: Path,
) -> None:
    term = Terminal(
        ["run", str(HELLO), "--execution", str(tmp_path / "run-dir"), "--no-autostart"],
        width=80,
        env=live_environment(tmp_path),
        cwd=tmp_path,
    )
    try:
        for codon_id in HELLO_CODONS:
            waiting = f"Waiting: press Enter to start {codon_id} (q stops the run)"
            term.until(partial(term.shows, waiting), f"waiting line for {codon_id}")
            _header, footer = table(term.screen)
            lines = term.screen.lines()
            assert " waiting " in lines[footer], lines[footer]  # not "running"
            assert lines[footer + 1] == waiting
            term.type(b"x\r")  # x means nothing: it is not echoed either
            term.until(partial(completed, term.screen, codon_id), f"{codon_id} completed")
        term.until(lambda: term.shows("Waiting: All codons completed. Press q"), "the parked line")
        term.type(b"q")
        assert term.wait() == 0, term.screen.text()
        modes = term.modes()
    finally:
        term.close()
    screen = term.screen
    assert_one_line_per_row(screen, HELLO_CODONS)
    assert "codon.next" not in screen.text()
    # (A long path wraps anywhere: a line may begin inside "--execution", never with an echoed x.)
    assert not re.search(r"^x(?!ecution)", screen.text(), re.MULTILINE)
    # The terminal is as it was: echo and line editing back on.
    assert modes & termios.ECHO
    assert modes & termios.ICANON


def completed(screen: Screen, codon_id: str) -> bool:
    """Whether the table shows ``codon_id`` completed."""
    return any(
        line[3:].startswith(f"{codon_id} ") and "completed" in line for line in screen.lines()
    )


def slow_hank(tmp_path: Path) -> Path:
    """a writes a.md; b writes b/started.md and then hangs until stopped; c after it."""
    return write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "a")),
        codon("b", write_file("b/started.md", "b") + scenario("hang_after_init"), files=["b/**"]),
        codon("c", write_file("c.md", "c")),
    )


def test_q_stops_an_autostart_run_as_ctrl_c_does_and_restores_the_terminal(
    tmp_path: Path,
) -> None:
    execution = tmp_path / "x"
    term = Terminal(
        ["run", str(slow_hank(tmp_path)), "--execution", str(execution)],
        width=80,
        env=live_environment(tmp_path),
        cwd=tmp_path,
    )
    try:
        term.until(lambda: term.shows("Press q to stop the run"), "the key hint")
        term.until(lambda: (execution / "agentRoot" / "b" / "started.md").exists(), "b working")
        term.type(b"q")
        code = term.wait()
        modes = term.modes()
    finally:
        term.close()
    text = term.screen.text()
    assert code == 128 + signal.SIGINT, text
    assert "Stopping: the agent is asked to stop and a checkpoint is taken" in text
    assert "run the same command" in text.replace("\n", " ") or "continue:" in text
    assert not (execution / "agentRoot" / "c.md").exists()  # c never started
    assert_one_line_per_row(term.screen, ("a", "b", "c"))
    assert modes & termios.ECHO
    assert modes & termios.ICANON
