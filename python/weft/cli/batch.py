"""``weft batch``: run a batch file's workstreams, and the seed's recovery procedures.

* ``weft batch run FILE [--workers N] [--headless | --json] [--junit OUT]``:
  run (or resume) the batch; exit 0 only when every workstream succeeded,
  1 otherwise, 2 for a bad file, 3 when drained with steps left (the first
  Ctrl-C drains: running steps finish, nothing new starts; the second stops
  at once, leaving them to resume), 128+n when stopped by signal n;
* ``weft batch drain FILE``: drain the coordinator running the batch (in
  another terminal); 1 (refused) when none runs;
* ``weft batch status FILE [--json]``: states, costs, breakers and the audit
  trail (``state_transitions``), plus the consistency check (Recovery 4);
* ``weft batch resume FILE``: continue a batch whose coordinator died
  (Recovery 1), the same as ``run`` on a started batch;
* ``weft batch rebuild FILE``: a new store for a batch whose store was
  refused as damaged, from the batch file and what the step folders prove;
* ``weft batch abandon FILE WS``, ``retry FILE WS/STEP [--reopen]`` and ``skip
  FILE WS/STEP`` (Recovery 2; ``--reopen``: a new attempt of an abandoned
  workstream), ``reset-breaker FILE TOOL`` (Recovery 3): sent to the running
  coordinator through the store's inbox, or applied at once when none runs;
  exit 0 when applied, 1 when refused, 2 for a name the batch lacks;
* ``weft batch schema``: the batch file's JSON Schema;
* ``weft batch validate FILE``: every check ``run`` makes before it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

from weft.clock import iso_from_ms
from weft.terminal import plural, printable

COMMAND_WAIT_S = 10.0
"""How long ``abandon``/``retry``/``reset-breaker`` wait for a running coordinator's answer."""


def register(commands: Any) -> None:
    """Adds the ``batch`` command and its subcommands."""
    parser = commands.add_parser(
        "batch",
        help="run many hank executions as workstreams of steps",
        description="Run a batch file (TOML or JSON): workstreams of steps, each a hank run or "
        "a command, with dependencies, retries, circuit breakers and a state database.",
    )
    sub = parser.add_subparsers(dest="batch_command", metavar="SUBCOMMAND", required=True)

    def with_file(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("file", type=Path, metavar="FILE", help="the batch file (.toml or .json)")
        p.add_argument(
            "--state-dir",
            type=Path,
            help="where the batch store and step folders live "
            "(default: .weft-batch/<file name> beside the file)",
        )
        return p

    for name, text in (
        ("run", "run (or resume) a batch"),
        ("resume", "resume a batch whose coordinator stopped (same as run)"),
    ):
        p = with_file(name, text)
        p.add_argument(
            "--workers",
            type=_positive,
            default=os.cpu_count() or 1,
            help="steps run at once (default: the number of cores)",
        )
        p.add_argument(
            "--engine",
            choices=["local", "ray"],
            default="local",
            help="where steps run: this machine, or a Ray cluster (pip install 'weft[ray]')",
        )
        p.add_argument(
            "--address",
            help="with --engine ray: the cluster to join (default: start a local Ray instance "
            "with --workers CPUs)",
        )
        p.add_argument(
            "--isolate",
            action="store_true",
            help="run each hank step as its own `weft run` process (default: in this process)",
        )
        out = p.add_mutually_exclusive_group()
        out.add_argument("--headless", action="store_true", help="plain timestamped lines (CI)")
        out.add_argument(
            "--json", action="store_true", help="one JSON line per transition, then the summary"
        )
        p.add_argument("--junit", type=Path, metavar="OUT", help="write a JUnit XML report")
        p.add_argument(
            "--otel",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="export the batch's trace (a span per workstream and step, each hank step's "
            "run under its step's) over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (default "
            "http://localhost:4318); on without the flag when that variable is set; "
            "needs weft[otel] (docs/telemetry.md)",
        )
        p.set_defaults(run=run_batch)

    p = with_file(
        "rebuild",
        "rebuild a damaged batch store from the step folders (finished steps are kept)",
    )
    p.set_defaults(run=rebuild)

    p = with_file("status", "show states, costs, breakers and the audit trail")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=status)

    for name, arg, text in (
        ("abandon", "WS", "abandon a workstream"),
        ("retry", "STEP", "start a failed step over (WS/STEP; Recovery 2)"),
        ("skip", "STEP", "count a failed or waiting step as done, so its dependents run"),
        ("reset-breaker", "TOOL", "close a tool's circuit breaker (Recovery 3)"),
    ):
        p = with_file(name, text)
        p.add_argument("target", metavar=arg)
        p.set_defaults(run=send_command, kind=name)
        if name == "retry":
            p.add_argument(
                "--reopen",
                action="store_true",
                help="the step's workstream is abandoned: start a new attempt of it "
                "(audited S_ABANDONED -> S_RUNNING with the attempt number)",
            )

    p = with_file(
        "drain",
        "let the running coordinator finish the steps that run and start nothing new "
        "(it then exits 3; weft batch run goes on)",
    )
    p.set_defaults(run=send_command, kind="drain", target="")

    p = sub.add_parser("schema", help="print the batch file's JSON Schema")
    p.set_defaults(run=schema)

    text = "check a batch file (and every hank it names) without running it"
    p = sub.add_parser("validate", help=text, description=text)
    p.add_argument("file", type=Path, metavar="FILE", help="the batch file (.toml or .json)")
    p.set_defaults(run=validate)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of workers")
    return value


