"""``weft run`` on the real Claude Code with traces on: the CLI's own spans land
under the codon attempt's span, in the run's trace (issue 38)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.agents.real.conftest import Homes, claude_env
from tests.agents.real.mock_anthropic import AnthropicMock
from tests.telemetry.receiver import otlp_receiver


def test_claude_codes_spans_nest_under_its_codon(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    marker = os.urandom(6).hex()
    hank = homes.root / "hank"
    hank.mkdir()
    codon = {
        "id": "one",
        "name": "one",
        "model": "sonnet",
        "continuationMode": "fresh",
        "promptText": f"Look around {marker} MOCK[tools=1]",
        "checkpointedFiles": ["**/*"],
    }
    (hank / "hank.json").write_text(json.dumps({"hank": [codon]}))
    env = dict(os.environ)
    env.pop("WEFT_REQUIRE_REAL_CLIS", None)
    for key, value in claude_env(anthropic, homes).items():
        env[f"WEFT_{key}"] = value  # WEFT_<X> passes to the agent as X
    env["HOME"] = str(homes.root)
    env["WEFT_CLAUDE_BIN"] = str(claude_bin)
    with otlp_receiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "weft",
                "run",
                str(hank),
                "--execution",
                str(homes.root / "exec"),
                "--headless",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        spans = list(receiver.spans)
    assert done.returncode == 0, done.stdout + done.stderr
    (attempt,) = [s for s in spans if s.name == "invoke_agent one"]
    theirs = [s for s in spans if s.resource.get("service.name") == "claude-code"]
    # Its interaction, model requests and tool spans (2.1.330's names), in our trace.
    assert {"claude_code.interaction", "claude_code.llm_request", "claude_code.tool"} <= {
        s.name for s in theirs
    }
    assert {s.trace_id for s in theirs} == {attempt.trace_id}
    ids = {s.span_id for s in theirs}
    (interaction,) = [s for s in theirs if s.parent_id not in ids]
    assert interaction.name == "claude_code.interaction"
    assert interaction.parent_id == attempt.span_id
