"""``weft run examples/sentinels`` runs offline, with no model key at all, and
leaves real sentinel outputs: journaled events, costs in the codon record and
in ``weft status``, log files and the last-value file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.runtime.hanks import FAKE_KNOBS, codon_records, journal, read_state
from tests.sentinels.offline import MODEL_KEYS

ROOT = Path(__file__).resolve().parents[2]


def weft(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in FAKE_KNOBS and not any(k.endswith(key) for key in MODEL_KEYS)
    }
    env.update(HOME=str(home), FAKE_AGENT_LINE_DELAY_MS="0")
    env.pop("CLAUDE_CONFIG_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "weft", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_sentinels_example_runs_offline_and_leaves_outputs(tmp_path: Path) -> None:
    execution = tmp_path / "sentinels"
    done = weft("run", "examples/sentinels", "--headless", "--execution", str(execution),
                home=tmp_path / "home")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sentinel error-streak" in done.stdout  # the headless view shows outputs
    assert "sentinels    $" in done.stdout  # and their spend, apart from the agent's

    events = journal(execution)
    kinds = [k for k, _ in events]
    outputs: dict[str, list[dict[str, Any]]] = {}
    for kind, data in events:
        if kind == "sentinel.output":
            outputs.setdefault(data["sentinelId"], []).append(data)
    assert set(outputs) == {"narrator", "cost-watch", "error-streak", "file-watch"}
    assert [o["content"] for o in outputs["error-streak"]] == ["permissions"]  # an enum value
    assert set(outputs["cost-watch"][0]["content"]) >= {"totalCost", "advice"}
    assert kinds.count("sentinel.loaded") == kinds.count("sentinel.unloaded") == 4
    assert "sentinel.error" not in kinds
    # The migration written, then edited: each write is reported as the file is when
    # its tool result is dispatched, so on a busy machine the edit may already be in
    # the file at the first report, and the second (same content) is not made.
    assert kinds.count("file.updated") in (1, 2)

    record = codon_records(read_state(execution))["migrate"]
    states = record["sentinels"]["executed"]
    assert {s["id"] for s in states} == set(outputs)
    assert all(s["llmCallCount"] >= 1 and s["failedLLMCalls"] == 0 for s in states)
    assert record["sentinels"]["totalCost"] > 0

    # The files: the narrator's log under .weft, the cost watch's last value in
    # the workspace where the codon's settings put it, the jsonl logs.
    managed = execution / ".weft" / "sentinels" / "outputs"
    assert (managed / "narrator" / "narration.md").read_text().strip()
    latest = json.loads((execution / "agentRoot" / "costs" / "latest.json").read_text())
    assert latest == outputs["cost-watch"][-1]["content"]
    lines = (managed / "file-watch" / "file-watch.jsonl").read_text().splitlines()
    assert len(lines) == len(outputs["file-watch"]) >= 1  # one per report (see above)
    assert (execution / ".weft" / "sentinels" / "history" / "narrator-migrate.json").is_file()

    status = weft("status", str(execution), "--json", home=tmp_path / "home")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    (migrate,) = shown["runs"][0]["codons"]
    assert [s["id"] for s in migrate["sentinels"]["states"]] == [s["id"] for s in states]
    assert shown["sentinelCost"] == record["sentinels"]["totalCost"]
