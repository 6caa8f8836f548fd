"""The execution plan: the flat, ordered list of codons a run executes.

A hank is a list of codons and loops. The plan flattens it: a top-level codon
is one entry (its runtime id is its own id); a loop contributes its codons once
per iteration, with runtime ids ``<codonId>#<iteration>`` (0-based) and a
:class:`~weft.events.transitions.LoopContext`.

Loops expand **lazily**. A new plan holds iteration 0 of every loop; the next
iteration is inserted right after the last codon of the current one, once that
codon has finished and the loop's ``terminateOn`` says it goes on. This lets a
``contextExceeded`` loop stop at whichever codon runs out of context, and keeps
the plan small for loops that run many times.

The rules, applied by :meth:`ExecutionPlan.on_codon_finished` when a codon of
a loop finishes (completed, skipped, or failed with ``onFailure: ignore``):

1. The loop **terminates** when the codon ran out of context inside a
   ``contextExceeded`` loop (``context_exceeded``), when a budget ran out
   (``budget_exceeded``), or when it is the last codon of iteration
   ``limit - 1`` of an ``iterationLimit`` loop (``iteration_limit``). On an
   early termination the rest of the iteration is dropped from the plan.
2. Otherwise, at the last codon of an iteration, the next iteration is inserted
   right after it.

:class:`ExecutionPlan` is an immutable value with no I/O: ``on_codon_finished``
returns a :class:`PlanChange` holding the new plan and the delta; the runtime
records the delta (:func:`plan_transitions`) and then adopts ``change.plan``.
Every decision is computed against the plan's current entries, so replaying a
completion (after a restart, or a rollback that reruns a codon) never expands
an iteration twice: what is already there is not inserted again.

The plan is stored in the state document's ``executionPlan``
(:meth:`ExecutionPlan.to_state`) and rebuilt from it after a restart
(:meth:`ExecutionPlan.from_state`); the stored entries win, and the hank only
supplies the loop definitions for iterations still to come, and the values of
codon ``env`` variables: the stored plan is journaled and sent to every
WebSocket client, so it keeps each variable's name and :data:`REDACTED` for
its value (an API key must not sit in the journal).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import msgspec

from weft.config.problems import ConfigProblem
from weft.config.schema import Codon, ContextExceeded, Hank, IterationLimit, Loop
from weft.errors import ConfigError
from weft.events.transitions import LoopContext, PlanEntry, PlanExtended, PlanTrimmed
from weft.terminal import plural

__all__ = [
    "ExecutionPlan",
    "LoopContext",
    "PlanChange",
    "PlannedCodon",
    "TerminationReason",
    "iteration_codon_id",
    "plan_transitions",
]

REDACTED = "***"
"""What a codon ``env`` value is in the journaled plan."""

HANK_FILE = "hank.json"
STATE_FILE = "state.json"

TerminationReason: TypeAlias = Literal["iteration_limit", "context_exceeded", "budget_exceeded"]
"""Why a loop ended; the values of ``loop.iteration.completed``'s terminationReason."""


def iteration_codon_id(codon_id: str, iteration: int) -> str:
    """The runtime id of a loop codon in one iteration: ``<codonId>#<iteration>``."""
    return f"{codon_id}#{iteration}"


def _to_json(value: msgspec.Struct) -> Any:
    """JSON builtins of a config Struct, unset optional fields left out as a hank writes them."""
    return _omit_unset(value, msgspec.to_builtins(value))


@functools.cache
def _fields(cls: type[msgspec.Struct]) -> tuple[msgspec.structs.FieldInfo, ...]:
    # msgspec.structs.fields evaluates the annotations on every call (0.5 ms).
    return msgspec.structs.fields(cls)


def _omit_unset(value: Any, built: Any) -> Any:
    # Only fields whose default is None are dropped when None: a null that
    # means something (a sentinel condition comparing with null) is kept.
    if isinstance(value, msgspec.Struct):
        for field in _fields(type(value)):
            item = getattr(value, field.name)
            if item is None and field.default is None:
                built.pop(field.encode_name, None)
            else:
                _omit_unset(item, built[field.encode_name])
    elif isinstance(value, list | tuple):
        for item, out in zip(value, built, strict=True):
            _omit_unset(item, out)
    elif isinstance(value, dict):
        for key, item in value.items():
            _omit_unset(item, built[key])
    return built


