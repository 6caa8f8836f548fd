"""``weft run [hank] [data]``: run a hank, creating or resuming its execution.

Exit codes: 0 when every codon finished (or there was nothing left to do),
1 when the run failed, 2 for a usage or configuration error, 128 + the
signal number when it was stopped by SIGINT or SIGTERM (run the same command
again to continue).

The settings that shape the run (the model, the sentinel model, the ceilings
given as ``--max-cost``/``--max-time``/``--max-tokens``) are kept with the execution
(:class:`~weft.runtime.execution.meta.RunSettings`): a later run without the flag goes on
with them, and a different model is confirmed like a changed hank.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvloop

from weft.budget.limits import BudgetBook, ceiling_source
from weft.budget.table import budget_warnings
from weft.cli.forecast import before_prepare
from weft.cli.prompts import ask_yes_no, is_interactive
from weft.cli.run_args import resolve_inputs
from weft.config import load_hank
from weft.config.copies import check_copy_bounds
from weft.config.inert import inert_settings
from weft.config.loader import LoadedHank
from weft.config.preflight import machine_problems
from weft.config.runtime import ResolvedRuntimeConfig, RuntimeConfig, resolve_runtime_config
from weft.config.schema import Hank
from weft.errors import CommandRejectedError, ConfigError
from weft.runtime.execution.errors import ExecutionSetupError, HankChangedError, InputPathError
from weft.runtime.execution.layout import HANK_FILE, ExecutionLayout
from weft.runtime.execution.meta import RunSettings, read_meta
from weft.runtime.execution.prepare import PreparedExecution, hank_hash, prepare_execution
from weft.runtime.run.runtime import RunOutcome, Runtime, RuntimeOptions
from weft.server import ProtocolServer, ServerError
from weft.terminal import printable, printable_lines

if TYPE_CHECKING:
    from weft.telemetry.settings import TelemetrySettings
    from weft.telemetry.sink import TraceSink


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535; 0 picks a free one)")
    return port


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        value = -1
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive whole number of tokens (e.g. 2000000)"
        )
    return value


def _idle_seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 255:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds from 0 to 255")
    return value


def register(commands: Any) -> None:
    """Adds the ``run`` command."""
    parser = commands.add_parser(
        "run",
        help="run a hank (creates or resumes its execution)",
        description=(
            "Run a hank. The first path is the hank (a hank.json or a folder holding one; "
            "default ./hank.json), the second the data it works on, linked into the agent's "
            "workspace as read_only_data_source: read-only by convention only, an agent can "
            "write through the link to your files (--copy gives it a copy instead). Running "
            "the same hank on the same data again resumes its execution: finished codons are "
            "kept and the rest runs. On a terminal, q stops the run as Ctrl-C does."
        ),
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="hank, then data")
    parser.add_argument("-e", "--execution", type=Path, help="use this execution directory")
    parser.add_argument("-n", "--new", action="store_true", help="always start a new execution")
    parser.add_argument(
        "-f",
        "--force",
        action="store_true",
        help="with --new and --execution: back the old execution up and start over; "
        "with --execution: relink to different data",
    )
    parser.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="answer yes (resume with a changed hank, model or sentinel model: the codons not "
        "yet run follow it)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="when the hank changed codons the execution already ran: fork the execution at "
        "the first codon that differs and run the fork (the codons before it are reused, "
        "not run or paid for again; the execution itself is not changed)",
    )
    parser.add_argument(
        "--rebind",
        action="store_true",
        help="with --execution: run a different hank file than the one the execution was "
        "made for (the execution then belongs to it)",
    )
    parser.add_argument(
        "-i",
        "--input",
        metavar="TEXT",
        help="inline data: TEXT becomes the data file input.txt (the same text resumes the "
        "same execution); instead of a data path",
    )
    parser.add_argument(
        "--copy",
        action="store_true",
        help="copy the data instead of linking it: your files are out of the agent's reach "
        "(the copy's files are write-protected, its folders are not)",
    )
    parser.add_argument(
        "--no-wipe", action="store_true", help="with --new --force, keep the workspace's files"
    )
    parser.add_argument(
        "-m",
        "--model",
        help="run every codon on this model (kept with the execution; on one that already "
        "ran on another model, asks first)",
    )
    parser.add_argument(
        "--sentinel-model",
        metavar="MODEL",
        help="every sentinel calls this provider/model (fake/haiku runs them offline; kept with "
        "the execution)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="a weft.json with runtime settings (default: the weft.json next to the hank, "
        "else ~/.config/weft/weft.json, if there is one)",
    )
    parser.add_argument(
        "--no-autostart",
        action="store_true",
        help="wait for a command before each codon (Enter on the terminal, s skips the "
        "running codon, q stops; or codon.next from a WebSocket client) and stay up when "
        "the codons are done",
    )
    parser.add_argument(
        "-p",
        "--port",
        type=_port,
        default=None,
        help="the WebSocket server's port (default 0: a free one, printed and in the lock file)",
    )
    parser.add_argument(
        "--host",
        default=None,
        help="the address the WebSocket server listens on (default 127.0.0.1)",
    )
    parser.add_argument(
        "--allow-anonymous-read",
        action="store_true",
        help="let WebSocket clients on this machine read the run without a token "
        "(anyone on the machine can then read the journal: prompts, tool output, files)",
    )
    parser.add_argument(
        "--ignore-rig-failures", action="store_true", help="treat every rig failure as allowed"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="DIR",
        help="copy each codon's outputFiles here when it succeeds (default: outputDirectory "
        "of weft.json; without one, nothing is copied)",
    )
    parser.add_argument(
        "--overwrite-output",
        action="store_true",
        help="replace files already in the output directory (default: keep them and write "
        "the new one as <name>_<n>_<time><ext>)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_idle_seconds,
        metavar="SECONDS",
        help="ping each WebSocket client every SECONDS and close one that does not answer "
        "within SECONDS (0-255; default 0: idle clients are never closed)",
    )
    parser.add_argument(
        "--shim-idle-timeout",
        type=int,
        metavar="SECONDS",
        help="end an agent session after this long without output (default 180)",
    )
    parser.add_argument(
        "--max-cost",
        type=_positive,
        metavar="USD",
        help="stop the run when it has spent more than this many dollars (all its runs "
        "together; overrides the hank's and the runtime config's budget; kept with the "
        "execution until another --max-cost replaces it)",
    )
    parser.add_argument(
        "--max-tokens",
        type=_positive_int,
        metavar="N",
        help="stop the run when it has used more than N tokens (input, output, cache writes "
        "and reads of every attempt; all its runs together): the ceiling for subscriptions "
        "that are never charged dollars; kept with the execution like --max-cost",
    )
    parser.add_argument(
        "--max-time",
        type=_positive,
        metavar="SECONDS",
        help="stop the run after this much wall time (all its runs together; kept with the "
        "execution like --max-cost)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan with each codon's expected cost and time (median and 90th "
        "percentile of the earlier executions of this hank on this machine; priced from their "
        "tokens for a new model; unknown without history) and the total, then exit: nothing "
        "is created, run or spent (--json prints it as one JSON document)",
    )
    parser.add_argument(
        "--force-budget",
        action="store_true",
        help="run even when the forecast's median already exceeds the dollar ceiling "
        "(--max-cost, budget.maxDollars); without it such a run is refused before it starts",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="CODON",
        help="skip this codon in this run (repeatable; every iteration of a loop's codon): "
        "it is recorded as skipped and the run goes on, e.g. to get past a codon that "
        "failed (the seed's recovery: skip the step)",
    )
    parser.add_argument(
        "--otel",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="export the run's trace over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (default "
        "http://localhost:4318); on without the flag when that variable or telemetry in "
        "weft.json is set; needs weft[otel] (docs/telemetry.md)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--headless", action="store_true", help="plain timestamped lines, no prompts (CI)"
    )
    output.add_argument("--json", action="store_true", help="print every event as a JSON line")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="plain lines (as --headless) that also show the agent's tool calls, their results "
        "and its messages",
    )
    parser.set_defaults(run=run, run_parser=parser)


def run(args: argparse.Namespace) -> int:
    """Runs ``weft run``: resolve the inputs, load the hank and the settings, prepare the
    execution, then run it under a view."""
    from weft.cli.view.terminal import single_keys

    if args.json and args.verbose:
        print(
            "weft: error: --verbose shows more lines; --json already prints every event: "
            "pass one of them",
            file=sys.stderr,
        )
        return 2
    try:
        hank_path, data_path = _inputs(args)
        loaded = load_hank(hank_path, model=args.model)
        config = args.config if args.config is not None else discover_config(hank_path)
        resolved = _settings(args, loaded, config)
        settings = resolved.config
        asked = _asked_settings(args, resolved)
        if asked.model != args.model:
            # A model from weft.json or WEFT_RUNTIME_MODEL applies like --model (the
            # hank's own overrides.model is a default, which load_hank applied).
            loaded = load_hank(hank_path, model=asked.model)
        # --dry-run, or a ceiling the forecast already exceeds: before anything exists.
        forecast_exit = before_prepare(args, loaded, hank_path, resolved)
        if forecast_exit is not None:
            return forecast_exit
        if args.overwrite_output and settings.output_directory is None:
            print(
                "weft: error: --overwrite-output needs an output directory: pass -o DIR "
                "(or set outputDirectory in weft.json)",
                file=sys.stderr,
            )
            return 2
        inside = _output_inside_execution(args, settings)
        if inside is not None:
            print(f"weft: error: {inside}", file=sys.stderr)
            return 2
        refused = _sentinel_model_problem(settings) or _skip_problem(args.skip, loaded)
        if refused is not None:
            print(f"weft: error: {refused}", file=sys.stderr)
            return 2
        telemetry = _telemetry(args, settings)
        if isinstance(telemetry, str):
            print(f"weft: error: {telemetry}", file=sys.stderr)
            return 2
        args.telemetry = telemetry
        # Before anything is created or spent: what weft validate would refuse.
        _refuse_before_spending(loaded, hank_path, settings.sentinel.model)
        prepared = _prepare(
            args, loaded, settings, hank_path, data_path, asked, _setting_names(resolved, config)
        )
        kept = prepared.settings
        if kept.model != asked.model:
            loaded = load_hank(hank_path, model=kept.model)
        if kept != asked:
            resolved = _settings(args, loaded, config, kept=kept)
            settings = resolved.config
            refused = _sentinel_model_problem(settings)
            if refused is not None:
                print(f"weft: error: {refused} (kept with the execution)", file=sys.stderr)
                return 2
            _refuse_before_spending(loaded, hank_path, settings.sentinel.model)
    except (ExecutionSetupError, ConfigError) as exc:
        if args.reuse and isinstance(exc, HankChangedError) and exc.execution is not None:
            return _reuse(args, exc.execution, loaded)
        if args.json:
            _refused_json(exc)
        print(f"weft: error: {printable_lines(str(exc))}", file=sys.stderr)
        return 2
    mode = "json" if args.json else "headless" if args.headless else "live"
    with single_keys(sys.stdin) as keys:
        return _run_under_view(args, prepared, loaded, settings, resolved, config, mode, keys)


def _run_under_view(
    args: argparse.Namespace,
    prepared: PreparedExecution,
    loaded: LoadedHank,
    settings: RuntimeConfig,
    resolved: ResolvedRuntimeConfig,
    config: Path | None,
    mode: str,
    keys: bool,
) -> int:
    """Runs the prepared execution under its view; ``keys``: the terminal is in
    single-key mode and its keys steer the run."""
    from weft.cli.view import RunSummary, make_view

    view = make_view(mode, sys.stdout, verbose=args.verbose, keys=keys)
    for note in _opening_notes(prepared, loaded, settings):
        view.note(note)
    if getattr(args, "rebound", None):
        view.note(printable(args.rebound))
    if config is not None and args.config is None:
        view.note(f"settings from {config}")

    def on_server(server: ProtocolServer) -> None:
        view.note(f"WebSocket server on {server.url} (weft attach {prepared.layout.root})")
        view.note(_dashboard_note(server, prepared.layout.root))

    options = _options(args, settings, resolved.sources, prepared.settings)
    sink = _trace_sink(args.telemetry, prepared.layout.root.name, view.note)
    if sink is not None:
        options = dataclasses.replace(options, agent_env=sink.agent_env)
    runtime = Runtime(
        prepared,
        loaded,
        options,
        listeners=(view.on_event,) if sink is None else (view.on_event, sink),
        on_state=view.progress.seed if sink is None else sink.seeded(view.progress.seed),
        on_server=on_server,
    )
    manual = not settings.autostart
    if keys and manual:
        view.note("Manual mode: press Enter to start the next codon, s to skip it, q to stop")
    elif keys:
        view.note("Press q to stop the run (as Ctrl-C does; run the same command to continue)")
    elif manual:
        view.note("Manual mode: waiting for commands from WebSocket clients (weft attach)")
    view.start()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            steer = (
                Keys(
                    runtime,
                    manual=manual,
                    say=view.note,
                    busy=lambda: view.progress.active is not None,
                )
                if keys
                else None
            )
            outcome: RunOutcome = runner.run(_run(runtime, keys=steer))
    except ServerError as exc:
        unserved: ServerError | None = exc
    else:
        unserved = None
    finally:
        view.stop()
        if sink is not None:
            sink.close()  # waits a few seconds at most, none when the collector is down
    if unserved is not None:
        print(f"weft: error: {unserved}", file=sys.stderr)
        return 2
    reached: dict[str, float] = {
        e.limit_kind: e.limit for e in view.progress.budget_exceeded if e.scope == "run"
    }
    resume = continue_command(args, prepared.layout.root, prepared.settings, reached=reached)
    view.summary(
        RunSummary(
            status=outcome.status,
            exit_code=outcome.exit_code,
            execution=prepared.layout.root,
            resume_command=resume,
            message=outcome.message,
            duration_ms=outcome.duration_ms,
            forked_from=_forked_from(prepared.layout),
        )
    )
    return outcome.exit_code


def _telemetry(args: argparse.Namespace, settings: RuntimeConfig) -> TelemetrySettings | str | None:
    """The trace export in force (None: off), or why ``--otel`` cannot be honoured
    (the SDK is missing: exit 2). A variable or setting without the SDK is only a
    warning: it may be set for other tools."""
    from weft.telemetry.settings import resolve

    telemetry = resolve(os.environ, flag=args.otel, setting=settings.telemetry)
    if telemetry is None:
        return None
    import importlib.util

    if importlib.util.find_spec("opentelemetry.sdk") is None:
        fix = "install it with `pip install 'weft[otel]'`"
        if args.otel:
            return f"--otel needs the OpenTelemetry SDK: {fix}"
        print(
            f"weft: warning: {telemetry.asked_by} asks for traces, but the OpenTelemetry SDK "
            f"is not installed ({fix}); the run goes on without them",
            file=sys.stderr,
        )
        return None
    return telemetry


def _trace_sink(
    telemetry: TelemetrySettings | None, execution_id: str, note: Callable[[str], None]
) -> TraceSink | None:
    """The live trace export of a run (None: off; nothing of OpenTelemetry is loaded)."""
    if telemetry is None:
        return None
    from weft.telemetry.sink import TraceSink

    note(f"Traces go to {telemetry.traces_url} ({telemetry.asked_by})")

    def warn(text: str) -> None:
        # From the exporter's thread: stderr, which the live view keeps above its table.
        print(f"weft: warning: {text}", file=sys.stderr, flush=True)

    return TraceSink(telemetry, execution_id=execution_id, warn=warn)


def _dashboard_note(server: ProtocolServer, execution: Path) -> str:
    """The dashboard's address: with the read-write token in its fragment on a
    terminal; elsewhere (a log, CI) without, saying where the token is."""
    from weft.web import dashboard_url

    if sys.stdout.isatty():
        return f"Dashboard: {dashboard_url(server, server.token)}"
    return f"Dashboard: {dashboard_url(server)} (token: {execution / '.weft' / 'server.token'})"


def _refuse_before_spending(
    loaded: LoadedHank, hank_path: Path, sentinel_model: str | None
) -> None:
    """Raises :class:`ConfigError` for what ``weft validate`` finds on this
    machine that a codon would otherwise meet only when it starts, after the
    codons before it spent money: a missing agent CLI, a required sentinel
    that would not load (no provider key, a broken prompt or schema). A
    sentinel that is not required and would not load is said as a warning
    (its codon runs without it)."""
    found = machine_problems(
        loaded, file=str(hank_path), env=os.environ, sentinel_model=sentinel_model
    )
    errors = [p for p in found if p.is_error]
    if errors:
        raise ConfigError(errors)
    for warning in found:
        print(f"weft: warning: {printable_lines(warning.message)}", file=sys.stderr)


def _refused_json(exc: ExecutionSetupError | ConfigError) -> None:
    """``--json``: a run refused before it started is one line on stdout too,
    ``{"type":"run.refused","timestamp":...,"data":{"exitCode":2,"message":...,"problems":[...]}}``
    (``problems`` as ``weft validate --json`` gives them, for a configuration error)."""
    from weft.clock import utc_now_iso

    problems = [p.to_json() for p in exc.problems] if isinstance(exc, ConfigError) else []
    data = {"exitCode": 2, "message": str(exc).split("\n", 1)[0], "problems": problems}
    line = {"type": "run.refused", "timestamp": utc_now_iso(), "data": data}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _inputs(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """The hank and data: the positionals, or with ``--execution`` the hank recorded in
    the execution (a different hank file needs ``--rebind``)."""
    paths = list(args.paths)
    if args.input is not None:
        paths = _with_inline_input(paths, args.input)
    meta_path = None if args.execution is None else ExecutionLayout(args.execution).meta_path
    if meta_path is None or not meta_path.is_file():
        return resolve_inputs(paths)
    meta = read_meta(meta_path)
    recorded = Path(meta.hank_path)
    root = meta_path.parent.parent.resolve()
    if len(paths) == 1 and not _names_hank(paths[0]):
        # One path that is not a hank: the data, run with the recorded hank.
        paths = [str(recorded), paths[0]]
    if not paths:
        if not recorded.is_file():
            raise InputPathError(
                f"execution {root} was made for {recorded}, which no longer exists; pass the "
                f"hank and --rebind: weft run path/to/hank.json --execution {root} --rebind"
            )
        return recorded, None
    hank_path, data_path = resolve_inputs(paths)
    # The same content at another path (a moved or copied project) is the same hank.
    if hank_path != recorded and hank_hash(hank_path) != meta.hank_hash:
        if not args.rebind:
            raise HankChangedError(
                f"execution {root} was made for {recorded}, not {hank_path} (a different "
                f"hank). Drop the hank to "
                f"continue with the recorded one (weft run --execution {root}), add --rebind to "
                f"run {hank_path} in this execution from now on, or drop --execution to use "
                "that hank's own execution"
            )
        # Said once the execution is prepared (a refusal there rebinds nothing).
        args.rebound = f"rebound execution {root} from {recorded} to {hank_path} (--rebind)"
    return hank_path, data_path


INPUT_FILE = "input.txt"


def _with_inline_input(paths: list[str], text: str) -> list[str]:
    """``paths`` with the data replaced by a file holding ``text``.

    The file lives in Weft's cache under the text's hash (``$XDG_CACHE_HOME/weft/
    inputs/<sha256>/input.txt``), so the same text is the same data and resumes the
    same execution, and the data stays where the execution's link points.
    """
    if len(paths) == 2 or (len(paths) == 1 and not _names_hank(paths[0])):
        raise InputPathError(
            "both a data path and --input were given; pass the data one way: a path, or "
            "--input TEXT"
        )
    digest = hashlib.sha256(text.encode()).hexdigest()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "weft" / "inputs" / digest[:32]
    target = folder / INPUT_FILE
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        temp = folder / f".{INPUT_FILE}.{os.getpid()}.tmp"
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, target)
    return [*paths, str(target)]


def _names_hank(arg: str) -> bool:
    from weft.bundle.unpack import is_bundle_name  # x.hank is a hank, not data (weft pack)

    path = Path(arg)
    return (
        arg.endswith(".json")
        or is_bundle_name(arg)
        or (path.is_dir() and (path / HANK_FILE).is_file())
    )


CONTINUE_SKIPS = frozenset(
    {
        "paths",
        "execution",
        "new",
        "force",
        "yes",
        "rebind",
        "copy",
        "no_wipe",
        "headless",
        "json",
        "verbose",
    }
)
"""Options the continue command leaves out: they choose or reshape the execution (it is
named by --execution), or the output format, which the next caller picks."""


_IN_FORCE = {
    "model": "model",
    "sentinel_model": "sentinel_model",
    "max_cost": "max_dollars",
    "max_time": "max_seconds",
    "max_tokens": "max_tokens",
}
"""The flags whose value kept with the execution the continue command gives."""

_CAPS = {"dollars": "max_cost", "timeSeconds": "max_time", "tokens": "max_tokens"}
"""A run ceiling's kind (``budget.exceeded``'s ``limitKind``) -> its flag's dest."""


