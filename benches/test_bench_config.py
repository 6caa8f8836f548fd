"""Loading and validating a 1,000-codon hank, beside two baselines in the same run.

- ``load_hank``: read, parse, the structural walk, every rule (references
  with lstat per path component, continuation and loop rules, sentinels,
  model routing), then the Structs. The target is at most 50 ms.
- baseline ``json_naive``: ``json.loads`` plus a hand-written check of each
  codon's required keys and types and an ``os.path.isfile`` per prompt file:
  roughly what a minimal loader does, with no error collection.
- ``msgspec_decode_only`` (for scale, not a baseline): msgspec decoding the
  bytes straight into the Structs; it stops at the first error and checks no
  rules and no files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from weft.config import Hank, load_hank

CODONS = 1_000
PROMPTS = 200
GROUP = "config: load a 1,000-codon hank"


def _codon(n: int, mode: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "name": f"Codon {n}",
        "model": "sonnet",
        "continuationMode": mode,
        "promptFile": f"prompts/p{n % PROMPTS}.md",
        "checkpointedFiles": ["notes/**", "*.md"],
        "env": {"STEP": str(n)},
        **extra,
    }


def _document() -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    n = 0
    while n < CODONS:
        if n % 50 == 25:
            codons = [
                _codon(
                    n + j,
                    "continue-previous",
                    onFailure="retry",
                    rigSetup=[
                        {"type": "command", "command": {"run": "make"}, "allowFailure": True}
                    ],
                )
                for j in range(5)
            ]
            items.append(
                {
                    "type": "loop",
                    "id": f"loop{n}",
                    "name": f"Loop {n}",
                    "terminateOn": {"type": "iterationLimit", "limit": 3},
                    "codons": codons,
                }
            )
            n += 5
            continue
        extra: dict[str, Any] = {}
        if n % 10 == 0:
            extra["rigSetup"] = [{"type": "copy", "copy": {"from": "templates", "to": "work"}}]
        if n % 100 == 0:
            extra["sentinels"] = [{"sentinelConfig": "sentinels/narrator.json"}]
        items.append(_codon(n, "fresh" if n % 4 == 0 else "continue-previous", **extra))
        n += 1
    return {"meta": {"name": "big", "version": "1.0.0"}, "hank": items}


SENTINEL = {
    "id": "narrator",
    "name": "Narrator",
    "model": "anthropic/claude-haiku-4-5",
    "trigger": {"type": "event", "on": ["assistant.action"]},
    "execution": {"strategy": "debounce", "milliseconds": 3000},
    "userPromptText": "What happened?",
}


@pytest.fixture(scope="module")
def big_hank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("big-hank")
    (root / "prompts").mkdir()
    for i in range(PROMPTS):
        (root / "prompts" / f"p{i}.md").write_text(f"Prompt {i}: do the work.\n")
    (root / "templates").mkdir()
    (root / "templates" / "Makefile").write_text("all:\n")
    (root / "sentinels").mkdir()
    (root / "sentinels" / "narrator.json").write_text(json.dumps(SENTINEL))
    (root / "hank.json").write_text(json.dumps(_document(), indent=2))
    loaded = load_hank(root)
    assert len(loaded.codons()) == CODONS
    assert loaded.warnings == []
    return root


def _naive(path: Path) -> int:
    doc = json.loads(path.read_bytes())
    base = path.parent
    checked = 0
    codons: list[dict[str, Any]] = []
    for item in doc["hank"]:
        codons.extend(item["codons"] if item.get("type") == "loop" else [item])
    for c in codons:
        for key in ("id", "name", "model", "continuationMode"):
            if not isinstance(c.get(key), str):
                raise ValueError(key)
        if c["continuationMode"] not in ("fresh", "continue-previous"):
            raise ValueError("continuationMode")
        if not os.path.isfile(base / c["promptFile"]):
            raise ValueError("promptFile")
        checked += 1
    return checked


def _tagged_bytes(path: Path) -> bytes:
    doc = json.loads(path.read_bytes())
    for item in doc["hank"]:
        item.setdefault("type", "codon")
    return json.dumps(doc).encode()


def _report(benchmark: Any) -> None:
    if benchmark.stats is None:  # --benchmark-disable: ran once, nothing measured
        return
    benchmark.extra_info["summary"] = f"median {benchmark.stats.stats.median * 1e3:.1f} ms"


@pytest.mark.benchmark(group=GROUP)
def test_load_baseline_json_naive(benchmark: Any, big_hank: Path) -> None:
    assert benchmark(_naive, big_hank / "hank.json") == CODONS
    _report(benchmark)


@pytest.mark.benchmark(group=GROUP)
def test_load_msgspec_decode_only(benchmark: Any, big_hank: Path) -> None:
    data = _tagged_bytes(big_hank / "hank.json")
    hank = benchmark(msgspec.json.decode, data, type=Hank)
    assert len(hank.hank) > 0
    _report(benchmark)


@pytest.mark.benchmark(group=GROUP)
def test_load_hank_validated(benchmark: Any, big_hank: Path) -> None:
    loaded = benchmark(load_hank, big_hank)
    assert len(loaded.codons()) == CODONS
    _report(benchmark)