_CONFIGS: dict[int, tuple[Codon, dict[str, Any]]] = {}
_CONFIGS_MAX = 4096


def _config_of(codon: Codon) -> dict[str, Any]:
    """``codon`` as the state document holds it, built once per config object.

    A loop's iterations plan the same config again and again; one shared
    document each keeps a long run's memory flat (the progress fold keeps
    each entry's) and spares re-encoding it at every iteration.
    """
    hit = _CONFIGS.get(id(codon))
    if hit is not None and hit[0] is codon:
        return hit[1]
    config: dict[str, Any] = _to_json(codon)
    if config.get("env"):
        # Journaled and sent to clients: the names are kept, never the values.
        config["env"] = dict.fromkeys(config["env"], REDACTED)
    if len(_CONFIGS) >= _CONFIGS_MAX:
        _CONFIGS.clear()
    # The config itself is kept with its document, so its id cannot be reused.
    _CONFIGS[id(codon)] = (codon, config)
    return config


@dataclass(frozen=True, slots=True)
class PlannedCodon:
    """One entry of the plan: a runtime codon id, its resolved config, its loop position.

    ``loop_context`` is None outside loops. It is the transition Struct itself,
    so it can be passed to ``CodonStarted`` as it is; do not mutate it.
    """

    codon_id: str
    codon: Codon
    loop_context: LoopContext | None = None

    def to_state(self) -> dict[str, Any]:
        """The entry as it appears in the state document's ``executionPlan``
        (a document of its own: the caller may change it)."""
        own: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(_config_of(self.codon)))
        return self._document(own)

    def _document(self, codon: dict[str, Any]) -> dict[str, Any]:
        entry: dict[str, Any] = {"codonId": self.codon_id, "codon": codon}
        if self.loop_context is not None:
            entry["loopContext"] = msgspec.to_builtins(self.loop_context)
        return entry

    def to_entry(self) -> PlanEntry:
        """The entry as a transition Struct (for ``RunStarted`` and ``PlanExtended``).

        Its ``codon`` is shared by every entry of the same config (a loop's
        iterations; the progress fold keeps it): read it, never change it.
        """
        state = self._document(_config_of(self.codon))
        return PlanEntry(
            codon=state["codon"], codon_id=self.codon_id, loop_context=state.get("loopContext")
        )


class _Line:
    """The entries and id index shared along a line of plans, each made from
    the one before: only ``owner`` (the newest) reads them as they are. A
    change is made in place, and the plan it was made from keeps how to undo
    it (its ``_undo``), so an older plan that is used again rebuilds its own
    entries (O(plan), once): copying them at each change made every
    iteration of a long loop cost O(plan)."""

    __slots__ = ("entries", "owner", "table")

    def __init__(self, entries: list[PlannedCodon], owner: ExecutionPlan) -> None:
        self.entries = entries
        self.table = {e.codon_id: i for i, e in enumerate(entries)}
        self.owner = owner


_Undo: TypeAlias = tuple["ExecutionPlan", int, int, tuple[PlannedCodon, ...]]
"""(the plan made from this one, where the change starts, how many entries it
put there, the entries it took away)."""


@dataclass(frozen=True, slots=True)
class PlanChange:
    """What finishing one codon did to the plan.

    ``plan`` is the plan afterwards. ``inserted`` entries go right after
    ``finished`` (the next iteration, or codons of this iteration that were
    missing); ``dropped`` entries left the plan (the rest of a loop that
    terminated). At most one of the two is non-empty; both are empty when the
    plan did not change, including when the change was already applied.

    ``iteration_completed`` says that ``finished`` closed an iteration of its
    loop (its last codon, or an early termination): the moment to emit
    ``loop.iteration.completed``. ``loop_finished`` says the loop will not run
    again, and ``termination_reason`` why.
    """

    plan: ExecutionPlan
    finished: PlannedCodon
    inserted: tuple[PlannedCodon, ...] = ()
    dropped: tuple[PlannedCodon, ...] = ()
    iteration_completed: bool = False
    loop_finished: bool = False
    termination_reason: TerminationReason | None = None

    @property
    def changed(self) -> bool:
        """Whether the plan's entries changed (and a transition must record it)."""
        return bool(self.inserted or self.dropped)