def continue_command(
    args: argparse.Namespace,
    root: Path,
    settings: RunSettings | None = None,
    *,
    reached: Mapping[str, float] | None = None,
) -> str:
    """``weft run --execution ROOT`` plus every flag of this run that changes how it
    runs, with paths made absolute, so that it works from any folder.

    ``settings`` are the run-shaping settings in force (kept with the execution or
    given now): the command gives those, not the flags as typed. A run ceiling in
    ``reached`` (its kind, ``dollars``, ``timeSeconds`` or ``tokens``, to its limit: the run
    stopped on it) is never repeated: the command raises it to twice the cap
    (``--max-cost 10`` after a stop at 5), so it runs as printed."""
    parser: argparse.ArgumentParser = args.run_parser
    words = ["weft", "run", "--execution", str(root)]
    raise_words: list[str] = []
    caps = {_CAPS[kind]: limit for kind, limit in (reached or {}).items() if kind in _CAPS}
    # argparse keeps no public list of a parser's actions; _actions is stable since 3.2.
    for action in parser._actions:
        if not action.option_strings or action.dest in CONTINUE_SKIPS or action.dest == "help":
            continue
        value = getattr(args, action.dest, None)
        if settings is not None and action.dest in _IN_FORCE:
            value = getattr(settings, _IN_FORCE[action.dest])
        if action.dest in caps:
            flag = max(action.option_strings, key=len)
            # Twice the cap: a command that runs as printed, and goes further.
            raise_words += [flag, _number(float(f"{caps[action.dest] * 2:.6g}"))]
            continue
        if value is None or value == action.default:
            continue
        if isinstance(action, argparse.BooleanOptionalAction):  # --otel / --no-otel
            words.append(action.option_strings[0 if value else 1])
            continue
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:
            words.append(flag)
            continue
        for item in value if isinstance(value, list) else [value]:
            text = _number(item) if isinstance(item, float) else str(item)
            words += [flag, str(item.absolute()) if isinstance(item, Path) else text]
    return shlex.join([*words, *raise_words])


