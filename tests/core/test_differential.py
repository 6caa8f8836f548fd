"""Differential tests: the compiled core (``weft._core``) against the
pure-Python oracle (``tests/oracle``).

The oracle is a deliberately naive restatement of the Rust semantics, so any
disagreement is a bug in one of them. Hypothesis draws random sequences of
all sixteen transition types (one seed per step; see "random values"):
mostly plausible (codons walked through their lifecycle, costs while running,
runs started, ended, crashed and continued, redos) and mixed with refusals
(wrong ``from``, bad metadata, unknown ids, terminal codons, duplicate
runs...) and malformed payloads. Every payload is built as plain JSON, so it
can also be something the msgspec Structs could never produce. Each sequence
goes through one of the three ways into the core (``apply``, ``submit`` +
``drain``, ``apply_batch``) and is compared outcome by outcome, state by state
and cost by cost; at the end the state must also reload into an equal core.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.oracle import OracleCore, OracleOutcome
from tests.oracle import validate_transition as oracle_validate
from tests.oracle.codon import STATUSES as ORACLE_STATUSES

from weft import _core
from weft.errors import InvalidTransitionError, MetadataValidationError

STATUSES = list(ORACLE_STATUSES)
NEXT = {  # the happy path
    "preparing": "starting",
    "starting": "initializing",
    "initializing": "running",
    "running": "completing-sentinels",
    "completing-sentinels": "completed",
}
CODON_IDS = ["c1", "c2", "c3", "loop#0"]
TIMES = ["2025-01-01T00:00:00Z", "2025-01-01T00:01:00Z", "2025-06-30T12:00:00.123Z"]

# Field order of each transition's data, as declared in transition.rs; used to
# send a struct as a JSON array, which serde also accepts. Written out here,
# independently of the oracle, so a wrong order on either side shows up.
FIELD_ORDER = {
    "RunStarted": [
        "runId",
        "runFolder",
        "gitBranch",
        "startingConditions",
        "serverPid",
        "startTime",
        "executionPlan",
    ],
    "RunCompleted": ["runId", "endTime"],
    "RunFailed": ["runId", "endTime"],
    "RunCrashed": ["runId", "detectedAt", "lastCodonStatus"],
    "CodonStarted": ["runId", "codonId", "startTime", "loopContext"],
    "CodonTransitioned": ["runId", "codonId", "from", "to", "timestamp", "metadata"],
    "CostsUpdated": ["runId", "codonId", "cost", "tokens"],
    "CostsIncremented": ["runId", "codonId", "costDelta", "tokensDelta"],
    "AssistantMessageCountUpdated": ["runId", "codonId", "newCount"],
    "ExtensionCountUpdated": ["runId", "codonId", "extensionCount"],
    "CodonFinalCostSet": ["runId", "codonId", "finalCost", "finalTokens"],
    "SentinelStatesUpdated": ["runId", "codonId", "sentinelStates", "totalCost"],
    "CheckpointCreated": ["runId", "codonId", "checkpointType", "sha", "branch"],
    "InitialCheckpointSet": ["sha"],
    "PlanExtended": ["runId", "afterCodonId", "entries"],
    "PlanTrimmed": ["runId", "codonIds"],
}
KINDS = list(FIELD_ORDER)

# --- random values --------------------------------------------------------------
# Each step of a sequence is built from one hypothesis-drawn seed: hypothesis
# shrinks a failure by dropping steps (and zeroing seeds), while the choices
# inside a step come from a seeded ``random.Random``, which is two orders of
# magnitude cheaper than a hypothesis draw. Values come from pools that hold
# the edge cases on purpose (ties, limits, huge integers, unicode).

TEXTS = ["", "a", "x y", "\u00e9t\u00e9", "\u65e5\u672c", "\U0001f600", "\x00\x1f", '"\\/', "null"]
SHAS = ["a1b2c3", "deadbeef", "0" * 40, "", "sha-\u00e9"]
COSTS: list[Any] = [0, 1, 0.0, 2.5e-9, 3.5e-9, 1e-10, 0.1, 0.0234, 0.031971, 1e6, 999999.5, 5e-324]
BAD_COSTS: list[Any] = [-0.01, -1, 1e6 + 0.01, 2e6, "0.5", True, None, [], 1e400]
BIG_INTS = [
    2**31,
    2**32 - 1,
    2**32,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    10**30,
]
FLOATS = [0.0, -0.0, 1.5, -2.25, 1e-7, 1e21, 1.7976931348623157e308, 5e-324, 0.1]
JUNK: list[Any] = [None, True, False, -1, 1.5, "x", [], {}, 2**64, -0.0, {"a": 1}, 1e400]


class Dice:
    """Seeded choices for one step."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def chance(self, percent: int) -> bool:
        return self.rng.randrange(100) < percent

    def pick(self, options: list[Any] | tuple[Any, ...]) -> Any:
        return self.rng.choice(options)

    def int(self, lo: int, hi: int) -> int:
        """Mostly small, sometimes the bounds."""
        roll = self.rng.randrange(10)
        if roll == 0:
            return lo
        if roll == 1:
            return hi
        return self.rng.randint(lo, min(hi, lo + 1000))

    def text(self) -> str:
        return self.pick(TEXTS) if self.chance(70) else self.pick(TEXTS) + self.pick(TEXTS)

    def cost(self) -> Any:
        roll = self.rng.randrange(10)
        if roll < 4:
            return self.rng.randint(0, 3 * 10**9) / 1e9  # exact nano amounts
        if roll < 7:
            return self.rng.uniform(0, 50)
        return self.pick(COSTS)

    def count(self) -> int:
        return self.pick(BIG_INTS[4:7]) if self.chance(10) else self.rng.randint(0, 1000)

    def tokens(self) -> dict[str, int]:
        keys = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")
        big = self.chance(15)
        return {
            k: self.rng.randint(2**63, 2**64 - 1) if big else self.rng.randint(0, 10**6)
            for k in keys
            if self.chance(60)
        }

    def json(self, depth: int = 0) -> Any:
        """Free-form JSON, as a plan entry or a loop budget carries it."""
        roll = self.rng.randrange(10 if depth < 3 else 7)
        if roll == 0:
            return self.pick([None, True, False])
        if roll in (1, 2):
            return self.pick(BIG_INTS) if self.chance(30) else self.rng.randint(-99, 99)
        if roll == 3:
            return self.pick(FLOATS) if self.chance(50) else self.rng.uniform(-1e6, 1e6)
        if roll in (4, 5, 6):
            return self.text()
        if roll in (7, 8):
            return [self.json(depth + 1) for _ in range(self.rng.randrange(3))]
        return {self.text(): self.json(depth + 1) for _ in range(self.rng.randrange(3))}

    def failure_reason(self) -> dict[str, Any]:
        reason: dict[str, Any] = {
            "type": self.pick(["timeout", "api-error", "rate-limit"]),
            "retriable": self.chance(50),
        }
        if self.chance(50):
            reason["message"] = self.text()
        if self.chance(30):
            reason["retryAfterMs"] = self.count()
        if self.chance(20):
            reason["sentinelRefs"] = [self.text() for _ in range(self.rng.randrange(3))]
        return reason

    def budget(self) -> dict[str, Any]:
        return {
            "currency": self.pick(["usd", "tokens"]),
            "limit": self.pick([5, 2.5, 0, 2**64]),
            "used": self.pick(FLOATS[:6]),
        }

    def loop_context(self) -> dict[str, Any]:
        ctx: dict[str, Any] = {
            "loopId": self.pick(["loop", "outer"]),
            "iteration": self.int(0, 2**32 - 1),
            "codonIndexInLoop": self.int(0, 5),
        }
        if self.chance(50):
            ctx["loopBudget"] = self.json()
        return ctx

    def sentinel(self) -> dict[str, Any]:
        s: dict[str, Any] = {
            "id": self.pick(["s1", "s2"]),
            "model": "haiku",
            "loadedAt": self.pick(TIMES),
            "llmCallCount": self.count(),
            "failedLLMCalls": self.int(0, 5),
            "totalCost": self.cost(),
            "status": self.pick(["active", "unloaded"]),
        }
        for key, value in (
            ("unloadedAt", self.pick(TIMES)),
            ("lastLlmCallAt", self.pick(TIMES)),
            ("totalTriggers", self.int(0, 9)),
            ("unloadReason", self.pick(["codon-complete", "fatal-error", "consecutive-failures"])),
        ):
            if self.chance(40):
                s[key] = value
        return s

    def plan_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"codon": self.json(), "codonId": self.pick(CODON_IDS)}
        if self.chance(30):
            entry["loopContext"] = self.json()
        return entry