class ExecutionPlan:
    """The ordered codons of an execution, with lazy loop expansion.

    Immutable: every change returns a new plan. Lookups by runtime codon id are
    O(1); a change costs O(the entries from the change on): the entries and
    their index pass from a plan to the plan made from it (see :class:`_Line`).
    """

    __slots__ = ("_firsts", "_line", "_loops", "_undo")

    def __init__(self, entries: Sequence[PlannedCodon], loops: Mapping[str, Loop]) -> None:
        """A plan of ``entries``; ``loops`` are the loop definitions, by loop id.

        Prefer :meth:`from_hank` and :meth:`from_state`, which check what this
        constructor trusts: ids unique, every loop context naming a known loop.
        """
        self._loops: dict[str, Loop] = dict(loops)
        self._line = _Line(list(entries), self)
        self._undo: _Undo | None = None
        self._firsts: list[tuple[int, str]] | None = None
        """(position, pattern): where each checkpointed-file pattern first
        appears, in plan order; made on first use, then carried by changes."""

    # ------------------------------------------------------------------ building

    @classmethod
    def from_hank(cls, hank: Hank) -> ExecutionPlan:
        """The plan of a fresh run: every codon, and iteration 0 of every loop."""
        entries: list[PlannedCodon] = []
        loops: dict[str, Loop] = {}
        for item in hank.hank:
            if isinstance(item, Loop):
                loops[item.id] = item
                entries.extend(_iteration(item, 0))
            else:
                entries.append(PlannedCodon(item.id, item))
        plan = cls(entries, loops)
        plan._check_unique(HANK_FILE)
        return plan

    @classmethod
    def from_state(cls, entries: Sequence[Mapping[str, Any]], hank: Hank) -> ExecutionPlan:
        """Rebuilds the plan stored in a state document's ``executionPlan``.

        The stored entries are kept as they are (a continuation run keeps its
        plan); ``hank`` gives the loop definitions for iterations not yet
        expanded. Raises ConfigError when the stored plan is malformed or does
        not fit the hank (a loop it names is gone, an index is out of range),
        which happens when hank.json changed under an execution.
        """
        loops = {item.id: item for item in hank.hank if isinstance(item, Loop)}
        codons = {item.id: item for item in hank.hank if not isinstance(item, Loop)}
        planned = [
            _with_env(i, _from_state_entry(i, raw, loops), codons, loops)
            for i, raw in enumerate(entries)
        ]
        plan = cls(planned, loops)
        plan._check_unique(STATE_FILE)
        return plan

    def _check_unique(self, file: str) -> None:
        if len(self._table()) == len(self._list()):
            return
        seen: set[str] = set()
        for at, entry in enumerate(self._list()):
            if entry.codon_id in seen:
                path = "hank" if file == HANK_FILE else f"executionPlan[{at}].codonId"
                raise _error(
                    file,
                    path,
                    f"the runtime codon id {entry.codon_id!r} appears twice in the execution plan",
                    code="duplicate_id",
                    hint=(
                        "codon ids must be unique, and a top-level id may not look like a loop "
                        "codon's iteration id (<id>#<n>)"
                    ),
                )
            seen.add(entry.codon_id)

    # ------------------------------------------------------------------ reading

    @property
    def entries(self) -> tuple[PlannedCodon, ...]:
        """The entries, in execution order."""
        return tuple(self._list())

    @property
    def loops(self) -> Mapping[str, Loop]:
        """The loop definitions, by loop id."""
        return self._loops

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self) -> Iterator[PlannedCodon]:
        return iter(tuple(self._list()))

    def __contains__(self, codon_id: object) -> bool:
        return codon_id in self._table()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExecutionPlan):
            return NotImplemented
        return self._list() == other._list()

    def __hash__(self) -> int:
        return hash(tuple(e.codon_id for e in self._list()))

    def __repr__(self) -> str:
        return f"ExecutionPlan([{', '.join(e.codon_id for e in self._list())}])"

    def index(self, codon_id: str) -> int:
        """The position of ``codon_id``; raises KeyError if it is not in the plan."""
        try:
            return self._table()[codon_id]
        except KeyError:
            raise KeyError(f"no codon {codon_id!r} in the execution plan") from None

    def get(self, codon_id: str) -> PlannedCodon | None:
        """The entry of ``codon_id``, or None."""
        at = self._table().get(codon_id)
        return None if at is None else self._list()[at]

    def __getitem__(self, codon_id: str) -> PlannedCodon:
        return self._list()[self.index(codon_id)]

    def next_codon(self, after: str | None = None) -> PlannedCodon | None:
        """The codon to run after ``after`` (the first one for None); None at the end."""
        at = 0 if after is None else self.index(after) + 1
        entries = self._list()
        return entries[at] if at < len(entries) else None

    def previous_codon(self, codon_id: str) -> PlannedCodon | None:
        """The codon before ``codon_id`` (whose session ``continue-previous`` resumes)."""
        at = self.index(codon_id)
        return self._list()[at - 1] if at > 0 else None

    def remaining(self, after: str | None = None) -> tuple[PlannedCodon, ...]:
        """The codons still to run after ``after`` (all of them for None)."""
        at = 0 if after is None else self.index(after) + 1
        return tuple(self._list()[at:])

    def iteration(self, loop_id: str, iteration: int) -> tuple[PlannedCodon, ...]:
        """The entries of one iteration of a loop, in order (for its summary event)."""
        # By id, not by a scan: an iteration's ids are known, and a long loop's
        # plan has thousands of entries.
        loop = self._loops.get(loop_id)
        if loop is None:
            return ()
        found = (self.get(iteration_codon_id(codon.id, iteration)) for codon in loop.codons)
        return tuple(
            e
            for e in found
            if e is not None
            and e.loop_context is not None
            and e.loop_context.loop_id == loop_id
            and e.loop_context.iteration == iteration
        )

    def checkpoint_patterns(self, codon_id: str) -> list[str]:
        """The checkpointed-file patterns in force at ``codon_id``.

        A checkpoint covers what every codon so far asked to keep: the union of
        the ``checkpointedFiles`` of all entries up to and including this one,
        in first-seen order.
        """
        at = self.index(codon_id)
        if self._firsts is None:
            self._firsts = _first_patterns(self._list(), 0, [])
        return [pattern for first, pattern in self._firsts if first <= at]

    def to_state(self) -> list[dict[str, Any]]:
        """The plan as the state document's ``executionPlan`` (JSON builtins)."""
        return [e.to_state() for e in self._list()]

    def to_entries(self) -> list[PlanEntry]:
        """The plan as transition Structs, for the ``executionPlan`` of ``RunStarted``."""
        return [e.to_entry() for e in self._list()]

    # ------------------------------------------------------------------ changing

    def on_codon_finished(
        self, codon_id: str, *, context_exceeded: bool = False, budget_exceeded: bool = False
    ) -> PlanChange:
        """Applies the loop rules to a codon that has finished.

        ``context_exceeded``: the agent ran out of context (including automatic
        compaction). ``budget_exceeded``: a budget ran out during the codon.
        Call it for completed, skipped and failed-but-ignored codons; a codon
        outside loops never changes the plan. Raises KeyError for an unknown id.
        """
        at = self.index(codon_id)
        entries = self._list()
        entry = entries[at]
        context = entry.loop_context
        if context is None:
            return PlanChange(plan=self, finished=entry)
        loop = self._loops[context.loop_id]
        last = context.codon_index_in_loop >= len(loop.codons) - 1
        reason = _termination(loop, context, last, context_exceeded, budget_exceeded)

        if reason is not None:
            # Everything of this loop after the finished codon goes: the rest of
            # this iteration and any later one a rerun may find already there.
            end = at + 1
            while end < len(entries) and _in_loop(entries[end], context.loop_id):
                end += 1
            dropped = tuple(entries[at + 1 : end])
            plan = self if not dropped else self._replace(at + 1, end, ())
            return PlanChange(
                plan=plan,
                finished=entry,
                dropped=dropped,
                iteration_completed=True,
                loop_finished=True,
                termination_reason=reason,
            )

        if last:
            expected = _iteration(loop, context.iteration + 1)
        else:
            expected = _iteration(loop, context.iteration)[context.codon_index_in_loop + 1 :]
        # Only what is missing is inserted, so replaying a completion whose
        # expansion is already in the plan changes nothing.
        inserted = tuple(e for e in expected if not self._has(e))
        plan = self if not inserted else self._replace(at + 1, at + 1, inserted)
        return PlanChange(plan=plan, finished=entry, inserted=inserted, iteration_completed=last)

    def _has(self, expected: PlannedCodon) -> bool:
        """Whether ``expected`` (a loop entry) is already planned; refuses an id clash."""
        found = self.get(expected.codon_id)
        if found is None:
            return False
        want, have = expected.loop_context, found.loop_context
        if (
            want is None
            or have is None
            or (have.loop_id, have.iteration)
            != (
                want.loop_id,
                want.iteration,
            )
        ):
            raise _error(
                HANK_FILE,
                "hank",
                f"the runtime codon id {expected.codon_id!r} is already used by another plan entry",
                code="duplicate_id",
                hint="codon ids must be unique and may not contain '#'",
            )
        return True

    def _own(self) -> _Line:
        """This plan's line, rebuilt first if a newer plan owns the shared one."""
        line = self._line
        if line.owner is self:
            return line
        # Follow the changes made since, to the owner, and undo them newest first.
        chain: list[_Undo] = []
        plan: ExecutionPlan = self
        while plan._undo is not None:
            chain.append(plan._undo)
            plan = plan._undo[0]
        entries = list(plan._line.entries)
        for _next, start, added, removed in reversed(chain):
            entries[start : start + added] = removed
        self._line, self._undo = _Line(entries, self), None
        return self._line

    def _list(self) -> list[PlannedCodon]:
        """The entries (never to be changed by the caller)."""
        return self._own().entries

    def _table(self) -> dict[str, int]:
        """Codon id -> position in this plan."""
        return self._own().table

    def _replace(self, start: int, stop: int, new: Sequence[PlannedCodon]) -> ExecutionPlan:
        # O(from ``start`` on), not O(plan): the line passes to the new plan.
        line = self._own()
        entries = line.entries
        removed = tuple(entries[start:stop])
        entries[start:stop] = new
        for gone in removed:
            del line.table[gone.codon_id]
        for at in range(start, len(entries)):
            line.table[entries[at].codon_id] = at
        plan: ExecutionPlan = object.__new__(ExecutionPlan)
        plan._loops = self._loops  # never mutated
        plan._line, plan._undo = line, None
        line.owner = plan
        self._undo = (plan, start, len(new), removed)
        plan._firsts = (
            None
            if self._firsts is None
            else _first_patterns(entries, start, [f for f in self._firsts if f[0] < start])
        )
        return plan