def _number(value: float) -> str:
    """``5`` for 5.0, ``0.05`` for 0.05: what a person types."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


CONFIG_FILE = "weft.json"


def discover_config(hank_path: Path) -> Path | None:
    """The ``weft.json`` a run without ``--config`` uses: the one next to the hank,
    else ``$XDG_CONFIG_HOME/weft/weft.json`` (``~/.config/weft/weft.json``), else none."""
    beside = hank_path.parent / CONFIG_FILE
    if beside.is_file():
        return beside
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    user = home / "weft" / CONFIG_FILE
    return user if user.is_file() else None


_MODEL_LAYERS = ("weft.json", "environment")
"""Where a model setting overrides every codon's model, as ``--model`` does."""


def _settings(
    args: argparse.Namespace,
    loaded: LoadedHank,
    config: Path | None = None,
    *,
    kept: RunSettings | None = None,
) -> ResolvedRuntimeConfig:
    """The run's settings: the flags over the config file over the hank's overrides;
    with ``kept``, the run-shaping settings in force for the execution (kept with it,
    or given now) stand as flags."""
    kept = kept or RunSettings()
    return resolve_runtime_config(
        cli={
            "model": args.model or kept.model,
            "shimIdleTimeout": args.shim_idle_timeout,
            "idleTimeout": args.idle_timeout,
            "autostart": False if args.no_autostart else None,
            "port": args.port,
            "allowAnonymousRead": True if args.allow_anonymous_read else None,
            "outputDirectory": None if args.output is None else str(args.output.absolute()),
            "sentinel.model": args.sentinel_model or kept.sentinel_model,
            "budget.maxDollars": args.max_cost if args.max_cost is not None else kept.max_dollars,
            "budget.maxTimeSeconds": args.max_time
            if args.max_time is not None
            else kept.max_seconds,
            "budget.maxTokens": args.max_tokens if args.max_tokens is not None else kept.max_tokens,
        },
        config_file=config,
        hank=loaded.hank,
    )


