"""``fake-codex``: ``codex exec --json`` (reference §2, §7.4).

Why this module stays whole (~870 lines): it is one CLI's emulation. The
rollout files, the :class:`CodexRun` steps, its few scenario rows and the
``codex exec`` command line that picks the sandbox and the resumed thread read
best together, and none is used by another fake.

Events: ``thread.started{thread_id}``, ``turn.started``, ``item.started`` /
``item.updated`` / ``item.completed`` with ``item_<n>`` ids, then
``turn.completed{usage}`` or ``error`` + ``turn.failed``. ``usage`` is the
thread total (it includes earlier turns after ``exec resume``);
``cached_input_tokens`` is a subset of ``input_tokens``. Sessions are
rollout files under ``$CODEX_HOME/sessions/YYYY/MM/DD/`` so ``exec resume
<id>`` finds them, and fails when the id is unknown.

File directives apply only when the sandbox allows writes
(``--sandbox workspace-write``, ``--full-auto``, ``--yolo`` /
``--dangerously-bypass-approvals-and-sandbox``); under the default
read-only sandbox the file_change item fails and nothing is written.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator

from weft.agents.fake import directives as dirs
from weft.agents.fake.argv import FLAG, VALUE, VARIADIC, ArgvError, Option, Parsed
from weft.agents.fake.argv import parse as parse_argv
from weft.agents.fake.common import (
    CliError,
    Clock,
    FakeConfigError,
    JsonObj,
    Settings,
    in_git_repo,
    make_rng,
    read_stdin,
    read_stdin_if_ready,
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

SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
DEFAULT_MODEL = "gpt-5-codex"

OPTIONS = (
    Option("json", FLAG, "--json", "--experimental-json"),
    Option("model", VALUE, "-m", "--model"),
    Option("sandbox", VALUE, "-s", "--sandbox", choices=SANDBOXES),
    Option(
        "approval",
        VALUE,
        "-a",
        "--ask-for-approval",
        choices=("untrusted", "on-failure", "on-request", "never"),
    ),
    Option("cd", VALUE, "-C", "--cd"),
    Option("config", VALUE, "-c", "--config", repeat=True),
    Option("profile", VALUE, "-p", "--profile"),
    Option("yolo", FLAG, "--dangerously-bypass-approvals-and-sandbox", "--yolo"),
    Option("full_auto", FLAG, "--full-auto"),
    Option("oss", FLAG, "--oss"),
    Option("search", FLAG, "--search"),
    Option("image", VARIADIC, "-i", "--image"),
    Option("skip_git", FLAG, "--skip-git-repo-check"),
    Option("last_message", VALUE, "-o", "--output-last-message"),
    Option("output_schema", VALUE, "--output-schema"),
    Option("ephemeral", FLAG, "--ephemeral"),
    Option("color", VALUE, "--color", choices=("always", "never", "auto")),
    Option("include_plan", FLAG, "--include-plan-tool"),
    Option("last", FLAG, "--last"),
    Option("add_dir", VALUE, "--add-dir", repeat=True),
    Option("enable", VALUE, "--enable", repeat=True),
    Option("disable", VALUE, "--disable", repeat=True),
    Option("version", FLAG, "-V", "--version"),
    Option("help", FLAG, "-h", "--help"),
)

USAGE = """Usage: codex exec [OPTIONS] [PROMPT]
       codex exec [OPTIONS] resume [SESSION_ID] [PROMPT]

