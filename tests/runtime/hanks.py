"""Small hanks on the fake agent, and readers for what a run leaves behind.

The runtime tests build a hank per test in ``tmp_path`` and assert on the real
artefacts: the recovered state (the store opened read-only), the journal, the
argv the fake agent recorded, the checkpoint commits (read with pygit2, not
with Weft's checkpoint code) and the workspace files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
import pytest

from weft.store import ExecutionStore

FAKE_KNOBS = (
    "FAKE_AGENT_SCENARIO",
    "FAKE_AGENT_SCRIPT",
    "FAKE_AGENT_RECORD",
    "FAKE_AGENT_SIGTERM",
    "FAKE_AGENT_RESUME_MODE",
    "FAKE_AGENT_START_DELAY_MS",
    "FAKE_AGENT_SEED",
    "FAKE_AGENT_OMIT_COST",
)
"""Fake-agent variables a developer's shell might set; the tests clear them."""


# --------------------------------------------------------------------------- prompts


def write_file(path: str, content: str) -> str:
    """A directive that makes the fake write exactly ``content`` to ``path``."""
    return f"@@fake:write path={path} content={json.dumps(content)}@@\n"


def delete_file(path: str) -> str:
    """A directive that makes the fake delete ``path``."""
    return f"@@fake:delete path={path}@@\n"


def scenario(name: str) -> str:
    """A directive choosing the fake's scenario."""
    return f"@@fake:scenario={name}@@\n"


# --------------------------------------------------------------------------- hank documents


