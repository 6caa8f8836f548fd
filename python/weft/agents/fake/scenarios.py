"""The scenario machinery shared by the three flavours.

A flavour (:class:`Flavour`) provides a handful of primitives: the opening
lines (Claude's ``system/init``, Codex's ``thread.started``, Gemini's
``init``), the work the prompt's directives ask for, the closing reply and
terminal event, one unit of visible progress, a tool call left without a
result, a huge tool output, and what a graceful stop prints. The transport
scenarios of §7.3 (hangs, crashes, malformed lines, chunked writes, floods,
signals) are built here from those primitives, once for all flavours; each
flavour adds its own scenarios in :meth:`Flavour.own_scenarios`.
"""

from __future__ import annotations

import abc
import json
import random
from collections.abc import Callable, Iterable, Iterator

from weft.agents.fake.common import (
    CliError,
    Clock,
    FakeConfigError,
    Ids,
    JsonObj,
    Settings,
    quote,
)
from weft.agents.fake.directives import Directives, Workspace, parse_scenario, plain_text
from weft.agents.fake.output import (
    Chunked,
    Exit,
    Hang,
    Kill,
    Raw,
    Runner,
    Sleep,
    StallNext,
    Stderr,
    StderrBytes,
    Step,
)

ScenarioFn = Callable[[], Iterator[Step]]

EMOJI = "\U0001f680"
"""A 4-byte UTF-8 character (rocket) that chunked writes split in two."""

KNOWN_PARAMS: dict[str, type] = {
    "after": int,
    "bytes": int,
    "cache_ttl": str,
    "code": int,
    "count": int,
    "delay_ms": float,
    "events": int,
    "fails": int,
    "hooks": int,
    "interval_ms": float,
    "lines": int,
    "message": str,
    "shape": str,
    "signal": str,
    "spill": int,
    "stall_ms": float,
    "status": int,
    "turns": int,
    "until": float,
    "usd": float,
    "variant": str,
}
"""Scenario parameters and their types, checked before the run starts."""


class Context:
    """Everything a run knows before its first line: settings, ids, clock,
    the prompt and its directives, the chosen scenario."""

    def __init__(
        self,
        *,
        flavour: str,
        settings: Settings,
        argv: list[str],
        rng: random.Random,
        clock: Clock,
        runner: Runner,
        cwd: str,
        prompt: str,
        directives: Directives,
        scenario: str,
        params: dict[str, str],
    ) -> None:
        self.flavour = flavour
        self.settings = settings
        self.argv = argv
        self.rng = rng
        self.ids = Ids(rng)
        self.clock = clock
        self.runner = runner
        self.cwd = cwd
        self.workspace = Workspace(cwd)
        self.prompt = prompt
        self.directives = directives
        self.scenario = scenario
        self.params = params


def choose_scenario(directives: Directives, settings: Settings) -> tuple[str, dict[str, str]]:
    """The scenario by §7.1 precedence: prompt directive, then
    ``FAKE_AGENT_SCENARIO``, then ``success``."""
    if directives.scenario is not None:
        spec, source = directives.scenario, "prompt directive @@fake:scenario=...@@"
    elif settings.scenario is not None:
        spec, source = settings.scenario, "FAKE_AGENT_SCENARIO"
    else:
        return "success", {}
    name, params = parse_scenario(spec, source)
    unknown = sorted(set(params) - set(KNOWN_PARAMS))
    if unknown:
        raise FakeConfigError(
            f"{source}: unknown scenario parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(KNOWN_PARAMS))}"
        )
    for key, raw in params.items():
        kind = KNOWN_PARAMS[key]
        if kind is str:
            continue
        try:
            value = kind(raw)
        except ValueError:
            value = -1
        if not value >= 0:
            noun = "a non-negative integer" if kind is int else "a non-negative number"
            raise FakeConfigError(f"{source}: scenario {name}: {key}={raw!r} is not {noun}")
    return name, params


def with_start_delay(steps: Iterator[Step], settings: Settings, scenario: str) -> Iterator[Step]:
    """``steps`` after ``FAKE_AGENT_START_DELAY_MS`` of silence (``slow_start``
    applies the delay itself). A step, so a signal during it is handled."""
    if settings.start_delay_ms and scenario != "slow_start":
        yield Sleep(settings.start_delay_ms)
    yield from steps