def _first_patterns(
    entries: Sequence[PlannedCodon], start: int, kept: list[tuple[int, str]]
) -> list[tuple[int, str]]:
    """``kept`` (first appearances before ``start``) extended with those from
    ``start`` on: (position, pattern), in plan order."""
    seen = {pattern for _, pattern in kept}
    for at in range(start, len(entries)):
        for pattern in entries[at].codon.checkpointed_files:
            if pattern not in seen:
                seen.add(pattern)
                kept.append((at, pattern))
    return kept


def _termination(
    loop: Loop,
    context: LoopContext,
    last: bool,
    context_exceeded: bool,
    budget_exceeded: bool,
) -> TerminationReason | None:
    if context_exceeded and isinstance(loop.terminate_on, ContextExceeded):
        return "context_exceeded"
    if budget_exceeded:
        return "budget_exceeded"
    limit = loop.terminate_on
    if last and isinstance(limit, IterationLimit) and context.iteration >= limit.limit - 1:
        return "iteration_limit"
    return None


def _in_loop(entry: PlannedCodon, loop_id: str) -> bool:
    return entry.loop_context is not None and entry.loop_context.loop_id == loop_id


def _loop_budget(loop: Loop) -> dict[str, Any] | None:
    if loop.budget is None:
        return None
    budget: dict[str, Any] = _to_json(loop.budget)
    return budget


