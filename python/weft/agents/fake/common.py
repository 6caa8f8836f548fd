"""What every fake flavour shares: errors, settings from the environment, ids,
the clock, stdin handling and the ``FAKE_AGENT_RECORD`` capture."""

from __future__ import annotations

import itertools
import json
import os
import random
import select
import sys
import time
from collections.abc import Mapping
from typing import Any

JsonObj = dict[str, Any]

FLAVOURS = ("claude", "codex", "gemini")

DEFAULT_VERSIONS = {"claude": "2.1.330", "codex": "0.58.0", "gemini": "0.17.1"}

# 2026-01-20T10:00:00Z: the seeded (virtual) clock starts here, so seeded runs
# print the same timestamps every time.
VIRTUAL_EPOCH_MS = 1_768_903_200_000


class FakeConfigError(Exception):
    """A mistake in how the fake itself was set up (an environment knob, a
    scenario name, a script file, a prompt directive).

    Reported as ``fake-<flavour>: <message>`` on stderr with exit code 2, so it
    cannot be mistaken for an error the real CLI would print.
    """


class CliError(Exception):
    """An error the real CLI reports before doing any work: a message on
    stderr and an exit code (the real CLIs print nothing on stdout then)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also rejects nan
        raise FakeConfigError(f"{name}={raw!r} is not a non-negative number (e.g. {name}=5)")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name, "").strip() or choices[0]
    if raw not in choices:
        raise FakeConfigError(f"{name}={raw!r} is not one of {', '.join(choices)}")
    return raw


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class Settings:
    """The ``FAKE_AGENT_*`` knobs, read once from the environment."""

    def __init__(self, env: Mapping[str, str], flavour: str) -> None:
        seed = env.get("FAKE_AGENT_SEED")
        self.seed: str | None = seed if seed else None
        self.line_delay_ms = _number(env, "FAKE_AGENT_LINE_DELAY_MS", 5.0)
        start = env.get("FAKE_AGENT_START_DELAY_MS", "").strip()
        self.start_delay_ms: float | None = (
            _number(env, "FAKE_AGENT_START_DELAY_MS", 0.0) if start else None
        )
        self.version = env.get("FAKE_AGENT_VERSION", "").strip() or DEFAULT_VERSIONS[flavour]
        self.resume_mode = _choice(env, "FAKE_AGENT_RESUME_MODE", ("same", "new", "tag"))
        self.omit_cost = _flag(env, "FAKE_AGENT_OMIT_COST")
        self.legacy_errors = _flag(env, "FAKE_AGENT_LEGACY_ERRORS")
        self.strict_flags = _flag(env, "FAKE_AGENT_STRICT_FLAGS")
        self.huge_bytes = int(_number(env, "FAKE_AGENT_HUGE_BYTES", 16 * 1024 * 1024))
        self.sigterm = _choice(env, "FAKE_AGENT_SIGTERM", ("exit", "graceful", "ignore"))
        self.record: str | None = env.get("FAKE_AGENT_RECORD") or None
        self.scenario: str | None = env.get("FAKE_AGENT_SCENARIO", "").strip() or None
        self.script: str | None = env.get("FAKE_AGENT_SCRIPT") or None
        self.stdin_wait_ms = _number(env, "FAKE_AGENT_STDIN_WAIT_MS", 500.0)

    def version_at_least(self, *parts: int) -> bool:
        """Whether the emulated CLI version is ``parts`` or newer."""
        numbers: list[int] = []
        for piece in self.version.split("."):
            digits = "".join(c for c in piece if c.isdigit())
            numbers.append(int(digits) if digits else 0)
        return tuple(numbers) >= parts


_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class Ids:
    """Identifier factory; every id comes from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid4(self) -> str:
        """A random (version 4) UUID."""
        value = self.rng.getrandbits(128)
        value &= ~(0xF000 << 64)
        value |= 0x4000 << 64
        value &= ~(0xC000 << 48)
        value |= 0x8000 << 48
        return _format_uuid(value)

    def uuid7(self, unix_ms: int) -> str:
        """A time-ordered (version 7) UUID, the kind Codex uses for threads."""
        value = (unix_ms & ((1 << 48) - 1)) << 80
        value |= 0x7 << 76
        value |= self.rng.getrandbits(12) << 64
        value |= 0x2 << 62
        value |= self.rng.getrandbits(62)
        return _format_uuid(value)

    def base62(self, length: int) -> str:
        """``length`` random base62 characters."""
        return "".join(self.rng.choice(_BASE62) for _ in range(length))

    def message(self) -> str:
        """An Anthropic message id: ``msg_01`` + 22 base62 characters."""
        return "msg_01" + self.base62(22)

    def tool(self) -> str:
        """An Anthropic tool-use id: ``toolu_01`` + 22 base62 characters."""
        return "toolu_01" + self.base62(22)

    def request(self) -> str:
        """An Anthropic request id (``requestId`` in transcripts)."""
        return "req_011C" + self.base62(20)


