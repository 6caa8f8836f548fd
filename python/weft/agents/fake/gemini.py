"""``fake-gemini``: ``gemini -p ... --output-format stream-json`` (§3, §7.4).

Why this module stays whole (~710 lines): it is one CLI's emulation. The
session files, the :class:`GeminiRun` steps, its few scenario rows and the
command line that picks the prompt, approval mode and resumed session read
best together, and none is used by another fake.

Events, each with ``type`` and an ISO ``timestamp``: ``init{session_id,
model}``, the user prompt echoed as ``message{role:user}``, assistant text
as 2-5 ``message{role:assistant, delta:true}`` chunks, ``tool_use`` /
``tool_result`` pairs, non-fatal ``error{severity}``, and
``result{status, stats}`` last. Exit codes: 0, 1 (API error), 42 (input
error), 53 (turn limit). ``-y`` prints the YOLO banner as a plain-text line
first.

Headless Gemini only offers the file-writing and shell tools when approval
is automatic: ``-y`` / ``--approval-mode yolo`` allows all, ``auto_edit``
allows ``write_file`` and ``replace``, ``--allowed-tools`` adds tools by
name. Other tool calls fail with ``tool_not_registered``, nothing written.

Sessions (best effort, like the real CLI's) are JSON files under
``$GEMINI_CLI_HOME/.gemini/tmp/<sha256 of the cwd>/chats/``
(``GEMINI_CLI_HOME`` defaults to the user's home, as in the real CLI);
``--resume latest|<index>|<session id>`` loads one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from weft.agents.fake import directives as dirs
from weft.agents.fake.argv import (
    FLAG,
    OPTIONAL,
    VALUE,
    VARIADIC,
    ArgvError,
    Option,
    Parsed,
    split_list,
)
from weft.agents.fake.argv import parse as parse_argv
from weft.agents.fake.common import (
    CliError,
    Clock,
    JsonObj,
    Settings,
    make_rng,
    quote,
    read_stdin,
    read_stdin_if_ready,
    split_words,
    stdin_is_tty,
    write_record,
)
from weft.agents.fake.directives import Op, ToolError
from weft.agents.fake.output import Chunks, Emit, Exit, Raw, Runner, Sleep, Stderr, Step, dumps
from weft.agents.fake.scenarios import (
    Context,
    Flavour,
    ScenarioFn,
    choose_scenario,
    huge_line,
    with_start_delay,
)

DEFAULT_MODEL = "gemini-2.5-pro"
CONTEXT_WINDOW = 1_048_576
"""The input token limit of the Gemini 2.5 models (what a too-large request is refused against)."""
YOLO_BANNER = "YOLO mode is enabled. All tool calls will be automatically approved."
EDIT_TOOLS = frozenset({"write_file", "replace"})
SHELL_TOOLS = frozenset({"run_shell_command"})

OPTIONS = (
    Option("prompt", VALUE, "-p", "--prompt"),
    Option("prompt_interactive", VALUE, "-i", "--prompt-interactive"),
    Option("model", VALUE, "-m", "--model"),
    Option(
        "output_format", VALUE, "-o", "--output-format", choices=("text", "json", "stream-json")
    ),
    Option("yolo", FLAG, "-y", "--yolo"),
    Option(
        "approval_mode", VALUE, "--approval-mode", choices=("default", "auto_edit", "yolo", "plan")
    ),
    Option("resume", OPTIONAL, "-r", "--resume"),
    Option("sandbox", FLAG, "-s", "--sandbox"),
    Option("debug", FLAG, "-d", "--debug"),
    Option("include_directories", VARIADIC, "--include-directories"),
    Option("allowed_tools", VARIADIC, "--allowed-tools"),
    Option("allowed_mcp", VARIADIC, "--allowed-mcp-server-names"),
    Option("extensions", VARIADIC, "-e", "--extensions"),
    Option("list_extensions", FLAG, "-l", "--list-extensions"),
    Option("list_sessions", FLAG, "--list-sessions"),
    Option("delete_session", VALUE, "--delete-session"),
    Option("screen_reader", FLAG, "--screen-reader"),
    Option("checkpointing", FLAG, "--checkpointing"),
    Option("session_summary", VALUE, "--session-summary"),
    Option("telemetry", FLAG, "--telemetry"),
    Option("proxy", VALUE, "--proxy"),
    Option("version", FLAG, "-v", "--version"),
    Option("help", FLAG, "-h", "--help"),
)

USAGE = """Usage: gemini [options] [query..]

