"""The Ray engine (on a local Ray instance) gives the same final states as the
local engine for the same batch file: dependencies, a retried failure, an
abandoned workstream, a blocked step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.batch.support import write_batch
from tests.runtime.hanks import subprocess_environment

pytest.importorskip("ray")

DOC = {
    "workstreams": [
        {
            "id": "ok",
            "steps": [
                {"id": "a", "command": ["sh", "-c", 'echo a > "$WEFT_BATCH_STEP_DIR/out"']},
                {"id": "b", "command": ["true"], "depends_on": ["a"]},
                {"id": "c", "command": ["sh", "-c", "exit 3"], "expected_exit_codes": [3]},
            ],
        },
        {
            "id": "flaky",
            "steps": [
                {
                    "id": "fetch",
                    "command": ["sh", "-c", "echo down >&2; exit 1"],
                    "max_retries": 1,
                    "retry_backoff": {"base_delay_ms": 50},
                },
                {"id": "publish", "command": ["true"], "depends_on": ["fetch"]},
            ],
        },
    ]
}


def final_states(tmp_path: Path, *engine: str) -> dict[str, object]:
    path = write_batch(tmp_path, DOC)
    done = subprocess.run(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--json", "--workers", "2",
         "--state-dir", str(tmp_path / "state"), *engine],
        env=subprocess_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    return {
        ws["id"]: (ws["state"], [(s["id"], s["state"], s["launches"]) for s in ws["steps"]])
        for ws in summary["workstreams"]
    }


def test_ray_and_local_engines_reach_the_same_final_states(tmp_path: Path) -> None:
    local = final_states(tmp_path / "local")
    ray = final_states(tmp_path / "ray", "--engine", "ray")
    assert ray == local
    assert local == {
        "ok": ("S_SUCCESS", [("a", "S_SUCCESS", 1), ("b", "S_SUCCESS", 1), ("c", "S_SUCCESS", 1)]),
        "flaky": ("S_ABANDONED", [("fetch", "S_FAILED", 2), ("publish", "S_PENDING", 0)]),
    }
    assert (tmp_path / "ray" / "state" / "steps" / "ok" / "a" / "out").read_text() == "a\n"
