"""The usage totals of a Codex thread (reference agent-cli-protocols §2.3).

Codex reports usage as the thread's running total, earlier sessions of a
resumed thread included. The parser reports the growth past the total the
thread had when the session started, which comes from the thread's rollout
file under ``$CODEX_HOME/sessions/`` (the CLI's own record), else from the
totals this process saw (:class:`ThreadUsageLedger`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from weft.agents.events import Tokens
from weft.agents.harness import decode_lossy

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ThreadTotal:
    """A Codex thread's cumulative usage as ``turn.completed`` reports it."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0

    def covers(self, earlier: ThreadTotal) -> bool:
        """Whether this total can follow ``earlier`` (no field went down)."""
        return (
            self.input_tokens >= earlier.input_tokens
            and self.cached_input_tokens >= earlier.cached_input_tokens
            and self.output_tokens >= earlier.output_tokens
        )

    def minus(self, earlier: ThreadTotal) -> Tokens:
        """What was used since ``earlier``, in Weft's token shape: the cached
        subset of the input moves to ``cache_read``."""
        spent_in = self.input_tokens - earlier.input_tokens
        cached = self.cached_input_tokens - earlier.cached_input_tokens
        cached = min(cached, spent_in)
        return Tokens(
            input=spent_in - cached,
            output=self.output_tokens - earlier.output_tokens,
            cache_read=cached,
        )


class ThreadUsageLedger:
    """The last usage total seen for each Codex thread, in this process: the
    baseline of the thread's next session when its rollout file has none."""

    def __init__(self) -> None:
        self._totals: dict[str, ThreadTotal] = {}

    def get(self, thread_id: str) -> ThreadTotal | None:
        """The last total recorded for ``thread_id``."""
        return self._totals.get(thread_id)

    def record(self, thread_id: str, total: ThreadTotal) -> None:
        """Note the total ``thread_id`` just reported."""
        self._totals[thread_id] = total


class _RolloutUsage(msgspec.Struct):
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0


class _RolloutInfo(msgspec.Struct):
    total_token_usage: _RolloutUsage | None = None


class _RolloutPayload(msgspec.Struct):
    type: str = ""
    info: _RolloutInfo | None = None


class _RolloutLine(msgspec.Struct):
    type: str = ""
    payload: _RolloutPayload | None = None


_rollout_decoder = msgspec.json.Decoder(_RolloutLine)


def codex_home(env: Mapping[str, str]) -> Path:
    """Where Codex keeps its sessions: ``$CODEX_HOME``, else ``~/.codex``."""
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"])
    return Path(env.get("HOME") or Path.home()) / ".codex"


def rollout_files(home: Path, thread_id: str) -> list[Path]:
    """The rollout files of ``thread_id``
    (``sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``), oldest first."""
    return sorted((home / "sessions").glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))


def rollout_thread_total(home: Path, thread_id: str) -> ThreadTotal | None:
    """The thread's last usage total as its rollout records it (the
    ``event_msg`` / ``token_count`` rows), or ``None`` when there is no
    rollout or it records no usage. Blocking: run it off the event loop."""
    last: ThreadTotal | None = None
    for path in rollout_files(home, thread_id):
        try:
            data = path.read_bytes()
        except OSError as e:
            _log.info("cannot read the codex rollout %s: %s", path, e.strerror)
            continue
        for line in data.splitlines():
            if b"token_count" not in line:
                continue
            try:
                row = decode_lossy(_rollout_decoder.decode, line)
            except msgspec.DecodeError:
                continue
            payload = row.payload
            if payload is None or payload.type != "token_count" or payload.info is None:
                continue
            usage = payload.info.total_token_usage
            if usage is not None:
                last = ThreadTotal(
                    usage.input_tokens, usage.cached_input_tokens, usage.output_tokens
                )
    return last
