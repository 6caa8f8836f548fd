"""Reference model of the core's reducer (``rust_core/src/state/reducer.rs``).

Deliberately naive where the core is clever, so the two can be compared:
runs and records are looked up by scanning, and every cost is recomputed by
summing the records (the seed's ``getCodonCost``), where the core keeps
indexes and an O(1) cache moved by deltas. The state is held in the
state.json layout itself (a codon record is a dict of exactly the keys the
core serialises), with costs as exact nano-dollars.

Known, intentional gap (far outside realistic input): totals are plain Python
integers where the core saturates at i64::MAX nano-dollars (about 9.2 billion
dollars, i.e. more than 9,000 codons at the $1M cap).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .codon import LIVE, TARGETS, TERMINAL, check_metadata, invalid_transition_message
from .codon import metadata_message as _metadata_message
from .wire import MAX_USD, U64_MAX, ZERO, MalformedError, Money, decode_transition, split_batch

_TOKEN_KEYS = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")
_CHECKPOINT_SLOTS = {
    "rig-setup": "rigSetupCheckpoint",
    "completed": "completionCheckpoint",
    "error": "errorCheckpoint",
    "skipped": "skipCheckpoint",
}


def _zero_tokens() -> dict[str, int]:
    return dict.fromkeys(_TOKEN_KEYS, 0)


@dataclass
class OracleOutcome:
    """What ``weft._core.Outcome`` reports, minus the sequence number."""

    ok: bool
    kind: str | None
    code: str | None = None
    message: str | None = None
    codon_terminal: bool = False
    run_ended: bool = False
    from_status: str | None = None
    to_status: str | None = None
    run_id: str | None = None
    codon_id: str | None = None
    missing: list[str] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)


class _RejectionError(Exception):
    """A refusal; the handler raised it before changing anything."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


def _set(rec: dict[str, Any], key: str, value: Any) -> None:
    """Sets an optional field; ``None`` removes it (``skip_serializing_if``)."""
    if value is None:
        rec.pop(key, None)
    else:
        rec[key] = value


def codon_cost(rec: dict[str, Any]) -> Money:
    """The seed's ``getCodonCost``: completed -> finalCost, failed ->
    partialCost, running/completing-sentinels -> currentCost, otherwise 0
    (a skipped codon costs 0 even though it keeps a partialCost)."""
    status = rec["status"]
    if status == "completed":
        key = "finalCost"
    elif status == "failed":
        key = "partialCost"
    elif status in LIVE:
        key = "currentCost"
    else:
        return ZERO  # preparing, starting, initializing, skipped
    cost: Money = rec.get(key, ZERO)
    return cost


def _plain(v: Any) -> Any:
    """A deep copy with money as dollars: the state.json value."""
    if isinstance(v, Money):
        return v.usd
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