def _state_dir(args: argparse.Namespace) -> Path:
    from weft.batch.coordinator import default_state_dir

    return args.state_dir.resolve() if args.state_dir else default_state_dir(args.file)


def schema(args: argparse.Namespace) -> int:
    """``weft batch schema``."""
    from weft.batch import batch_json_schema

    print(json.dumps(batch_json_schema(), indent=2))
    return 0


def validate(args: argparse.Namespace) -> int:
    """``weft batch validate``: the checks ``run`` makes first (every problem: exit 2)."""
    from weft.batch import load_batch

    plan = load_batch(args.file)
    counts = f"{plural(len(plan.workstreams), 'workstream')}, {plural(len(plan.steps()), 'step')}"
    print(printable(f"valid: {args.file}: {counts}"))
    return 0


def run_batch(args: argparse.Namespace) -> int:
    """``weft batch run`` / ``resume``."""
    from weft.batch import load_batch
    from weft.batch.coordinator import (
        DRAINED_EXIT,
        Coordinator,
        file_sha256,
        record_plan,
        wall_clock_ms,
    )
    from weft.batch.report import overhead, summary, write_junit
    from weft.batch.store import BatchStore

    plan = load_batch(args.file)
    state_dir = _state_dir(args)
    mode = (
        "json" if args.json else "headless" if args.headless or not sys.stdout.isatty() else "live"
    )
    with BatchStore.open(state_dir, writer=True, batch_file=args.file) as store:
        record_plan(store, plan, file_sha256(args.file), wall_clock_ms())
        try:
            trace = _batch_trace(args, plan, state_dir)
            engine = _engine(args)
        except _UsageError as e:
            print(f"weft: error: {e}", file=sys.stderr)
            return 2

        async def main() -> None:
            coordinator = Coordinator(store, engine, workers=args.workers)
            coordinators.append(coordinator)
            if trace is not None:
                coordinator.listeners.append(trace)
                coordinator.step_env, coordinator.on_tick = trace.step_env, trace.on_tick
            elif args.otel is False:
                # --no-otel: the steps' runs (and their agents) export nothing either.
                coordinator.step_env = lambda key, launch: {"OTEL_SDK_DISABLED": "true"}
            _stop_on_signals(coordinator, stopped)
            if mode == "live":
                from weft.cli.batch_view import LiveBatchView

                with LiveBatchView(coordinator) as view:
                    coordinator.listeners.append(view.on_change)
                    await coordinator.run()
            else:
                coordinator.listeners.append(_line_printer(mode))
                await coordinator.run()
            await engine.close()

        stopped: list[int] = []
        coordinators: list[Any] = []
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(main())
        finally:
            if trace is not None:
                trace.close()  # waits a few seconds at most, none when the collector is down
        report = summary(store)
        ran = coordinators[0]
        report["coordinator"] = overhead(store, ran.busy_ns, ran.launched, args.workers)
    if stopped:
        print(
            f"weft: stopped by signal {stopped[0]}; the steps left running resume with: "
            f"weft batch resume {printable(str(args.file))}",
            file=sys.stderr,
        )
        return 128 + stopped[0]
    if args.junit:
        write_junit(report, args.junit)
    if ran.drained:
        report["drained"] = True
    if mode == "json":
        print(json.dumps({"type": "summary", **report}))
    else:
        print(render_summary(report))
    if ran.drained:
        print(
            "weft: drained: the running steps finished and were recorded, nothing new started; "
            f"go on with: weft batch run {printable(str(args.file))}",
            file=sys.stderr,
        )
        return DRAINED_EXIT
    return 0 if report["succeeded"] else 1