def _asked_settings(args: argparse.Namespace, resolved: ResolvedRuntimeConfig) -> RunSettings:
    """The run-shaping settings this run gives (None: not given, the execution's kept
    ones apply): the model and sentinel model from a flag, weft.json or the
    environment; the ceilings from their flags (a weft.json or environment ceiling is
    read from there each time)."""
    config, sources = resolved.config, resolved.sources
    return RunSettings(
        model=config.model if sources.get("model") in _GIVEN_LAYERS else None,
        sentinel_model=config.sentinel.model
        if sources.get("sentinel.model") in _GIVEN_LAYERS
        else None,
        max_dollars=args.max_cost,
        max_seconds=args.max_time,
        max_tokens=args.max_tokens,
    )


def _setting_names(resolved: ResolvedRuntimeConfig, config: Path | None) -> dict[str, str]:
    """How the model and the sentinel model were given, for the messages."""
    names = {}
    for field, key, flag, variable in (
        ("model", "model", "--model", "WEFT_RUNTIME_MODEL"),
        ("sentinel_model", "sentinel.model", "--sentinel-model", "WEFT_RUNTIME_SENTINEL_MODEL"),
    ):
        layer = resolved.sources.get(key)
        if layer == "weft.json":
            names[field] = f"{key} in {config}"
        elif layer == "environment":
            names[field] = variable
        else:
            names[field] = flag
    return names