fake-codex: a stand-in for `codex exec` (see docs/fake-agents.md).
"""


def codex_home() -> str:
    """``$CODEX_HOME`` or ``~/.codex``."""
    return os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")


def find_rollout(thread_id: str) -> str | None:
    """The rollout file of ``thread_id``, if any."""
    root = os.path.join(codex_home(), "sessions")
    suffix = f"-{thread_id}.jsonl"
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith("rollout-") and name.endswith(suffix):
                return os.path.join(folder, name)
    return None


def latest_rollout(cwd: str) -> str | None:
    """The most recent rollout file of a session started in ``cwd``."""
    best: tuple[float, str] | None = None
    root = os.path.join(codex_home(), "sessions")
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if not (name.startswith("rollout-") and name.endswith(".jsonl")):
                continue
            path = os.path.join(folder, name)
            meta = _read_rollout(path)[0]
            if meta.get("cwd") != cwd:
                continue
            mtime = os.path.getmtime(path)
            if best is None or mtime > best[0]:
                best = (mtime, path)
    return best[1] if best else None


def _read_rollout(path: str) -> tuple[JsonObj, list[JsonObj]]:
    meta: JsonObj = {}
    rows: list[JsonObj] = []
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                try:
                    row = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(row, dict):
                    continue
                rows.append(row)
                payload = row.get("payload")
                if row.get("type") == "session_meta" and isinstance(payload, dict):
                    meta = payload
    except OSError:
        pass
    return meta, rows


class Rollout:
    """Appends rows to a session's rollout file (or nowhere)."""

    def __init__(self, path: str | None, clock: Clock) -> None:
        self.path = path
        self.clock = clock

    def add(self, kind: str, payload: JsonObj) -> None:
        """Append one ``{timestamp, type, payload}`` row."""
        if self.path is None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        row = {"timestamp": self.clock.iso(), "type": kind, "payload": payload}
        with open(self.path, "ab") as fh:
            fh.write(dumps(row) + b"\n")


class Totals:
    """Token usage of a thread."""

    def __init__(self, input_tokens: int = 0, cached: int = 0, output: int = 0) -> None:
        self.input = input_tokens
        self.cached = cached
        self.output = output

    def obj(self) -> JsonObj:
        """The ``usage`` object of ``turn.completed``."""
        return {
            "input_tokens": self.input,
            "cached_input_tokens": self.cached,
            "output_tokens": self.output,
        }