class OracleCore:
    """Reference ``weft._core.Core`` (no queue: transitions apply in call order)."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []  # oldest first, unlike state.json
        self.current_run_id: str | None = None
        self.initial_checkpoint: str | None = None
        self.execution_plan: list[Any] = []
        # The same indexes the core keeps, so that as a benchmark baseline the
        # oracle is not slowed by linear scans the core does not do.
        self._runs_by_id: dict[str, dict[str, Any]] = {}
        self._latest_by_id: dict[tuple[str, str], dict[str, Any]] = {}

    # --- API ---------------------------------------------------------------

    def apply(self, payload: bytes | str) -> OracleOutcome:
        """Decodes and applies one transition; a rejection changes nothing."""
        try:
            kind, data = decode_transition(payload)
        except MalformedError as e:
            return OracleOutcome(False, None, "malformed", f"Malformed transition: {e}")
        handler: Callable[[OracleCore, dict[str, Any]], tuple[bool, bool]] = _HANDLERS[kind]
        # What the transition is about, reported whether or not it applies.
        about: dict[str, Any] = {
            "run_id": data.get("runId"),
            "codon_id": data.get("codonId", data.get("afterCodonId")),
        }
        if kind == "CodonTransitioned":
            about |= {"from_status": data["from"], "to_status": data["to"]}
        try:
            codon_terminal, run_ended = handler(self, data)
        except _RejectionError as r:
            return OracleOutcome(False, kind, r.code, r.message, **(about | r.extra))
        return OracleOutcome(
            True, kind, codon_terminal=codon_terminal, run_ended=run_ended, **about
        )

    def apply_batch_outcomes(self, payload: bytes | str) -> list[OracleOutcome]:
        """Applies a JSON array of transitions in order; one outcome each.
        ``ValueError`` if the payload is not an array."""
        return [self.apply(element) for element in split_batch(payload)]

    def apply_batch(self, payload: bytes | str) -> int:
        """Applies a JSON array of transitions; returns how many were applied."""
        return sum(o.ok for o in self.apply_batch_outcomes(payload))

    def state_dict(self) -> dict[str, Any]:
        """The state in the state.json layout (runs newest first)."""
        state: dict[str, Any] = {
            "runs": [_plain(run) for run in reversed(self.runs)],
            "currentRunId": self.current_run_id,
            "executionPlan": _plain(self.execution_plan),
        }
        if self.initial_checkpoint is not None:
            state["initialCheckpoint"] = self.initial_checkpoint
        return state

    def total_cost(self) -> float:
        """Every record of every run, summed."""
        return Money(sum(self._run_nanos(run) for run in self.runs)).usd

    def current_run_cost(self) -> float:
        """The current run's records, summed; 0 when no run is current."""
        run = self._run(self.current_run_id) if self.current_run_id is not None else None
        return Money(self._run_nanos(run) if run else 0).usd

    def run_cost(self, run_id: str) -> float | None:
        """One run's records summed, ``None`` for an unknown run."""
        run = self._run(run_id)
        return None if run is None else Money(self._run_nanos(run)).usd

    def codon_cost(self, run_id: str, codon_id: str) -> float | None:
        """``getCodonCost`` of the codon's latest record in the run, or ``None``."""
        run = self._run(run_id)
        rec = None if run is None else self._latest(run, codon_id)
        return None if rec is None else codon_cost(rec).usd

    # --- lookups -----------------------------------------------------------

    @staticmethod
    def _run_nanos(run: dict[str, Any]) -> int:
        return sum(codon_cost(rec).nanos for rec in run["codons"])

    def _run(self, run_id: str) -> dict[str, Any] | None:
        return self._runs_by_id.get(run_id)

    def _latest(self, run: dict[str, Any], codon_id: str) -> dict[str, Any] | None:
        return self._latest_by_id.get((run["runId"], codon_id))

    @staticmethod
    def _active(run: dict[str, Any]) -> dict[str, Any] | None:
        # CodonStarted appends only when nothing is active, so an active
        # record is always the run's last one.
        codons: list[dict[str, Any]] = run["codons"]
        if codons and codons[-1]["status"] not in TERMINAL:
            return codons[-1]
        return None

    @staticmethod
    def _non_empty(name: str, value: str) -> None:
        if not value:
            raise _RejectionError("invalid_value", f"{name} must not be empty")

    def _live_run(self, run_id: str) -> dict[str, Any]:
        self._non_empty("runId", run_id)
        run = self._run(run_id)
        if run is None:
            raise _RejectionError("unknown_run", f"Unknown run '{run_id}'")
        if run["status"] != "running":
            raise _RejectionError(
                "run_not_active", f"Run '{run_id}' is {run['status']}, not running"
            )
        return run

    def _record(self, run_id: str, codon_id: str) -> dict[str, Any]:
        run = self._live_run(run_id)
        self._non_empty("codonId", codon_id)
        rec = self._latest(run, codon_id)
        if rec is None:
            raise _RejectionError("unknown_codon", f"No codon '{codon_id}' in run '{run_id}'")
        return rec

    def _live_record(self, run_id: str, codon_id: str) -> dict[str, Any]:
        rec = self._record(run_id, codon_id)
        if rec["status"] not in LIVE:
            raise _RejectionError(
                "codon_not_live",
                f"Codon '{codon_id}' in run '{run_id}' is {rec['status']}, not running",
            )
        return rec

    # --- handlers: check everything, then mutate ------------------------------

    def _run_started(self, d: dict[str, Any]) -> tuple[bool, bool]:
        run_id = d["runId"]
        self._non_empty("runId", run_id)
        if self._run(run_id) is not None:
            raise _RejectionError("run_exists", f"Run '{run_id}' already exists")
        if self.current_run_id is not None:
            raise _RejectionError(
                "run_still_active",
                f"Run '{self.current_run_id}' is still running; end it before starting run "
                f"'{run_id}'",
            )
        conditions = d["startingConditions"]
        if conditions["type"] == "continuation":
            source = conditions["source"]
            src = self._run(source["runId"])
            if src is None:
                raise _RejectionError(
                    "unknown_source_run",
                    f"Continuation source run '{source['runId']}' not found",
                )
            after = source["afterCodon"]
            if after is not None and self._latest(src, after) is None:
                raise _RejectionError(
                    "unknown_source_codon",
                    f"Continuation source run '{source['runId']}' has no codon '{after}'",
                )
            if "executionPlan" in d:
                raise _RejectionError(
                    "plan_on_continuation",
                    "A continuation run keeps the existing execution plan; omit executionPlan",
                )
        if "executionPlan" in d:
            self.execution_plan = d["executionPlan"]
        self._runs_by_id[run_id] = {
            "runId": run_id,
            "runFolder": d["runFolder"],
            "gitBranch": d["gitBranch"],
            "startingConditions": conditions,
            "codons": [],
            "status": "running",
            "startTime": d["startTime"],
            "serverPid": d["serverPid"],
        }
        self.runs.append(self._runs_by_id[run_id])
        self.current_run_id = run_id
        return False, False

    def _finish_run(self, run: dict[str, Any], at: str, status: str) -> None:
        run["status"] = status
        run["endTime"] = at
        if self.current_run_id == run["runId"]:
            self.current_run_id = None

    def _run_ended(self, d: dict[str, Any], status: str) -> tuple[bool, bool]:
        run_id = d["runId"]
        run = self._live_run(run_id)
        active = self._active(run)
        if active is not None:
            raise _RejectionError(
                "run_has_active_codon",
                f"Run '{run_id}' still has an active codon '{active['codonId']}' "
                f"({active['status']}); finish it first",
            )
        self._finish_run(run, d["endTime"], status)
        return False, True

    def _run_failed(self, d: dict[str, Any]) -> tuple[bool, bool]:
        ended = self._run_ended(d, "failed")
        if d.get("reason") is not None:
            run = self._run(d["runId"])
            assert run is not None
            failure = {"codonId": d.get("codonId"), "reason": d["reason"]}
            run["failure"] = {k: v for k, v in failure.items() if v is not None}
        return ended

    def _run_stopped(self, d: dict[str, Any]) -> tuple[bool, bool]:
        if d["by"] == "budget" and d.get("budget") is None:
            raise _RejectionError(
                "invalid_value", "RunStopped by budget needs the budget that stopped it"
            )
        ended = self._run_ended(d, "stopped")
        run = self._run(d["runId"])
        assert run is not None
        stop = {k: d.get(k) for k in ("by", "forced", "reason", "codonId", "budget")}
        run["stop"] = {k: v for k, v in stop.items() if v is not None}
        return ended

    def _run_crashed(self, d: dict[str, Any]) -> tuple[bool, bool]:
        run = self._live_run(d["runId"])
        active = self._active(run)
        if active is not None:
            # The agent died with the server: the codon fails where it was.
            active["exitCode"] = -1
            active["failureReason"] = {
                "type": "crash",
                "retriable": False,
                "message": "Server crashed",
            }
            active["failedDuring"] = active["status"]
            _settle(active, "failed", d["detectedAt"])
        self._finish_run(run, d["detectedAt"], "crashed")
        return active is not None, True

    def _codon_started(self, d: dict[str, Any]) -> tuple[bool, bool]:
        self._non_empty("codonId", d["codonId"])
        run = self._live_run(d["runId"])
        active = self._active(run)
        if active is not None:
            raise _RejectionError(
                "codon_already_active",
                f"Run '{run['runId']}' already has an active codon '{active['codonId']}' "
                f"({active['status']})",
            )
        rec = {"codonId": d["codonId"], "status": "preparing", "startTime": d["startTime"]}
        _set(rec, "loopContext", d.get("loopContext"))
        run["codons"].append(rec)
        self._latest_by_id[(run["runId"], d["codonId"])] = rec
        return False, False

    def _codon_transitioned(self, d: dict[str, Any]) -> tuple[bool, bool]:
        run_id, codon_id, frm, to = d["runId"], d["codonId"], d["from"], d["to"]
        rec = self._record(run_id, codon_id)
        if rec["status"] != frm:
            raise _RejectionError(
                "status_mismatch",
                f"Codon '{codon_id}' in run '{run_id}' is {rec['status']}, not {frm}",
            )
        if to not in TARGETS[frm]:
            raise _RejectionError(
                "invalid_transition",
                invalid_transition_message(frm, to),
                from_status=frm,
                to_status=to,
            )
        meta = d.get("metadata", {})
        missing, invalid = check_metadata(frm, to, meta)
        if missing or invalid:
            raise _RejectionError(
                "invalid_metadata",
                _metadata_message(to, missing, invalid),
                from_status=frm,
                to_status=to,
                missing=missing,
                invalid=invalid,
            )
        _enter(rec, to, meta, d["timestamp"])
        return to in TERMINAL, False

    def _costs_updated(self, d: dict[str, Any]) -> tuple[bool, bool]:
        rec = self._live_record(d["runId"], d["codonId"])
        rec["currentCost"] = d["cost"]
        rec["currentTokens"] = d["tokens"]
        return False, False

    def _costs_incremented(self, d: dict[str, Any]) -> tuple[bool, bool]:
        run_id, codon_id = d["runId"], d["codonId"]
        rec = self._live_record(run_id, codon_id)
        cost = Money(rec.get("currentCost", ZERO).nanos + d["costDelta"].nanos)
        if cost.nanos > MAX_USD * 10**9:  # no single value may outgrow what a document holds
            raise _RejectionError(
                "invalid_value",
                f"Codon '{codon_id}' in run '{run_id}' would cost more than 1000000 USD",
            )
        rec["currentCost"] = cost
        tokens = rec.get("currentTokens", _zero_tokens())
        delta = d["tokensDelta"]
        rec["currentTokens"] = {k: min(tokens[k] + delta[k], U64_MAX) for k in _TOKEN_KEYS}
        return False, False

    def _message_count(self, d: dict[str, Any]) -> tuple[bool, bool]:
        self._live_record(d["runId"], d["codonId"])["assistantMessageCount"] = d["newCount"]
        return False, False

    def _extension_count(self, d: dict[str, Any]) -> tuple[bool, bool]:
        self._live_record(d["runId"], d["codonId"])["extensionCount"] = d["extensionCount"]
        return False, False

    def _final_cost(self, d: dict[str, Any]) -> tuple[bool, bool]:
        rec = self._live_record(d["runId"], d["codonId"])
        # The agent's own total supersedes the running estimate.
        rec["finalCost"] = rec["currentCost"] = d["finalCost"]
        rec["finalTokens"] = d["finalTokens"]
        rec["currentTokens"] = dict(d["finalTokens"])
        return False, False

    def _sentinels(self, d: dict[str, Any]) -> tuple[bool, bool]:
        run_id, codon_id = d["runId"], d["codonId"]
        rec = self._record(run_id, codon_id)
        if rec["status"] in TERMINAL:
            raise _RejectionError(
                "sentinels_final",
                f"Codon '{codon_id}' in run '{run_id}' is {rec['status']}; "
                "its sentinel states are final",
            )
        rec["sentinels"] = {"loaded": d["sentinelStates"], "totalCost": d["totalCost"]}
        return False, False

    def _checkpoint(self, d: dict[str, Any]) -> tuple[bool, bool]:
        self._non_empty("sha", d["sha"])
        rec = self._record(d["runId"], d["codonId"])
        rec[_CHECKPOINT_SLOTS[d["checkpointType"]]] = d["sha"]
        return False, False

    def _initial_checkpoint(self, d: dict[str, Any]) -> tuple[bool, bool]:
        self._non_empty("sha", d["sha"])
        self.initial_checkpoint = d["sha"]
        return False, False

    def _plan_extended(self, d: dict[str, Any]) -> tuple[bool, bool]:
        self._live_run(d["runId"])
        self._non_empty("afterCodonId", d["afterCodonId"])
        if not d["entries"]:
            raise _RejectionError("invalid_value", "entries must not be empty")
        ids = [e["codonId"] for e in self.execution_plan]
        if d["afterCodonId"] not in ids:
            raise _RejectionError(
                "unknown_plan_entry", f"No plan entry '{d['afterCodonId']}' to extend after"
            )
        at = ids.index(d["afterCodonId"])
        for entry in d["entries"]:
            self._non_empty("codonId", entry["codonId"])
            if entry["codonId"] in ids:
                raise _RejectionError(
                    "plan_conflict", f"The plan already has an entry '{entry['codonId']}'"
                )
            ids.append(entry["codonId"])
        self.execution_plan[at + 1 : at + 1] = d["entries"]
        return False, False

    def _plan_trimmed(self, d: dict[str, Any]) -> tuple[bool, bool]:
        self._live_run(d["runId"])
        if not d["codonIds"]:
            raise _RejectionError("invalid_value", "codonIds must not be empty")
        ids = {e["codonId"] for e in self.execution_plan}
        for codon_id in d["codonIds"]:
            if codon_id not in ids:
                raise _RejectionError("unknown_plan_entry", f"No plan entry '{codon_id}' to remove")
        gone = set(d["codonIds"])
        self.execution_plan = [e for e in self.execution_plan if e["codonId"] not in gone]
        return False, False