_GIVEN_LAYERS = ("cli", *_MODEL_LAYERS)
"""Where a run-shaping setting is given for the execution, not taken from the hank."""


def _sentinel_model_problem(settings: RuntimeConfig) -> str | None:
    """Why the sentinel model override cannot be used (None: it can, or there is none)."""
    if settings.sentinel.model is None:
        return None
    from weft.sentinels.providers import ProviderError, split_model  # only for an override

    try:
        split_model(settings.sentinel.model)
    except ProviderError as exc:
        return f"--sentinel-model / sentinel.model: {exc}"
    return None


def _prepare(
    args: argparse.Namespace,
    loaded: LoadedHank,
    settings: RuntimeConfig,
    hank_path: Path,
    data_path: Path | None,
    asked: RunSettings | None = None,
    names: dict[str, str] | None = None,
) -> PreparedExecution:
    """Creates or resumes the execution (asking, when a person can answer);
    ``asked``: the run-shaping settings given now, ``names``: how."""
    interactive = is_interactive(headless=args.headless or args.json)
    base_dir = Path(os.path.expanduser(settings.execution_base_dir))
    # Where the execution will be is known now: refuse a rig copy that would
    # copy it into itself before anything is created.
    unbounded = check_copy_bounds(
        loaded,
        execution=(args.execution or base_dir).absolute(),
        workspace=None if args.execution is None else ExecutionLayout(args.execution).workspace,
    )
    if unbounded:
        raise ConfigError(unbounded)
    return prepare_execution(
        hank_path,
        data_path,
        execution_dir=args.execution,
        new=args.new,
        yes=args.yes or args.rebind,  # --rebind is the explicit answer to "another hank?"
        force=args.force,
        interactive=interactive,
        base_dir=base_dir,
        copy=args.copy,
        keep_workspace=args.no_wipe,
        data_hash_time_limit=settings.data_hash_time_limit / 1000,
        prompt=ask_yes_no,
        hank=loaded.hank,
        settings=asked,
        setting_names=names,
        load_hank=_hank_loader(hank_path),
    )