def _iteration(loop: Loop, iteration: int) -> tuple[PlannedCodon, ...]:
    budget = _loop_budget(loop)
    return tuple(
        PlannedCodon(
            iteration_codon_id(codon.id, iteration),
            codon,
            LoopContext(
                loop_id=loop.id,
                iteration=iteration,
                codon_index_in_loop=index,
                loop_budget=budget,
            ),
        )
        for index, codon in enumerate(loop.codons)
    )


def _error(file: str, path: str, message: str, *, code: str, hint: str) -> ConfigError:
    return ConfigError([ConfigProblem(file=file, path=path, message=message, code=code, hint=hint)])


_CHANGED_HANK = "restore hank.json as it was when the execution started, or start a new execution"


def _with_env(
    index: int, entry: PlannedCodon, codons: Mapping[str, Codon], loops: Mapping[str, Loop]
) -> PlannedCodon:
    """``entry`` with its redacted ``env`` values taken from the hank again."""
    env = entry.codon.env
    if not any(value == REDACTED for value in env.values()):
        return entry
    context = entry.loop_context
    source = (
        codons.get(entry.codon.id)
        if context is None
        else loops[context.loop_id].codons[context.codon_index_in_loop]
    )
    given = {} if source is None else source.env
    missing = sorted(name for name, value in env.items() if value == REDACTED and name not in given)
    if missing:
        raise _error(
            STATE_FILE,
            f"executionPlan[{index}].codon.env",
            f"codon {entry.codon_id!r} needs env {', '.join(missing)}, whose values are not "
            "journaled and which hank.json no longer sets",
            code="plan_mismatch",
            hint="add them back to the codon's env in hank.json, or start a new execution",
        )
    restored = {name: given[name] if value == REDACTED else value for name, value in env.items()}
    codon = msgspec.structs.replace(entry.codon, env=restored)
    return PlannedCodon(entry.codon_id, codon, entry.loop_context)


