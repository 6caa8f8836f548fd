"""The Claude Code adapter (reference agent-cli-protocols §1, §4-§6).

:class:`ClaudeHarness` runs::

    claude -p --output-format stream-json --verbose --model <m>
           --permission-mode bypassPermissions [--append-system-prompt <text>]
           [--max-turns N] [--max-budget-usd X] [--resume=<id>]    (prompt on stdin)

The parser of its NDJSON stdout is :mod:`weft.agents.claude_parser` (the wire
Structs in :mod:`weft.agents.claude_wire`, the verdict's word lists in
:mod:`weft.agents.claude_verdict`, transcripts in
:mod:`weft.agents.claude_transcripts`).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence

from weft.agents.adapter_parts import child_env
from weft.agents.claude_parser import ClaudeParser
from weft.agents.claude_transcripts import claude_config_dir
from weft.agents.harness import SessionSpec
from weft.agents.process import (
    FAKE_AGENT_PREFIX,
    MAX_LINE_BYTES,
    EnvPolicy,
    SubprocessSession,
    spawn,
)

# -- the harness ---------------------------------------------------------------------------

CLAUDE_ENV = EnvPolicy(
    names=frozenset(
        {
            "CLAUDE_CONFIG_DIR",
            "MAX_THINKING_TOKENS",
            "API_TIMEOUT_MS",
            "BASH_DEFAULT_TIMEOUT_MS",
            "BASH_MAX_TIMEOUT_MS",
            "MCP_TIMEOUT",
            "MCP_TOOL_TIMEOUT",
            "DISABLE_AUTOUPDATER",
            "DISABLE_TELEMETRY",
            "DISABLE_ERROR_REPORTING",
        }
    ),
    prefixes=("ANTHROPIC_", "CLAUDE_CODE_"),
    remove=frozenset({"CLAUDECODE"}),
)
"""What the Claude CLI gets from Weft's environment (besides the base set)."""
_BEDROCK_PREFIXES = ("AWS_",)
_VERTEX_NAMES = frozenset({"CLOUD_ML_REGION", "GOOGLE_APPLICATION_CREDENTIALS", "GCLOUD_PROJECT"})


def claude_env_policy(parent: Mapping[str, str], *, fake: bool = False) -> EnvPolicy:
    """:data:`CLAUDE_ENV`, plus cloud credentials when the parent selects
    Bedrock (``CLAUDE_CODE_USE_BEDROCK``) or Vertex (``CLAUDE_CODE_USE_VERTEX``),
    plus the fake agent's knobs when the fake runs."""
    names, prefixes = set(CLAUDE_ENV.names), list(CLAUDE_ENV.prefixes)
    if parent.get("CLAUDE_CODE_USE_BEDROCK"):
        prefixes.extend(_BEDROCK_PREFIXES)
    if parent.get("CLAUDE_CODE_USE_VERTEX"):
        names |= _VERTEX_NAMES
    if fake:
        prefixes.append(FAKE_AGENT_PREFIX)
    return EnvPolicy(names=frozenset(names), prefixes=tuple(prefixes), remove=CLAUDE_ENV.remove)


class ClaudeHarness:
    """Runs Claude Code (or the fake agent in its Claude flavour)."""

    name = "claude"

    def __init__(
        self,
        command: Sequence[str] = ("claude",),
        *,
        fake: bool = False,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.command = list(command)
        """The program and any leading arguments (``[python, -m, ...]``)."""
        self.fake = fake
        self.max_line_bytes = max_line_bytes
        """Longer stdout lines are counted and skipped (still in the log)."""

    def argv(self, spec: SessionSpec) -> list[str]:
        """The command line of §1.1; the prompt goes on stdin, so no variadic
        flag can swallow it."""
        argv = [
            *self.command,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            spec.model,
            "--permission-mode",
            "bypassPermissions",
        ]
        if spec.append_system_prompt:
            argv += ["--append-system-prompt", spec.append_system_prompt]
        if spec.max_turns is not None:
            argv += ["--max-turns", str(spec.max_turns)]
        if spec.max_budget_usd is not None:
            argv += ["--max-budget-usd", f"{spec.max_budget_usd:g}"]
        if spec.resume_session_id:
            # The = form: --resume takes an optional value, so a separate one
            # starting with "-" would be read as a flag.
            argv.append(f"--resume={spec.resume_session_id}")
        argv += spec.extra_args
        return argv

    def env(self, spec: SessionSpec, parent: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment (see :func:`weft.agents.process.build_env`)."""
        source = os.environ if parent is None else parent
        return child_env(claude_env_policy(source), spec, source, fake=self.fake)

    def parser(self, spec: SessionSpec, env: Mapping[str, str]) -> ClaudeParser:
        """A parser for one session of ``spec``."""
        return ClaudeParser(
            cwd=spec.cwd,
            config_dir=claude_config_dir(env),
            resume_session_id=spec.resume_session_id,
        )

    async def start(self, spec: SessionSpec) -> SubprocessSession:
        """Spawn the CLI for ``spec``."""
        env = self.env(spec)
        return await spawn(
            self.argv(spec),
            parser=self.parser(spec, env),
            cwd=spec.cwd,
            env=env,
            stdin=spec.prompt.encode("utf-8"),
            timeouts=spec.timeouts,
            log_path=spec.log_path,
            max_line_bytes=self.max_line_bytes,
            name="fake-claude" if self.fake else "claude",
            # Claude Code answers SIGINT with an aborted_streaming result that
            # carries the spend so far (and exits 0); on SIGTERM it prints
            # nothing, so a stopped or timed-out codon would be billed $0.
            stop_signal=signal.SIGINT,
        )