class CodexRun(Flavour):
    """One fake ``codex exec`` process."""

    name = "codex"
    work_said = "ran {count} step(s)"
    resume_said = "Continuing the thread"

    def __init__(
        self,
        ctx: Context,
        *,
        thread_id: str,
        model: str,
        sandbox: str,
        rollout: Rollout,
        totals: Totals,
        previous_prompt: str | None,
    ) -> None:
        super().__init__(ctx)
        self.thread_id = thread_id
        self.model = model
        self.sandbox = sandbox
        self.rollout = rollout
        self.totals = totals
        self.previous_prompt = previous_prompt
        self.prior_prompts = 0
        """User prompts of the resumed thread before this process's (``context_full``)."""
        self.items = 0
        self.turn_tokens = Totals()
        self.legacy = False
        self.last_message: str | None = None
        self.session_ref = thread_id
        self.model_ref = model

    # -- items -----------------------------------------------------------------

    def _item(self, kind: str, **fields: object) -> JsonObj:
        item: JsonObj = {"id": f"item_{self.items}"}
        self.items += 1
        if self.legacy:
            item["item_type"] = "assistant_message" if kind == "agent_message" else kind
        else:
            item["type"] = kind
        item.update(fields)
        return item

    def _spend(self, extra_output: int = 0) -> None:
        tokens = self.rng.randint(400, 1600)
        self.turn_tokens.input += tokens
        self.turn_tokens.cached += int(tokens * self.rng.uniform(0.6, 0.95))
        self.turn_tokens.output += self.rng.randint(20, 120) + extra_output

    def opening(self) -> Iterator[Step]:
        """``thread.started``, ``turn.started``, a reasoning item."""
        self.rollout.add(
            "turn_context",
            {
                "cwd": self.ctx.cwd,
                "approval_policy": "never",
                "sandbox_policy": {"mode": self.sandbox},
                "model": self.model,
                "summary": "auto",
            },
        )
        self.rollout.add(
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": self.ctx.prompt}],
            },
        )
        self.rollout.add(
            "event_msg", {"type": "user_message", "message": self.ctx.prompt, "images": []}
        )
        base = self.rng.randint(7000, 16000)
        self.turn_tokens.input += base
        self.turn_tokens.cached += int(base * self.rng.uniform(0.75, 0.97))
        yield Emit({"type": "thread.started", "thread_id": self.thread_id})
        yield Emit({"type": "turn.started"})
        yield Emit(
            {
                "type": "item.completed",
                "item": self._item("reasoning", text="**Reading the request**"),
            }
        )

    def _writable(self) -> bool:
        return self.sandbox != "read-only"

    def _file_change(self, op: Op) -> Iterator[Step]:
        ws = self.ctx.workspace
        path = op.path or ""
        shown = ws.display(path)
        kind = {"write": "add", "append": "update", "edit": "update", "delete": "delete"}[op.verb]
        status = "completed"
        try:
            if not self._writable():
                ws.resolve(path)
                raise ToolError("sandbox", "writing is blocked by the read-only sandbox")
            if op.verb == "write":
                existed = os.path.exists(ws.resolve(path))
                ws.write(path, op.text)
                kind = "update" if existed else "add"
            elif op.verb == "append":
                original = ws.append(path, op.text)[1]
                kind = "add" if original is None else "update"
            elif op.verb == "edit":
                ws.edit(path, op.old, op.new, op.replace_all)
            else:
                ws.delete(path)
        except ToolError:
            status = "failed"
        self.outcomes.append(status == "completed")
        self._spend()
        self.rollout.add(
            "event_msg",
            {"type": "patch_apply_end", "success": status == "completed", "path": shown},
        )
        change = {"path": shown, "kind": kind}
        # 0.163.0 sends item.started (in_progress), then item.completed.
        item = self._item("file_change", changes=[change], status="in_progress")
        yield Emit({"type": "item.started", "item": item})
        yield Emit({"type": "item.completed", "item": dict(item, status=status)})

    def _command(self, command: str, run: bool) -> Iterator[Step]:
        shown = f"/bin/bash -lc {_sh_quote(command)}"
        item = self._item(
            "command_execution",
            command=shown,
            aggregated_output="",
            exit_code=None,
            status="in_progress",
        )
        yield Emit({"type": "item.started", "item": item})
        if run:
            timeout = 120.0
            out, err, code, _timed_out = self.ctx.workspace.bash(command, timeout)
            output = out + err
        else:
            output, code = "", 1
        done = dict(
            item,
            aggregated_output=output,
            exit_code=code,
            status="completed" if code == 0 else "failed",
        )
        self.outcomes.append(code == 0)
        self._spend()
        yield Emit({"type": "item.completed", "item": done})

    def _read(self, path: str) -> Iterator[Step]:
        shown = f"bash -lc {_sh_quote('cat ' + path)}"
        item = self._item(
            "command_execution",
            command=shown,
            aggregated_output="",
            exit_code=None,
            status="in_progress",
        )
        yield Emit({"type": "item.started", "item": item})
        try:
            output, code = self.ctx.workspace.read(path)[1], 0
        except ToolError:
            output, code = f"cat: {path}: No such file or directory\n", 1
        self.outcomes.append(code == 0)
        self._spend()
        done = dict(
            item,
            aggregated_output=output,
            exit_code=code,
            status="completed" if code == 0 else "failed",
        )
        yield Emit({"type": "item.completed", "item": done})

    def work(self) -> Iterator[Step]:
        """Directives as file_change and command_execution items."""
        for op in self.ctx.directives.ops:
            if op.verb == "sleep":
                yield Sleep(op.ms)
            elif op.verb in ("write", "append", "edit", "delete"):
                yield from self._file_change(op)
            elif op.verb == "bash":
                # A read-only sandbox cannot promise the command only reads,
                # so the fake declines to run it there.
                yield from self._command(op.text.strip(), self._writable())
            elif op.verb == "read":
                yield from self._read(op.path or "")

    def _thread_usage(self) -> Totals:
        return Totals(
            self.totals.input + self.turn_tokens.input,
            self.totals.cached + self.turn_tokens.cached,
            self.totals.output + self.turn_tokens.output,
        )

    def _message(self, text: str) -> Emit:
        self.last_message = text
        self.turn_tokens.output += len(text) // 4 + self.rng.randint(10, 60)
        self.rollout.add(
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            },
        )
        return Emit({"type": "item.completed", "item": self._item("agent_message", text=text)})

    def _completed(self) -> Emit:
        usage = self._thread_usage()
        self.rollout.add(
            "event_msg",
            {
                "type": "token_count",
                "info": {
                    "total_token_usage": dict(
                        usage.obj(),
                        reasoning_output_tokens=0,
                        total_tokens=usage.input + usage.output,
                    ),
                    "last_token_usage": dict(
                        self.turn_tokens.obj(),
                        reasoning_output_tokens=0,
                        total_tokens=self.turn_tokens.input + self.turn_tokens.output,
                    ),
                },
            },
        )
        return Emit({"type": "turn.completed", "usage": usage.obj()})

    def closing(self) -> Iterator[Step]:
        """The agent message and ``turn.completed``."""
        yield self._message(self.final_text())
        yield self._completed()

    def progress(self, index: int, total: int) -> Iterator[Step]:
        """A reasoning item."""
        text = "**Looking into it**" if total == 1 else f"**Step {index} of {total}**"
        self._spend()
        yield Emit({"type": "item.completed", "item": self._item("reasoning", text=text)})

    def dangling_tool(self) -> Iterator[Step]:
        """A command that starts and never completes."""
        item = self._item(
            "command_execution",
            command="bash -lc 'npm test'",
            aggregated_output="",
            exit_code=None,
            status="in_progress",
        )
        yield Emit({"type": "item.started", "item": item})

    def crash_trace(self) -> str:
        """A Rust panic."""
        return (
            "thread 'main' panicked at codex-rs/exec/src/lib.rs:318:14:\n"
            "called `Result::unwrap()` on an `Err` value: Os { code: 32, kind: BrokenPipe }\n"
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
        )

    def noise(self) -> Iterator[Step]:
        """A CRLF line, a truncated line, unknown event and item types."""
        item = self._item("reasoning", text="**Checking the workspace**")
        yield Raw(dumps({"type": "item.completed", "item": item}).decode("utf-8") + "\r")
        yield Raw('{"type":"item.comp')
        yield Emit({"type": "future_event", "x": 1})
        yield Emit({"type": "item.completed", "item": self._item("future_item", data={"x": 1})})

    def huge(self, nbytes: int, events: int) -> Iterator[Step]:
        """A command whose output is ``nbytes``, and ``events`` todo updates."""
        command = "bash -lc 'cat build.log'"
        item = self._item(
            "command_execution",
            command=command,
            aggregated_output="",
            exit_code=None,
            status="in_progress",
        )
        yield Emit({"type": "item.started", "item": item})
        marker = "\x00FAKE-HUGE\x00"
        done = {
            "type": "item.completed",
            "item": dict(item, aggregated_output=marker, exit_code=0, status="completed"),
        }
        yield Chunks(huge_line(done, marker, nbytes))
        if events > 0:
            steps = [
                {"text": "Read the log", "completed": True},
                {"text": "Summarise", "completed": False},
            ]
            todo = self._item("todo_list", items=steps)
            yield Emit({"type": "item.started", "item": todo})
            for number in range(events):
                steps[1]["completed"] = number % 2 == 1
                yield Emit({"type": "item.updated", "item": dict(todo, items=steps)}, delay=False)
            yield Emit({"type": "item.completed", "item": dict(todo, items=steps)})

    def abort(self, signum: int) -> Iterable[Step]:
        """An interrupted turn."""
        message = "Conversation interrupted"
        yield Emit({"type": "error", "message": message})
        yield Emit({"type": "turn.failed", "error": {"message": message}})

    def resume_missing(self) -> Iterator[Step]:
        """``exec resume`` with an id that has no rollout."""
        yield Stderr(
            "Error: thread/resume: thread/resume failed: no rollout found for thread id "
            f"{self.thread_id} (code -32600)\n"
        )
        yield Exit(1)

    def empty_prompt_error(self) -> CliError:
        """Codex's message for an empty prompt on stdin."""
        return CliError("No prompt provided via stdin.")

    # -- Codex-only scenarios --------------------------------------------------

    def own_scenarios(self) -> dict[str, ScenarioFn]:
        """§7.4's Codex rows."""
        return {
            "command": self.sc_command,
            "file_change": self.sc_file_change,
            "turn_failed": self.sc_turn_failed,
            "completed_then_nonzero": self.sc_completed_then_nonzero,
            "resume": self.sc_success,
            "legacy_item_type": self.sc_legacy_item_type,
            "context_full": self.sc_context_full,
        }

    def sc_command(self) -> Iterator[Step]:
        """A command_execution (``ls``, simulated) started and completed."""
        yield from self.opening()
        listing = "".join(name + "\n" for name in self.ctx.workspace.listing())
        item = self._item(
            "command_execution",
            command="bash -lc ls",
            aggregated_output="",
            exit_code=None,
            status="in_progress",
        )
        yield Emit({"type": "item.started", "item": item})
        self._spend()
        yield Emit(
            {
                "type": "item.completed",
                "item": dict(item, aggregated_output=listing, exit_code=0, status="completed"),
            }
        )
        yield from self.work()
        yield from self.closing()

    def sc_file_change(self) -> Iterator[Step]:
        """A file_change item: writes ``CHANGES.md`` (unless directives do the work)."""
        yield from self.opening()
        if not any(op.is_tool for op in self.ctx.directives.ops):
            yield from self._file_change(
                Op("append", path="CHANGES.md", text="- fake-codex was here\n")
            )
        yield from self.work()
        yield from self.closing()

    def sc_turn_failed(self) -> Iterator[Step]:
        """``error`` and ``turn.failed``; exit 1, or 0 with ``variant=exit0``."""
        yield from self.opening()
        yield from self.work()
        message = (
            self.params.get("message") or "exceeded retry limit, last status: 429 Too Many Requests"
        )
        yield Emit({"type": "error", "message": message})
        yield Emit({"type": "turn.failed", "error": {"message": message}})
        yield Exit(0 if self.params.get("variant") == "exit0" else 1)

    def sc_context_full(self) -> Iterator[Step]:
        """The thread's context is full at its ``after``-th prompt (3; earlier
        prompts of a resumed thread count): before that a normal turn; then what
        0.163.0 prints for ``context_length_exceeded``: ``error`` and
        ``turn.failed`` with "Codex ran out of room...", no work, exit 1."""
        if self.prior_prompts + 1 < max(1, self.param_int("after", 3)):
            yield from self.sc_success()
            return
        message = (
            "Codex ran out of room in the model's context window. Start a new thread or "
            "clear earlier history before retrying."
        )
        yield from self.opening()
        yield Emit({"type": "error", "message": message})
        yield Emit({"type": "turn.failed", "error": {"message": message}})
        yield Exit(1)

    def sc_completed_then_nonzero(self) -> Iterator[Step]:
        """A completed turn, then exit 1 (a background TLS error)."""
        yield from self.sc_success()
        yield Stderr("ERROR codex_core::client: TLS close_notify not received\n")
        yield Exit(self.param_int("code", 1))

    def sc_result_then_nonzero(self) -> Iterator[Step]:
        """Same as ``completed_then_nonzero`` (exit 1 by default)."""
        return self.sc_completed_then_nonzero()

    def sc_legacy_item_type(self) -> Iterator[Step]:
        """Items with ``item_type`` and ``assistant_message`` (pre-0.4x docs)."""
        self.legacy = True
        return self.sc_command()


