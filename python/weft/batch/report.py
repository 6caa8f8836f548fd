"""Reports of a batch: the JSON summary, the JUnit XML file, the audit trail.

All three are read from the store (any process may read it), so ``weft batch
status`` shows the same figures as the end of ``weft batch run``. JUnit has
one test case per step, with its duration, its cost (a property) and, for a
failed step, the end of its output; a step that never ran because a
dependency failed is reported as skipped, naming the dependency, and so is a
step the user skipped (``weft batch skip``).
"""

from __future__ import annotations

import heapq
import json
import statistics
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from weft.batch.scheduler import Scheduler
from weft.batch.store import BatchStore, StoredBatch
from weft.batch.windows import PROVIDERS_META, WindowWatch, steps_providers
from weft.clock import iso_from_ms

__all__ = [
    "OVERDUE_FACTOR",
    "consistency_problems",
    "overhead",
    "slot_gaps_ms",
    "summary",
    "write_junit",
]


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def slot_gaps_ms(transitions: list[dict[str, Any]], workers: int) -> list[int]:
    """How long each worker slot stayed free between a step's end and the next
    launch in it, replayed from the audit trail (``BatchStore.transitions()``)
    in the order it was written (the coordinator records an end before the
    launch that reuses its slot; two rows can share a millisecond, so their
    times cannot order them): the ``workers`` first launches take the initially
    free slots; every later launch takes the slot freed earliest. In a batch
    whose steps are all ready (no dependencies, backoffs or open breakers),
    that is the coordinator's latency per step: noticing the end, committing
    it, scheduling, committing the launch."""
    events = []
    for t in transitions:
        if t["step_id"] is None or (t["from"] == "S_RUNNING") == (t["to"] == "S_RUNNING"):
            continue
        events.append((t["id"], _ms(t["at"]), t["from"] != "S_RUNNING"))
    free: list[int] = []
    initial = workers
    gaps = []
    for _, at, launch in sorted(events):
        if not launch:
            heapq.heappush(free, at)
        elif initial > 0:
            initial -= 1
        elif free:
            gaps.append(at - heapq.heappop(free))
    return gaps


def overhead(store: BatchStore, busy_ns: int, launches: int, workers: int) -> dict[str, Any]:
    """The coordinator's overhead figures of a finished run: its own work per
    launch (``busy_ns`` over ``launches``, both of this coordinator:
    :attr:`weft.batch.coordinator.Coordinator.busy_ns`) and the slot gaps of
    :func:`slot_gaps_ms` over the whole audit trail (median and mean)."""
    gaps = slot_gaps_ms(store.transitions(), workers)
    return {
        "workers": workers,
        "launches": launches,
        "busy_ms": round(busy_ns / 1e6, 3),
        "busy_ms_per_launch": round(busy_ns / 1e6 / launches, 3) if launches else None,
        "slot_gap_ms_median": statistics.median(gaps) if gaps else None,
        "slot_gap_ms_mean": round(statistics.fmean(gaps), 3) if gaps else None,
    }


OVERDUE_FACTOR = 3
"""A step without a timeout is flagged once it has run this many times the
median duration of its workstream's finished steps."""


