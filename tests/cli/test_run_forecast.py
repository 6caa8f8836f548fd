"""``weft run --dry-run`` and the forecast's ceiling check, on a history made by
running the hank three times on the fake agent (real ``weft run`` processes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    codon,
    read_state,
    runs_oldest_first,
    subprocess_environment,
    weft_cli,
    write_file,
    write_hank,
)

from weft.agents.events import Tokens
from weft.agents.pricing import default_table
from weft.clock import ms_from_iso
from weft.fork.forecast import percentile

CODONS = ("a", "b", "c")
PRICED = "fake/claude-opus-4-5"
"""A model the fake runs and Weft's price table knows (``fake/sonnet`` is an alias: unpriced)."""


def _hank(directory: Path) -> Path:
    return write_hank(
        directory,
        *(codon(c, write_file(f"{c}.md", f"{c} was here") + f"Do {c}.") for c in CODONS),
    )


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A hank and the managed root holding three completed executions of it."""
    tmp = tmp_path_factory.mktemp("forecast")
    hank = _hank(tmp / "hank")
    env = subprocess_environment(tmp)
    for _ in range(3):
        done = weft_cli("run", hank, "--new", "--headless", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    return hank, tmp / "managed"


def _env(tmp_path: Path, managed: Path) -> dict[str, str]:
    """This test's environment over its own copy of the history (a test that runs
    adds an execution, which must not change what the next test forecasts)."""
    env = subprocess_environment(tmp_path)
    own = tmp_path / "managed"
    shutil.copytree(managed, own, symlinks=True)
    env["WEFT_RUNTIME_EXECUTION_BASE_DIR"] = str(own)
    return env


def _records(managed: Path) -> list[dict[str, dict[str, Any]]]:
    """Every execution's codon records, by codon id."""
    out = []
    for execution in sorted(managed.iterdir()):
        run = runs_oldest_first(read_state(execution))[-1]
        out.append({r["codonId"]: r for r in run["codons"]})
    return out


def _seconds(record: dict[str, Any]) -> float:
    start, end = ms_from_iso(record["startTime"]), ms_from_iso(record["endTime"])
    assert start is not None
    assert end is not None
    return (end - start) / 1000


def _dry_run(hank: Path, env: dict[str, str], *extra: str) -> dict[str, Any]:
    done = weft_cli("run", hank, "--dry-run", "--json", *extra, env=env)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_dry_run_forecasts_within_the_range_of_earlier_executions_and_creates_nothing(
    tmp_path: Path, history: tuple[Path, Path]
) -> None:
    hank, managed = history
    env = _env(tmp_path, managed)
    before = sorted(p.name for p in Path(env["WEFT_RUNTIME_EXECUTION_BASE_DIR"]).iterdir())
    found = _dry_run(hank, env)
    assert found["executions"] == 3
    records = _records(managed)
    rows = {row["codonId"]: row for row in found["codons"]}
    assert list(rows) == list(CODONS)
    for codon_id, row in rows.items():
        assert (row["basis"], row["samples"]) == ("history", 3)
        costs = [r[codon_id]["finalCost"] for r in records]
        times = [_seconds(r[codon_id]) for r in records]
        for figure in ("median", "p90"):
            assert min(costs) <= row["cost"][figure] <= max(costs)
            assert min(times) - 1e-9 <= row["seconds"][figure] <= max(times) + 1e-9
        assert row["cost"]["median"] == pytest.approx(percentile(costs, 0.5), abs=1e-9)
    total = found["total"]
    assert total["unknown"] == []
    for figure in ("median", "p90"):
        parts = sum(row["cost"][figure] for row in rows.values())
        assert total["cost"][figure] == pytest.approx(parts, abs=1e-8)
    # Nothing was created or written.
    after = sorted(p.name for p in Path(env["WEFT_RUNTIME_EXECUTION_BASE_DIR"]).iterdir())
    assert after == before
    text = weft_cli("run", hank, "--dry-run", env=env)
    assert text.returncode == 0, text.stderr
    assert "from 3 earlier executions" in text.stdout
    median = f"${total['cost']['median']:.4f}"
    assert any(line.startswith("total") and median in line for line in text.stdout.splitlines())


