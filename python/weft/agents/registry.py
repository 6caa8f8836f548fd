"""Which program runs a route, and which agent CLIs are installed.

:func:`harness_for` turns a :class:`~weft.agents.harness.Route` into a
:class:`~weft.agents.harness.Harness` with its command resolved:

* a real CLI: ``$WEFT_CLAUDE_BIN`` / ``$WEFT_CODEX_BIN`` / ``$WEFT_GEMINI_BIN``
  (a path, or a command line split like a shell would) if set, else
  ``claude`` / ``codex`` / ``gemini`` on ``PATH``;
* a fake agent (``fake/<model>``): the ``fake-<harness>`` console script
  installed beside the running interpreter, else the one on ``PATH``, else
  ``python -m weft.agents.fake --flavor <harness>`` with this interpreter.

Each adapter module ``weft.agents.<harness>`` provides a class
``<Name>Harness(command, *, fake=False)``; the registry only imports the one
a route needs.

:func:`installed_agents` asks each real CLI for ``--version`` (concurrently,
with a short timeout) for ``weft agents``.
"""

from __future__ import annotations

import importlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weft.agents.harness import AgentStartError, Harness, Route

HARNESSES = ("claude", "codex", "gemini")
"""Every harness Weft has, in display order."""
BINARY = {"claude": "claude", "codex": "codex", "gemini": "gemini"}
"""The real CLI's program name on ``PATH``."""
BIN_ENV = {name: f"WEFT_{name.upper()}_BIN" for name in HARNESSES}
"""The variable that overrides where a real CLI is."""
_CLASSES = {
    "claude": ("weft.agents.claude", "ClaudeHarness"),
    "codex": ("weft.agents.codex", "CodexHarness"),
    "gemini": ("weft.agents.gemini", "GeminiHarness"),
}
VERSION_TIMEOUT = 5.0
"""Seconds a CLI gets to answer ``--version``."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """A command and where it was found."""

    command: list[str]
    source: str
    """``env`` (the ``WEFT_<NAME>_BIN`` override), ``PATH``, ``beside python``
    or ``module``."""


def real_command(name: str, env: Mapping[str, str] | None = None) -> Resolved | None:
    """The real CLI of harness ``name``, or ``None`` when it is not installed."""
    source = os.environ if env is None else env
    override = source.get(BIN_ENV[name], "").strip()
    if override:
        return Resolved(shlex.split(override), "env")
    found = shutil.which(BINARY[name], path=source.get("PATH"))
    return Resolved([found], "PATH") if found else None


def fake_command(name: str, env: Mapping[str, str] | None = None) -> Resolved:
    """The fake agent of harness ``name``'s flavour (always available)."""
    script = f"fake-{name}"
    beside = Path(sys.executable).parent / script
    # The script beside this interpreter runs this very package, and skips
    # version-manager shims that cost a noticeable start-up delay.
    if beside.is_file() and os.access(beside, os.X_OK):
        return Resolved([str(beside)], "beside python")
    source = os.environ if env is None else env
    found = shutil.which(script, path=source.get("PATH"))
    if found:
        return Resolved([found], "PATH")
    return Resolved([sys.executable, "-m", "weft.agents.fake", "--flavor", name], "module")


def harness_class(name: str) -> Any:
    """The adapter class of harness ``name``."""
    if name not in _CLASSES:
        raise AgentStartError(f"unknown harness {name!r}; Weft has {', '.join(HARNESSES)}")
    module_name, class_name = _CLASSES[name]
    try:
        module = importlib.import_module(module_name)
        return getattr(module, class_name)
    except (ImportError, AttributeError) as e:
        raise AgentStartError(f"the {name} harness is not available in this build: {e}") from e


def harness_for(route: Route, env: Mapping[str, str] | None = None) -> Harness:
    """The harness that runs ``route``, its command resolved. Raises
    :class:`~weft.agents.harness.AgentStartError` when the real CLI is not
    installed, saying how to install or point to it."""
    if route.fake:
        command = fake_command(route.harness, env).command
    else:
        resolved = real_command(route.harness, env)
        if resolved is None:
            raise AgentStartError(
                f"model {route.model!r} runs on {route.harness}, but `{BINARY[route.harness]}` "
                f"is not on PATH: install it, set {BIN_ENV[route.harness]} to its path, or use "
                f"fake/{route.model} to run the fake agent"
            )
        command = resolved.command
    harness: Harness = harness_class(route.harness)(command, fake=route.fake)
    return harness


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """What ``weft agents`` reports about one real CLI."""

    name: str
    command: list[str] | None
    """``None``: not installed."""
    source: str | None
    version: str | None = None
    error: str | None = None
    """Why ``--version`` gave no answer."""


def installed_agents(
    env: Mapping[str, str] | None = None, timeout: float = VERSION_TIMEOUT
) -> list[AgentInfo]:
    """Every real CLI Weft can drive: where it is and its ``--version``."""

    def probe(name: str) -> AgentInfo:
        resolved = real_command(name, env)
        if resolved is None:
            return AgentInfo(name, None, None)
        version, error = cli_version(resolved.command, timeout)
        return AgentInfo(name, resolved.command, resolved.source, version, error)

    with ThreadPoolExecutor(max_workers=len(HARNESSES)) as pool:
        return list(pool.map(probe, HARNESSES))


def cli_version(
    command: Sequence[str], timeout: float = VERSION_TIMEOUT
) -> tuple[str | None, str | None]:
    """``(version, None)`` from ``<command> --version``, or ``(None, why)``."""
    try:
        proc = subprocess.Popen(
            [*command, "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        return None, f"cannot run {command[0]}: {e.strerror or e}"
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Its own group: a Node CLI's helpers go too.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, f"no answer to --version within {timeout:g} s"
    text = out.decode("utf-8", "replace").strip() or err.decode("utf-8", "replace").strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if proc.returncode != 0:
        return None, f"--version exited {proc.returncode}" + (f": {first[:200]}" if first else "")
    return (first[:200] or None), (None if first else "--version printed nothing")