class Generator:
    """Builds the next transition from what the guide oracle says the state
    is, so most transitions are plausible and the rest are near misses."""

    def __init__(self) -> None:
        self.guide = OracleCore()
        self.dice = Dice(0)

    # Targets: mostly what is live, sometimes something stale or unknown.

    def run_id(self) -> str:
        guide, dice = self.guide, self.dice
        roll = dice.rng.randrange(100)
        if guide.current_run_id is not None and roll < 80:
            return guide.current_run_id
        if guide.runs and roll < 93:
            return str(dice.pick([r["runId"] for r in guide.runs]))
        return str(dice.pick(["nope", "nope", ""]))

    def codon_target(self) -> tuple[str, str]:
        dice = self.dice
        run_id = self.run_id()
        run = self.guide._run(run_id)
        roll = dice.rng.randrange(100)
        if run is not None:
            active = self.guide._active(run)
            if active is not None and roll < 80:
                return run_id, active["codonId"]
            if run["codons"] and roll < 92:
                return run_id, dice.pick([c["codonId"] for c in run["codons"]])
        return run_id, dice.pick(CODON_IDS if dice.chance(80) else ["", "zz"])

    def active(self) -> dict[str, Any] | None:
        cur = self.guide.current_run_id
        run = self.guide._run(cur) if cur is not None else None
        return self.guide._active(run) if run is not None else None

    # One builder per transition type: (type, data).

    def run_started(self) -> tuple[str, dict[str, Any]]:
        dice, runs = self.dice, self.guide.runs
        if dice.chance(85) or not runs:
            run_id = f"r{len(runs) + 1}"
        else:
            run_id = dice.pick([r["runId"] for r in runs] + [""])
        d: dict[str, Any] = {
            "runId": run_id,
            "runFolder": f"/x/.weft/runs/{run_id}",
            "gitBranch": f"run-{run_id}",
            "serverPid": dice.pick([4242, 1, 0, -1, 2**63 - 1, -(2**63)]),
            "startTime": dice.pick(TIMES),
        }
        if runs and dice.chance(50):
            src = dice.pick([r["runId"] for r in runs] + ["ghost"])
            src_run = self.guide._run(src)
            names = [c["codonId"] for c in src_run["codons"]] if src_run else []
            after = dice.pick([None, *names, "ghost"])
            cond: dict[str, Any] = {
                "type": "continuation",
                "source": {"runId": src, "afterCodon": after, "checkpointSha": "abc"},
            }
            if dice.chance(50):
                cond["reason"] = dice.pick(["retry", "rollback", "continue"])
            if dice.chance(15):
                d["executionPlan"] = [] if dice.chance(50) else [dice.plan_entry()]
        else:
            cond = {"type": "fresh"}
            if dice.chance(40):
                cond["initialCheckpointSha"] = "init"
            if dice.chance(60):
                d["executionPlan"] = [dice.plan_entry() for _ in range(dice.rng.randrange(4))]
        d["startingConditions"] = cond
        return "RunStarted", d

    def run_ended(self, kind: str | None = None) -> tuple[str, dict[str, Any]]:
        dice = self.dice
        kind = kind or dice.pick(["RunCompleted", "RunFailed", "RunCrashed"])
        run_id = self.run_id()
        at = dice.pick(TIMES)
        if kind == "RunCrashed":
            last = dice.pick(STATUSES)
            return kind, {"runId": run_id, "detectedAt": at, "lastCodonStatus": last}
        return kind, {"runId": run_id, "endTime": at}

    def codon_started(self) -> tuple[str, dict[str, Any]]:
        dice = self.dice
        d: dict[str, Any] = {
            "runId": self.run_id(),
            "codonId": dice.pick([*CODON_IDS, ""] if dice.chance(5) else CODON_IDS),
            "startTime": dice.pick(TIMES),
        }
        if dice.chance(25):
            d["loopContext"] = dice.loop_context()
        return "CodonStarted", d

    def metadata_for(self, to: str, frm: str) -> dict[str, Any] | None:
        """Plausible metadata for ``to``, sometimes with a field missing or wrong."""
        dice = self.dice
        meta: dict[str, Any] = {}
        if to == "initializing":
            meta = {"claudePid": dice.int(1, 2**31), "claudeLogPath": "log/c.log"}
            if dice.chance(30):
                meta["previousSessionId"] = "prev"
        elif to == "running":
            meta = {"claudeSessionId": dice.pick(["s-1", "s-2", ""])}
        elif to == "completed":
            meta = {"checkpointSha": dice.pick(SHAS)}
            if dice.chance(30):
                meta["resultMessageReceived"] = dice.chance(50)
            if dice.chance(15):
                meta["exitCode"] = dice.pick([0, 0, 1, -1])
        elif to == "failed":
            meta = {
                "exitCode": dice.rng.randint(-5, 5),
                "failureReason": dice.failure_reason(),
                "failedDuring": frm if dice.chance(85) else dice.pick([*STATUSES, "exploding"]),
            }
        elif to == "skipped":
            meta = {"skippedDuring": frm if dice.chance(85) else dice.pick([*STATUSES, "later"])}
        if to in ("starting", "failed", "skipped") and dice.chance(40):
            meta["checkpointSha"] = dice.pick(SHAS)
        if dice.chance(15):
            extra = dice.pick(["extensionCount", "contextExceeded", "budgetExceeded", "claudePid"])
            meta[extra] = {
                "extensionCount": dice.count,
                "contextExceeded": lambda: dice.chance(50),
                "budgetExceeded": dice.budget,
                "claudePid": lambda: dice.int(0, 9),
            }[extra]()
        if meta and dice.chance(8):  # a guard's field goes missing
            del meta[dice.pick(sorted(meta))]
        if not meta and dice.chance(50):
            return None
        return meta

    def codon_transitioned(self) -> tuple[str, dict[str, Any]]:
        dice = self.dice
        run_id, codon_id = self.codon_target()
        run = self.guide._run(run_id)
        rec = self.guide._latest(run, codon_id) if run is not None else None
        status = rec["status"] if rec is not None else "preparing"
        frm = status if dice.chance(90) else dice.pick(STATUSES)
        roll = dice.rng.randrange(100)
        if status in NEXT and roll < 70:
            to = NEXT[status]
        elif roll < 88:
            to = dice.pick(["failed", "skipped", "completed"])
        else:
            to = dice.pick(STATUSES)
        d: dict[str, Any] = {
            "runId": run_id,
            "codonId": codon_id,
            "from": frm,
            "to": to,
            "timestamp": dice.pick(TIMES),
        }
        meta = self.metadata_for(to, status)
        if meta is not None or dice.chance(10):
            d["metadata"] = meta
        return "CodonTransitioned", d

    def costs(self, kind: str | None = None) -> tuple[str, dict[str, Any]]:
        dice = self.dice
        run_id, codon_id = self.codon_target()
        base = {"runId": run_id, "codonId": codon_id}
        kind = kind or dice.pick(
            [
                "CostsUpdated",
                "CostsIncremented",
                "CostsIncremented",
                "CodonFinalCostSet",
                "AssistantMessageCountUpdated",
                "ExtensionCountUpdated",
            ]
        )
        if kind == "CostsUpdated":
            return kind, {**base, "cost": dice.cost(), "tokens": dice.tokens()}
        if kind == "CostsIncremented":
            return kind, {**base, "costDelta": dice.cost(), "tokensDelta": dice.tokens()}
        if kind == "CodonFinalCostSet":
            return kind, {**base, "finalCost": dice.cost(), "finalTokens": dice.tokens()}
        if kind == "AssistantMessageCountUpdated":
            return kind, {**base, "newCount": dice.count()}
        return kind, {**base, "extensionCount": dice.count()}

    def sentinels(self) -> tuple[str, dict[str, Any]]:
        dice = self.dice
        run_id, codon_id = self.codon_target()
        return "SentinelStatesUpdated", {
            "runId": run_id,
            "codonId": codon_id,
            "sentinelStates": [dice.sentinel() for _ in range(dice.rng.randrange(3))],
            "totalCost": dice.cost(),
        }

    def checkpoint(self, kind: str | None = None) -> tuple[str, dict[str, Any]]:
        dice = self.dice
        if kind == "InitialCheckpointSet" or (kind is None and dice.chance(20)):
            return "InitialCheckpointSet", {"sha": dice.pick(SHAS)}
        run_id, codon_id = self.codon_target()
        return "CheckpointCreated", {
            "runId": run_id,
            "codonId": codon_id,
            "checkpointType": dice.pick(["rig-setup", "completed", "error", "skipped"]),
            "sha": dice.pick(SHAS),
            "branch": "run-x",
        }

    def plan_extended(self) -> tuple[str, dict[str, Any]]:
        """Mostly a fresh iteration after an existing entry; sometimes an id
        the plan already has, an unknown anchor or no entries at all."""
        dice = self.dice
        plan_ids = [e["codonId"] for e in self.guide.execution_plan if isinstance(e, dict)]
        after = dice.pick([*plan_ids, *plan_ids, "ghost", ""]) if plan_ids else "c1"
        entries = []
        for _ in range(dice.rng.randrange(4)):
            entry = dice.plan_entry()
            if dice.chance(70):
                entry["codonId"] = f"{dice.pick(CODON_IDS)}#{dice.rng.randrange(1, 9)}"
            entries.append(entry)
        return "PlanExtended", {"runId": self.run_id(), "afterCodonId": after, "entries": entries}

    def plan_trimmed(self) -> tuple[str, dict[str, Any]]:
        """Some planned ids, sometimes with an unknown one or none at all."""
        dice = self.dice
        plan_ids = [e["codonId"] for e in self.guide.execution_plan if isinstance(e, dict)]
        pool = [*plan_ids, *plan_ids, "ghost"]
        ids = [dice.pick(pool) for _ in range(dice.rng.randrange(3))]
        return "PlanTrimmed", {"runId": self.run_id(), "codonIds": ids}

    def any_of_type(self) -> tuple[str, dict[str, Any]]:
        """A transition of a random type, whatever the state."""
        kind = self.dice.pick(KINDS)
        if kind in ("RunCompleted", "RunFailed", "RunCrashed"):
            return self.run_ended(kind)
        if kind in ("CheckpointCreated", "InitialCheckpointSet"):
            return self.checkpoint(kind)
        simple = {
            "RunStarted": self.run_started,
            "CodonStarted": self.codon_started,
            "CodonTransitioned": self.codon_transitioned,
            "SentinelStatesUpdated": self.sentinels,
            "PlanExtended": self.plan_extended,
            "PlanTrimmed": self.plan_trimmed,
        }
        return simple[kind]() if kind in simple else self.costs(kind)

    def plausible(self) -> tuple[str, dict[str, Any]]:
        """What a real runtime would likely send next."""
        dice = self.dice
        active = self.active()
        if self.guide.current_run_id is None:
            return self.run_started() if dice.chance(85) else self.checkpoint()
        roll = dice.rng.randrange(100)
        if active is None:
            if roll < 70:
                return self.codon_started()
            return self.run_ended() if roll < 92 else self.checkpoint()
        live = active["status"] in ("running", "completing-sentinels")
        if live and roll < 35:
            return self.costs()
        if roll < 80:
            return self.codon_transitioned()
        if roll < 86:
            return self.sentinels()
        if roll < 89:
            return self.plan_extended() if dice.chance(75) else self.plan_trimmed()
        if roll < 95:
            return self.checkpoint()
        return self.run_ended()

    # Turning (type, data) into bytes.

    def mutate(self, data: dict[str, Any]) -> dict[str, Any]:
        """Breaks one spot of the data: drops a key, adds an unknown one, or
        puts a wrongly typed value somewhere (at any depth)."""
        dice = self.dice
        data = copy.deepcopy(data)
        spots: list[tuple[Any, Any]] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                spots.extend((node, k) for k in node)
                spots.append((node, None))
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                spots.extend((node, i) for i in range(len(node)))
                for v in node:
                    walk(v)

        walk(data)
        node, key = dice.pick(spots)
        if key is None:
            node["bogusField"] = 1
        elif isinstance(node, dict) and dice.chance(33):
            del node[key]
        else:
            node[key] = dice.pick(BAD_COSTS if dice.chance(50) else JUNK)
        return data

    def encode(self, kind: str, data: Any) -> bytes:
        """Usually plain ``{"type", "data"}``; sometimes another shape serde
        also accepts (data first, arrays, ``{"Type": null}``)."""
        dice = self.dice
        shape = dice.pick(["plain"] * 12 + ["data_first", "seq", "tag_map", "data_seq"])
        if shape == "data_seq" and isinstance(data, dict):
            order = FIELD_ORDER[kind]
            last = max((i for i, k in enumerate(order) if k in data), default=-1)
            data = [data.get(k) for k in order[: last + 1]]
        if shape == "data_first":
            doc: Any = {"data": data, "type": kind}
        elif shape == "seq":
            doc = [kind, data]
        elif shape == "tag_map":
            doc = {"type": {kind: None}, "data": data}
        else:
            doc = {"type": kind, "data": data}
        return json.dumps(doc, ensure_ascii=dice.chance(50)).encode()

    def broken_bytes(self) -> bytes:
        """Payloads that are not transitions at all."""
        kind, data = self.any_of_type()
        good = json.dumps({"type": kind, "data": data}).encode()
        return bytes(
            self.dice.pick(
                [
                    b"",
                    b"not json",
                    b"[]",
                    b"null",
                    good[: len(good) // 2],
                    good + b" x",
                    good.replace(b'"data"', b'"extra": 1, "data"', 1),
                    json.dumps({"type": "NoSuchType", "data": data}).encode(),
                    json.dumps({"type": kind}).encode(),
                    json.dumps({"type": {kind: {}}, "data": data}).encode(),
                    json.dumps([kind, data, 1]).encode(),
                    b'{"type":"InitialCheckpointSet","data":{"sha":NaN}}',
                    b'{"type":"InitialCheckpointSet","data":{"sha":"a","sha":"b"}}',
                    b'{"type":"InitialCheckpointSet","data":{"sha":"\\ud800"}}',
                    b'{"type":"InitialCheckpointSet","data":{"sha":"\xff"}}',
                    b"\xef\xbb\xbf" + good,
                ]
            )
        )

    def next_payload(self, seed: int) -> bytes:
        self.dice = dice = Dice(seed)
        roll = dice.rng.randrange(100)
        if roll < 4:
            payload = self.broken_bytes()
        else:
            kind, data = self.plausible() if roll < 80 else self.any_of_type()
            if roll >= 92:
                data = self.mutate(data)
            payload = self.encode(kind, data)
        self.guide.apply(payload)
        return payload


# --- comparison --------------------------------------------------------------


def outcome_view(o: Any, *, seq_base: int = 0) -> dict[str, Any]:
    """What must match between a core ``Outcome`` and an ``OracleOutcome``."""
    view = {
        "ok": o.ok,
        "kind": o.kind,
        "code": o.code,
        "message": o.message,
        "codon_terminal": o.codon_terminal,
        "run_ended": o.run_ended,
        "from_status": o.from_status,
        "to_status": o.to_status,
        "run_id": o.run_id,
        "codon_id": o.codon_id,
        "missing": list(o.missing),
        "invalid": [tuple(x) for x in o.invalid],
    }
    if o.code == "malformed":  # serde's wording is not part of the contract
        view["message"] = None
    return view


def assert_same_outcome(core_out: Any, oracle_out: OracleOutcome, payload: bytes) -> None:
    assert outcome_view(core_out) == outcome_view(oracle_out), payload


def assert_same_state(core: _core.Core, oracle: OracleCore, context: Any = None) -> None:
    """State document, current run, record count and every cost query."""
    state = json.loads(core.state_json())
    assert state == oracle.state_dict(), context
    assert core.current_run_id == oracle.current_run_id
    assert core.codon_record_count == sum(len(r["codons"]) for r in oracle.runs)
    assert core.total_cost() == oracle.total_cost(), context
    assert core.current_run_cost() == oracle.current_run_cost(), context
    run_ids = [r["runId"] for r in oracle.runs] + ["nope", ""]
    for run_id in run_ids:
        assert core.run_cost(run_id) == oracle.run_cost(run_id), (run_id, context)
        for codon_id in [*CODON_IDS, "zzz"]:
            assert core.codon_cost(run_id, codon_id) == oracle.codon_cost(run_id, codon_id), (
                run_id,
                codon_id,
                context,
            )


def run_sequence(mode: str, payloads: list[bytes], chunks: list[int]) -> None:
    """Feeds the same payloads to a core and an oracle, comparing as it goes."""
    core, oracle = _core.Core(), OracleCore()
    if mode == "apply":
        for payload in payloads:
            assert_same_outcome(core.apply(payload), oracle.apply(payload), payload)
            assert_same_state(core, oracle, payload)
    else:
        feed_in_chunks(core, oracle, mode, payloads, chunks)
    # The reducer only makes records that pass the load-time checks, and a
    # reloaded core rebuilds the same cost cache from them (model.rs).
    assert_same_state(_core.Core(core.state_json()), oracle, "reloaded")


def feed_in_chunks(
    core: _core.Core, oracle: OracleCore, mode: str, payloads: list[bytes], chunks: list[int]
) -> None:
    """``submit`` + ``drain``, or ``apply_batch``, one chunk at a time."""
    start = 0
    sizes = iter(chunks)
    while start < len(payloads):
        chunk = payloads[start : start + max(1, next(sizes, len(payloads)))]
        start += len(chunk)
        if mode == "drain":
            first = core.next_seq
            if len(chunk) % 2:
                assert core.submit_many(chunk) == first
            else:
                for payload in chunk:
                    core.submit(payload)
            # Two drains: the queue hands out the oldest first, in order.
            outs = core.drain(max_events=len(chunk) // 2) + core.drain()
            assert [o.seq for o in outs] == list(range(first, first + len(chunk)))
            for out, payload in zip(outs, chunk, strict=True):
                assert_same_outcome(out, oracle.apply(payload), payload)
        else:
            array = b"[" + b",".join(chunk) + b"]"
            try:
                expected = oracle.apply_batch_outcomes(array)
            except ValueError:
                with pytest.raises(ValueError, match="expects a JSON array"):
                    core.apply_batch(array)
                continue
            result = core.apply_batch(array)
            # Elements are what the array holds, not the payloads (b"" adds none).
            assert result.count == len(expected), array
            assert result.applied == sum(o.ok for o in expected)
            rejected = {o.seq - result.first_seq: o for o in result.rejected}
            assert sorted(rejected) == [i for i, o in enumerate(expected) if not o.ok]
            for i, out in rejected.items():
                assert_same_outcome(out, expected[i], array)
        assert_same_state(core, oracle, chunk)


@st.composite
def sequences(draw: st.DrawFn) -> tuple[str, list[bytes], list[int]]:
    """(how to feed the core, payloads, chunk sizes for drain/batch)."""
    length = draw(st.integers(1, 60))  # lists would average ~6 steps: too short to finish codons
    seeds = draw(st.lists(st.integers(0, 2**32 - 1), min_size=length, max_size=length))
    gen = Generator()
    payloads = [gen.next_payload(seed) for seed in seeds]
    mode = draw(st.sampled_from(["apply", "drain", "batch"]))
    chunks = draw(st.lists(st.integers(1, 16), max_size=8))
    return mode, payloads, chunks


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sequences())
def test_random_sequences_match_the_oracle(case: tuple[str, list[bytes], list[int]]) -> None:
    """Random transition sequences: same outcomes, states and costs."""
    run_sequence(*case)


# --- validate_transition -----------------------------------------------------

META_KEYS = [
    "claudePid",
    "claudeLogPath",
    "previousSessionId",
    "claudeSessionId",
    "exitCode",
    "failureReason",
    "failedDuring",
    "skippedDuring",
    "resultMessageReceived",
    "checkpointSha",
    "contextExceeded",
    "extensionCount",
    "budgetExceeded",
]
GUARDED = {  # what each target's guard reads (the binding also reads exitCode for completed)
    "initializing": ["claudePid", "claudeLogPath"],
    "running": ["claudeSessionId"],
    "completed": ["checkpointSha", "exitCode"],
    "failed": ["exitCode", "failureReason", "failedDuring"],
    "skipped": ["skippedDuring"],
}
meta_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1]),
    st.floats(allow_nan=False),
    st.sampled_from(["", *STATUSES, "exploding", "s-1"]),
    st.sampled_from(STATUSES),  # for failedDuring / skippedDuring
    st.text(max_size=6),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def validation_cases(draw: st.DrawFn) -> tuple[str, str, dict[str, Any] | None]:
    """(from, to, metadata), mostly an edge of the graph with metadata aimed
    at the target's guard: each guarded field absent, well formed or wrong."""
    if draw(st.integers(0, 9)) == 0:
        frm = draw(st.sampled_from([*STATUSES, "bogus", "Running"]))
        to = draw(st.sampled_from([*STATUSES, "bogus"]))
    else:
        frm = draw(st.sampled_from(STATUSES[:5]))
        to = draw(st.sampled_from([*GUARDED, "starting", "completing-sentinels"]))
    if draw(st.integers(0, 9)) == 0:
        return frm, to, None
    good = full_metadata(frm)
    meta: dict[str, Any] = {}
    for key in GUARDED.get(to, []):
        roll = draw(st.integers(0, 3))
        if roll == 1:
            meta[key] = good[key]
        elif roll >= 2:
            meta[key] = draw(meta_values)
    meta.update(
        draw(st.dictionaries(st.sampled_from([*META_KEYS, "other"]), meta_values, max_size=3))
    )
    return frm, to, meta