def _sh_quote(command: str) -> str:
    if command and all(c.isalnum() or c in "-_./=:,@%+" for c in command):
        return command
    return "'" + command.replace("'", "'\"'\"'") + "'"


def _config_value(configs: list[str], key: str) -> str | None:
    value: str | None = None
    for item in configs:
        name, eq, raw = item.partition("=")
        if eq and name.strip() == key:
            raw = raw.strip()
            try:
                parsed = json.loads(raw)
                value = parsed if isinstance(parsed, str) else raw
            except ValueError:
                value = raw.strip("'\"")
    return value


def main(argv: list[str], settings: Settings) -> int:
    """Run ``fake-codex`` with ``argv`` (without the program name)."""
    args = _parse_command(argv, settings)
    if args is None:
        return 0
    top, parsed = args
    configs = top.many("config") + parsed.many("config")
    cd = _merged(top, parsed, "cd")
    if cd:
        try:
            os.chdir(cd)
        except OSError as exc:
            raise CliError(f"Error: failed to change directory to {cd}: {exc.strerror}") from None
    resume, resume_id, prompt_arg = _resume_target(parsed)
    prompt = _read_prompt(argv, prompt_arg, settings)
    if not _either(top, parsed, "skip_git") and not in_git_repo(os.getcwd()):
        raise CliError(
            "Not inside a trusted directory and --skip-git-repo-check was not specified."
        )
    sandbox = _sandbox(top, parsed, configs)
    model = _merged(top, parsed, "model") or _config_value(configs, "model") or DEFAULT_MODEL

    directives = dirs.parse(prompt)
    scenario, params = choose_scenario(directives, settings)
    rng = make_rng(settings, "codex", argv, prompt)
    clock = Clock(virtual=settings.seed is not None)
    human: list[JsonObj] | None = None if parsed.flag("json") else []
    runner = Runner(settings, clock, rng, capture=human)
    runner.install_signals()
    ctx = Context(
        flavour="codex",
        settings=settings,
        argv=argv,
        rng=rng,
        clock=clock,
        runner=runner,
        cwd=os.getcwd(),
        prompt=prompt,
        directives=directives,
        scenario=scenario,
        params=params,
    )
    session = _open_session(ctx, resume, resume_id, ephemeral=parsed.flag("ephemeral"))
    if _either(top, parsed, "full_auto"):
        sys.stderr.write(
            "warning: --full-auto is deprecated; use --sandbox workspace-write instead.\n"
        )
    run = CodexRun(
        ctx,
        thread_id=session.thread_id,
        model=model,
        sandbox=sandbox,
        rollout=session.rollout,
        totals=session.totals,
        previous_prompt=session.previous_prompt,
    )
    run.prior_prompts = session.prior_prompts
    missing = session.missing
    steps = run.resume_missing() if missing and settings.script is None else run.steps()
    code = runner.run(with_start_delay(steps, settings, scenario), run.abort)
    if human is not None:
        _print_human(human, run)
    last_file = _merged(top, parsed, "last_message")
    if last_file and run.last_message is not None:
        with open(last_file, "w", encoding="utf-8") as fh:
            fh.write(run.last_message)
    return code