def _format_uuid(value: int) -> str:
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Clock:
    """Wall clock, or with a seed a virtual clock that starts at a fixed
    instant and only moves when the fake sleeps or simulates API latency, so
    seeded runs print identical timestamps and durations."""

    def __init__(self, virtual: bool) -> None:
        self.virtual = virtual
        self._start = time.time()
        self._simulated_ms = 0.0
        self._latency_ms = 0.0

    def advance(self, ms: float) -> None:
        """Note ``ms`` of slept time (moves the virtual clock; the wall clock
        moved by itself)."""
        self._simulated_ms += ms

    def simulate(self, ms: float) -> None:
        """Note ``ms`` of simulated API latency: it moves the virtual clock
        and counts in :meth:`elapsed_ms` either way, so durations look like a
        real run's without the fake waiting for them."""
        self._simulated_ms += ms
        self._latency_ms += ms

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        if self.virtual:
            return VIRTUAL_EPOCH_MS + int(self._simulated_ms)
        return int(time.time() * 1000)

    def elapsed_ms(self) -> int:
        """Milliseconds since the fake started."""
        if self.virtual:
            return int(self._simulated_ms)
        return int((time.time() - self._start) * 1000 + self._latency_ms)

    def iso(self, unix_ms: int | None = None) -> str:
        """An ISO-8601 UTC timestamp with milliseconds, ``...T10:00:00.120Z``."""
        ms = self.now_ms() if unix_ms is None else unix_ms
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"

    def stamp(self, fmt: str) -> str:
        """The current UTC time formatted with :func:`time.strftime`."""
        return time.strftime(fmt, time.gmtime(self.now_ms() // 1000))


def make_rng(settings: Settings, flavour: str, argv: list[str], material: str) -> random.Random:
    """The run's random generator: seeded from ``FAKE_AGENT_SEED`` plus the
    flavour, argv and prompt (so a resumed run does not repeat the ids of the
    run it resumes), or from the OS without a seed."""
    if settings.seed is None:
        return random.Random()
    return random.Random(json.dumps([settings.seed, flavour, argv, material]))


def read_stdin() -> str:
    """All of stdin (blocks until EOF, like the real CLIs)."""
    if sys.stdin is None:
        return ""
    try:
        data = sys.stdin.buffer.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def read_stdin_if_ready(wait_ms: float) -> str | None:
    """Stdin when it is piped and has data (or EOF) within ``wait_ms``;
    ``None`` when it is a terminal or an open pipe nobody writes to. Used when
    the prompt is also given as an argument, so a parent that never closes
    stdin does not hang the fake."""
    if sys.stdin is None:
        return None
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            return None
        ready, _, _ = select.select([fd], [], [], wait_ms / 1000)
    except (OSError, ValueError):
        return None
    if not ready:
        return None
    return read_stdin()


def stdin_is_tty() -> bool:
    """Whether stdin is an interactive terminal."""
    try:
        return sys.stdin is not None and os.isatty(sys.stdin.fileno())
    except (OSError, ValueError):
        return False


_RECORD_PREFIXES = (
    "FAKE_AGENT_",
    "ANTHROPIC_",
    "CLAUDE",
    "CODEX_",
    "OPENAI_",
    "GEMINI_",
    "GOOGLE_",
    "WEFT_",
    "OTEL_",  # the trace exporter's settings a traced run passes on (docs/telemetry.md)
)
_RECORD_NAMES = frozenset(
    {
        "MAX_THINKING_TOKENS",
        "API_TIMEOUT_MS",
        "BASH_DEFAULT_TIMEOUT_MS",
        "DISABLE_AUTOUPDATER",
        "HOME",
        "NO_COLOR",
        "TERM",
        "TRACEPARENT",
    }
)
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def env_subset(env: Mapping[str, str]) -> dict[str, str]:
    """The environment variables a test may want to assert on; values of
    secrets are replaced by ``<redacted: N chars>``."""
    out: dict[str, str] = {}
    for name in sorted(env):
        if name in _RECORD_NAMES or name.startswith(_RECORD_PREFIXES):
            value = env[name]
            if any(marker in name.upper() for marker in _SECRET_MARKERS):
                value = f"<redacted: {len(value)} chars>"
            out[name] = value
    return out


_recorded = False


def write_record(
    settings: Settings, flavour: str, argv: list[str], stdin: str | None, extra: JsonObj
) -> None:
    """Write the ``FAKE_AGENT_RECORD`` capture (atomically: temp file and
    rename, so a reader never sees half a file)."""
    global _recorded
    if settings.record is None:
        return
    _recorded = True
    doc: JsonObj = {
        "flavour": flavour,
        "argv": argv,
        "cwd": os.getcwd(),
        "env": env_subset(os.environ),
        "stdin": stdin,
    }
    doc.update(extra)
    tmp = f"{settings.record}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, ensure_ascii=False, indent=1)
        os.replace(tmp, settings.record)
    except OSError as exc:
        raise FakeConfigError(
            f"FAKE_AGENT_RECORD={settings.record!r}: cannot write the record ({exc.strerror})"
        ) from exc


def record_if_missing(settings: Settings, flavour: str, argv: list[str]) -> None:
    """Write the record of a run refused before it read its prompt."""
    if not _recorded:
        write_record(settings, flavour, argv, None, {"prompt": None})


def git_branch(cwd: str) -> str:
    """The checked-out branch of the git repository holding ``cwd``, or ``""``."""
    path = cwd
    while True:
        head = os.path.join(path, ".git", "HEAD")
        if os.path.exists(os.path.join(path, ".git")):
            try:
                with open(head, encoding="utf-8") as fh:
                    ref = fh.read().strip()
            except OSError:
                return ""
            prefix = "ref: refs/heads/"
            return ref[len(prefix) :] if ref.startswith(prefix) else "HEAD"
        parent = os.path.dirname(path)
        if parent == path:
            return ""
        path = parent


def in_git_repo(cwd: str) -> bool:
    """Whether ``cwd`` is inside a git work tree (a ``.git`` above it)."""
    path = os.path.abspath(cwd)
    while True:
        if os.path.exists(os.path.join(path, ".git")):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def quote(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters (for echoing a prompt)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def split_words(text: str, rng: random.Random, pieces: int) -> list[str]:
    """Split ``text`` into at most ``pieces`` non-empty chunks at word
    boundaries where possible (how streamed deltas look)."""
    if pieces <= 1 or len(text) < 2:
        return [text]
    cuts: set[int] = set()
    spaces = [i for i, c in enumerate(text) if c == " " and 0 < i < len(text)]
    pool = spaces if len(spaces) >= pieces - 1 else list(range(1, len(text)))
    cuts.update(rng.sample(pool, min(pieces - 1, len(pool))))
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]