def full_metadata(frm: str) -> dict[str, Any]:
    """Metadata that satisfies every guard for a codon leaving ``frm``."""
    return {
        "claudePid": 7,
        "claudeLogPath": "c.log",
        "claudeSessionId": "s",
        "checkpointSha": "abc",
        "exitCode": 0,
        "failureReason": {"type": "x", "retriable": False},
        "failedDuring": frm,
        "skippedDuring": frm,
    }


def call(fn: Any, *args: Any) -> tuple[Any, ...]:
    """What a call raised, reduced to what must match (type, text, attributes)."""
    try:
        fn(*args)
    except (InvalidTransitionError, MetadataValidationError) as e:
        return (type(e), str(e), dict(vars(e)))
    except (ValueError, TypeError) as e:
        return (type(e), str(e))
    return ("ok",)


@settings(max_examples=600, deadline=None)
@given(validation_cases())
def test_validate_transition_matches_the_oracle(case: tuple[str, str, Any]) -> None:
    """Same exception type, message and attributes for any status pair and metadata."""
    assert call(_core.validate_transition, *case) == call(oracle_validate, *case)


@pytest.mark.parametrize("frm", STATUSES)
@pytest.mark.parametrize("to", STATUSES)
def test_validate_transition_every_pair(frm: str, to: str) -> None:
    """Every edge of the graph, with no, empty and complete metadata."""
    full = full_metadata(frm)
    elsewhere = {**full, "failedDuring": "running", "skippedDuring": "running"}
    if frm == "running":
        elsewhere = {**full, "failedDuring": "starting", "skippedDuring": "starting"}
    for metadata in (None, {}, full, elsewhere, {"failedDuring": "nope", "skippedDuring": 3}):
        got = call(_core.validate_transition, frm, to, metadata)
        assert got == call(oracle_validate, frm, to, metadata)


