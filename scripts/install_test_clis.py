"""Install the pinned real agent CLIs the test suite drives, and say where they are.

The real Claude Code and Codex binaries ship inside two PyPI wheels:

* ``claude-agent-sdk==0.2.187`` bundles Claude Code 2.1.330 at
  ``claude_agent_sdk/_bundled/claude``;
* ``openai-codex-cli-bin==0.163.0`` ships ``codex`` at ``codex_cli_bin/bin/codex``.

Each wheel is installed with ``pip install --no-deps --target`` into its own folder
under the tools folder (``$WEFT_TEST_TOOLS``, default ``~/.cache/weft-test-tools``),
outside the project's venv: the binaries need none of the wheels' Python
dependencies, and the cache survives a fresh checkout. A folder that already holds
its binary is left alone, so a second run costs a few milliseconds. An install goes
to a temporary folder first and is renamed into place, so an interrupted download
never leaves a half folder that looks installed.

``make test`` runs this script before pytest; the tests import :func:`binaries`
from it (``tests/agents/real/``), so the location is defined once, here.

Usage: ``python scripts/install_test_clis.py [--check]`` (``--check``: install
nothing, exit 1 if a binary is missing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pin:
    """One pinned wheel and where its binary sits inside it."""

    name: str
    """The CLI (``claude``, ``codex``)."""
    package: str
    version: str
    binary: str
    """The binary's path inside the ``--target`` folder."""
    cli_version: str
    """What ``<binary> --version`` must print (the pin's CLI version)."""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def folder(self) -> str:
        """The pin's folder under :func:`tools_dir` (a new pin gets a new folder)."""
        return f"{self.package}-{self.version}"


PINS = (
    Pin("claude", "claude-agent-sdk", "0.2.187", "claude_agent_sdk/_bundled/claude", "2.1.330"),
    Pin("codex", "openai-codex-cli-bin", "0.163.0", "codex_cli_bin/bin/codex", "0.163.0"),
)


def tools_dir() -> Path:
    """Where the pinned wheels are installed (``$WEFT_TEST_TOOLS`` or the user cache)."""
    configured = os.environ.get("WEFT_TEST_TOOLS")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "weft-test-tools"


def binary_path(pin: Pin) -> Path:
    """Where ``pin``'s binary is once installed."""
    return tools_dir() / pin.folder / pin.binary


def binaries() -> dict[str, Path]:
    """The installed binaries by CLI name; a missing one is left out."""
    found = {}
    for pin in PINS:
        path = binary_path(pin)
        if path.is_file() and os.access(path, os.X_OK):
            found[pin.name] = path
    return found


def install(pin: Pin) -> Path:
    """Install ``pin`` unless its binary is already there; returns the binary."""
    path = binary_path(pin)
    if path.is_file():
        return path
    root = tools_dir()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{pin.folder}-", dir=root))
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-compile",
                "--target",
                str(staging),
                pin.requirement,
            ],
            check=True,
        )
        if not (staging / pin.binary).is_file():
            raise SystemExit(f"{pin.requirement} installed, but it has no {pin.binary}")
        staging.rename(root / pin.folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def version(path: Path) -> str:
    """The first line ``<binary> --version`` prints."""
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    status = 0
    for pin in PINS:
        path = binary_path(pin)
        if not check:
            try:
                path = install(pin)
            except subprocess.CalledProcessError as e:
                print(f"error: pip could not install {pin.requirement} ({e})", file=sys.stderr)
                return 1
        if not path.is_file():
            print(
                f"{pin.name}: missing ({path}); run scripts/install_test_clis.py", file=sys.stderr
            )
            status = 1
            continue
        seen = version(path)
        if pin.cli_version not in seen:
            print(f"{pin.name}: {path} says {seen!r}, expected {pin.cli_version}", file=sys.stderr)
            status = 1
            continue
        print(f"{pin.name} {seen} ({pin.requirement}) at {path}")
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