def codon(
    ident: str,
    prompt: str = "",
    *,
    model: str = "fake/sonnet",
    mode: str = "fresh",
    files: Iterable[str] = ("**/*.md",),
    record: Path | None = None,
    prompt_file: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A codon running the fake agent on ``prompt`` (or on the hank's file
    ``prompt_file``, which a test can rewrite between runs without changing
    the hank).

    ``record`` makes the fake write its argv, prompt and environment to that
    JSON file (through the codon's ``env``, so each codon can have its own).
    """
    out: dict[str, Any] = {
        "id": ident,
        "name": f"Codon {ident}",
        "model": model,
        "continuationMode": mode,
        "checkpointedFiles": list(files),
    }
    if prompt_file is not None:
        out["promptFile"] = prompt_file
    else:
        out["promptText"] = prompt or f"Work on {ident}.\n"
    if record is not None:
        out["env"] = {**fields.pop("env", {}), "FAKE_AGENT_RECORD": str(record)}
    out.update(fields)
    return out


def loop(ident: str, *codons: dict[str, Any], limit: int = 3) -> dict[str, Any]:
    """A loop of ``limit`` iterations around ``codons``."""
    return {
        "type": "loop",
        "id": ident,
        "name": f"Loop {ident}",
        "terminateOn": {"type": "iterationLimit", "limit": limit},
        "codons": list(codons),
    }


def write_hank(
    directory: Path, *items: dict[str, Any], files: Mapping[str, str] | None = None
) -> Path:
    """Writes ``directory/hank.json`` holding ``items`` (plus ``files`` beside it);
    returns the hank file."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    doc = {"meta": {"name": directory.name, "version": "1.0.0"}, "hank": list(items)}
    path = directory / "hank.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


# --------------------------------------------------------------------------- environment


def fake_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """Makes this process's environment safe and fast for the fake agent; returns it."""
    for name in FAKE_KNOBS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    monkeypatch.setenv("FAKE_AGENT_LINE_DELAY_MS", "0")
    return dict(os.environ)


def subprocess_environment(tmp_path: Path) -> dict[str, str]:
    """The environment of a ``python -m weft`` child: the fake is fast, sessions and
    managed executions stay under ``tmp_path``, and no CI variable or prompt interferes."""
    env = {k: v for k, v in os.environ.items() if k not in FAKE_KNOBS}
    env.update(
        CLAUDE_CONFIG_DIR=str(tmp_path / "claude-config"),
        FAKE_AGENT_LINE_DELAY_MS="0",
        WEFT_RUNTIME_EXECUTION_BASE_DIR=str(tmp_path / "managed"),
        PYTHONUNBUFFERED="1",
    )
    return env


def weft_cli(
    *args: str | Path, env: Mapping[str, str], timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``python -m weft ARGS`` as a user runs it (no terminal, nothing on stdin);
    a traceback in its output fails the test, whatever the exit code."""
    done = subprocess.run(
        [sys.executable, "-m", "weft", *map(str, args)],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


# --------------------------------------------------------------------------- artefacts


def weft_run_argv(hank: Path, execution: Path, *extra: str) -> list[str]:
    """``python -m weft run HANK --execution EXECUTION --headless [extra]``:
    a real ``weft run`` process, for tests that kill or starve it."""
    return [
        sys.executable, "-m", "weft", "run", str(hank),
        "--execution", str(execution), "--headless", *extra,
    ]  # fmt: skip


def read_state(execution: Path) -> dict[str, Any]:
    """The execution's state, recovered read-only (snapshot + journal tail)."""
    store = ExecutionStore.open(execution, readonly=True)
    try:
        state: dict[str, Any] = json.loads(store.core.state_json())
    finally:
        store.journal.close()
    return state


def journal(execution: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every journal entry as (type, data), in journal order."""
    store = ExecutionStore.open(execution, readonly=True)
    try:
        out = []
        for page in store.journal.pages():
            for row in page:
                payload = json.loads(row.payload)
                out.append((row.type, payload.get("data", payload)))
    finally:
        store.journal.close()
    return out


def runs_oldest_first(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The state's runs, oldest first (the document keeps them newest first)."""
    return list(reversed(state["runs"]))


def codon_records(state: Mapping[str, Any], run_index: int = 0) -> dict[str, dict[str, Any]]:
    """Codon id -> its latest record in a run (``run_index`` 0 is the oldest run)."""
    return {c["codonId"]: c for c in attempts(state, run_index)}


def attempts(state: Mapping[str, Any], run_index: int = 0) -> list[dict[str, Any]]:
    """Every codon record of a run (one per attempt), in the order they started."""
    records: list[dict[str, Any]] = runs_oldest_first(state)[run_index]["codons"]
    return records


def checkpoint_tree(execution: Path, sha: str) -> dict[str, bytes]:
    """path -> content of every blob in the tree of checkpoint ``sha``, read with
    pygit2 straight from ``.weft/checkpoints/.weftcheckpoints``."""
    repo = pygit2.Repository(str(execution / ".weft" / "checkpoints" / ".weftcheckpoints"))
    commit = repo.get(sha)
    assert isinstance(commit, pygit2.Commit), f"{sha} is not a commit"
    out: dict[str, bytes] = {}

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            obj = repo.get(entry.id)
            if isinstance(obj, pygit2.Tree):
                walk(obj, f"{prefix}{entry.name}/")
            elif isinstance(obj, pygit2.Blob):
                out[f"{prefix}{entry.name}"] = obj.data

    walk(commit.tree, "")
    return out


def checkpoint_parent(execution: Path, sha: str) -> str | None:
    """The first parent of checkpoint ``sha``."""
    repo = pygit2.Repository(str(execution / ".weft" / "checkpoints" / ".weftcheckpoints"))
    commit = repo.get(sha)
    assert isinstance(commit, pygit2.Commit)
    return str(commit.parent_ids[0]) if commit.parent_ids else None


def checkpoint_message(execution: Path, sha: str) -> str:
    """The commit message of checkpoint ``sha``."""
    repo = pygit2.Repository(str(execution / ".weft" / "checkpoints" / ".weftcheckpoints"))
    commit = repo.get(sha)
    assert isinstance(commit, pygit2.Commit)
    return commit.message


def recorded(path: Path) -> dict[str, Any]:
    """What the fake agent recorded about its invocation (FAKE_AGENT_RECORD)."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def workspace_files(execution: Path) -> dict[str, str]:
    """Relative path -> text of every regular file in the workspace (data link excluded)."""
    root = execution / "agentRoot"
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("read_only_data_source") or not path.is_file():
            continue
        out[rel] = path.read_text()
    return out


def pid_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (zombies are not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(
    check: Callable[[], Any], *, timeout: float = 20.0, every: float = 0.05, what: str = ""
) -> Any:
    """Polls ``check`` until it returns something truthy; fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or check}")
        time.sleep(every)


@dataclass
class Seen:
    """A StateManager listener keeping every processed item as (seq, type, data, time_ns)."""

    items: list[tuple[int, str, dict[str, Any], int]] = field(default_factory=list)
    hooks: list[Callable[[str, dict[str, Any]], None]] = field(default_factory=list)

    def __call__(self, item: Any) -> None:
        doc = json.loads(item.payload)
        kind = doc.get("type", "")
        data = doc.get("data", {})
        self.items.append((item.seq, kind, data, item.time_ns))
        for hook in self.hooks:
            hook(kind, data)

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The data of every item of one type."""
        return [d for _, k, d, _ in self.items if k == kind]

    def types(self) -> list[str]:
        """Every item's type, in order."""
        return [k for _, k, _, _ in self.items]

    def position(self, kind: str, codon_id: str | None = None, to: str | None = None) -> int:
        """The position of the first ``kind`` item (of ``codon_id``; for a
        CodonTransitioned, moving ``to``)."""
        for i, (_, k, data, _) in enumerate(self.items):
            if k != kind or (codon_id is not None and data.get("codonId") != codon_id):
                continue
            if to is None or data.get("to") == to:
                return i
        raise AssertionError(f"no {kind} item for {codon_id} {to or ''}")

    def positions(self, kind: str) -> list[int]:
        """The positions of every ``kind`` item."""
        return [i for i, (_, k, _, _) in enumerate(self.items) if k == kind]

    def moves(self, codon_id: str) -> list[str]:
        """The statuses ``codon_id`` moved through (every CodonTransitioned target)."""
        return [d["to"] for d in self.of("CodonTransitioned") if d["codonId"] == codon_id]


# --------------------------------------------------------------------------- running


Hook = Callable[[Any], Callable[[str, dict[str, Any]], None]]
"""Given the :class:`Runtime`, a :class:`Seen` hook called with each item's (type, data)."""


async def runtime_for(
    hank: Path,
    execution: Path,
    options: Any = None,
    *,
    listeners: Iterable[Callable[[Any], None]] = (),
    check_environment: bool = True,
    yes: bool = False,
) -> tuple[Any, Seen]:
    """Prepares (or resumes) ``execution`` for ``hank`` and returns its
    in-process :class:`Runtime`, not started, with a :class:`Seen` listening
    (before ``listeners``).

    ``options`` is a :class:`RuntimeOptions` (the runtime's defaults when None);
    managed executions go under ``execution.parent / "managed"``; ``yes``
    accepts a changed hank on resume.
    """
    import asyncio

    from weft.config import load_hank
    from weft.runtime.execution.prepare import prepare_execution
    from weft.runtime.run.runtime import Runtime

    loaded = load_hank(hank, check_environment=check_environment)
    prepared = await asyncio.to_thread(
        prepare_execution,
        hank,
        None,
        execution_dir=execution,
        interactive=False,
        yes=yes,
        base_dir=execution.parent / "managed",
    )
    seen = Seen()
    return Runtime(prepared, loaded, options, listeners=(seen, *listeners)), seen


async def run_hank(
    hank: Path,
    execution: Path,
    options: Any = None,
    *,
    hooks: Iterable[Hook] = (),
    check_environment: bool = True,
    yes: bool = False,
) -> tuple[Any, Seen]:
    """:func:`runtime_for`, run to the end: the :class:`RunOutcome` and every
    processed item (``hooks`` see each as it comes)."""
    runtime, seen = await runtime_for(
        hank, execution, options, check_environment=check_environment, yes=yes
    )
    seen.hooks.extend(hook(runtime) for hook in hooks)
    return await runtime.run(), seen