# --- hand-written sequences ----------------------------------------------------


def tx(kind: str, **data: Any) -> bytes:
    return json.dumps({"type": kind, "data": data}).encode()


def start_run(run_id: str = "r1", **extra: Any) -> bytes:
    conditions = extra.pop("startingConditions", {"type": "fresh"})
    return tx(
        "RunStarted",
        runId=run_id,
        runFolder=f"/p/.weft/runs/{run_id}",
        gitBranch=f"run-{run_id}",
        startingConditions=conditions,
        serverPid=4242,
        startTime="t0",
        **extra,
    )


def move(frm: str, to: str, run_id: str = "r1", codon_id: str = "c1", **meta: Any) -> bytes:
    data: dict[str, Any] = {
        "runId": run_id,
        "codonId": codon_id,
        "from": frm,
        "to": to,
        "timestamp": f"at-{to}",
    }
    if meta:
        data["metadata"] = meta
    return tx("CodonTransitioned", **data)


def to_running(run_id: str = "r1", codon_id: str = "c1") -> list[bytes]:
    return [
        tx("CodonStarted", runId=run_id, codonId=codon_id, startTime="t1"),
        move("preparing", "starting", run_id, codon_id),
        move("starting", "initializing", run_id, codon_id, claudePid=7, claudeLogPath="c.log"),
        move("initializing", "running", run_id, codon_id, claudeSessionId="sess"),
    ]