def _stop_on_signals(coordinator: Any, stopped: list[int]) -> None:
    """The first SIGINT (Ctrl-C) drains: the running steps finish, nothing new
    starts. A SIGTERM, or a SIGINT while draining, asks the coordinator to stop
    (running steps stay ``S_RUNNING`` for ``resume``); one more ends the process
    at once."""
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stopped:
            os._exit(128 + signum)  # the store is consistent after every commit
        if signum == signal.SIGINT and coordinator.request_drain("Ctrl-C (SIGINT)"):
            print(
                "weft: draining: the running steps finish, nothing new starts; "
                "Ctrl-C again stops now (they resume with weft batch run)",
                file=sys.stderr,
                flush=True,
            )
            return
        stopped.append(signum)
        coordinator.request_stop()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, int(signum))


def _batch_trace(args: argparse.Namespace, plan: Any, state_dir: Path) -> Any:
    """The batch's live trace export (:class:`weft.telemetry.batch.BatchTrace`),
    None when off (then nothing of OpenTelemetry is loaded); ``weft run``'s rules."""
    from weft.telemetry.settings import resolve

    settings = resolve(os.environ, flag=args.otel)
    if settings is None:
        return None
    import importlib.util

    if importlib.util.find_spec("opentelemetry.sdk") is None:
        fix = "install it with `pip install 'weft[otel]'`"
        if args.otel:
            raise _UsageError(f"--otel needs the OpenTelemetry SDK: {fix}")
        print(
            f"weft: warning: {settings.asked_by} asks for traces, but the OpenTelemetry SDK "
            f"is not installed ({fix}); the batch goes on without them",
            file=sys.stderr,
        )
        return None
    from weft.batch.coordinator import wall_clock_ms
    from weft.telemetry.batch import BatchTrace

    def warn(text: str) -> None:
        print(f"weft: warning: {text}", file=sys.stderr, flush=True)

    return BatchTrace(
        settings,
        state_dir=state_dir,
        name=plan.name,
        started_ms=wall_clock_ms(),
        warn=warn,
        tools={step.key: step.tool for step in plan.steps()},
    )


def _engine(args: argparse.Namespace) -> Any:
    from weft.batch.engine import LocalEngine

    if args.engine == "local":
        if args.address:
            raise _UsageError("--address goes with --engine ray")
        return LocalEngine(in_process=not args.isolate)
    try:
        from weft.batch.ray_engine import RayEngine

        return RayEngine(address=args.address, num_cpus=args.workers)
    except ImportError as e:
        raise _UsageError(
            f"the Ray engine needs Ray ({e}); install it with: pip install 'weft[ray]'"
        ) from e


class _UsageError(Exception):
    """A flag combination that cannot work: private, caught in this module (exit 2)."""


def _line_printer(mode: str) -> Any:
    from weft.batch.store import Change

    def on_change(change: Change, now_ms: int) -> None:
        if change.from_state == change.to_state and not change.audit:
            return
        who = "/".join(change.key)
        kind = {"workstreams": "workstream", "steps": "step", "breakers": "breaker"}[change.table]
        note = change.from_state == change.to_state  # written as an audit note, not a move
        if note and mode == "json":
            line = {
                "type": "note",
                "at": iso_from_ms(now_ms),
                kind: who,
                "state": change.to_state,
                "metadata": change.metadata,
            }
            print(json.dumps(line), flush=True)
            return
        if mode == "json":
            line = {
                "type": "transition",
                "at": iso_from_ms(now_ms),
                kind: who,
                "from": change.from_state,
                "to": change.to_state,
                "metadata": change.metadata,
            }
            print(json.dumps(line), flush=True)
            return
        reason = change.metadata.get("reason")
        extra = f" ({reason})" if reason else ""
        if note:
            text = f"{iso_from_ms(now_ms)} {kind} {who}: note, in {change.to_state}: {reason or ''}"
            print(printable(text), flush=True)
            return
        print(
            printable(
                f"{iso_from_ms(now_ms)} {kind} {who}: "
                f"{change.from_state} -> {change.to_state}{extra}"
            ),
            flush=True,
        )

    return on_change


