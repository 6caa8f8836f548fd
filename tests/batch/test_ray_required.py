"""The Ray tests skip without Ray, except where Ray is required (CI sets
``WEFT_REQUIRE_RAY=1``): there a missing Ray fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Collects the Ray tests in an interpreter where `import ray` fails.
_WITHOUT_RAY = (
    "import sys; sys.modules['ray'] = None; import pytest; "
    "sys.exit(pytest.main(['-q', '-p', 'no:randomly', '-p', 'no:cacheprovider', "
    "'--collect-only', 'tests/batch/test_ray_engine.py']))"
)


@pytest.mark.parametrize(("required", "exit_code"), [("1", 2), ("", 5)])
def test_a_missing_ray_fails_only_where_it_is_required(required: str, exit_code: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "WEFT_REQUIRE_RAY"}
    if required:
        env["WEFT_REQUIRE_RAY"] = required
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_RAY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # pytest: 2 = an error while collecting; 5 = no tests collected (skipped).
    assert done.returncode == exit_code, done.stdout + done.stderr