def both(payloads: list[bytes]) -> tuple[_core.Core, OracleCore, list[Any]]:
    """Applies payloads to a core and an oracle, asserting they agree."""
    core, oracle = _core.Core(), OracleCore()
    outs = []
    for payload in payloads:
        out = core.apply(payload)
        assert_same_outcome(out, oracle.apply(payload), payload)
        outs.append(out)
    assert_same_state(core, oracle)
    return core, oracle, outs


def codons(core: _core.Core) -> list[dict[str, Any]]:
    return json.loads(core.state_json())["runs"][0]["codons"]


def test_run_crashed_fails_the_running_codon() -> None:
    """The agent dies with the server: failed, exit -1, "Server crashed",
    partialCost = what it had spent, sentinels sealed."""
    core, _, outs = both(
        [
            start_run(),
            *to_running(),
            tx("CostsUpdated", runId="r1", codonId="c1", cost=0.25, tokens={"inputTokens": 10}),
            tx("CodonFinalCostSet", runId="r1", codonId="c1", finalCost=0.3, finalTokens={}),
            tx("SentinelStatesUpdated", runId="r1", codonId="c1", sentinelStates=[], totalCost=0),
            tx("RunCrashed", runId="r1", detectedAt="later", lastCodonStatus="running"),
        ]
    )
    assert (outs[-1].codon_terminal, outs[-1].run_ended) == (True, True)
    (rec,) = codons(core)
    assert rec["status"] == "failed"
    assert rec["exitCode"] == -1
    assert rec["failedDuring"] == "running"
    assert rec["failureReason"] == {
        "type": "crash",
        "retriable": False,
        "message": "Server crashed",
    }
    assert rec["partialCost"] == 0.3
    assert "finalCost" not in rec
    assert "currentCost" not in rec
    assert rec["sentinels"] == {"executed": [], "totalCost": 0.0}
    assert rec["endTime"] == "later"
    assert core.current_run_id is None
    assert core.total_cost() == 0.3