def render_summary(report: dict[str, Any]) -> str:
    """The summary as text."""
    lines = [f"Batch {report['batch']} ({report['state_dir']})"]
    for ws in report["workstreams"]:
        lines.append(
            f"  {ws['id']:<24} {ws['state']:<12} retries {ws['retry_count']}/{ws['max_retries']}"
            f"  ${ws['cost_usd']:.4f}"
        )
        for st in ws["steps"]:
            note = ""
            if st.get("overdue"):
                note = f"  OVERDUE: {st['overdue']}"
            elif st.get("waiting_for_window"):
                w = st["waiting_for_window"]
                note = f"  waiting: {w['provider']} usage window closed until {w['opens_at']}"
            elif st.get("skipped"):
                note = "  skipped by the user"
            elif st.get("blocked_by"):
                note = f"  blocked by {', '.join(st['blocked_by'])}"
            elif st["exit_code"] is not None:
                note = f"  exit {st['exit_code']}"
            lines.append(
                f"    {st['id']:<22} {st['state']:<12} launches {st['launches']}"
                f"  {st['duration_ms'] / 1000:.1f}s  ${st['cost_usd']:.4f}{note}"
            )
    for b in report["breakers"]:
        if b["state"] != "CLOSED" or b["consecutive_failures"]:
            lines.append(
                f"  breaker {b['tool']}: {b['state']} "
                f"({b['consecutive_failures']} consecutive failures)"
            )
    for w in report.get("usage_windows", []):
        waiting = sum(
            1
            for ws in report["workstreams"]
            for st in ws["steps"]
            if st.get("waiting_for_window", {}).get("provider") == w["provider"]
        )
        lines.append(
            f"  usage window {w['provider']}: closed until {w['opens_at']}; "
            f"{plural(waiting, 'step')} waiting for it (no error, no retry spent)"
        )
    for problem in report["problems"]:
        lines.append(f"  inconsistent: {problem}")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(report["workstream_states"].items()))
    lines.append(f"  total ${report['total_cost_usd']:.4f}; workstreams: {counts}")
    return "\n".join(printable(line) for line in lines)


def status(args: argparse.Namespace) -> int:
    """``weft batch status``."""
    from weft.batch.report import summary
    from weft.batch.store import BatchStore

    with BatchStore.open(_state_dir(args), writer=False, batch_file=args.file) as store:
        report = summary(store)
        audit = store.transitions()
        breaker_audit = store.breaker_transitions()
        notes = store.notes()
    if args.json:
        trails = {"transitions": audit, "breaker_transitions": breaker_audit, "notes": notes}
        print(json.dumps({**report, **trails}))
        return 0
    print(render_summary(report))
    print("Audit trail (state_transitions, breaker_transitions and notes, in the order written):")
    for line in render_trail(audit, breaker_audit, notes):
        print(line)
    return 0 if not report["problems"] else 1


def render_trail(
    audit: list[dict[str, Any]],
    breaker_audit: list[dict[str, Any]],
    notes: list[dict[str, Any]] | None = None,
) -> list[str]:
    """The audit tables as one trail, in the order the rows were written: their
    ids are one sequence over the tables (a note reads ``note:``, as it moved
    nothing). Never by time: two rows may share a millisecond, and a step's end
    is stamped when it ended, which can be before a row written just ahead of it."""
    rows: list[tuple[int, str]] = []
    for t in audit:
        who = t["ws_id"] + (f"/{t['step_id']}" if t["step_id"] else "")
        reason = t["metadata"].get("reason", "")
        rows.append((t["id"], f"  {t['at']}  {who:<28} {t['from']} -> {t['to']}  {reason}"))
    for t in breaker_audit:
        reason = t["metadata"].get("reason", "")
        line = f"  {t['at']}  breaker {t['tool']:<20} {t['from']} -> {t['to']}  {reason}"
        rows.append((t["id"], line))
    for n in notes or []:
        who = {"batch": "batch", "breaker": f"breaker {n['name']}"}.get(n["subject"], n["name"])
        reason = n["metadata"].get("reason", "")
        state = f" (in {n['state']})" if n["state"] else ""
        rows.append((n["id"], f"  {n['at']}  {who:<28} note{state}: {reason}"))
    return [printable(line) for _, line in sorted(rows)]