class Flavour(abc.ABC):
    """Base class of the three fake CLIs' run logic."""

    name = "agent"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.ids = ctx.ids
        self.rng = ctx.rng
        self.clock = ctx.clock
        self.params = ctx.params
        self.extra_text = ""
        """Appended to the final reply (chunked_writes adds an emoji)."""
        self.previous_prompt: str | None = None
        """The prompt of the session this run resumes, if any (quoted in the reply)."""
        self.outcomes: list[bool] = []
        """Whether each tool call (or step) of this run succeeded."""

    work_said = "made {count} tool call(s)"
    """How the final reply counts the work: the real CLI's own word for it."""
    resume_said = "Continuing our session"
    """How the final reply opens on a resumed session."""

    def final_text(self) -> str:
        """The final reply: the ``say`` texts, else a deterministic summary
        that quotes the prompt (and, on resume, the previous prompt)."""
        says = self.ctx.directives.says
        if says:
            return "\n".join(says) + self.extra_text
        text = f'Done. You asked: "{quote(self.ctx.directives.plain) or "(directives only)"}".'
        if self.outcomes:
            work = self.work_said.format(count=len(self.outcomes))
            text += f" I {work}; {self.outcomes.count(False)} failed."
        if self.previous_prompt is not None:
            previous = quote(plain_text(self.previous_prompt))
            text = f'{self.resume_said} (previous prompt was: "{previous}"). ' + text
        return text + self.extra_text

    # -- parameters ------------------------------------------------------------

    def param_int(self, name: str, default: int) -> int:
        """An integer scenario parameter."""
        raw = self.params.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise FakeConfigError(
                f"scenario {self.ctx.scenario}: {name}={raw!r} is not an integer"
            ) from None

    def param_float(self, name: str, default: float) -> float:
        """A non-negative number scenario parameter."""
        raw = self.params.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not value >= 0:
            raise FakeConfigError(
                f"scenario {self.ctx.scenario}: {name}={raw!r} is not a non-negative number"
            )
        return value

    # -- primitives (overridden by flavours) -----------------------------------

    @abc.abstractmethod
    def opening(self) -> Iterator[Step]:
        """Lines up to and including the one that names the session."""

    @abc.abstractmethod
    def work(self) -> Iterator[Step]:
        """The tool calls the prompt's directives ask for, performed for real."""

    @abc.abstractmethod
    def closing(self) -> Iterator[Step]:
        """The final reply and the terminal success event."""

    @abc.abstractmethod
    def progress(self, index: int, total: int) -> Iterator[Step]:
        """One visible unit of work (an assistant message or an item)."""

    @abc.abstractmethod
    def dangling_tool(self) -> Iterator[Step]:
        """A tool call whose result never comes (the process dies first)."""

    @abc.abstractmethod
    def huge(self, nbytes: int, events: int) -> Iterator[Step]:
        """A tool result line of about ``nbytes`` and ``events`` small lines."""

    @abc.abstractmethod
    def noise(self) -> Iterator[Step]:
        """Unknown but valid lines of this flavour (after the opening)."""

    def abort(self, signum: int) -> Iterable[Step]:
        """What a graceful stop prints (after SIGTERM or SIGINT)."""
        return ()

    @abc.abstractmethod
    def resume_missing(self) -> Iterator[Step]:
        """The output for a resume id that has no session."""

    @abc.abstractmethod
    def empty_prompt_error(self) -> CliError:
        """The real CLI's error for an empty prompt."""

    def hooks(self) -> Iterator[Step]:
        """Lines a start-up hook prints before the opening (Claude only)."""
        return iter(())

    @abc.abstractmethod
    def crash_trace(self) -> str:
        """What the CLI prints on stderr when it crashes."""

    def own_scenarios(self) -> dict[str, ScenarioFn]:
        """This flavour's scenarios beyond the shared ones."""
        return {}

    # -- scenario table --------------------------------------------------------

    def scenarios(self) -> dict[str, ScenarioFn]:
        """Every scenario this flavour plays, by name."""
        table: dict[str, ScenarioFn] = {
            "success": self.sc_success,
            "slow_start": self.sc_slow_start,
            "hang_before_init": self.sc_hang_before_init,
            "hang_after_init": self.sc_hang_after_init,
            "crash_before_init": self.sc_crash_before_init,
            "crash_mid_run": self.sc_crash_mid_run,
            "exit0_no_result": self.sc_exit0_no_result,
            "result_then_nonzero": self.sc_result_then_nonzero,
            "malformed_lines": self.sc_malformed_lines,
            "chunked_writes": self.sc_chunked_writes,
            "partial_line_stall": self.sc_partial_line_stall,
            "huge_output": self.sc_huge_output,
            "stderr_flood": self.sc_stderr_flood,
            "sigterm": self.sc_sigterm,
            "resume_missing": self.resume_missing,
        }
        table.update(self.own_scenarios())
        return table

    session_ref = ""
    """The session (thread) id, for script placeholders."""
    model_ref = ""
    """The model id, for script placeholders."""

    def script_steps(self) -> Iterator[Step]:
        """The steps of ``FAKE_AGENT_SCRIPT`` (loaded now, so a bad script
        fails before any output)."""
        from weft.agents.fake import script

        assert self.settings.script is not None
        loaded = script.load(self.settings.script)
        fixed = {
            "session_id": self.session_ref,
            "thread_id": self.session_ref,
            "cwd": self.ctx.cwd,
            "model": self.model_ref,
            "prompt": self.ctx.prompt,
        }
        return script.steps(loaded, script.Placeholders(self.ids, fixed))

    def steps(self) -> Iterator[Step]:
        """The steps of the script, or else of the chosen scenario."""
        if self.settings.script is not None:
            return self.script_steps()
        table = self.scenarios()
        name = self.ctx.scenario
        if name == "empty_prompt":
            raise self.empty_prompt_error()
        fn = table.get(name)
        if fn is None:
            known = ", ".join(sorted([*table, "empty_prompt"]))
            raise FakeConfigError(f"unknown scenario {name!r} for fake-{self.name}; known: {known}")
        return fn()

    # -- shared scenarios ------------------------------------------------------

    def sc_success(self) -> Iterator[Step]:
        """The normal run."""
        yield from self.opening()
        yield from self.work()
        yield from self.closing()

    def sc_slow_start(self) -> Iterator[Step]:
        """Silence for ``delay_ms`` (default ``FAKE_AGENT_START_DELAY_MS`` or
        5 s), start-up hook lines (``hooks=0`` drops them), then normal."""
        default = self.settings.start_delay_ms
        yield Sleep(self.param_float("delay_ms", 5000.0 if default is None else default))
        if self.param_int("hooks", 1):
            yield from self.hooks()
        yield from self.sc_success()

    def sc_hang_before_init(self) -> Iterator[Step]:
        """Nothing at all, forever."""
        yield Hang()

    def sc_hang_after_init(self) -> Iterator[Step]:
        """The opening, the work, one message, then silence forever."""
        yield from self.opening()
        yield from self.work()
        yield from self.progress(1, 1)
        yield Hang()

    def _crash(self) -> Iterator[Step]:
        yield Stderr(self.crash_trace())
        signame = self.params.get("signal")
        if signame:
            if not signame.startswith("SIG"):
                signame = "SIG" + signame.upper()
            yield Kill(signame)
        yield Exit(self.param_int("code", 1))

    def sc_crash_before_init(self) -> Iterator[Step]:
        """A stack trace on stderr and exit 1 (or ``signal=SIGSEGV|SIGKILL``)."""
        yield from self._crash()

    def sc_crash_mid_run(self) -> Iterator[Step]:
        """The opening, the work, a tool call with no result, then a crash."""
        yield from self.opening()
        yield from self.work()
        yield from self.dangling_tool()
        yield from self._crash()

    def sc_exit0_no_result(self) -> Iterator[Step]:
        """The opening and one message, then exit 0 without a terminal event."""
        yield from self.opening()
        yield from self.work()
        yield from self.progress(1, 1)
        yield Exit(0)

    def sc_result_then_nonzero(self) -> Iterator[Step]:
        """A complete successful stream, then a non-zero exit (``code``)."""
        yield from self.sc_success()
        yield Stderr("Error: write EPIPE\n    at afterWriteDispatched (node:internal/stream)\n")
        yield Exit(self.param_int("code", 2))

    def sc_malformed_lines(self) -> Iterator[Step]:
        """Noise a parser must survive, then a normal run."""
        yield Raw("[SandboxDebug] fake sandbox probe: ok")
        yield from self.opening()
        yield Raw("")
        yield Raw("   ")
        yield from self.noise()
        yield from self.work()
        yield from self.closing()

    def sc_chunked_writes(self) -> Iterator[Step]:
        """Every line in random 1-7 byte pieces, a 4-byte character split."""
        self.extra_text = f" {EMOJI} (sent in pieces)"
        yield Chunked(True)
        yield from self.sc_success()

    def sc_partial_line_stall(self) -> Iterator[Step]:
        """Half of the first line after the opening, ``stall_ms`` (3 s) of
        silence, then the rest."""
        yield from self.opening()
        yield StallNext(self.param_float("stall_ms", 3000.0))
        yield from self.progress(1, 1)
        yield from self.work()
        yield from self.closing()

    def sc_huge_output(self) -> Iterator[Step]:
        """A tool result of ``bytes`` (``FAKE_AGENT_HUGE_BYTES``, 16 MiB) and
        ``events`` (50 000) small lines, streamed with bounded memory."""
        yield from self.opening()
        nbytes = self.param_int("bytes", self.settings.huge_bytes)
        yield from self.huge(max(nbytes, 64), self.param_int("events", 50_000))
        yield from self.work()
        yield from self.closing()

    def sc_stderr_flood(self) -> Iterator[Step]:
        """``bytes`` (4 MiB) on stderr, interleaved with the stream, all of it
        before the terminal event."""
        total = self.param_int("bytes", 4 * 1024 * 1024)
        first = total // 2
        yield from self.opening()
        yield from flood(first)
        yield from self.work()
        yield from self.progress(1, 1)
        yield from flood(total - first)
        yield from self.closing()

    def sc_sigterm(self) -> Iterator[Step]:
        """A long run: ``lines`` (100) messages ``interval_ms`` (200) apart."""
        yield from self.opening()
        total = self.param_int("lines", 100)
        interval = self.param_float("interval_ms", 200.0)
        for index in range(1, total + 1):
            yield Sleep(interval)
            yield from self.progress(index, total)
        yield from self.work()
        yield from self.closing()