def test_a_skipped_codon_costs_nothing_but_keeps_its_partial_cost() -> None:
    core, _, _ = both(
        [
            start_run(),
            *to_running(),
            tx("CostsIncremented", runId="r1", codonId="c1", costDelta=0.5, tokensDelta={}),
            move("running", "skipped", skippedDuring="running"),
        ]
    )
    (rec,) = codons(core)
    assert rec["partialCost"] == 0.5
    assert core.codon_cost("r1", "c1") == 0.0
    assert core.total_cost() == 0.0


def test_costs_are_exact_nano_dollars_rounded_half_to_even() -> None:
    core, _, _ = both(
        [
            start_run(),
            *to_running(),
            *[
                tx("CostsIncremented", runId="r1", codonId="c1", costDelta=d, tokensDelta={})
                for d in (0.1, 0.2, 2.5e-9, 3.5e-9)
            ],
        ]
    )
    assert core.codon_cost("r1", "c1") == 0.300000006  # 0.1 + 0.2 + 2e-9 + 4e-9, exactly


def test_refusals_name_the_problem_and_change_nothing() -> None:
    _, _, outs = both(
        [
            start_run(),
            start_run("r1"),
            start_run("r2"),
            *to_running(),
            move("preparing", "starting"),
            move("running", "preparing"),
            move("running", "completed", checkpointSha=""),
            move("running", "completed", checkpointSha="x", exitCode=2),
            move("running", "failed", failedDuring="nope"),
            tx("RunCompleted", runId="r1", endTime="t"),
            tx("CostsUpdated", runId="r1", codonId="zz", cost=1, tokens={}),
        ]
    )
    messages = [(o.code, o.message) for o in outs if not o.ok]
    assert messages == [
        ("run_exists", "Run 'r1' already exists"),
        ("run_still_active", "Run 'r1' is still running; end it before starting run 'r2'"),
        ("status_mismatch", "Codon 'c1' in run 'r1' is running, not preparing"),
        ("invalid_transition", "Invalid transition from running to preparing"),
        (
            "invalid_metadata",
            "Missing required metadata for transition to completed: checkpointSha",
        ),
        ("invalid_metadata", "Invalid metadata for transition to completed: exitCode must be 0"),
        (
            "invalid_metadata",
            "Missing required metadata for transition to failed: exitCode, failureReason; "
            "invalid: failedDuring must be a codon status",
        ),
        (
            "run_has_active_codon",
            "Run 'r1' still has an active codon 'c1' (running); finish it first",
        ),
        ("unknown_codon", "No codon 'zz' in run 'r1'"),
    ]


