"""``weft run examples/hello``, the README's first command, runs end to end
offline and leaves checkpoints and a journal behind; a second run resumes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pygit2

from weft.store import ExecutionStore

ROOT = Path(__file__).resolve().parents[2]


def weft_run(execution: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "FAKE_AGENT_LINE_DELAY_MS": "0"}
    env.pop("CLAUDE_CONFIG_DIR", None)
    command = ["run", "examples/hello", "--headless", "--execution", str(execution)]
    return subprocess.run(
        [sys.executable, "-m", "weft", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_hello_runs_offline_and_leaves_checkpoints_and_a_journal(tmp_path: Path) -> None:
    execution = tmp_path / "hello"
    done = weft_run(execution, tmp_path / "home")
    assert done.returncode == 0, done.stdout + done.stderr

    store = ExecutionStore.open(execution, readonly=True)
    try:
        state = json.loads(store.core.state_json())
        events = store.journal.count()
        plan_extensions = store.journal.count_applied("PlanExtended", store.journal.last_seq())
    finally:
        store.journal.close()
    (run,) = state["runs"]
    assert run["status"] == "completed"
    codons = {c["codonId"]: c for c in run["codons"]}
    assert list(codons) == ["greet", "polish", "draft#0", "draft#1", "draft#2", "review"]
    assert all(c["status"] == "completed" for c in codons.values())
    # continue-previous resumed greet's session
    assert codons["polish"]["previousSessionId"] == codons["greet"]["claudeSessionId"]
    assert events > 50
    assert plan_extensions == 2  # draft#1 and draft#2, each added when the previous one finished

    repo = pygit2.Repository(str(execution / ".weft" / "checkpoints" / ".weftcheckpoints"))
    for record in codons.values():
        assert repo.get(record["completionCheckpoint"]) is not None
    assert "rigSetupCheckpoint" in codons["greet"]
    review = repo.get(codons["review"]["completionCheckpoint"])
    assert review is not None
    assert "review.md" in review.peel(pygit2.Tree)

    workspace = execution / "agentRoot"
    assert (workspace / "site" / "index.html").is_file()
    assert "thank you" in (workspace / "notes.md").read_text()
    assert (workspace / "drafts.md").read_text().count("Another draft line.") == 3
    # The fake agents' transcripts stay inside the execution, not in ~/.claude.
    assert not (tmp_path / "home" / ".claude").exists()

    again = weft_run(execution, tmp_path / "home")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to do" in (again.stdout + again.stderr).lower()
