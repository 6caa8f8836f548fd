"""The execution-thread analyzer against the pure-Python oracle, on one long history.

The history: 1,000 runs of 100 codon records each (100,000 records), one
continuation chain (most runs continue after their last codon; every 50th
run ends with a failed codon that the next run re-runs from its rig-setup
checkpoint), inside a 100-codon loop expanded over 1,000 iterations (a plan of
100,000 entries). About 5% of the recorded checkpoints are missing from the
"git" set. The latest run is running, between two codons, so the whole
analysis runs: the chain walk, ``failed``, and the next codon from the plan.

Groups (ratio = oracle median / Rust median, printed at the end):

* **a: analyse**: the analysis alone, ``Core.execution_thread`` on the live
  state against the oracle on the parsed document. Target: at most 20 ms and
  at least 20x. The oracle builds every thread codon and its checkpoints; the
  core keeps positions and builds those when read, so group b measures what
  recovery actually reads and group d reading everything.
* **b: analyse + recovery queries**: plus the newest completed codon's
  confirmed checkpoint and the session for the next codon.
* **c: from a state document**: parsing included (``analyze_execution_thread``
  on bytes against ``orjson.loads`` + the oracle).
* **d: analyse + read every codon**: status and validated checkpoints of all
  100,000 thread codons.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest
from tests.oracle import thread as oracle

from weft import core

RUNS = 1_000
PER_RUN = 100
LOOP = 100
T = "2026-01-01T00:00:00.000Z"


def _sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


def _codon_id(k: int) -> str:
    return f"c{k % LOOP}#{k // LOOP}"


def _record(run: int, i: int, codon_id: str, status: str) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "codonId": codon_id,
        "status": status,
        "startTime": T,
        "loopContext": {
            "loopId": "refine",
            "iteration": int(codon_id.split("#")[1]),
            "codonIndexInLoop": int(codon_id[1:].split("#")[0]),
        },
        "claudePid": 900_000 + i,
        "claudeLogPath": f"logs/{codon_id}.jsonl",
        "claudeSessionId": _sha("session", run, i),
        "assistantMessageCount": 3,
        "extensionCount": 0,
        "endTime": T,
    }
    if i:
        rec["previousSessionId"] = _sha("session", run, i - 1)
    if i % 4 == 0 or status == "failed":
        rec["rigSetupCheckpoint"] = _sha("rig", run, i)
    tokens = {"inputTokens": 1200, "outputTokens": 300}
    if status == "completed":
        rec |= {"exitCode": 0, "finalCost": 0.0125, "finalTokens": tokens}
        rec |= {"resultMessageReceived": True, "completionCheckpoint": _sha("done", run, i)}
    elif status == "skipped":
        rec |= {"skippedDuring": "running", "partialCost": 0.002, "partialTokens": tokens}
        rec["skipCheckpoint"] = _sha("skip", run, i)
    else:
        reason = {"type": "api-error", "retriable": True, "message": "overloaded"}
        rec |= {"exitCode": 1, "failureReason": reason, "failedDuring": "running"}
        rec |= {"partialCost": 0.004, "partialTokens": tokens}
        rec["errorCheckpoint"] = _sha("err", run, i)
    return rec


def long_history() -> tuple[dict[str, Any], frozenset[str]]:
    """The state document described above, and the shas "git" still has."""
    runs: list[dict[str, Any]] = []
    next_k = 0
    source: dict[str, Any] | None = None
    for r in range(RUNS):
        run_id = f"{1_763_683_200_000 + r}-r{r:04d}"
        records = []
        ends_failed = r % 50 == 49 and r != RUNS - 1
        for i in range(PER_RUN):
            codon_id = _codon_id(next_k)
            if ends_failed and i == PER_RUN - 1:
                records.append(_record(r, i, codon_id, "failed"))
            elif i % 25 == 7:
                # A failed attempt, retried in the next record.
                records.append(_record(r, i, codon_id, "failed"))
            else:
                records.append(_record(r, i, codon_id, "skipped" if i % 33 == 5 else "completed"))
                next_k += 1
        conditions: dict[str, Any] = {"type": "fresh"}
        if source is not None:
            conditions = {"type": "continuation", "source": source, "reason": "continue"}
        last = r == RUNS - 1
        run = {
            "runId": run_id,
            "runFolder": f"/w/.weft/runs/{run_id}",
            "gitBranch": f"run-{run_id}",
            "startingConditions": conditions,
            "codons": records,
            "status": "running" if last else "failed" if ends_failed else "completed",
            "startTime": T,
            "serverPid": 4242,
        }
        if not last:
            run["endTime"] = T
        runs.append(run)
        tail = records[-1]
        if ends_failed:
            source = {"runId": run_id, "afterCodon": None}
            source["checkpointSha"] = tail["rigSetupCheckpoint"]
        else:
            source = {"runId": run_id, "afterCodon": tail["codonId"]}
            source["checkpointSha"] = tail["completionCheckpoint"]
    plan = [
        {"codon": {"id": f"c{k % LOOP}", "model": "sonnet"}, "codonId": _codon_id(k)}
        for k in range(next_k + LOOP)
    ]
    keys = ("rigSetupCheckpoint", "completionCheckpoint", "errorCheckpoint", "skipCheckpoint")
    shas = [rec[k] for run in runs for rec in run["codons"] for k in keys if k in rec]
    existing = frozenset(s for s in shas if int(s[:4], 16) % 20)
    state = {"runs": runs[::-1], "currentRunId": runs[-1]["runId"], "executionPlan": plan}
    return state, existing


@pytest.fixture(scope="module")
def history() -> dict[str, Any]:
    state, existing = long_history()
    document = orjson.dumps(state)
    live = core.Core(document)
    assert live.codon_record_count == RUNS * PER_RUN
    expected = oracle.analyze_execution_thread(state, existing)
    got = live.execution_thread(existing)
    assert (len(got), got.next_codon_id, got.failed) == (
        len(expected.codons),
        expected.next_codon_id,
        expected.failed,
    )
    assert len(got) > 0.95 * RUNS * PER_RUN
    assert got.total_runs == RUNS
    return {"state": state, "document": document, "core": live, "existing": existing}


def _report(benchmark: Any, what: str) -> None:
    if benchmark.stats is None:  # --benchmark-disable: ran once, nothing measured
        return
    ms = benchmark.stats.stats.median * 1e3
    benchmark.extra_info["median_ms"] = ms
    benchmark.extra_info["summary"] = f"{ms:.1f} ms {what}"


# -- a: the analysis ---------------------------------------------------------------


@pytest.mark.benchmark(group="thread a: analyse 1,000 runs x 100 codons")
def test_analyse_baseline_oracle(benchmark: Any, history: dict[str, Any]) -> None:
    state, existing = history["state"], history["existing"]
    result = benchmark.pedantic(
        oracle.analyze_execution_thread, args=(state, existing), rounds=3, iterations=1
    )
    assert result.total_runs == RUNS


@pytest.mark.benchmark(group="thread a: analyse 1,000 runs x 100 codons")
def test_analyse_rust(benchmark: Any, history: dict[str, Any]) -> None:
    live, existing = history["core"], history["existing"]
    result = benchmark.pedantic(live.execution_thread, args=(existing,), rounds=30, iterations=1)
    assert result.total_runs == RUNS
    _report(benchmark, "per analysis (target <= 20 ms)")


# -- b: what recovery reads ------------------------------------------------------------


def _recovery_oracle(state: dict[str, Any], existing: frozenset[str]) -> tuple[Any, ...]:
    thread = oracle.analyze_execution_thread(state, existing)
    last = next(tc for tc in thread.codons if tc.codon["status"] == "completed")
    confirmed = [c.sha for c in last.validated_checkpoints if c.type == "completed"]
    assert thread.next_codon_id is not None
    session = oracle.find_continuation_session_id(thread, thread.next_codon_id, state)
    return thread.failed, thread.next_codon_id, confirmed, session


def _recovery_rust(live: core.Core, existing: frozenset[str]) -> tuple[Any, ...]:
    thread = live.execution_thread(existing)
    last = next(tc for tc in thread.codons if tc.status == "completed")
    confirmed = [c.sha for c in last.validated_checkpoints if c.type == "completed"]
    assert thread.next_codon_id is not None
    session = thread.find_continuation_session_id(thread.next_codon_id)
    return thread.failed, thread.next_codon_id, confirmed, session


@pytest.mark.benchmark(group="thread b: analyse + recovery queries")
def test_recovery_baseline_oracle(benchmark: Any, history: dict[str, Any]) -> None:
    args = (history["state"], history["existing"])
    result = benchmark.pedantic(_recovery_oracle, args=args, rounds=3, iterations=1)
    assert result == _recovery_rust(history["core"], history["existing"])


@pytest.mark.benchmark(group="thread b: analyse + recovery queries")
def test_recovery_rust(benchmark: Any, history: dict[str, Any]) -> None:
    args = (history["core"], history["existing"])
    benchmark.pedantic(_recovery_rust, args=args, rounds=30, iterations=1)
    _report(benchmark, "per analysis + queries")


# -- c: from a state document -----------------------------------------------------------


def _document_oracle(document: bytes, existing: frozenset[str]) -> int:
    return len(oracle.analyze_execution_thread(orjson.loads(document), existing).codons)


def _document_rust(document: bytes, existing: frozenset[str]) -> int:
    return len(core.analyze_execution_thread(document, existing))


@pytest.mark.benchmark(group="thread c: parse a 1,000-run document + analyse")
def test_document_baseline_oracle(benchmark: Any, history: dict[str, Any]) -> None:
    args = (history["document"], history["existing"])
    assert benchmark.pedantic(_document_oracle, args=args, rounds=3, iterations=1) > 0


@pytest.mark.benchmark(group="thread c: parse a 1,000-run document + analyse")
def test_document_rust(benchmark: Any, history: dict[str, Any]) -> None:
    args = (history["document"], history["existing"])
    assert benchmark.pedantic(_document_rust, args=args, rounds=5, iterations=1) > 0
    _report(benchmark, "per document (64 MB of JSON)")


# -- d: everything ------------------------------------------------------------------------


def _everything_oracle(state: dict[str, Any], existing: frozenset[str]) -> int:
    thread = oracle.analyze_execution_thread(state, existing)
    return sum(len(tc.validated_checkpoints) for tc in thread.codons if tc.codon["status"])


def _everything_rust(live: core.Core, existing: frozenset[str]) -> int:
    thread = live.execution_thread(existing)
    return sum(len(tc.validated_checkpoints) for tc in thread.codons if tc.status)


@pytest.mark.benchmark(group="thread d: analyse + read every codon")
def test_everything_baseline_oracle(benchmark: Any, history: dict[str, Any]) -> None:
    args = (history["state"], history["existing"])
    result = benchmark.pedantic(_everything_oracle, args=args, rounds=3, iterations=1)
    assert result == _everything_rust(history["core"], history["existing"])


@pytest.mark.benchmark(group="thread d: analyse + read every codon")
def test_everything_rust(benchmark: Any, history: dict[str, Any]) -> None:
    args = (history["core"], history["existing"])
    benchmark.pedantic(_everything_rust, args=args, rounds=5, iterations=1)
    _report(benchmark, "to read 100k codons' status and checkpoints")
