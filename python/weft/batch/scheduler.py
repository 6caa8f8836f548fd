"""The scheduler: which step runs next, sans I/O.

It holds one core machine per workstream, step and tool
(:class:`weft.core.Workstream`, :class:`~weft.core.Step`,
:class:`~weft.core.CircuitBreaker`), rebuilt from the store's rows, and answers
two questions with values, never by doing anything itself:

* :meth:`Scheduler.tick` (now, free slots): the state changes to write and the
  steps to launch once they are written, plus when to ask again;
* :meth:`Scheduler.finished` (a step's outcome): the changes it causes.

Every change is made by a machine first (so a refused move raises
:class:`weft.errors.InvalidTransitionError` here, before anything is written),
then handed to :meth:`weft.batch.store.BatchStore.commit` by the coordinator.
The clock is an argument (milliseconds), so tests drive time by hand.

Rules, beyond the machines' own:

* a step starts when its workstream runs, its dependencies succeeded, a slot
  is free and its tool's breaker allows a request; a failed step with retries
  left goes to ``S_RETRYING`` at once and starts again after its backoff;
* a workstream starts (``S_PENDING -> S_RUNNING``) when it can launch a step;
  it ends when nothing in it can move: ``S_SUCCESS`` if every step succeeded,
  else ``S_FAILED``, then ``S_RETRYING`` (its failed steps start over after
  the backoff) or, retries spent, ``S_ABANDONED``. Steps behind a failed one
  stay ``S_PENDING``: a failure blocks exactly its dependents;
* abandoning (``weft batch abandon``) is a request honoured at the first legal
  move: the seed lets only ``S_RUNNING`` become ``S_ABANDONED``;
* a usage window (:mod:`weft.windows`): a step that could start is held back
  while a provider it calls (:attr:`Scheduler.providers`) has a closed window
  (the ``windows`` given to :meth:`Scheduler.tick` with the time, like the
  clock); it is named in :attr:`Tick.held` with the provider and when the
  window opens, the tick wakes then, and nothing else moves: no error, no
  breaker, no retry. A pending workstream whose only ready steps are held
  does not start;
* a step running past its ``timeout_seconds`` (counted from its launch's
  ``started_at_ms``) is named in :attr:`Tick.cancels` once, audited ``timed
  out after Ns: stopping``; its launch's end is then a failure (whatever its
  exit code: it did not finish in its time), ``timed out after Ns``, and its
  retries apply as to any failure;
* skipping (``weft batch skip``, the seed's Recovery 2 "or skip the step"): the
  core's step machine has no skipped state and no move from ``S_FAILED`` or
  ``S_PENDING`` to ``S_SUCCESS``, so a skipped step gets a machine restored in
  ``S_SUCCESS`` (the one state that lets dependents run), audited with
  ``skipped: true``; reports tell it from a real success by that audit row.

A recovery command's result is its changes and a line; no changes means it
was refused (the line says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from weft.batch.store import BreakerRow, Change, StepRow, StoredBatch, WorkstreamRow
from weft.clock import iso_from_ms
from weft.core import CircuitBreaker, Step, Workstream, circuit_open_message

__all__ = ["Outcome", "Scheduler", "Tick"]

PENDING, RUNNING, SUCCESS, FAILED, RETRYING, ABANDONED = (
    "S_PENDING",
    "S_RUNNING",
    "S_SUCCESS",
    "S_FAILED",
    "S_RETRYING",
    "S_ABANDONED",
)


@dataclass(frozen=True)
class Outcome:
    """How one launch of a step ended."""

    exit_code: int | None
    """``None``: no exit code (killed by a signal, or the process was lost)."""
    duration_ms: int = 0
    cost_usd: float = 0.0
    error: str | None = None
    """The end of the step's output when it failed, for reports."""
    ended_at_ms: int | None = None
    """When the engine saw the launch end (wall clock, ms since the epoch); the
    coordinator records the step's end at this time, not when it got round to
    it. ``None``: at the time it is recorded."""