def _hank_loader(hank_path: Path) -> Callable[[str | None], Hank]:
    """Loads ``hank_path`` with every codon's model replaced (None: its own)."""

    def load(model: str | None) -> Hank:
        return load_hank(hank_path, model=model).hank

    return load


def _opening_notes(
    prepared: PreparedExecution, loaded: LoadedHank, settings: RuntimeConfig
) -> list[str]:
    """What the view says before the run starts: the execution, then every warning."""
    verb = "Resuming" if prepared.resumed else "Created"
    notes = [f"{verb} execution {prepared.layout.root}"]
    notes += [printable(note) for note in prepared.notes]
    notes += [f"warning: {warning}" for warning in prepared.warnings]
    for problem in loaded.warnings:
        # The problem's own text says "warning:" after its location: said once, up front.
        hint = f"\n    hint: {printable(problem.hint)}" if problem.hint else ""
        notes.append(printable(f"warning: {problem.location()}: {problem.message}") + hint)
    notes.extend(output_notes(loaded, settings.output_directory))
    notes.extend(f"warning: {line}" for line in inert_settings(settings))
    book = BudgetBook.from_hank(
        loaded.hank,
        max_dollars=settings.budget.max_dollars,
        max_seconds=settings.budget.max_time_seconds,
        max_tokens=settings.budget.max_tokens,
    )
    limits = settings.budget
    ceiling = []
    if limits.max_dollars is not None:
        ceiling.append(f"${limits.max_dollars:g}")
    if limits.max_time_seconds is not None:
        ceiling.append(f"{limits.max_time_seconds:g}s of wall time")
    if limits.max_tokens is not None:
        ceiling.append(f"{limits.max_tokens:,} tokens")
    if ceiling:
        notes.append(
            f"Budget: the run may use {' and '.join(ceiling)} (all its runs together); "
            "the codon that crosses it is stopped"
        )
    for budget in budget_warnings(book, loaded.hank):
        notes.append(f"warning {budget.code} at {budget.path}: {budget.message}")
    if settings.allow_anonymous_read:
        notes.append(
            "warning: anonymous reads are on: anyone on this machine can read this run's "
            "journal over the WebSocket server without a token"
        )
    return notes


