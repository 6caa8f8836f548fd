"""Start-up stays short (issue 35, "Start fast"): what ``weft run`` defers.

``weft run`` of a hank without sentinels or front-matter, into a pipe, never
needs the sentinel machinery, PyYAML, rich's live table or the WebSocket
client; these tests run real commands in fresh interpreters and read
``sys.modules`` at their end, so a module-level import that brings one back
fails here instead of silently costing start-up time (``benches/test_bench_startup.py``
measures what it costs). ``tests/cli/test_conventions.py`` holds the reading
commands' own list (no run machinery at all).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.runtime.hanks import codon, subprocess_environment, write_hank

DEFERRED_BY_RUN = (
    "yaml",
    "weft.sentinels.manager",
    "weft.sentinels.config",
    "weft.sentinels.providers",
    "weft.sentinels.template",
    "weft.sentinels.checks",
    "rich",
    "weft.cli.view.live",
    "weft.client",
    "websockets.asyncio.client",
    "opentelemetry",
    "weft.telemetry.spans",
    "weft.telemetry.export",
    "weft.telemetry.sink",
    "weft.telemetry.metrics",
)
"""Loaded only by a hank that needs them (sentinels, front-matter), a live
table on a terminal, ``weft attach``, or trace export (issue 38: with it off,
nothing of OpenTelemetry is imported)."""

HEAVY_FOR_READERS = (
    *DEFERRED_BY_RUN,
    "asyncio",
    "pygit2",
    "websockets",
    "weft.config",
    "weft.sentinels",
)

_MODULES_AT_END = (
    "import sys; from weft.cli import main\n"
    "code = main(sys.argv[2:])\n"
    "watched = sys.argv[1].split(',')\n"
    "print('loaded:' + ','.join(m for m in sys.modules "
    "if any(m == w or m.startswith(w + '.') for w in watched)))\n"
    "sys.exit(code)"
)


def _loaded(
    watched: tuple[str, ...], *argv: str | Path, env: dict[str, str], cwd: Path
) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """The modules of ``watched`` (or under them) loaded when ``weft ARGV`` ends."""
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_AT_END, ",".join(watched), *map(str, argv)],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "loaded:" in done.stdout, done.stderr
    loaded = done.stdout.rsplit("loaded:", 1)[1].strip()
    return sorted(m for m in loaded.split(",") if m), done


def test_run_of_a_plain_hank_loads_none_of_the_deferred_modules(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "project", codon("a"))
    env = subprocess_environment(tmp_path)
    loaded, done = _loaded(DEFERRED_BY_RUN, "run", hank, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "All codons completed" in done.stdout  # the agent ran: the whole run is covered
    assert loaded == [], f"weft run loaded {loaded}"


def test_run_still_loads_what_a_hank_asks_for(tmp_path: Path) -> None:
    """The same watch sees the modules come back when they are needed: a prompt
    file with front-matter loads PyYAML (so the test above can fail)."""
    hank = write_hank(
        tmp_path / "project",
        codon("a", prompt_file="a.md"),
        files={"a.md": "---\nname: a\n---\nWork on a.\n"},
    )
    env = subprocess_environment(tmp_path)
    loaded, done = _loaded(("yaml",), "run", hank, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "yaml" in loaded


def test_run_loads_opentelemetry_only_when_traces_are_exported(tmp_path: Path) -> None:
    """The same watch sees OpenTelemetry come back with ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (so the test above can fail); nothing listens there, which changes nothing."""
    hank = write_hank(tmp_path / "project", codon("a"))
    env = {**subprocess_environment(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    loaded, done = _loaded(
        ("opentelemetry.sdk", "weft.telemetry.sink"), "run", hank, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "opentelemetry.sdk" in loaded
    assert "weft.telemetry.sink" in loaded


def test_reading_commands_load_none_of_the_heavy_modules(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "project", codon("a"))
    env = subprocess_environment(tmp_path)
    made = subprocess.run(
        [sys.executable, "-m", "weft", "run", str(hank)],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr + made.stdout
    (execution,) = (tmp_path / "managed").iterdir()
    for argv in (["status", execution], ["ls"], ["logs", execution]):
        loaded, done = _loaded(HEAVY_FOR_READERS, *argv, env=env, cwd=tmp_path)
        assert done.returncode == 0, (argv, done.stderr)
        assert loaded == [], f"weft {argv[0]} loaded {loaded}"


def test_the_adapters_error_patterns_compile_on_first_use() -> None:
    """Importing the Claude adapter (done before every first agent) compiles
    none of the error patterns, which are read only when a session fails."""
    code = (
        "import math, re\n"
        "import weft.agents.events  # what the module imports, with patterns of its own\n"
        "compiled = []\n"
        "real = re.compile\n"
        "re.compile = lambda *a, **k: compiled.append(a[0]) or real(*a, **k)\n"
        "import weft.agents.vendor_errors as v\n"
        "print(len(compiled))\n"
        "assert v.classify_api_error('429 Too Many Requests') is not None\n"
        "print(len(compiled))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    at_import, after_use = map(int, done.stdout.split())
    assert at_import == 0
    assert after_use >= 1
