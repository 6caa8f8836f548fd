"""``weft export-trace``: send a finished execution's trace to an OTLP receiver.

The journal is folded by the same :class:`~weft.telemetry.spans.TraceFold` the
live export uses, with the same derived ids, so exporting an execution that was
also exported live (or twice) sends the very same spans: a backend keyed by
trace and span id shows each once. Read-only: no lock, safe beside a live run,
whose unfinished spans say so (``weft.unfinished``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from weft.cli.resolve import EXECUTION_HELP, resolve_execution

NO_SDK = (
    "weft export-trace needs the OpenTelemetry SDK, which is not installed: "
    "install it with `pip install 'weft[otel]'`"
)


def register(commands: Any) -> None:
    """Adds ``export-trace``."""
    parser = commands.add_parser(
        "export-trace",
        help="send an execution's trace (every run) to an OpenTelemetry receiver",
        description="Send the trace of every run of an execution, rebuilt from its journal, "
        "over OTLP/HTTP to --endpoint (default: OTEL_EXPORTER_OTLP_ENDPOINT, else "
        "http://localhost:4318). Ids are derived from the execution and its runs: exporting "
        "again sends the same spans. See docs/telemetry.md.",
    )
    parser.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="the receiver's base URL (/v1/traces is appended), e.g. http://localhost:4318",
    )
    parser.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Sends the trace; exit 1 when the receiver could not take it."""
    import importlib.util

    from weft.telemetry.settings import resolve

    execution = resolve_execution(args.execution)
    env = dict(os.environ)
    if args.endpoint:
        if not args.endpoint.startswith(("http://", "https://")):
            print(
                f"weft: error: --endpoint {args.endpoint!r} is not an http(s) URL "
                "(for example http://localhost:4318)",
                file=sys.stderr,
            )
            return 2
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = args.endpoint
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    settings = resolve(env, flag=True)
    assert settings is not None  # flag=True always turns it on
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        print(f"weft: error: {NO_SDK}", file=sys.stderr)
        return 2
    from weft.telemetry.export import export_journal
    from weft.telemetry.spans import capture_content

    def warn(text: str) -> None:
        print(f"weft: warning: {text}", file=sys.stderr)

    spans, runs, sent = export_journal(
        execution,
        settings,
        workflow=execution.name,
        capture=capture_content(),
        warn=warn,
        env_service=env.get("OTEL_SERVICE_NAME"),
    )
    if not sent:
        return 1
    plural = "" if runs == 1 else "s"
    print(f"sent {spans} spans ({runs} run{plural}) of {execution} to {settings.traces_url}")
    return 0