def _enter(rec: dict[str, Any], to: str, meta: dict[str, Any], at: str) -> None:
    """Moves a record into ``to``, filling in what that state promises."""
    for key in ("extensionCount", "budgetExceeded", "contextExceeded"):
        if key in meta:
            rec[key] = meta[key]
    sha = meta.get("checkpointSha") or None  # an empty sha is no sha
    if to == "starting" and sha:
        rec["rigSetupCheckpoint"] = sha
    elif to == "initializing":
        _set(rec, "claudePid", meta.get("claudePid"))
        _set(rec, "claudeLogPath", meta.get("claudeLogPath"))
        if "previousSessionId" in meta:
            rec["previousSessionId"] = meta["previousSessionId"]
    elif to == "running":
        _set(rec, "claudeSessionId", meta.get("claudeSessionId"))
        rec.setdefault("currentCost", ZERO)
        rec.setdefault("currentTokens", _zero_tokens())
        rec.setdefault("assistantMessageCount", 0)
        rec.setdefault("extensionCount", 0)
    elif to == "completed":
        rec["exitCode"] = 0
        _set(rec, "completionCheckpoint", sha)
        rec["resultMessageReceived"] = meta.get("resultMessageReceived", False)
    elif to == "failed":
        _set(rec, "exitCode", meta.get("exitCode"))
        _set(rec, "failureReason", meta.get("failureReason"))
        _set(rec, "failedDuring", meta.get("failedDuring"))
        if sha:
            rec["errorCheckpoint"] = sha
    elif to == "skipped":
        _set(rec, "skippedDuring", meta.get("skippedDuring"))
        if sha:
            rec["skipCheckpoint"] = sha
    if to in TERMINAL:
        _settle(rec, to, at)
    else:
        rec["status"] = to