fake-gemini: a stand-in for Gemini CLI (see docs/fake-agents.md).
"""


def gemini_home() -> str:
    """The ``.gemini`` directory: under ``$GEMINI_CLI_HOME`` when set (the real
    CLI's home override), else under the user's home."""
    home = os.environ.get("GEMINI_CLI_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".gemini")


def chats_dir(cwd: str) -> str:
    """Where sessions started in ``cwd`` are kept."""
    digest = hashlib.sha256(os.path.realpath(cwd).encode("utf-8")).hexdigest()
    return os.path.join(gemini_home(), "tmp", digest, "chats")


def list_sessions(cwd: str) -> list[tuple[str, JsonObj]]:
    """``(path, record)`` of the sessions of ``cwd``, oldest first."""
    folder = chats_dir(cwd)
    found: list[tuple[str, JsonObj]] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        if not (name.startswith("session-") and name.endswith(".json")):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            found.append((path, record))
    found.sort(key=lambda item: str(item[1].get("startTime", "")))
    return found


class GeminiRun(Flavour):
    """One fake Gemini CLI process."""

    name = "gemini"
    work_said = "used {count} tool(s)"
    resume_said = "Resuming the session"

    def __init__(
        self,
        ctx: Context,
        *,
        session_id: str,
        model: str,
        approval: str,
        allowed: list[str],
        record_path: str | None,
        record: JsonObj,
        previous_prompt: str | None,
    ) -> None:
        super().__init__(ctx)
        self.session_id = session_id
        self.model = model
        self.approval = approval
        self.allowed = allowed
        self.record_path = record_path
        self.record = record
        self.previous_prompt = previous_prompt
        self.tool_calls = 0
        self.tokens_in = 0
        self.tokens_cached = 0
        self.tokens_out = 0
        self.reply: list[str] = []
        self.session_ref = session_id
        self.model_ref = model

    def _event(self, kind: str, **fields: Any) -> JsonObj:
        event: JsonObj = {"type": kind, "timestamp": self.clock.iso()}
        event.update(fields)
        return event

    def _save(self) -> None:
        if self.record_path is None:
            return
        self.record["lastUpdated"] = self.clock.iso()
        os.makedirs(os.path.dirname(self.record_path), exist_ok=True)
        tmp = self.record_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.record, fh, ensure_ascii=False, indent=2)
        os.replace(tmp, self.record_path)

    def _remember(self, kind: str, content: str) -> None:
        messages = self.record.setdefault("messages", [])
        messages.append(
            {
                "id": self.ids.uuid4(),
                "timestamp": self.clock.iso(),
                "type": kind,
                "content": content,
            }
        )
        self._save()

    def opening(self) -> Iterator[Step]:
        """The banner (with ``-y``), ``init``, the echoed prompt."""
        if self.approval == "yolo":
            yield Raw(YOLO_BANNER)
        self.tokens_in = self.rng.randint(3000, 9000)
        self.tokens_cached = int(self.tokens_in * self.rng.uniform(0.0, 0.6))
        self._remember("user", self.ctx.prompt)
        yield Emit(self._event("init", session_id=self.session_id, model=self.model))
        yield Emit(self._event("message", role="user", content=self.ctx.prompt))

    def _spend(self, text: str = "") -> None:
        extra = self.rng.randint(300, 1500)
        self.tokens_in += extra
        self.tokens_cached += int(extra * self.rng.uniform(0.0, 0.8))
        self.tokens_out += len(text) // 4 + self.rng.randint(5, 40)

    def _tool_id(self, name: str) -> str:
        self.tool_calls += 1
        return f"{name}-{self.clock.now_ms()}-{self.tool_calls}"

    def _available(self, name: str) -> bool:
        if self.approval == "yolo":
            return True
        if any(rule == name or rule.startswith(name + "(") for rule in self.allowed):
            return True
        if name in EDIT_TOOLS:
            return self.approval == "auto_edit"
        return name not in SHELL_TOOLS

    def tool(self, name: str, parameters: JsonObj, perform: Callable[[], str]) -> Iterator[Step]:
        """A ``tool_use`` and, once the tool ran, its ``tool_result``."""
        tool_id = self._tool_id(name)
        yield Emit(self._event("tool_use", tool_name=name, tool_id=tool_id, parameters=parameters))
        self._spend(json.dumps(parameters))
        if not self._available(name):
            error = {
                "type": "tool_not_registered",
                "message": f'Tool "{name}" not found in registry. Tools must use the exact names '
                "that are registered.",
            }
            result = self._event("tool_result", tool_id=tool_id, status="error", error=error)
        else:
            try:
                output = perform()
            except ToolError as exc:
                kind = {
                    "missing": "file_not_found",
                    "no_match": "edit_no_occurrence_found",
                    "many_matches": "edit_expected_occurrence_mismatch",
                    "escape": "path_not_in_workspace",
                    "no_change": "edit_no_change",
                }.get(exc.kind, "tool_error")
                error = {"type": kind, "message": exc.message}
                result = self._event("tool_result", tool_id=tool_id, status="error", error=error)
            else:
                result = self._event(
                    "tool_result", tool_id=tool_id, status="success", output=output
                )
        self.outcomes.append(result["status"] == "success")
        yield Emit(result)

    def _op(self, op: Op) -> Iterator[Step]:
        ws = self.ctx.workspace
        path = op.path or ""
        shown = ws.display(path)
        if op.verb in ("write", "append"):
            content = op.text
            if op.verb == "append":
                try:
                    full = ws.resolve(path)
                    content = (ws.read(path)[1] if os.path.exists(full) else "") + op.text
                except ToolError:
                    pass

            def write() -> str:
                original = ws.write(path, content)[1]
                if original is None:
                    return f"Successfully created and wrote to new file: {shown}."
                return f"Successfully overwrote file: {shown}."

            yield from self.tool("write_file", {"file_path": shown, "content": content}, write)
        elif op.verb == "edit":

            def replace() -> str:
                original = ws.read(path)[1]
                ws.edit(path, op.old, op.new, op.replace_all)
                count = original.count(op.old) if op.replace_all else 1
                return f"Successfully modified file: {shown} ({count} replacements)."

            parameters = {"file_path": shown, "old_string": op.old, "new_string": op.new}
            yield from self.tool("replace", parameters, replace)
        elif op.verb == "read":
            yield from self.tool("read_file", {"absolute_path": shown}, lambda: ws.read(path)[1])
        elif op.verb == "delete":

            def delete() -> str:
                ws.delete(path)
                return ""

            yield from self.tool("run_shell_command", {"command": f"rm {path}"}, delete)
        else:
            command = op.text.strip()

            def shell() -> str:
                out, err, code, _timed_out = ws.bash(command, 120.0)
                if code != 0:
                    raise ToolError(
                        "shell", f"Command exited with code {code}: {(out + err).strip()}"
                    )
                return out + err

            yield from self.tool("run_shell_command", {"command": command}, shell)

    def work(self) -> Iterator[Step]:
        """Directives as tool_use / tool_result pairs."""
        for op in self.ctx.directives.ops:
            if op.verb == "sleep":
                yield Sleep(op.ms)
            elif op.is_tool:
                yield from self._op(op)

    def say(self, text: str) -> Iterator[Step]:
        """Assistant text as 2-5 delta chunks."""
        self._spend(text)
        self.reply.append(text)
        for piece in split_words(text, self.rng, self.rng.randint(2, 5)):
            yield Emit(self._event("message", role="assistant", content=piece, delta=True))

    def stats(self) -> JsonObj:
        """``result.stats``."""
        return {
            "total_tokens": self.tokens_in + self.tokens_out,
            "input_tokens": self.tokens_in,
            "output_tokens": self.tokens_out,
            "cached": self.tokens_cached,
            "input": self.tokens_in - self.tokens_cached,
            "duration_ms": self.clock.elapsed_ms(),
            "tool_calls": len(self.outcomes),
        }

    def closing(self) -> Iterator[Step]:
        """The reply and a success result."""
        yield from self.say(self.final_text())
        self._remember("gemini", "".join(self.reply))
        yield Emit(self._event("result", status="success", stats=self.stats()))

    def _fail(self, error_type: str, message: str, code: int) -> Iterator[Step]:
        yield Emit(
            self._event(
                "result",
                status="error",
                error={"type": error_type, "message": message},
                stats=self.stats(),
            )
        )
        yield Exit(code)

    def progress(self, index: int, total: int) -> Iterator[Step]:
        """A short assistant delta."""
        text = "Let me look into this. " if total == 1 else f"Step {index} of {total}. "
        self._spend(text)
        self.reply.append(text)
        yield Emit(self._event("message", role="assistant", content=text, delta=True))

    def dangling_tool(self) -> Iterator[Step]:
        """A tool_use with no result."""
        tool_id = self._tool_id("run_shell_command")
        yield Emit(
            self._event(
                "tool_use",
                tool_name="run_shell_command",
                tool_id=tool_id,
                parameters={"command": "npm test"},
            )
        )

    def crash_trace(self) -> str:
        """A Node.js crash."""
        return (
            "file:///usr/local/lib/node_modules/@google/gemini-cli/dist/index.js:2\n"
            "TypeError: Cannot read properties of undefined (reading 'parts')\n"
            "    at Turn.run (file:///usr/local/lib/node_modules/@google/gemini-cli-core/"
            "dist/src/core/turn.js:212:41)\n\nNode.js v20.11.1\n"
        )

    def noise(self) -> Iterator[Step]:
        """A CRLF line, a truncated line, an unknown type, a warning."""
        warning = self._event(
            "error", severity="warning", message="Loop detection is checking this turn"
        )
        yield Raw(dumps(warning).decode("utf-8") + "\r")
        yield Raw('{"type":"tool_res')
        yield Emit({"type": "future_event", "timestamp": self.clock.iso(), "x": 1})

    def huge(self, nbytes: int, events: int) -> Iterator[Step]:
        """A shell tool with ``nbytes`` of output and ``events`` text deltas."""
        tool_id = self._tool_id("run_shell_command")
        yield Emit(
            self._event(
                "tool_use",
                tool_name="run_shell_command",
                tool_id=tool_id,
                parameters={"command": "cat build.log"},
            )
        )
        marker = "\x00FAKE-HUGE\x00"
        result = self._event("tool_result", tool_id=tool_id, status="success", output=marker)
        yield Chunks(huge_line(result, marker, nbytes))
        self.outcomes.append(True)
        for number in range(events):
            piece = f"w{number} "
            self.reply.append(piece)
            yield Emit(
                self._event("message", role="assistant", content=piece, delta=True), delay=False
            )
        self._spend("x" * events)

    def abort(self, signum: int) -> Iterable[Step]:
        """A cancelled run."""
        yield Emit(
            self._event(
                "result",
                status="error",
                error={"type": "FatalCancellationError", "message": "Operation cancelled."},
                stats=self.stats(),
            )
        )

    def resume_missing(self) -> Iterator[Step]:
        """``--resume`` with an unknown session."""
        yield Stderr(
            f'Error resuming session: Invalid session identifier "{self.session_id}". '
            "Use --list-sessions to see available sessions.\n"
        )
        yield Exit(42)

    def empty_prompt_error(self) -> CliError:
        """Gemini's message when there is no input."""
        return CliError(
            "No input provided via stdin. Input can be provided by piping data into gemini "
            "or using the --prompt option.",
            42,
        )

    # -- Gemini-only scenarios -------------------------------------------------

    def own_scenarios(self) -> dict[str, ScenarioFn]:
        """§7.4's Gemini rows."""
        table: dict[str, ScenarioFn] = {
            "tool": self.sc_tool,
            "tool_error": self.sc_tool_error,
            "turn_limit": self.sc_turn_limit,
            "bad_input": self.sc_bad_input,
            "api_error": self.sc_api_error,
            "warning": self.sc_warning,
            "resume": self.sc_success,
            "context_full": self.sc_context_full,
        }
        return table

    def _list_directory(self) -> Iterator[Step]:
        listing = self.ctx.workspace.listing()
        yield from self.tool(
            "list_directory",
            {"path": self.ctx.cwd},
            lambda: f"Listed {len(listing)} item(s).",
        )

    def sc_tool(self) -> Iterator[Step]:
        """A ``list_directory`` tool call and its result."""
        yield from self.opening()
        yield from self.say("I'll look at the directory first.")
        yield from self._list_directory()
        yield from self.work()
        yield from self.closing()

    def sc_tool_error(self) -> Iterator[Step]:
        """A ``read_file`` of a missing file: ``status:error`` with ``error{type,message}``."""
        yield from self.opening()
        missing = os.path.join(self.ctx.cwd, "__fake_missing__", "settings.json")

        def fail() -> str:
            raise ToolError("missing", f"File not found: {missing}")

        yield from self.tool("read_file", {"absolute_path": missing}, fail)
        yield from self.work()
        yield from self.closing()

    def sc_turn_limit(self) -> Iterator[Step]:
        """Tool calls, then ``MaxSessionTurnsError`` and exit 53."""
        yield from self.opening()
        yield from self.work()
        for _ in range(self.param_int("turns", 2)):
            yield from self._list_directory()
        yield from self._fail(
            "MaxSessionTurnsError",
            "Reached max session turns for this session. Increase the number of turns by "
            "specifying maxSessionTurns in settings.json.",
            53,
        )

    def sc_bad_input(self) -> Iterator[Step]:
        """An input error: stderr only, exit 42."""
        yield Stderr("Error: the prompt could not be processed: invalid input.\n")
        yield Exit(42)

    def sc_api_error(self) -> Iterator[Step]:
        """An API failure: a result with status error, exit 1."""
        yield from self.opening()
        yield from self.work()
        status = self.param_int("status", 429)
        message = self.params.get("message") or (
            f"[API Error: got status {status}. Resource has been exhausted (e.g. check quota).]"
        )
        yield from self._fail("ApiError", message, 1)

    def sc_context_full(self) -> Iterator[Step]:
        """The session's context is full at its ``after``-th prompt (3; earlier
        prompts of a resumed session count): before that a normal turn; then
        what the Gemini CLI prints when the API refuses the request as too
        large (400 INVALID_ARGUMENT): a result with status error, the API's
        "input token count ... exceeds the maximum" message, no work, exit 1."""
        earlier = sum(1 for m in self.record.get("messages", []) if m.get("type") == "user")
        if earlier + 1 < max(1, self.param_int("after", 3)):
            yield from self.sc_success()
            return
        yield from self.opening()
        # The refused request is not billed: no API response, no tokens in the stats.
        self.tokens_in = self.tokens_cached = self.tokens_out = 0
        limit = CONTEXT_WINDOW
        wanted = limit + self.rng.randint(1, 40_000)
        yield from self._fail(
            "ApiError",
            f"[API Error: The input token count ({wanted}) exceeds the maximum number of "
            f"tokens allowed ({limit}).]",
            1,
        )

    def sc_warning(self) -> Iterator[Step]:
        """A non-fatal ``error`` event (severity warning), then success."""
        yield from self.opening()
        yield Emit(
            self._event(
                "error",
                severity="warning",
                message="Loop detected, stopping the repeated tool call.",
            )
        )
        yield from self.work()
        yield from self.closing()


def main(argv: list[str], settings: Settings) -> int:
    """Run ``fake-gemini`` with ``argv`` (without the program name)."""
    parsed = _parse_command(argv, settings)
    if parsed is None:
        return 0
    cwd = os.getcwd()
    if parsed.flag("list_sessions"):
        _print_sessions(cwd)
        return 0
    prompt = _read_prompt(argv, parsed, settings)

    directives = dirs.parse(prompt)
    scenario, params = choose_scenario(directives, settings)
    rng = make_rng(settings, "gemini", argv, prompt)
    clock = Clock(virtual=settings.seed is not None)
    output_format = parsed.one("output_format") or "text"
    capture: list[JsonObj] | None = None if output_format == "stream-json" else []
    runner = Runner(settings, clock, rng, capture=capture)
    runner.install_signals()
    ctx = Context(
        flavour="gemini",
        settings=settings,
        argv=argv,
        rng=rng,
        clock=clock,
        runner=runner,
        cwd=cwd,
        prompt=prompt,
        directives=directives,
        scenario=scenario,
        params=params,
    )
    approval = "yolo" if parsed.flag("yolo") else (parsed.one("approval_mode") or "default")
    model = parsed.one("model") or os.environ.get("GEMINI_MODEL") or DEFAULT_MODEL
    session_id, record_path, session, previous_prompt, missing = _open_session(ctx, parsed)
    run = GeminiRun(
        ctx,
        session_id=session_id,
        model=model,
        approval=approval,
        allowed=split_list(parsed.many("allowed_tools")),
        record_path=record_path,
        record=session,
        previous_prompt=previous_prompt,
    )
    if not prompt.strip() and scenario != "bad_input":
        raise run.empty_prompt_error()
    steps = run.resume_missing() if missing and settings.script is None else run.steps()
    code = runner.run(with_start_delay(steps, settings, scenario), run.abort)
    if capture is not None:
        _print_captured(capture, run, output_format)
    return code


def _parse_command(argv: list[str], settings: Settings) -> Parsed | None:
    """Parse and check the flags; None once help or version is printed."""
    try:
        parsed = parse_argv(argv, OPTIONS)
    except ArgvError as exc:
        raise CliError(str(exc).replace("error: option", "Error: option")) from None
    if parsed.flag("version"):
        sys.stdout.write(settings.version + "\n")
        return None
    if parsed.flag("help"):
        sys.stdout.write(USAGE)
        return None
    if parsed.unknown and settings.strict_flags:
        raise CliError(f"Unknown argument: {parsed.unknown[0].lstrip('-')}")
    if parsed.flag("yolo") and parsed.given("approval_mode"):
        raise CliError(
            "Cannot use both --yolo (-y) and --approval-mode together. "
            "Use --approval-mode=yolo instead."
        )
    return parsed


def _print_sessions(cwd: str) -> None:
    """``--list-sessions``: one line per recorded session, oldest first."""
    for index, (_path, record) in enumerate(list_sessions(cwd), 1):
        first = next(
            (m.get("content", "") for m in record.get("messages", []) if m.get("type") == "user"),
            "",
        )
        sys.stdout.write(f"  {index}. {quote(str(first), 60)} [{record.get('sessionId')}]\n")


def _read_prompt(argv: list[str], parsed: Parsed, settings: Settings) -> str:
    """The prompt from ``-p``, the positionals and/or stdin; records the invocation."""
    positional = " ".join(parsed.positionals)
    prompt_flag = parsed.one("prompt")
    if prompt_flag is not None and positional:
        raise CliError(
            "Cannot use both a positional prompt and the --prompt (-p) flag together", 42
        )
    stdin_text: str | None = None
    if prompt_flag or positional:
        prompt = prompt_flag or positional
        stdin_text = read_stdin_if_ready(settings.stdin_wait_ms)
        if stdin_text and stdin_text.strip():
            prompt = f"{stdin_text.rstrip()}\n\n{prompt}"
    elif not stdin_is_tty():
        stdin_text = read_stdin()
        prompt = stdin_text
    else:
        prompt = ""
    write_record(settings, "gemini", argv, stdin_text, {"prompt": prompt})
    return prompt


def _open_session(
    ctx: Context, parsed: Parsed
) -> tuple[str, str | None, JsonObj, str | None, bool]:
    """``(session_id, record_path, record, previous_prompt, missing)``: the session
    ``--resume`` names (latest, an index or an id), or a new one."""
    cwd, clock = ctx.cwd, ctx.clock
    missing = False
    previous_prompt: str | None = None
    record_path: str | None
    session: JsonObj
    if parsed.given("resume"):
        wanted = parsed.one("resume") or "latest"
        sessions = list_sessions(cwd)
        chosen: tuple[str, JsonObj] | None = None
        if wanted == "latest":
            chosen = sessions[-1] if sessions else None
        elif wanted.isdigit():
            index = int(wanted)
            chosen = sessions[index - 1] if 0 < index <= len(sessions) else None
        else:
            chosen = next((s for s in sessions if s[1].get("sessionId") == wanted), None)
        if chosen is None:
            missing = True
            session_id, record_path, session = wanted, None, {}
        else:
            record_path, session = chosen
            session_id = str(session.get("sessionId"))
            users = [m for m in session.get("messages", []) if m.get("type") == "user"]
            previous_prompt = str(users[-1].get("content", "")) if users else None
    else:
        session_id = ctx.ids.uuid4()
        stamp = clock.stamp("%Y-%m-%dT%H-%M")
        record_path = os.path.join(chats_dir(cwd), f"session-{stamp}-{session_id[:8]}.json")
        session = {
            "sessionId": session_id,
            "projectHash": os.path.basename(os.path.dirname(chats_dir(cwd))),
            "startTime": clock.iso(),
            "lastUpdated": clock.iso(),
            "messages": [],
        }
    return session_id, record_path, session, previous_prompt, missing


def _print_captured(events: list[JsonObj], run: GeminiRun, output_format: str) -> None:
    results = [e for e in events if e.get("type") == "result"]
    text = "".join(
        str(e.get("content", ""))
        for e in events
        if e.get("type") == "message" and e.get("role") == "assistant"
    )
    if output_format == "json":
        doc: JsonObj = {"session_id": run.session_id, "response": text}
        if results:
            doc["stats"] = results[-1].get("stats")
            if results[-1].get("status") == "error":
                doc["error"] = results[-1].get("error")
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
    elif results:
        if results[-1].get("status") == "error":
            error = results[-1].get("error") or {}
            sys.stderr.write(f"Error: {error.get('message', 'unknown error')}\n")
        else:
            sys.stdout.write(text + "\n")
    sys.stdout.flush()
