"""Where Claude Code keeps a session's transcript (reference
agent-cli-protocols §1.9): the parser checks which id of a resume chain has
one, and the harness finds the config dir for the child's environment.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path


def sanitize_project_dir(cwd: Path) -> str:
    """The directory name Claude Code files a cwd's transcripts under: the
    real path, NFC, every non-alphanumeric character as ``-`` (longer than
    200 characters: the first 200, ``-`` and a hash only the CLI knows)."""
    real = unicodedata.normalize("NFC", os.path.realpath(cwd))
    return re.sub(r"[^a-zA-Z0-9]", "-", real)


def transcript_path(config_dir: Path, cwd: Path, session_id: str) -> Path | None:
    """The transcript of ``session_id`` if it exists."""
    name = sanitize_project_dir(cwd)
    projects = config_dir / "projects"
    if len(name) <= 200:
        path = projects / name / f"{session_id}.jsonl"
        return path if path.is_file() else None
    try:
        dirs = [d for d in projects.iterdir() if d.name.startswith(name[:200] + "-")]
    except OSError:
        return None
    for d in dirs:
        path = d / f"{session_id}.jsonl"
        if path.is_file():
            return path
    return None


def claude_config_dir(env: Mapping[str, str]) -> Path:
    """Where the CLI keeps its transcripts for this environment."""
    configured = env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured)
    return Path(env.get("HOME") or Path.home()) / ".claude"


def agent_config_dirs(env: Mapping[str, str]) -> list[Path]:
    """Every folder where an agent Weft starts in ``env`` may keep Claude Code
    transcripts (``WEFT_<X>`` reaches the agent as ``X``), the ones that hold
    a ``projects/`` folder, without duplicates."""
    found: list[Path] = []
    for name in ("WEFT_CLAUDE_CONFIG_DIR", "CLAUDE_CONFIG_DIR"):
        if env.get(name):
            found.append(Path(env[name]).expanduser())
    for home in (env.get("WEFT_HOME"), env.get("HOME")):
        if home:
            found.append(Path(home) / ".claude")
    return list({c: None for c in found if (c / "projects").is_dir()})