def rebuild(args: argparse.Namespace) -> int:
    """``weft batch rebuild``: a store refused as damaged is set aside and made
    again from the batch file and the step folders; a sound one is left alone."""
    from weft.batch import load_batch
    from weft.batch.coordinator import check_rebuildable, file_sha256, rebuild, wall_clock_ms
    from weft.batch.store import BatchStore
    from weft.errors import StoreError

    plan = load_batch(args.file)
    state_dir = _state_dir(args)
    if not state_dir.is_dir():
        raise StoreError(f"no batch in {state_dir}; run `weft batch run {args.file}`")
    try:
        # As the writer: its checks are the ones `resume` makes.
        BatchStore.open(state_dir, writer=True, batch_file=args.file).close()
    except StoreError as e:
        damage = str(e)
    else:
        print(f"the batch store in {printable(str(state_dir))} is sound; nothing to rebuild")
        return 0
    traces = check_rebuildable(state_dir, plan)
    store, aside = BatchStore.set_aside(state_dir)
    with store:
        result = rebuild(store, plan, file_sha256(args.file), wall_clock_ms(), traces)
    print(printable(f"found: {damage.split('. Resuming would')[0]}"))
    if aside is not None:
        print(printable(f"the damaged files are kept in {aside}"))
    print(
        f"rebuilt: {len(result['kept'])} step(s) proven finished and kept "
        f"({', '.join(result['kept']) or 'none'}); {len(result['again'])} launched before "
        f"without a proven success will run again ({', '.join(result['again']) or 'none'})"
    )
    print(printable(f"continue with: weft batch resume {args.file}"))
    return 0


def send_command(args: argparse.Namespace) -> int:
    """``weft batch abandon|retry|skip|reset-breaker``: 0 when applied, 1 when
    refused (the target is in no state for it), 2 for a target the batch does
    not have; a refusal's reason goes to stderr."""
    from weft.batch.coordinator import REFUSED, apply_commands_offline, wall_clock_ms
    from weft.batch.store import BatchStore
    from weft.errors import StoreError

    state_dir = _state_dir(args)
    if not state_dir.is_dir():
        raise StoreError(f"no batch in {state_dir}; run `weft batch run {args.file}` first")
    with BatchStore.open(state_dir, writer=False, batch_file=args.file) as store:
        unknown = _unknown_target(store, args.kind, args.target)
        if unknown is not None:
            print(printable(f"weft: error: {unknown}"), file=sys.stderr)
            return 2
        kind = "reopen" if getattr(args, "reopen", False) else args.kind
        command_id = store.add_command(kind, args.target, wall_clock_ms())
    applied_here = apply_commands_offline(state_dir) is not None
    # Otherwise a coordinator runs: it applies the inbox within a poll interval.
    deadline = time.monotonic() + (0 if applied_here else COMMAND_WAIT_S)
    with BatchStore.open(state_dir, writer=False) as store:
        while True:
            answer = store.command_result(command_id)
            if answer is not None:
                if answer.startswith(REFUSED):
                    print(printable(f"weft: refused: {answer[len(REFUSED) :]}"), file=sys.stderr)
                    return 1
                print(printable(answer))
                return 0
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    print(f"sent to the running coordinator (command {command_id}); see weft batch status")
    return 0


def _unknown_target(store: Any, kind: str, target: str) -> str | None:
    """Why ``target`` names nothing this batch has (``None``: it names something)."""
    if kind == "drain":
        return None  # the batch itself
    stored = store.load()
    if kind == "reset-breaker":
        tools = [b.tool for b in stored.breakers]
        if target in tools:
            return None
        return f"no breaker for tool {target!r}; known: {_known(tools)}"
    if kind == "abandon":
        names = [w.ws_id for w in stored.workstreams]
        if target in names:
            return None
        return f"no workstream {target!r}; known: {_known(names)}"
    keys = [s.key for s in stored.steps]
    if target in keys:
        return None
    if "/" not in target:
        return f"{kind} takes a step as WS/STEP, not {target!r}; known: {_known(keys)}"
    return f"no step {target!r}; known: {_known(keys)}"


def _known(names: list[str], shown: int = 10) -> str:
    """The first names of a list that may hold a whole matrix's expansion."""
    if not names:
        return "none"
    more = f", and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