_FLOOD_LINE = "[debug] fake stderr flood: the reader must drain stderr while it reads stdout.\n"


def flood(total: int) -> Iterator[Step]:
    """``total`` bytes of stderr noise in 64 KiB writes."""
    block = (_FLOOD_LINE * (65536 // len(_FLOOD_LINE) + 1)).encode("ascii")
    block = block[:65536]
    written = 0
    while written < total:
        size = min(len(block), total - written)
        yield StderrBytes(block[:size])
        written += size


_FILLER_LINE = "fake output line {:07d}: lorem ipsum dolor sit amet, consectetur adipiscing elit\n"


def filler_text(nbytes: int) -> Iterator[str]:
    """``nbytes`` of plain tool output (ASCII lines), in pieces of about 64 KiB."""
    produced = 0
    number = 0
    while produced < nbytes:
        pieces: list[str] = []
        size = 0
        while size < 65536 and produced + size < nbytes:
            line = _FILLER_LINE.format(number)[: nbytes - produced - size]
            number += 1
            pieces.append(line)
            size += len(line)
        produced += size
        yield "".join(pieces)


def filler_json(nbytes: int) -> Iterator[bytes]:
    """Tool output that takes exactly ``nbytes`` once JSON-string-escaped,
    in pieces of about 64 KiB (never the whole text in memory)."""
    produced = 0
    number = 0
    while produced < nbytes:
        pieces: list[str] = []
        size = 0
        while size < 65536:
            line = json.dumps(_FILLER_LINE.format(number))[1:-1]
            if produced + size + len(line) > nbytes:
                break
            number += 1
            pieces.append(line)
            size += len(line)
        if not pieces:
            pieces.append(" " * (nbytes - produced))
            size = nbytes - produced
        produced += size
        yield "".join(pieces).encode("ascii")


def huge_line(obj: JsonObj, marker: str, line_bytes: int) -> Iterator[bytes]:
    """The JSON of ``obj``, ``line_bytes`` long (when it can be), where every
    string equal to ``marker`` becomes an equal share of filler; streamed."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    pieces = text.split(json.dumps(marker))
    count = len(pieces) - 1
    envelope = sum(len(p.encode("utf-8")) for p in pieces) + 2 * count
    # Equal shares, as a CLI that repeats one output twice would print.
    share = max(1, (line_bytes - envelope) // max(1, count))
    for index, piece in enumerate(pieces):
        yield piece.encode("utf-8")
        if index < count:
            yield b'"'
            yield from filler_json(share)
            yield b'"'