@dataclass
class Tick:
    """What the coordinator must do now: write ``changes``, then launch
    ``launches`` and stop ``cancels``; call again at ``wake_at_ms`` at the latest."""

    changes: list[Change] = field(default_factory=list)
    launches: list[str] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    wake_at_ms: int | None = None
    waiting: dict[str, str] = field(default_factory=dict)
    """Steps that could start but wait, with why (``circuit open: ...``)."""
    held: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Steps held back by a closed usage window: the provider and when it opens (epoch ms)."""

    def wake(self, at: int) -> None:
        """Asks to be called again at ``at`` (the earliest request wins)."""
        self.wake_at_ms = at if self.wake_at_ms is None else min(self.wake_at_ms, at)


@dataclass
class _Step:
    row: StepRow
    machine: Step
    providers: frozenset[str] = frozenset()
    """The providers its launch calls (:attr:`Scheduler.providers`)."""

    @property
    def deps(self) -> list[str]:
        return list(self.row.plan.get("depends_on", []))

    @property
    def tool(self) -> str:
        return str(self.row.plan["tool"])


@dataclass
class _Ws:
    row: WorkstreamRow
    machine: Workstream
    steps: dict[str, _Step]


class Scheduler:
    """The batch's machines and the rules that drive them (see the module doc)."""

    def __init__(
        self,
        stored: StoredBatch,
        *,
        max_dollars: float | None = None,
        providers: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        self.max_dollars = max_dollars
        self._windows: Mapping[str, int] = {}
        self._held_words: dict[tuple[str, int], str] = {}
        self.workstreams: dict[str, _Ws] = {}
        for w in stored.workstreams:
            machine = Workstream.restore(
                w.state,
                max_retries=w.max_retries,
                retry_count=w.retry_count,
                retry_ready_at_ms=w.retry_ready_at_ms,
                base_delay_ms=w.base_delay_ms,
                max_delay_ms=w.max_delay_ms,
            )
            self.workstreams[w.ws_id] = _Ws(row=w, machine=machine, steps={})
        for s in stored.steps:
            self.workstreams[s.ws_id].steps[s.step_id] = _Step(row=s, machine=_restore_step(s))
        self.breakers: dict[str, CircuitBreaker] = {
            b.tool: CircuitBreaker.restore(
                b.state,
                consecutive_failures=b.consecutive_failures,
                half_open_successes=b.half_open_successes,
                opened_at_ms=b.opened_at_ms,
                probe_started_at_ms=b.probe_started_at_ms,
                failure_threshold=b.failure_threshold,
                cooldown_ms=b.cooldown_ms,
                success_threshold=b.success_threshold,
            )
            for b in stored.breakers
        }
        # The machine says whether a test request is out, not since when; the
        # store needs the time to restore it, so it is noted here.
        self._probe_at: dict[str, int | None] = {
            b.tool: b.probe_started_at_ms for b in stored.breakers
        }
        self._timed_out: set[str] = set()
        """Steps stopped for their timeout whose launch's end is not recorded yet."""
        self.providers = {key: frozenset(names) for key, names in (providers or {}).items()}

    @property
    def providers(self) -> dict[str, frozenset[str]]:
        """The providers each step's launch calls (``ws/step`` -> names), from
        :func:`weft.batch.windows.step_providers`; a step not named calls none."""
        return {
            s.row.key: s.providers
            for ws in self.workstreams.values()
            for s in ws.steps.values()
            if s.providers
        }

    @providers.setter
    def providers(self, value: Mapping[str, Iterable[str]]) -> None:
        for ws in self.workstreams.values():
            for step in ws.steps.values():
                step.providers = frozenset(value.get(step.row.key, ()))

    # ---- queries ------------------------------------------------------------

    def step(self, key: str) -> _Step:
        """The step ``ws_id/step_id``; ``KeyError`` names it when unknown."""
        ws_id, _, step_id = key.partition("/")
        try:
            return self.workstreams[ws_id].steps[step_id]
        except KeyError:
            raise KeyError(f"no step {key!r} in this batch") from None

    def running(self) -> list[str]:
        """Keys of the steps in ``S_RUNNING``."""
        return [
            s.row.key
            for ws in self.workstreams.values()
            for s in ws.steps.values()
            if s.machine.state == RUNNING
        ]

    @property
    def done(self) -> bool:
        """Whether every workstream is terminal and no step runs."""
        return (
            all(ws.machine.is_terminal for ws in self.workstreams.values()) and not self.running()
        )

    # ---- the two questions --------------------------------------------------

    def held(self, now_ms: int, windows: Mapping[str, int]) -> dict[str, tuple[str, int]]:
        """The steps that could start at ``now_ms`` (their workstream not over,
        their dependencies met, their backoff past) but call a provider closed in
        ``windows`` (provider -> when it opens, epoch ms): ``key -> (provider,
        opens_at_ms)``, the provider opening last when several are closed. Moves
        nothing (``weft batch status`` asks it of a scheduler built to read)."""
        out: dict[str, tuple[str, int]] = {}
        for ws in self.workstreams.values():
            if ws.machine.is_terminal or ws.row.abandon_requested:
                continue
            for step in ws.steps.values():
                closed = self._closed(step, now_ms, windows)
                if closed is not None and self._ready(ws, step, now_ms, None):
                    out[step.row.key] = closed
        return out

    def tick(self, now_ms: int, free_slots: int, windows: Mapping[str, int] | None = None) -> Tick:
        """The changes and launches due at ``now_ms`` with ``free_slots`` free
        workers, while the providers in ``windows`` (provider -> when its usage
        window opens, epoch ms) refuse sessions."""
        tick = Tick()
        self._windows = windows or {}
        slots = free_slots
        self._check_budget(tick)
        self._check_timeouts(now_ms, tick)
        for ws in self.workstreams.values():
            slots = self._tick_ws(ws, now_ms, slots, tick)
        return tick

    def finished(self, key: str, outcome: Outcome, now_ms: int) -> list[Change]:
        """Records the end of a launch of ``key``; the changes it causes."""
        step = self.step(key)
        changes: list[Change] = []
        before = step.machine.state
        timeout = step.row.plan.get("timeout_seconds") if key in self._timed_out else None
        self._timed_out.discard(key)
        # A launch stopped for its timeout fails, whatever its exit code.
        to = step.machine.finish(outcome.exit_code if timeout is None else None)
        step.row.exit_code = outcome.exit_code
        values: dict[str, Any] = {
            "exit_code": outcome.exit_code,
            "duration_ms": outcome.duration_ms,
            "cost_usd": outcome.cost_usd,
            "error": outcome.error,
            "pid": None,
            "pid_start": None,
        }
        step.row.cost_usd, step.row.duration_ms = outcome.cost_usd, outcome.duration_ms
        step.row.error = outcome.error
        code = outcome.exit_code
        meta: dict[str, Any] = {
            "reason": f"exit code {code}" if code is not None else "no exit code",
            "exit_code": code,
            "launch": step.row.launches,
        }
        if timeout is not None:
            meta["reason"] = f"timed out after {timeout:g}s"
            meta["timed_out"] = True
            step.row.error = values["error"] = "\n".join(
                filter(None, [f"timed out after {timeout:g}s (stopped)", outcome.error])
            )
        if outcome.cost_usd:
            meta["cost_usd"] = round(outcome.cost_usd, 6)
        changes.append(_step_change(step, before, to, values, meta))
        changes.extend(self._breaker_report(step.tool, to == SUCCESS, now_ms))
        ws_over = self.workstreams[step.row.ws_id].machine.is_terminal
        if to == FAILED and step.machine.retry_eligible and not ws_over:
            changes.append(self._step_retry(step, now_ms))
        return changes

    @property
    def total_cost(self) -> float:
        """The batch's cost so far: every step's last known execution cost."""
        return sum(s.row.cost_usd for ws in self.workstreams.values() for s in ws.steps.values())

    def _check_budget(self, tick: Tick) -> None:
        """Over the batch budget: every unfinished workstream is asked to stop."""
        if self.max_dollars is None or self.total_cost < self.max_dollars:
            return
        reason = f"batch budget spent (${self.total_cost:.4f} of ${self.max_dollars:.4f})"
        for ws in self.workstreams.values():
            if ws.machine.is_terminal or ws.row.abandon_requested:
                continue
            ws.row.abandon_requested = True
            state = ws.machine.state
            tick.changes.append(
                Change(
                    "workstreams",
                    (ws.row.ws_id,),
                    state,
                    state,
                    values={"abandon_requested": True},
                    metadata={"reason": reason},
                    audit=True,
                )
            )

    def _check_timeouts(self, now: int, tick: Tick) -> None:
        """Running steps past their ``timeout_seconds``: stopped (once each)."""
        for ws in self.workstreams.values():
            for step in ws.steps.values():
                timeout = step.row.plan.get("timeout_seconds")
                started = step.row.started_at_ms
                key = step.row.key
                if step.machine.state != RUNNING or timeout is None or started is None:
                    continue
                if key in self._timed_out:
                    continue
                deadline = started + round(timeout * 1000)
                if now < deadline:
                    tick.wake(deadline)
                    continue
                self._timed_out.add(key)
                tick.cancels.append(key)
                tick.changes.append(
                    Change(
                        "steps",
                        (step.row.ws_id, step.row.step_id),
                        RUNNING,
                        RUNNING,
                        metadata={
                            "reason": f"timed out after {timeout:g}s: stopping",
                            "launch": step.row.launches,
                        },
                        audit=True,
                    )
                )

    # ---- recovery commands --------------------------------------------------

    def request_abandon(self, ws_id: str) -> tuple[list[Change], str]:
        """``weft batch abandon WS``: the changes and a one-line result."""
        ws = self.workstreams.get(ws_id)
        if ws is None:
            return [], f"no workstream {ws_id!r}; known: {', '.join(self.workstreams)}"
        if ws.machine.is_terminal:
            return [], f"workstream {ws_id} is already {ws.machine.state} (terminal)"
        if ws.row.abandon_requested:
            return [], f"workstream {ws_id}: abandon already requested"
        ws.row.abandon_requested = True
        state = ws.machine.state
        change = Change(
            "workstreams",
            (ws_id,),
            state,
            state,
            values={"abandon_requested": True},
            metadata={"reason": "abandon requested by the user"},
            audit=True,
        )
        return [change], f"workstream {ws_id}: abandon requested (in {state})"

    def retry_step(self, key: str, *, reopen: bool = False) -> tuple[list[Change], str]:
        """``weft batch retry STEP`` (the seed's Recovery 2): a failed step whose
        retries are spent starts over in ``S_PENDING`` with ``retry_count`` 0.
        In an abandoned workstream only with ``reopen`` (``--reopen``): a new
        attempt of the workstream (:meth:`_reopen`)."""
        try:
            step = self.step(key)
        except KeyError as e:
            return [], str(e.args[0])
        ws = self.workstreams[step.row.ws_id]
        if step.machine.state != FAILED:
            return [], f"step {key} is {step.machine.state}; only a step in S_FAILED is retried"
        if ws.machine.is_terminal:
            if reopen and ws.machine.state == ABANDONED:
                return self._reopen(ws, step)
            how = (
                f"; `weft batch retry FILE {key} --reopen` starts a new attempt of the workstream"
                if ws.machine.state == ABANDONED
                else ""
            )
            return [], (
                f"step {key} belongs to workstream {ws.row.ws_id}, which is "
                f"{ws.machine.state} (terminal): nothing in it runs again{how}"
            )
        return [self._reset_step(step, {"reason": "retry requested", "recovery": 2})], (
            f"step {key}: reset to S_PENDING (retry_count 0)"
        )

    def _reopen(self, ws: _Ws, step: _Step) -> tuple[list[Change], str]:
        """A new attempt of an abandoned workstream, for one of its failed steps.

        The seed's workstream machine has no move out of ``S_ABANDONED``; the
        workstream is given a machine restored in ``S_RUNNING`` with its own
        retries fresh (a new attempt), audited ``S_ABANDONED -> S_RUNNING`` with
        ``"reopened": true`` and the attempt's number; the step starts over as
        ``weft batch retry`` does. Its other failed steps stay failed (each can
        be retried now that the workstream runs); a pending abandon request is
        withdrawn."""
        m = ws.machine
        attempt = ws.row.attempt + 1
        ws.machine = Workstream.restore(
            RUNNING,
            max_retries=m.max_retries,
            retry_count=0,
            retry_ready_at_ms=None,
            base_delay_ms=m.base_delay_ms,
            max_delay_ms=m.max_delay_ms,
        )
        ws.row.state, ws.row.attempt, ws.row.abandon_requested = RUNNING, attempt, False
        reopen = Change(
            "workstreams",
            (ws.row.ws_id,),
            ABANDONED,
            RUNNING,
            values={"retry_count": 0, "retry_ready_at_ms": None, "abandon_requested": False},
            metadata={
                "reason": f"reopened by the user for step {step.row.step_id}: attempt {attempt}",
                "reopened": True,
                "attempt": attempt,
                "recovery": 2,
            },
        )
        meta = {"reason": f"retry requested (workstream attempt {attempt})", "recovery": 2}
        return [reopen, self._reset_step(step, meta)], (
            f"workstream {ws.row.ws_id}: reopened (S_ABANDONED -> S_RUNNING, attempt {attempt}, "
            f"workstream retries 0 of {m.max_retries}); step {step.row.key}: reset to S_PENDING "
            "(retry_count 0)"
        )

    def skip_step(self, key: str) -> tuple[list[Change], str]:
        """``weft batch skip STEP`` (the seed's Recovery 2, "or skip the step"): a
        step not running and not done counts as succeeded, so its dependents run."""
        try:
            step = self.step(key)
        except KeyError as e:
            return [], str(e.args[0])
        ws = self.workstreams[step.row.ws_id]
        state = step.machine.state
        if state not in (FAILED, PENDING, RETRYING):
            why = "it is running: abandon its workstream or wait" if state == RUNNING else "done"
            return [], f"step {key} is {state}; {why}"
        if ws.machine.is_terminal:
            return [], (
                f"step {key} belongs to workstream {ws.row.ws_id}, which is "
                f"{ws.machine.state} (terminal): nothing in it runs again"
            )
        m = step.machine
        # Outside the seed's table (see the module doc): restored, not moved.
        step.machine = Step.restore(
            SUCCESS,
            max_retries=m.max_retries,
            retry_count=m.retry_count,
            expected_exit_codes=m.expected_exit_codes,
            base_delay_ms=m.base_delay_ms,
            max_delay_ms=m.max_delay_ms,
        )
        meta = {"reason": "skipped by the user", "skipped": True, "recovery": 2}
        change = _step_change(step, state, SUCCESS, {}, meta)
        change.audit = True
        return [change], f"step {key}: skipped ({state} -> S_SUCCESS; its dependents may run)"

    def reset_breaker(self, tool: str, now_ms: int) -> tuple[list[Change], str]:
        """``weft batch reset-breaker TOOL`` (the seed's Recovery 3)."""
        breaker = self.breakers.get(tool)
        if breaker is None:
            return [], f"no breaker for tool {tool!r}; known: {', '.join(self.breakers) or 'none'}"
        before = _breaker_snapshot(breaker)
        breaker.reset()
        change = self._breaker_change(tool, before, now_ms, {"reason": "reset", "recovery": 3})
        change.audit = True
        return [change], f"breaker {tool}: {before[0]} -> CLOSED"

    # ---- the rules ----------------------------------------------------------

    def _tick_ws(self, ws: _Ws, now: int, slots: int, tick: Tick) -> int:
        m = ws.machine
        if m.state == PENDING:
            if ws.row.abandon_requested:
                tick.changes.append(self._ws_move(ws, RUNNING, now, "orchestrator start"))
                tick.changes.append(self._ws_move(ws, ABANDONED, now, "abandon requested"))
                return slots
            if slots > 0 and self._launchable(ws, now):
                tick.changes.append(self._ws_move(ws, RUNNING, now, "orchestrator start"))
            else:
                self._hold(ws, now, tick)
                return slots
        if m.state == FAILED:
            self._after_failure(ws, now, tick)
        if m.state == RETRYING:
            ready = m.retry_ready_at_ms or 0
            if now < ready:
                tick.wake(ready)
                return slots
            reason = f"retry attempt {m.retry_count + 1}"
            tick.changes.append(self._ws_move(ws, RUNNING, now, reason))
            for step in ws.steps.values():
                if step.machine.state == FAILED:
                    tick.changes.append(self._reset_step(step, {"reason": "workstream " + reason}))
        if m.state != RUNNING:
            return slots
        finished = all(st.machine.state == SUCCESS for st in ws.steps.values())
        if ws.row.abandon_requested and not finished:  # a finished workstream succeeds
            tick.cancels.extend(s.row.key for s in ws.steps.values() if s.machine.state == RUNNING)
            tick.changes.append(self._ws_move(ws, ABANDONED, now, "abandon requested"))
            return slots
        for step in ws.steps.values():
            if step.machine.state == FAILED and step.machine.retry_eligible:
                tick.changes.append(self._step_retry(step, now))
            if not self._ready(ws, step, now, tick):
                continue
            closed = self._closed(step, now, self._windows)
            if closed is not None:
                self._note_held(step, closed, tick)
                continue
            if slots <= 0:
                tick.waiting[step.row.key] = "waiting for a free worker"
                continue
            breaker = self._breaker(step.tool)
            before = _breaker_snapshot(breaker)
            wait = breaker.allow_request(now)
            if wait is not None:
                tick.waiting[step.row.key] = f"{step.tool} {circuit_open_message(wait)}"
                tick.wake(now + wait)
                continue
            if _breaker_snapshot(breaker) != before:
                tick.changes.append(
                    self._breaker_change(step.tool, before, now, {"reason": "test request"})
                )
            tick.changes.append(self._launch(ws, step, now))
            tick.launches.append(step.row.key)
            slots -= 1
        if self._quiescent(ws, now):
            self._conclude(ws, now, tick)
        return slots

    def _launchable(self, ws: _Ws, now: int) -> bool:
        return any(
            self._ready(ws, s, now, None) and self._closed(s, now, self._windows) is None
            for s in ws.steps.values()
        )

    def _closed(self, step: _Step, now: int, windows: Mapping[str, int]) -> tuple[str, int] | None:
        """The provider of ``step`` whose window opens last, if any is closed."""
        if not windows:
            return None
        found: tuple[str, int] | None = None
        for provider in step.providers:
            opens = windows.get(provider)
            if opens is not None and opens > now and (found is None or opens > found[1]):
                found = (provider, opens)
        return found

    def _hold(self, ws: _Ws, now: int, tick: Tick) -> None:
        """Names the held steps of a workstream that does not start (see :meth:`held`)."""
        if not self._windows:
            return
        for step in ws.steps.values():
            closed = self._closed(step, now, self._windows)
            if closed is not None and self._ready(ws, step, now, None):
                self._note_held(step, closed, tick)

    def _note_held(self, step: _Step, closed: tuple[str, int], tick: Tick) -> None:
        words = self._held_words.get(closed)
        if words is None:  # the same few windows for every held step: worded once
            words = f"{closed[0]} usage window closed until {iso_from_ms(closed[1])}"
            if len(self._held_words) > 16:  # windows past: forget them
                self._held_words.clear()
            self._held_words[closed] = words
        key = step.row.key
        tick.held[key] = closed
        tick.waiting[key] = words
        tick.wake(closed[1])

    def _ready(self, ws: _Ws, step: _Step, now: int, tick: Tick | None) -> bool:
        state = step.machine.state
        if state == PENDING:
            return all(ws.steps[d].machine.state == SUCCESS for d in step.deps)
        if state == RETRYING:
            ready = step.machine.retry_ready_at_ms or 0
            if now >= ready:
                return True
            if tick is not None:
                tick.wake(ready)
        return False

    def _quiescent(self, ws: _Ws, now: int) -> bool:
        for step in ws.steps.values():
            state = step.machine.state
            if state in (RUNNING, RETRYING):
                return False
            if state == FAILED and step.machine.retry_eligible:
                return False
            if state == PENDING and self._ready(ws, step, now, None):
                return False
        return True

    def _conclude(self, ws: _Ws, now: int, tick: Tick) -> None:
        states = [s.machine.state for s in ws.steps.values()]
        if all(state == SUCCESS for state in states):
            tick.changes.append(
                self._ws_move(ws, SUCCESS, now, "all steps succeeded", steps=states)
            )
            return
        failed = [k for k, s in ws.steps.items() if s.machine.state == FAILED]
        tick.changes.append(
            self._ws_move(ws, FAILED, now, "step failed", steps=states, failed_steps=failed)
        )
        self._after_failure(ws, now, tick)

    def _after_failure(self, ws: _Ws, now: int, tick: Tick) -> None:
        m = ws.machine
        if m.retry_eligible:
            tick.changes.append(self._ws_move(ws, RETRYING, now, f"retry {m.retry_count + 1}"))
            tick.wake(m.retry_ready_at_ms or now)
        else:
            tick.changes.append(
                self._ws_move(
                    ws,
                    ABANDONED,
                    now,
                    _retries_spent(ws),
                    workstream_retries=m.retry_count,
                    max_workstream_retries=m.max_retries,
                )
            )

    def _ws_move(
        self,
        ws: _Ws,
        to: str,
        now: int,
        reason: str,
        *,
        steps: list[str] | None = None,
        **meta: Any,
    ) -> Change:
        before = ws.machine.state
        ws.machine.transition(to, steps or [], now_ms=now)
        ws.row.state = to
        return Change(
            "workstreams",
            (ws.row.ws_id,),
            before,
            to,
            values={
                "retry_count": ws.machine.retry_count,
                "retry_ready_at_ms": ws.machine.retry_ready_at_ms,
            },
            metadata={"reason": reason, **meta},
        )

    def _launch(self, ws: _Ws, step: _Step, now: int) -> Change:
        before = step.machine.state
        deps = [ws.steps[d].machine.state for d in step.deps]
        step.machine.transition(RUNNING, dependency_states=deps, now_ms=now)
        step.row.launches += 1
        step.row.started_at_ms = now
        reason = "dependencies met" if before == PENDING else f"retry {step.machine.retry_count}"
        return _step_change(
            step,
            before,
            RUNNING,
            {"launches": step.row.launches, "started_at_ms": now, "exit_code": None},
            {"reason": reason, "launch": step.row.launches, "tool": step.tool},
        )

    def _step_retry(self, step: _Step, now: int) -> Change:
        step.machine.transition(RETRYING, now_ms=now)
        ready = step.machine.retry_ready_at_ms
        return _step_change(
            step,
            FAILED,
            RETRYING,
            {},
            {
                "reason": f"retry {step.machine.retry_count + 1} of {step.machine.max_retries}",
                "ready_at_ms": ready,
            },
        )

    def _reset_step(self, step: _Step, meta: dict[str, Any]) -> Change:
        """A failed step starts over: a fresh machine in ``S_PENDING``. The seed's
        machine has no such move; this is its Recovery 2, audited as such."""
        before = step.machine.state
        step.machine = Step(
            step.machine.max_retries,
            expected_exit_codes=step.machine.expected_exit_codes,
            base_delay_ms=step.machine.base_delay_ms,
            max_delay_ms=step.machine.max_delay_ms,
        )
        change = _step_change(step, before, PENDING, {}, meta)
        change.audit = True
        return change

    def _breaker(self, tool: str) -> CircuitBreaker:
        breaker = self.breakers.get(tool)
        if breaker is None:  # a store always has a row per tool; keep going regardless
            breaker = self.breakers[tool] = CircuitBreaker()
        return breaker

    def _breaker_report(self, tool: str, success: bool, now: int) -> list[Change]:
        breaker = self._breaker(tool)
        before = _breaker_snapshot(breaker)
        if success:
            breaker.record_success(now)
        else:
            breaker.record_failure(now)
        if _breaker_snapshot(breaker) == before:
            return []
        reason = "step succeeded" if success else "step failed"
        return [self._breaker_change(tool, before, now, {"reason": reason})]

    def _breaker_change(
        self, tool: str, before: _Snapshot, now: int, meta: dict[str, Any]
    ) -> Change:
        b = self.breakers[tool]
        if not b.probe_in_flight:
            self._probe_at[tool] = None
        elif not before[4] or self._probe_at.get(tool) is None:
            self._probe_at[tool] = now
        return Change(
            "breakers",
            (tool,),
            before[0],
            b.state,
            values={
                "consecutive_failures": b.consecutive_failures,
                "half_open_successes": b.half_open_successes,
                "opened_at_ms": b.opened_at_ms,
                "probe_started_at_ms": self._probe_at[tool],
            },
            metadata={**meta, "consecutive_failures": b.consecutive_failures},
        )


def _retries_spent(ws: _Ws) -> str:
    """Why a failed workstream is abandoned, naming both kinds of retries: the
    workstream's own (its failed steps started over) and each failed step's
    (``workstream retries spent (0 of 0); step fetch failed after 2 of 2 step
    retries (3 launches)``). A step's launches count every launch of the batch,
    across workstream retries; its retries are those of the current attempt."""
    m = ws.machine
    text = f"workstream retries spent ({m.retry_count} of {m.max_retries})"
    failed = [
        f"step {s.row.step_id} failed after {s.machine.retry_count} of "
        f"{s.machine.max_retries} step retries ({s.row.launches} "
        f"launch{'es' if s.row.launches != 1 else ''})"
        for s in ws.steps.values()
        if s.machine.state == FAILED
    ]
    return "; ".join([text, *failed])


def _restore_step(s: StepRow) -> Step:
    backoff = s.plan.get("backoff", {})
    return Step.restore(
        s.state,
        max_retries=s.max_retries,
        retry_count=s.retry_count,
        retry_ready_at_ms=s.retry_ready_at_ms,
        expected_exit_codes=s.plan.get("expected_exit_codes", [0]),
        base_delay_ms=backoff.get("base_delay_ms", 1000),
        max_delay_ms=backoff.get("max_delay_ms", 60000),
    )


def _step_change(
    step: _Step, before: str, to: str, values: dict[str, Any], meta: dict[str, Any]
) -> Change:
    step.row.state = to
    step.row.retry_count = step.machine.retry_count
    step.row.retry_ready_at_ms = step.machine.retry_ready_at_ms
    return Change(
        "steps",
        (step.row.ws_id, step.row.step_id),
        before,
        to,
        values={
            "retry_count": step.machine.retry_count,
            "retry_ready_at_ms": step.machine.retry_ready_at_ms,
            **values,
        },
        metadata=meta,
    )


_Snapshot = tuple[str, int, int, int | None, bool]


def _breaker_snapshot(b: CircuitBreaker) -> _Snapshot:
    return (
        b.state,
        b.consecutive_failures,
        b.half_open_successes,
        b.opened_at_ms,
        b.probe_in_flight,
    )


def breaker_row(
    tool: str, failure_threshold: int, cooldown_ms: int, success_threshold: int
) -> BreakerRow:
    """A new ``CLOSED`` breaker row."""
    return BreakerRow(
        tool=tool,
        state="CLOSED",
        consecutive_failures=0,
        half_open_successes=0,
        opened_at_ms=None,
        probe_started_at_ms=None,
        failure_threshold=failure_threshold,
        cooldown_ms=cooldown_ms,
        success_threshold=success_threshold,
    )
