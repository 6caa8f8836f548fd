"""Claude Code's sessions on disk (§1.6, §1.9): the project directory of a
working directory, transcript files, and which session a run resumes."""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterable

from weft.agents.fake.common import CliError, Clock, JsonObj, git_branch
from weft.agents.fake.output import dumps

# -- paths -------------------------------------------------------------------------------------


def config_dir() -> str:
    """``$CLAUDE_CONFIG_DIR`` or ``~/.claude``."""
    return os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")


def _java_hash36(text: str) -> str:
    value = 0
    for char in text:
        value = (value * 31 + ord(char)) & 0xFFFFFFFF
    if value >= 1 << 31:
        value -= 1 << 32
    value = abs(value)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
        if value == 0:
            return out


def sanitize_cwd(cwd: str) -> str:
    """The project directory name for ``cwd`` (§1.9): the NFC realpath with
    every non-alphanumeric character replaced by ``-``; beyond 200
    characters, the first 200, ``-`` and a hash."""
    name = re.sub(r"[^A-Za-z0-9]", "-", unicodedata.normalize("NFC", os.path.realpath(cwd)))
    if len(name) > 200:
        name = name[:200] + "-" + _java_hash36(name)
    return name


def project_dir(cwd: str) -> str:
    """Where the transcripts of sessions started in ``cwd`` live."""
    return os.path.join(config_dir(), "projects", sanitize_cwd(cwd))


# -- transcripts -------------------------------------------------------------------------------


class Transcript:
    """Appends §1.9 entries to one session file (or nowhere)."""

    def __init__(
        self,
        path: str | None,
        session_id: str,
        cwd: str,
        version: str,
        clock: Clock,
        parent: str | None = None,
    ) -> None:
        self.path = path
        self.session_id = session_id
        self.cwd = cwd
        self.version = version
        self.clock = clock
        self.parent = parent
        self.branch = git_branch(cwd)

    def add(
        self,
        kind: str,
        uuid: str,
        fields: JsonObj,
        *,
        sidechain: bool = False,
    ) -> None:
        """Append one entry (``fields`` carries ``message`` and friends)."""
        if self.path is None:
            return
        entry: JsonObj = {
            "parentUuid": self.parent,
            "isSidechain": sidechain,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": self.version,
            "gitBranch": self.branch,
            "type": kind,
        }
        entry.update(fields)
        entry["uuid"] = uuid
        entry["timestamp"] = self.clock.iso()
        self.parent = uuid
        self.write_raw([dumps(entry)])

    def write_raw(self, lines: Iterable[bytes]) -> None:
        """Append already-encoded lines."""
        if self.path is None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "ab") as fh:
            for line in lines:
                fh.write(line + b"\n")


def load_transcript(path: str) -> list[JsonObj]:
    """The entries of a transcript file (corrupt lines skipped)."""
    entries: list[JsonObj] = []
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


def last_prompt(entries: list[JsonObj]) -> str | None:
    """The most recent user prompt of a transcript (not a tool result, not a
    subagent's)."""
    for entry in reversed(entries):
        if entry.get("type") != "user" or entry.get("isSidechain") or entry.get("isMeta"):
            continue
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [
                b.get("text", "")
                for b in content
                if isinstance(b, dict) and b.get("type") == "text"
            ]
            if texts and not any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content
            ):
                return "\n".join(str(t) for t in texts)
    return None


def count_prompts(entries: list[JsonObj]) -> int:
    """How many user prompts a transcript holds (tool results, meta lines and
    subagents' prompts do not count)."""
    count = 0
    for entry in entries:
        if entry.get("type") != "user" or entry.get("isSidechain") or entry.get("isMeta"):
            continue
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) or (
            isinstance(content, list)
            and not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        ):
            count += 1
    return count


class Session:
    """Which id the run reports, where its transcript goes, what it resumes."""

    def __init__(self) -> None:
        self.session_id = ""
        self.file_id = ""
        self.path: str | None = None
        self.previous_prompt: str | None = None
        self.parent: str | None = None
        self.missing = False
        self.copy_from: list[JsonObj] = []
        self.history: list[JsonObj] = []
        """The resumed session's entries when this run continues that session
        (its cost so far counts in the run's cumulative figures)."""


def resolve_session(
    cwd: str,
    *,
    resume: str | None,
    continue_: bool,
    session_id: str | None,
    fork: bool,
    resume_mode: str,
    new_id: Callable[[], str],
) -> Session:
    """Decide the session of a run from its flags (§1.6, §7.2 items 7-8).

    Raises :class:`CliError` for a pre-assigned id that is taken and for
    ``--continue`` with nothing to continue; an unknown ``--resume`` id is
    not an error here (:attr:`Session.missing`), the run reports it."""
    session = Session()
    folder = project_dir(cwd)
    target = resume
    if continue_ and not target:
        try:
            files = [f for f in os.listdir(folder) if f.endswith(".jsonl")]
        except OSError:
            files = []
        if not files:
            raise CliError("No conversation found to continue")
        files.sort(key=lambda f: os.path.getmtime(os.path.join(folder, f)))
        target = files[-1][: -len(".jsonl")]
    if target is None:
        session.session_id = session.file_id = session_id or new_id()
        path = os.path.join(folder, f"{session.session_id}.jsonl")
        if session_id is not None and os.path.exists(path):
            raise CliError(f"Error: Session ID {session_id} is already in use.")
        session.path = path
        return session
    old_path = os.path.join(folder, f"{target}.jsonl")
    if not os.path.exists(old_path):
        session.missing = True
        session.session_id = session.file_id = target
        return session
    entries = load_transcript(old_path)
    session.previous_prompt = last_prompt(entries)
    mode = "new" if fork else resume_mode
    if mode == "new":
        session.session_id = session.file_id = session_id or new_id()
        session.path = os.path.join(folder, f"{session.session_id}.jsonl")
        session.copy_from = entries
    elif mode == "tag":
        session.session_id = new_id()
        session.file_id = target
        session.path = old_path
    else:
        session.session_id = session.file_id = target
        session.path = old_path
    if mode != "new":
        session.history = entries
    if entries:
        uuid = entries[-1].get("uuid")
        session.parent = uuid if isinstance(uuid, str) else None
    return session