def test_a_model_change_is_priced_from_the_tokens_of_the_history(
    tmp_path: Path, history: tuple[Path, Path]
) -> None:
    hank, managed = history
    found = _dry_run(hank, _env(tmp_path, managed), "--model", PRICED)
    records = _records(managed)
    for row in found["codons"]:
        assert (row["model"], row["basis"]) == (PRICED, "tokens")
        tokens = [r[row["codonId"]]["finalTokens"] for r in records]
        median = Tokens(
            input=round(percentile([t["inputTokens"] for t in tokens], 0.5)),
            output=round(percentile([t["outputTokens"] for t in tokens], 0.5)),
            cache_creation=round(percentile([t["cacheCreationTokens"] for t in tokens], 0.5)),
            cache_read=round(percentile([t["cacheReadTokens"] for t in tokens], 0.5)),
        )
        expected = default_table().cost_usd(PRICED, median)
        assert expected is not None
        assert row["cost"]["median"] == pytest.approx(expected, abs=1e-9)
        # Opus costs more than the sonnet the history ran on.
        assert row["cost"]["median"] > max(r[row["codonId"]]["finalCost"] for r in records)


def test_without_history_every_codon_is_unknown(tmp_path: Path) -> None:
    hank = _hank(tmp_path / "hank")
    env = subprocess_environment(tmp_path)
    found = _dry_run(hank, env)
    assert found["executions"] == 0
    assert [row["basis"] for row in found["codons"]] == ["unknown"] * 3
    assert found["total"] == {"cost": None, "seconds": None, "unknown": list(CODONS)}
    text = weft_cli("run", hank, "--dry-run", env=env)
    assert text.returncode == 0
    assert "unknown" in text.stdout
    assert not (tmp_path / "managed").exists()


def test_a_ceiling_below_the_forecast_is_refused_before_spending_unless_forced(
    tmp_path: Path, history: tuple[Path, Path]
) -> None:
    hank, managed = history
    env = _env(tmp_path, managed)
    root = Path(env["WEFT_RUNTIME_EXECUTION_BASE_DIR"])
    median = _dry_run(hank, env)["total"]["cost"]["median"]
    ceiling = f"{median / 2:.6f}"
    refused = weft_cli("run", hank, "--new", "--headless", "--max-cost", ceiling, env=env)
    assert refused.returncode == 2, refused.stdout
    assert f"${median:.4f}" in refused.stderr
    assert f"${float(ceiling):.4f}" in refused.stderr
    assert "--max-cost" in refused.stderr
    assert "--force-budget" in refused.stderr
    assert len(list(root.iterdir())) == 3  # no execution was created
    as_json = weft_cli("run", hank, "--new", "--json", "--max-cost", ceiling, env=env)
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["type"] == "run.refused"
    forced = weft_cli(
        "run", hank, "--new", "--headless", "--max-cost", ceiling, "--force-budget", env=env
    )
    # Forced, it runs; the ceiling itself still stops it once crossed (exit 3).
    assert forced.returncode in (0, 3), forced.stdout + forced.stderr
    assert len(list(root.iterdir())) == 4
    above = weft_cli("run", hank, "--new", "--headless", "--max-cost", "100", env=env)
    assert above.returncode == 0, above.stdout + above.stderr


def test_the_hanks_own_ceiling_is_named_when_it_refuses(tmp_path: Path) -> None:
    hank = _hank(tmp_path / "hank")
    env = subprocess_environment(tmp_path)
    doc = json.loads(hank.read_text())
    doc["overrides"] = {"budget": {"maxDollars": 100}}
    hank.write_text(json.dumps(doc))
    assert weft_cli("run", hank, "--headless", env=env).returncode == 0
    doc["overrides"]["budget"]["maxDollars"] = 0.000001
    hank.write_text(json.dumps(doc))
    refused = weft_cli("run", hank, "--new", "--headless", env=env)
    assert refused.returncode == 2, refused.stdout
    assert "median of 1 earlier execution" in refused.stderr
    assert "overrides.budget.maxDollars" in refused.stderr
    assert len(list((tmp_path / "managed").iterdir())) == 1


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--dry-run", "--reuse"), "--dry-run forecasts the whole hank"),
        (("--dry-run", "--force-budget"), "drop --force-budget"),
        (("--dry-run=yes",), "--dry-run"),
        (("--force-budget=1",), "--force-budget"),
    ],
)
def test_malformed_flags_are_refused_clearly(
    tmp_path: Path, flags: tuple[str, ...], said: str
) -> None:
    hank = _hank(tmp_path / "hank")
    done = weft_cli("run", hank, *flags, env=subprocess_environment(tmp_path))
    assert done.returncode == 2
    assert said in done.stderr
    assert not (tmp_path / "managed").exists()