def _forked_from(layout: ExecutionLayout) -> tuple[str, str] | None:
    """The source and codon of a forked execution, for the summary."""
    from weft.runtime.execution.meta import read_meta

    try:
        forked = read_meta(layout.meta_path).forked_from
    except ExecutionSetupError:
        return None
    return None if forked is None else (forked.execution, forked.codon_id)


def _reuse(args: argparse.Namespace, execution: Path, loaded: LoadedHank) -> int:
    """``--reuse``: fork ``execution`` where the hank first differs, then run the fork."""
    from weft.fork.clone import ForkError, make_fork
    from weft.fork.reuse import fork_point

    try:
        state = json.loads((ExecutionLayout(execution).weft_dir / "state.json").read_bytes())
        point = fork_point(state, loaded.hank)
        if point is None:
            raise ForkError(f"nothing in {execution} can be reused by this hank")
        fork = asyncio.run(make_fork(execution, point.codon_id))
    except (ForkError, OSError, ValueError) as exc:
        print(f"weft: error: --reuse: {printable_lines(str(exc))}", file=sys.stderr)
        return 2
    kept = point.reused
    reused = f"{len(kept)} codon(s) ({', '.join(kept)})" if kept else "nothing"
    print(
        printable_lines(
            f"Reusing {reused} of {execution}: {point.codon_id} differs ({point.why}); "
            f"forked into {fork.path}"
        )
    )
    args.execution, args.yes, args.reuse, args.new = fork.path, True, False, False
    return run(args)


def _skip_problem(skip: list[str], loaded: LoadedHank) -> str | None:
    """Why ``--skip`` cannot be honoured: a codon the hank does not have."""
    known = [codon.id for codon, _ in loaded.codons()]
    unknown = [c for c in dict.fromkeys(skip) if c not in known]
    if not unknown:
        return None
    return (
        f"--skip {', '.join(unknown)}: the hank has no such codon; its codons are "
        f"{', '.join(known)}"
    )


def _options(
    args: argparse.Namespace,
    settings: RuntimeConfig,
    sources: dict[str, Any],
    kept: RunSettings | None = None,
) -> RuntimeOptions:
    source = ceiling_source(sources)
    if kept is not None:
        for flag, given, value in (
            ("--max-cost", args.max_cost, kept.max_dollars),
            ("--max-time", args.max_time, kept.max_seconds),
            ("--max-tokens", args.max_tokens, kept.max_tokens),
        ):
            if given is None and value is not None:
                source = source.replace(flag, f"{flag} kept with the execution")
    return RuntimeOptions(
        skip=frozenset(args.skip),
        max_dollars=settings.budget.max_dollars,
        max_seconds=settings.budget.max_time_seconds,
        max_tokens=settings.budget.max_tokens,
        budget_source=source,
        autostart=settings.autostart,
        ignore_rig_failures=args.ignore_rig_failures or settings.ignore_rig_failures,
        idle_timeout=settings.shim_idle_timeout,
        server_idle_timeout=settings.idle_timeout,
        host=args.host or "127.0.0.1",
        port=settings.port,
        allow_anonymous_read=settings.allow_anonymous_read,
        output_dir=None
        if settings.output_directory is None
        else Path(os.path.expanduser(settings.output_directory)).absolute(),
        overwrite_output=args.overwrite_output,
        sentinel_model=settings.sentinel.model,
        sentinel_persistence=settings.sentinel.enable_persistence,
        sentinel_call_timeout=settings.sentinel.call_timeout_ms / 1000,
        anthropic_base_url=settings.anthropic_base_url,
        sessions=settings.session,
        breakers=settings.breaker,
        usage_window=settings.usage_window,
    )