def test_continuation_runs_and_redos() -> None:
    """A continuation points at an earlier run's codon, keeps the plan, and
    the codon runs again as a new record."""
    done = [
        *to_running(),
        move("running", "completed", checkpointSha="abc"),
        tx("RunCompleted", runId="r1", endTime="t9"),
    ]
    source = {"runId": "r1", "afterCodon": "c1", "checkpointSha": "abc"}
    core, _, outs = both(
        [
            start_run(executionPlan=[{"codon": {"model": "x"}, "codonId": "c1"}]),
            *done,
            start_run("r2", startingConditions={"type": "continuation", "source": source}),
            *to_running("r2", "c1"),
            tx("RunCrashed", runId="r2", detectedAt="t10", lastCodonStatus="running"),
            start_run(
                "r3",
                startingConditions={"type": "continuation", "source": {**source, "runId": "r9"}},
            ),
        ]
    )
    assert [o.code for o in outs if not o.ok] == ["unknown_source_run"]
    state = json.loads(core.state_json())
    assert [r["runId"] for r in state["runs"]] == ["r2", "r1"]
    assert state["executionPlan"] == [{"codon": {"model": "x"}, "codonId": "c1"}]
    _, _, outs = both(
        [
            start_run(),
            *done,
            start_run(
                "r2",
                startingConditions={"type": "continuation", "source": source},
                executionPlan=[],
            ),
            start_run(
                "r3",
                startingConditions={
                    "type": "continuation",
                    "source": {**source, "afterCodon": "c7"},
                },
            ),
        ]
    )
    assert [o.code for o in outs if not o.ok] == ["plan_on_continuation", "unknown_source_codon"]