def _parse_command(argv: list[str], settings: Settings) -> tuple[Parsed, Parsed] | None:
    """Parse ``codex [top options] exec [options]``; None once help or version is printed."""
    try:
        top = parse_argv(argv, OPTIONS, stop_at_positional=True)
        if top.flag("version"):
            sys.stdout.write(f"codex-cli {settings.version}\n")
            return None
        if top.rest_index is None:
            if top.flag("help"):
                sys.stdout.write(USAGE)
                return None
            raise FakeConfigError("only `codex exec ...` is emulated; put `exec` first")
        sub = argv[top.rest_index]
        if sub not in ("exec", "e"):
            raise FakeConfigError(f"only `codex exec ...` is emulated, not `codex {sub}`")
        rest = argv[top.rest_index + 1 :]
        parsed = parse_argv(rest, OPTIONS)
    except ArgvError as exc:
        raise CliError(str(exc).replace("option", "argument"), 2) from None
    if parsed.flag("help"):
        sys.stdout.write(USAGE)
        return None
    if parsed.given("approval"):
        raise CliError(
            "error: unexpected argument '--ask-for-approval' found\n\n"
            "  tip: --ask-for-approval is an option of `codex`, not of `codex exec`\n\n"
            "Usage: codex exec [OPTIONS] [PROMPT] [COMMAND]",
            2,
        )
    unknown = top.unknown + parsed.unknown
    if unknown and settings.strict_flags:
        raise CliError(f"error: unexpected argument '{unknown[0]}' found", 2)
    return top, parsed