def _output_inside_execution(args: argparse.Namespace, settings: RuntimeConfig) -> str | None:
    """Why the output directory cannot be used, or None: inside the execution (or
    the managed root), copies would land in the agent's workspace or Weft's state."""
    if settings.output_directory is None:
        return None
    output = Path(os.path.expanduser(settings.output_directory)).resolve()
    execution = args.execution or Path(os.path.expanduser(settings.execution_base_dir))
    root = execution.resolve()
    if output == root or root in output.parents:
        return (
            f"the output directory {output} is inside {root}, where executions live; "
            "pass -o a folder outside it"
        )
    return None


def output_notes(loaded: LoadedHank, output_directory: str | None) -> list[str]:
    """Warnings about ``outputFiles`` before the run: none would be copied (no
    output directory), or the output directory already holds files."""
    owners = [c.id for c, _ in loaded.codons() if c.output_files]
    if not owners:
        return []
    if output_directory is None:
        return [
            f"warning: {', '.join(owners)} declare outputFiles, but no output directory is set: "
            "nothing will be copied (pass -o DIR or set outputDirectory in weft.json)"
        ]
    folder = Path(os.path.expanduser(output_directory))
    if folder.is_dir() and any(folder.iterdir()):
        return [
            f"warning: the output directory {folder} is not empty: files already there are kept "
            "and new ones with the same name get a _<n>_<time> suffix (--overwrite-output "
            "replaces them)"
        ]
    return [f"Output files go to {folder}"]


class Keys:
    """``weft run``'s keys on its own terminal, one key at a time (the terminal is
    in single-key mode: nothing is echoed). ``q`` stops the run as the first Ctrl-C
    does (the agent is asked to stop, a checkpoint is taken; run the same command
    to continue) and a second ``q`` kills the agent; in manual mode Enter (or
    ``n``) starts the next codon and ``s`` skips the running one. A refused
    command is said with ``say``; ``busy`` tells whether a codon is running."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        manual: bool,
        say: Callable[[str], None],
        busy: Callable[[], bool],
    ) -> None:
        self.runtime = runtime
        self.say = say
        self.busy = busy
        self.manual = manual
        self.stopping = False
        self.tasks: set[asyncio.Task[None]] = set()

    def command_of(self, key: str) -> str | None:
        """The command ``key`` sends now (None: the key does nothing)."""
        key = key.lower()
        if key == "q":
            return "server.shutdown"
        if not self.manual or self.stopping:
            return None
        if key in ("\r", "\n", "n"):
            return "codon.next"
        if key == "s":
            return "codon.skip"
        return None

    def press(self, key: str) -> None:
        """Carries out one key (on the event loop)."""
        command = self.command_of(key)
        if command is None:
            return
        if command == "server.shutdown":
            self.say(self._stopping_words())
            self.stopping = True
        task = asyncio.get_running_loop().create_task(self._send(command))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _stopping_words(self) -> str:
        if self.stopping:
            return "Killing the agent now"
        if self.busy():
            return (
                "Stopping: the agent is asked to stop and a checkpoint is taken "
                "(q or Ctrl-C again to kill it now)"
            )
        return "Stopping the run"

    async def _send(self, command: str) -> None:
        try:
            await self.runtime.command(command)
        except CommandRejectedError as exc:
            self.say(str(exc))


KEY_READ = 64
"""Bytes read from the terminal at once: a paste or an escape sequence is several keys."""


async def _run(runtime: Runtime, *, keys: Keys | None = None) -> RunOutcome:
    """Runs ``runtime``; with ``keys``, keys typed on the terminal steer it."""
    if keys is None:
        return await runtime.run()
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()

    def on_keys() -> None:
        try:
            typed = os.read(fd, KEY_READ)
        except OSError:
            typed = b""
        if not typed:  # the terminal is gone: stop listening, the run goes on
            loop.remove_reader(fd)
            return
        for key in typed.decode(errors="replace"):
            keys.press(key)

    loop.add_reader(fd, on_keys)
    try:
        return await runtime.run()
    finally:
        loop.remove_reader(fd)