def test_shapes_serde_accepts_are_accepted_by_both() -> None:
    """The other spellings of a transition that serde takes, and near misses."""
    _, _, outs = both(
        [
            b'{"data":{"sha":"a"},"type":"InitialCheckpointSet"}',
            b'["InitialCheckpointSet",{"sha":"b"}]',
            b'{"type":{"InitialCheckpointSet":null},"data":["c"]}',
            b'{"type":{"InitialCheckpointSet":{}},"data":["c"]}',
            b'{"type":"InitialCheckpointSet","data":{"sha":"a","sha":"b"}}',
            b'{"type":"InitialCheckpointSet","data":{"sha":"a"},"x":1}',
            b'{"type":"InitialCheckpointSet","data":["a","b"]}',
            b"\xef\xbb\xbf" + tx("InitialCheckpointSet", sha="a"),
        ]
    )
    assert [o.ok for o in outs] == [True, True, True] + [False] * 5
    assert {o.code for o in outs[3:]} == {"malformed"}


def test_batches_and_the_queue_agree_with_the_oracle() -> None:
    payloads = [start_run(), *to_running(), b"garbage", move("running", "running")]
    run_sequence("drain", payloads, [2, 3])
    run_sequence("batch", [p for p in payloads if p != b"garbage"], [3])
    with pytest.raises(ValueError, match="expects a JSON array"):
        _core.Core().apply_batch(b"[1,")
    with pytest.raises(ValueError, match="expects a JSON array"):
        OracleCore().apply_batch(b"[1,")
    assert OracleCore().apply_batch(b"[" + b",".join(payloads[:5]) + b"]") == 5


def test_money_limits() -> None:
    """Costs are refused at decode when negative, not finite or above $1M."""
    payloads = [start_run(), *to_running()]
    head = b'{"type":"CostsUpdated","data":{"runId":"r1","codonId":"c1","tokens":{},"cost":'
    for cost in (b"-0", b"-0.0", b"1000000", b"1000000.0000001", b"-1e-9", b"1e400", b"1.0e2"):
        payloads.append(head + cost + b"}}")
    _, _, outs = both(payloads)
    assert [o.code for o in outs[-7:]] == [None, None, None, *["malformed"] * 3, None]

    # An increment may not push one codon past $1M either (a conflict, not malformed).
    def inc(delta: float) -> bytes:
        return tx("CostsIncremented", runId="r1", codonId="c1", costDelta=delta, tokensDelta={})

    _, _, outs = both([*payloads, inc(999_900), inc(1e-9)])  # the codon was at $100
    assert [o.code for o in outs[-2:]] == [None, "invalid_value"]
    assert outs[-1].message == "Codon 'c1' in run 'r1' would cost more than 1000000 USD"


def test_msgspec_encoded_transitions_agree() -> None:
    """The production encoder's bytes (``weft.events.transitions.encode``)."""
    from weft.events import transitions as t

    tokens = t.TokenUsage(input_tokens=3, cache_read_tokens=2)
    sentinel = t.SentinelState(
        id="s1",
        model="haiku",
        loaded_at="t",
        llm_call_count=1,
        failed_llm_calls=0,
        total_cost=0.01,
        status="active",
    )
    events: list[t.Transition] = [
        t.InitialCheckpointSet(sha="init"),
        t.RunStarted(
            run_id="r1",
            run_folder="/p",
            git_branch="run-r1",
            starting_conditions=t.Fresh(initial_checkpoint_sha="init"),
            server_pid=1,
            start_time="t0",
            execution_plan=[t.PlanEntry(codon={"model": "m"}, codon_id="c1")],
        ),
        t.CodonStarted(
            run_id="r1",
            codon_id="c1",
            start_time="t1",
            loop_context=t.LoopContext(loop_id="l", iteration=0, codon_index_in_loop=0),
        ),
        t.CodonTransitioned(
            run_id="r1",
            codon_id="c1",
            from_status="preparing",
            to_status="starting",
            timestamp="t2",
        ),
        t.CodonTransitioned(
            run_id="r1",
            codon_id="c1",
            from_status="starting",
            to_status="initializing",
            timestamp="t3",
            metadata=t.TransitionMetadata(claude_pid=9, claude_log_path="c.log"),
        ),
        t.CodonTransitioned(
            run_id="r1",
            codon_id="c1",
            from_status="initializing",
            to_status="running",
            timestamp="t4",
            metadata=t.TransitionMetadata(claude_session_id="s"),
        ),
        t.CostsIncremented(run_id="r1", codon_id="c1", cost_delta=0.02, tokens_delta=tokens),
        t.AssistantMessageCountUpdated(run_id="r1", codon_id="c1", new_count=2),
        t.SentinelStatesUpdated(
            run_id="r1", codon_id="c1", sentinel_states=[sentinel], total_cost=0.01
        ),
        t.CodonFinalCostSet(run_id="r1", codon_id="c1", final_cost=0.05, final_tokens=tokens),
        t.CodonTransitioned(
            run_id="r1",
            codon_id="c1",
            from_status="running",
            to_status="failed",
            timestamp="t5",
            metadata=t.TransitionMetadata(
                exit_code=1,
                failure_reason=t.FailureReason(kind="timeout", retriable=True),
                failed_during="running",
            ),
        ),
        t.CheckpointCreated(
            run_id="r1", codon_id="c1", checkpoint_type="error", sha="e1", branch="run-r1"
        ),
        t.RunFailed(run_id="r1", end_time="t6"),
        t.RunStarted(
            run_id="r2",
            run_folder="/p",
            git_branch="run-r2",
            starting_conditions=t.Continuation(
                source=t.ContinuationSource(run_id="r1", after_codon=None, checkpoint_sha="init"),
                reason="retry",
            ),
            server_pid=2,
            start_time="t7",
        ),
    ]
    core, _, outs = both([t.encode(e) for e in events])
    assert all(o.ok for o in outs), [o.message for o in outs if not o.ok]
    assert core.run_cost("r1") == 0.05