def _merged(top: Parsed, parsed: Parsed, dest: str) -> str | None:
    """An option given after ``exec`` or, failing that, before it."""
    return parsed.one(dest) or top.one(dest)


def _either(top: Parsed, parsed: Parsed, dest: str) -> bool:
    """A flag given before or after ``exec``."""
    return parsed.flag(dest) or top.flag(dest)


def _resume_target(parsed: Parsed) -> tuple[bool, str | None, str | None]:
    """``(resume, resume_id, prompt_arg)`` from the positionals after ``exec``."""
    positionals = list(parsed.positionals)
    resume = bool(positionals) and positionals[0] == "resume"
    resume_id: str | None = None
    if resume:
        positionals = positionals[1:]
        if not parsed.flag("last"):
            if not positionals:
                raise CliError("error: `codex exec resume` needs a SESSION_ID or --last", 2)
            resume_id = positionals.pop(0)
    prompt_arg = positionals[0] if positionals else None
    return resume, resume_id, prompt_arg


def _read_prompt(argv: list[str], prompt_arg: str | None, settings: Settings) -> str:
    """The prompt from the argument and/or stdin; records the invocation."""
    stdin_text: str | None = None
    if not prompt_arg or prompt_arg == "-":
        if stdin_is_tty():
            raise CliError(
                "No prompt provided. Either specify one as an argument or pipe the prompt "
                "into stdin."
            )
        stdin_text = read_stdin()
        prompt = stdin_text
    else:
        prompt = prompt_arg
        stdin_text = read_stdin_if_ready(settings.stdin_wait_ms)
        if stdin_text and stdin_text.strip():
            prompt = f"{prompt}\n\n<stdin>\n{stdin_text.rstrip()}\n</stdin>"
    write_record(settings, "codex", argv, stdin_text, {"prompt": prompt})
    if not prompt.strip():
        raise CliError("No prompt provided via stdin.")
    return prompt