def summary(
    store: BatchStore, now_ms: int | None = None, windows: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The batch as a JSON-ready dictionary; a running step has ``running_ms``
    (at ``now_ms``, default the clock) and, when it runs too long,
    ``overdue`` saying why (:func:`_overdue`). A step held back by a closed
    usage window (``windows``: provider -> when it opens, default the user's
    registry) has ``waiting_for_window``: the provider and when it opens."""
    stored = store.load()
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if windows is None:
        windows = WindowWatch().closed(now_ms)
    held = _held(store, stored, now_ms, windows)
    by_ws: dict[str, list[dict[str, Any]]] = {w.ws_id: [] for w in stored.workstreams}
    states = {(s.ws_id, s.step_id): s.state for s in stored.steps}
    skipped = _skipped_steps(store)
    for s in stored.steps:
        entry: dict[str, Any] = {
            "id": s.step_id,
            "state": s.state,
            "retry_count": s.retry_count,
            "launches": s.launches,
            "exit_code": s.exit_code,
            "cost_usd": round(s.cost_usd, 6),
            "duration_ms": s.duration_ms,
            "tool": s.plan.get("tool"),
        }
        if s.execution_dir:
            entry["execution"] = s.execution_dir
        if s.state == "S_SUCCESS" and (s.ws_id, s.step_id) in skipped:
            entry["skipped"] = True
        if s.state == "S_RUNNING" and s.started_at_ms is not None:
            entry["running_ms"] = max(0, now_ms - s.started_at_ms)
            finished = [
                o.duration_ms
                for o in stored.steps
                if o.ws_id == s.ws_id
                and o.state == "S_SUCCESS"
                and o.launches
                and (o.ws_id, o.step_id) not in skipped
            ]
            why = _overdue(entry["running_ms"], s.plan.get("timeout_seconds"), finished)
            if why is not None:
                entry["overdue"] = why
        blockers = [
            d for d in s.plan.get("depends_on", []) if states.get((s.ws_id, d)) != "S_SUCCESS"
        ]
        if s.state == "S_PENDING" and blockers:
            entry["blocked_by"] = blockers
        if s.error and s.state != "S_SUCCESS":
            entry["error"] = s.error
        if s.key in held:
            provider, opens = held[s.key]
            entry["waiting_for_window"] = {
                "provider": provider,
                "opens_at_ms": opens,
                "opens_at": iso_from_ms(opens),
            }
        by_ws[s.ws_id].append(entry)
    workstreams = [
        {
            "id": w.ws_id,
            "state": w.state,
            "retry_count": w.retry_count,
            "max_retries": w.max_retries,
            "cost_usd": round(sum(st["cost_usd"] for st in by_ws[w.ws_id]), 6),
            "steps": by_ws[w.ws_id],
        }
        for w in stored.workstreams
    ]
    counts: dict[str, int] = {}
    for w in stored.workstreams:
        counts[w.state] = counts.get(w.state, 0) + 1
    return {
        "batch": store.get_meta("name"),
        "state_dir": str(store.folder),
        "succeeded": all(w.state == "S_SUCCESS" for w in stored.workstreams),
        "workstream_states": counts,
        "total_cost_usd": round(sum(s.cost_usd for s in stored.steps), 6),
        "breakers": [
            {
                "tool": b.tool,
                "state": b.state,
                "consecutive_failures": b.consecutive_failures,
                "opened_at_ms": b.opened_at_ms,
            }
            for b in stored.breakers
        ],
        "workstreams": workstreams,
        "usage_windows": [
            {"provider": p, "opens_at_ms": at, "opens_at": iso_from_ms(at)}
            for p, at in sorted(windows.items())
            if any(h[0] == p for h in held.values())
        ],
        "problems": consistency_problems(store),
    }


def _held(
    store: BatchStore, stored: StoredBatch, now_ms: int, windows: Mapping[str, int]
) -> dict[str, tuple[str, int]]:
    """The steps a coordinator would hold back now for a closed window
    (:meth:`weft.batch.scheduler.Scheduler.held`), with the providers the
    coordinator recorded (or worked out here for a store without them)."""
    if not windows:
        return {}
    text = store.get_meta(PROVIDERS_META)
    providers = json.loads(text) if text else steps_providers((s.key, s.plan) for s in stored.steps)
    return Scheduler(stored, providers=providers).held(now_ms, windows)


def _overdue(running_ms: int, timeout_s: float | None, finished_ms: list[int]) -> str | None:
    """Why a step running ``running_ms`` runs too long: past its timeout, or
    (without one) past :data:`OVERDUE_FACTOR` times the median of
    ``finished_ms`` (its workstream's finished steps); ``None`` if it does not."""
    ran = f"running {running_ms / 1000:.1f}s"
    if timeout_s is not None:
        if running_ms > timeout_s * 1000:
            return f"{ran}, past its timeout of {timeout_s:g}s"
        return None
    if not finished_ms:
        return None
    median = statistics.median(finished_ms)
    if running_ms > OVERDUE_FACTOR * median:
        return (
            f"{ran}, over {OVERDUE_FACTOR}x the median ({median / 1000:.1f}s) "
            "of its workstream's finished steps"
        )
    return None


def _skipped_steps(store: BatchStore) -> set[tuple[str, str]]:
    """Steps whose latest audit row is a skip (``weft batch skip``): the core has
    no skipped state, so the audit trail is what tells them from a success."""
    latest: dict[tuple[str, str], bool] = {}
    for t in store.transitions():
        if t["step_id"] is not None and t["from"] != t["to"]:
            latest[(t["ws_id"], t["step_id"])] = bool(t["metadata"].get("skipped"))
    return {key for key, was_skip in latest.items() if was_skip}


def consistency_problems(store: BatchStore) -> list[str]:
    """The seed's Recovery 4 check: states that contradict each other."""
    stored = store.load()
    steps_of: dict[str, list[str]] = {}
    for s in stored.steps:
        steps_of.setdefault(s.ws_id, []).append(s.state)
    problems = []
    for w in stored.workstreams:
        states = steps_of.get(w.ws_id, [])
        if w.state == "S_SUCCESS" and any(st != "S_SUCCESS" for st in states):
            problems.append(f"workstream {w.ws_id} is S_SUCCESS but not all its steps are")
        if w.state == "S_PENDING" and any(st != "S_PENDING" for st in states):
            problems.append(f"workstream {w.ws_id} is S_PENDING but some of its steps moved")
    return problems


def write_junit(report: dict[str, Any], path: Path) -> None:
    """Writes ``report`` (from :func:`summary`) as JUnit XML to ``path``."""
    root = ET.Element("testsuites", name=str(report.get("batch") or "weft batch"))
    total_tests = total_failures = total_skipped = 0
    for ws in report["workstreams"]:
        cases = ws["steps"]
        failures = sum(1 for st in cases if st["state"] == "S_FAILED")
        skipped = sum(
            1 for st in cases if st["state"] not in ("S_SUCCESS", "S_FAILED") or st.get("skipped")
        )
        suite = ET.SubElement(
            root,
            "testsuite",
            name=ws["id"],
            tests=str(len(cases)),
            failures=str(failures),
            errors="0",
            skipped=str(skipped),
            time=f"{sum(st['duration_ms'] for st in cases) / 1000:.3f}",
        )
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="state", value=ws["state"])
        ET.SubElement(props, "property", name="cost_usd", value=f"{ws['cost_usd']:.6f}")
        for st in cases:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"batch.{ws['id']}",
                name=st["id"],
                time=f"{st['duration_ms'] / 1000:.3f}",
            )
            cprops = ET.SubElement(case, "properties")
            ET.SubElement(cprops, "property", name="cost_usd", value=f"{st['cost_usd']:.6f}")
            ET.SubElement(cprops, "property", name="launches", value=str(st["launches"]))
            if st["state"] == "S_FAILED":
                failure = ET.SubElement(
                    case,
                    "failure",
                    message=f"exit code {st['exit_code']} after {st['launches']} launch(es)",
                )
                failure.text = st.get("error") or ""
            elif st.get("skipped"):
                ET.SubElement(case, "skipped", message="skipped by the user (weft batch skip)")
            elif st["state"] != "S_SUCCESS":
                why = (
                    f"blocked by {', '.join(st['blocked_by'])}"
                    if st.get("blocked_by")
                    else f"not run ({st['state']}, workstream {ws['state']})"
                )
                ET.SubElement(case, "skipped", message=why)
        total_tests += len(cases)
        total_failures += failures
        total_skipped += skipped
    root.set("tests", str(total_tests))
    root.set("failures", str(total_failures))
    root.set("skipped", str(total_skipped))
    ET.indent(root)
    path.write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")