def _settle(rec: dict[str, Any], to: str, at: str) -> None:
    """Closes a record: the live cost becomes final (completed) or partial
    (failed, skipped), and sentinels move from ``loaded`` to ``executed``."""
    cost = rec.pop("currentCost", ZERO)
    tokens = rec.pop("currentTokens", None) or _zero_tokens()
    if to == "completed":
        rec["finalCost"], rec["finalTokens"] = cost, tokens
    else:
        rec.pop("finalCost", None)
        rec.pop("finalTokens", None)
        rec["partialCost"], rec["partialTokens"] = cost, tokens
    sentinels = rec.get("sentinels")
    if sentinels is not None and "loaded" in sentinels:
        sentinels["executed"] = sentinels.pop("loaded")
    rec["endTime"] = at
    rec["status"] = to


_HANDLERS: dict[str, Callable[[OracleCore, dict[str, Any]], tuple[bool, bool]]] = {
    "RunStarted": OracleCore._run_started,
    "RunCompleted": lambda core, d: core._run_ended(d, "completed"),
    "RunFailed": OracleCore._run_failed,
    "RunStopped": OracleCore._run_stopped,
    "RunCrashed": OracleCore._run_crashed,
    "CodonStarted": OracleCore._codon_started,
    "CodonTransitioned": OracleCore._codon_transitioned,
    "CostsUpdated": OracleCore._costs_updated,
    "CostsIncremented": OracleCore._costs_incremented,
    "AssistantMessageCountUpdated": OracleCore._message_count,
    "ExtensionCountUpdated": OracleCore._extension_count,
    "CodonFinalCostSet": OracleCore._final_cost,
    "SentinelStatesUpdated": OracleCore._sentinels,
    "CheckpointCreated": OracleCore._checkpoint,
    "InitialCheckpointSet": OracleCore._initial_checkpoint,
    "PlanExtended": OracleCore._plan_extended,
    "PlanTrimmed": OracleCore._plan_trimmed,
}
