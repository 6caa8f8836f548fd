"""Test support: a runner that spawns the fake agents as real subprocesses
with an isolated environment (no line delay, private config directories for
transcripts and sessions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BASE_ARGS = {
    "claude": ["-p", "--output-format", "stream-json", "--verbose"],
    "codex": ["exec", "--json", "--skip-git-repo-check"],
    "gemini": ["-o", "stream-json"],
}


class Result:
    """A finished fake run."""

    def __init__(self, code: int, out: bytes, err: bytes) -> None:
        self.code = code
        self.out = out
        self.err = err

    @property
    def text(self) -> str:
        """Stdout decoded."""
        return self.out.decode("utf-8")

    @property
    def stderr(self) -> str:
        """Stderr decoded."""
        return self.err.decode("utf-8", "replace")

    @property
    def lines(self) -> list[dict[str, Any]]:
        """The JSON lines of stdout (lines not starting with ``{`` skipped)."""
        out = []
        for raw in self.out.split(b"\n"):
            stripped = raw.strip()
            if stripped.startswith(b"{"):
                out.append(json.loads(stripped))
        return out


class Fake:
    """Runs the fake agents in a private work directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root / "work"
        self.cwd.mkdir()
        self.claude_dir = root / "claude-config"
        self.codex_home = root / "codex-home"
        self.gemini_home = root / "gemini-home"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("FAKE_AGENT_", "ANTHROPIC_", "CLAUDE", "CODEX_", "GEMINI_"))
        }
        env.update(
            FAKE_AGENT_LINE_DELAY_MS="0",
            CLAUDE_CONFIG_DIR=str(self.claude_dir),
            CODEX_HOME=str(self.codex_home),
            GEMINI_CLI_HOME=str(self.gemini_home),
        )
        self.env = env

    def command(self, flavour: str) -> list[str]:
        """The command that starts ``flavour``."""
        return [sys.executable, "-m", "weft.agents.fake", "--flavor", flavour]

    def environ(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        """The child environment with ``extra`` applied."""
        env = dict(self.env)
        env.update(extra or {})
        return env

    def run(
        self,
        flavour: str,
        *args: str,
        stdin: str | bytes | None = b"",
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60,
    ) -> Result:
        """Run to completion; ``stdin=None`` gives the child /dev/null."""
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        done = subprocess.run(
            [*self.command(flavour), *args],
            input=data,
            stdin=subprocess.DEVNULL if data is None else None,
            capture_output=True,
            env=self.environ(env),
            cwd=cwd or self.cwd,
            timeout=timeout,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def spawn(
        self,
        flavour: str,
        *args: str,
        stdin: bytes = b"go",
        env: Mapping[str, str] | None = None,
        stderr: int | None = subprocess.PIPE,
    ) -> subprocess.Popen[bytes]:
        """Start a run and return it with stdin already written and closed."""
        proc = subprocess.Popen(
            [*self.command(flavour), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=self.environ(env),
            cwd=self.cwd,
        )
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
        proc.stdin = None
        return proc

    def claude(self, prompt: str, *args: str, env: Mapping[str, str] | None = None) -> Result:
        """``claude -p --output-format stream-json --verbose ...`` with the prompt on stdin."""
        return self.run("claude", *BASE_ARGS["claude"], *args, stdin=prompt, env=env)

    def codex(self, prompt: str, *args: str, env: Mapping[str, str] | None = None) -> Result:
        """``codex exec --json --skip-git-repo-check ... -`` with the prompt on stdin."""
        return self.run("codex", *BASE_ARGS["codex"], *args, "-", stdin=prompt, env=env)

    def gemini(self, prompt: str, *args: str, env: Mapping[str, str] | None = None) -> Result:
        """``gemini -p "" -o stream-json ...`` with the prompt on stdin."""
        return self.run("gemini", "-p", "", *BASE_ARGS["gemini"], *args, stdin=prompt, env=env)

    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        """The Claude transcript entries of ``session_id`` in the work directory."""
        from weft.agents.fake.claude_session import sanitize_cwd

        path = self.claude_dir / "projects" / sanitize_cwd(str(self.cwd)) / f"{session_id}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def transcript_path(self, session_id: str) -> Path:
        """Where the Claude transcript of ``session_id`` lives."""
        from weft.agents.fake.claude_session import sanitize_cwd

        return self.claude_dir / "projects" / sanitize_cwd(str(self.cwd)) / f"{session_id}.jsonl"