def _from_state_entry(
    index: int, raw: Mapping[str, Any], loops: Mapping[str, Loop]
) -> PlannedCodon:
    path = f"executionPlan[{index}]"
    try:
        codon_id = raw["codonId"]
        codon = msgspec.convert(raw["codon"], Codon)
        raw_context = raw.get("loopContext")
        context = None if raw_context is None else msgspec.convert(raw_context, LoopContext)
    except (KeyError, TypeError, AttributeError, msgspec.ValidationError) as exc:
        problem = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise _error(
            STATE_FILE,
            path,
            f"not an execution plan entry: {problem}",
            code="bad_plan",
            hint="the state was written by an incompatible version; start a new execution",
        ) from None
    if not isinstance(codon_id, str) or not codon_id:
        raise _error(
            STATE_FILE,
            f"{path}.codonId",
            "codonId must be a non-empty string",
            code="bad_plan",
            hint="start a new execution",
        )
    if context is None:
        if codon_id != codon.id:
            raise _error(
                STATE_FILE,
                f"{path}.codonId",
                f"codonId {codon_id!r} does not match its codon {codon.id!r}",
                code="bad_plan",
                hint="start a new execution",
            )
        return PlannedCodon(codon_id, codon)
    loop = loops.get(context.loop_id)
    if loop is None:
        raise _error(
            STATE_FILE,
            f"{path}.loopContext.loopId",
            f"codon {codon_id!r} belongs to loop {context.loop_id!r}, which hank.json no "
            "longer has",
            code="plan_mismatch",
            hint=_CHANGED_HANK,
        )
    if not 0 <= context.codon_index_in_loop < len(loop.codons):
        raise _error(
            STATE_FILE,
            f"{path}.loopContext.codonIndexInLoop",
            f"codon {codon_id!r} sits at index {context.codon_index_in_loop} of loop "
            f"{loop.id!r}, which has {plural(len(loop.codons), 'codon')} in hank.json",
            code="plan_mismatch",
            hint=_CHANGED_HANK,
        )
    if context.iteration < 0 or codon_id != iteration_codon_id(codon.id, context.iteration):
        raise _error(
            STATE_FILE,
            f"{path}.codonId",
            f"codonId {codon_id!r} does not match codon {codon.id!r} in iteration "
            f"{context.iteration}",
            code="bad_plan",
            hint="start a new execution",
        )
    return PlannedCodon(codon_id, codon, context)


def plan_transitions(change: PlanChange, run_id: str) -> list[PlanExtended | PlanTrimmed]:
    """The state transitions that record ``change`` (none when nothing changed).

    Inserted entries become one ``PlanExtended`` after the finished codon;
    dropped entries one ``PlanTrimmed``.
    """
    out: list[PlanExtended | PlanTrimmed] = []
    if change.dropped:
        out.append(PlanTrimmed(run_id=run_id, codon_ids=[e.codon_id for e in change.dropped]))
    if change.inserted:
        out.append(
            PlanExtended(
                run_id=run_id,
                after_codon_id=change.finished.codon_id,
                entries=[e.to_entry() for e in change.inserted],
            )
        )
    return out