def _sandbox(top: Parsed, parsed: Parsed, configs: list[str]) -> str:
    """The sandbox mode: config, then --full-auto, then --sandbox, then --yolo win."""
    sandbox = "read-only"
    configured = _config_value(configs, "sandbox_mode")
    if configured in SANDBOXES:
        sandbox = configured
    if _either(top, parsed, "full_auto"):
        sandbox = "workspace-write"
    chosen = _merged(top, parsed, "sandbox")
    if chosen:
        sandbox = chosen
    if _either(top, parsed, "yolo"):
        sandbox = "danger-full-access"
    return sandbox


class _Session:
    """The thread a run writes to: new, resumed, or a resume whose rollout is missing."""

    def __init__(
        self,
        thread_id: str,
        rollout: Rollout,
        totals: Totals,
        previous_prompt: str | None,
        missing: bool,
    ) -> None:
        self.thread_id = thread_id
        self.rollout = rollout
        self.totals = totals
        self.previous_prompt = previous_prompt
        self.missing = missing
        self.prior_prompts = 0


def _open_session(ctx: Context, resume: bool, resume_id: str | None, ephemeral: bool) -> _Session:
    """Find the rollout to resume, or name a new one and write its ``session_meta``."""
    clock, cwd = ctx.clock, ctx.cwd
    totals = Totals()
    previous_prompt: str | None = None
    prior_prompts = 0
    missing = False
    rollout_path: str | None
    if resume:
        rollout_path = latest_rollout(cwd) if resume_id is None else find_rollout(resume_id)
        if rollout_path is None:
            missing = True
            thread_id = resume_id or ""
            if resume_id is None:
                raise CliError("Error: no recorded session to resume in this directory (--last)")
        else:
            meta, rows = _read_rollout(rollout_path)
            thread_id = str(meta.get("id") or resume_id)
            previous_prompt, totals, prior_prompts = _history(rows)
    else:
        thread_id = ctx.ids.uuid7(clock.now_ms())
        stamp = clock.stamp("%Y-%m-%dT%H-%M-%S")
        day = clock.stamp("%Y/%m/%d")
        rollout_path = os.path.join(
            codex_home(), "sessions", day, f"rollout-{stamp}-{thread_id}.jsonl"
        )
    rollout = Rollout(None if ephemeral or missing else rollout_path, clock)
    if not resume:
        rollout.add(
            "session_meta",
            {
                "id": thread_id,
                "timestamp": clock.iso(),
                "cwd": cwd,
                "originator": "codex_exec",
                "cli_version": ctx.settings.version,
                "instructions": None,
                "source": "exec",
                "model_provider": "openai",
            },
        )
    session = _Session(thread_id, rollout, totals, previous_prompt, missing)
    session.prior_prompts = prior_prompts
    return session


def _history(rows: list[JsonObj]) -> tuple[str | None, Totals, int]:
    prompt: str | None = None
    totals = Totals()
    prompts = 0
    for row in rows:
        payload = row.get("payload")
        if row.get("type") != "event_msg" or not isinstance(payload, dict):
            continue
        if payload.get("type") == "user_message":
            prompt = str(payload.get("message", ""))
            prompts += 1
        elif payload.get("type") == "token_count":
            info = payload.get("info")
            total = info.get("total_token_usage") if isinstance(info, dict) else None
            if isinstance(total, dict):
                totals = Totals(
                    int(total.get("input_tokens", 0)),
                    int(total.get("cached_input_tokens", 0)),
                    int(total.get("output_tokens", 0)),
                )
    return prompt, totals, prompts


def _print_human(events: list[JsonObj], run: CodexRun) -> None:
    # Without --json, codex exec narrates on stderr and prints only the final
    # message on stdout.
    err = sys.stderr
    err.write(f"OpenAI Codex v{run.settings.version} (research preview)\n--------\n")
    err.write(f"workdir: {run.ctx.cwd}\nmodel: {run.model}\nsandbox: {run.sandbox}\n")
    err.write(f"session id: {run.thread_id}\n--------\nuser\n{run.ctx.prompt}\n\n")
    for event in events:
        item = event.get("item")
        if event.get("type") == "item.completed" and isinstance(item, dict):
            kind = item.get("type") or item.get("item_type")
            if kind == "reasoning":
                err.write(f"thinking\n{item.get('text', '')}\n")
            elif kind == "command_execution":
                err.write(f"exec\n{item.get('command')} in {run.ctx.cwd}\n")
            elif kind == "file_change":
                err.write(f"file update: {item.get('status')}\n")
        elif event.get("type") in ("error", "turn.failed"):
            err.write(f"ERROR: {event.get('message') or event.get('error')}\n")
        elif event.get("type") == "turn.completed":
            usage = event.get("usage") or {}
            used = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
            err.write(f"tokens used\n{used}\n")
    err.flush()
    if run.last_message is not None:
        sys.stdout.write(run.last_message + "\n")
        sys.stdout.flush()
