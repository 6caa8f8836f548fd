"""The sentinels of one codon: load, feed, process, drain, unload.

A :class:`SentinelManager` lives as long as its codon. The runtime

1. calls :meth:`~SentinelManager.load` when the codon starts: each attached
   sentinel's provider is resolved (no network), its prompts are read and
   compiled, its schema checked and its output files placed. A sentinel that
   cannot load is reported (:class:`LoadFailure`); when its codon entry says
   ``failCodonIfNotLoaded``, :meth:`~SentinelManager.required_failure` is the
   reason the codon fails with;
2. calls :meth:`~SentinelManager.feed` with every committed event, in journal
   order (``feed(event_type, data, seq)``). Sentinel and connection events are
   ignored; the rest go to the trigger engine (:mod:`weft.sentinels.triggers`);
   a fired trigger wakes that sentinel's worker;
3. awaits :meth:`~SentinelManager.drain` in ``completing-sentinels`` and again
   after ``codon.completed``: buffered events fire at once and every queued
   trigger is processed;
4. awaits :meth:`~SentinelManager.unload` with the reason.

Each sentinel processes its triggers serially (one model call at a time, in
trigger order); different sentinels run concurrently. Processing a trigger
renders the prompts with ``it.events`` / ``it.codon`` / ``it.world``, calls
the model, validates structured output, writes the log and last value off
the event loop, prices the tokens, and reports through ``emit`` (the
``sentinel.*`` events of :mod:`weft.sentinels.events`, filtered by
``reportToWebsocket``) and ``on_states`` (every :class:`SentinelState`, for a
``SentinelStatesUpdated`` transition).

Failure rules (reference §2.10): a failed call, an answer that breaks the
schema or a failed render counts towards ``maxConsecutiveFailures`` (a
success resets the count), and reaching it unloads with
``consecutive-failures``. Fatal errors (the template cannot run, the
provider refuses the configuration or the key, an output file cannot be
written) unload at once with ``fatal-error`` when ``unloadOnFatalError``
(the default); otherwise they count as failures.

The engine's clock is ``clock()`` (milliseconds); time-based strategies fire
from a timer task that sleeps until the engine's next deadline. Nothing here
touches the journal: the events go out through ``emit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import orjson

from weft.clock import iso_from_ms
from weft.config.schema import (
    CountExecution,
    DebounceExecution,
    EventTrigger,
    MaxTurnsTrimming,
    SentinelConfig,
    SentinelSettings,
    TimeWindowExecution,
)
from weft.errors import UnsafePathError
from weft.events.transitions import SentinelState
from weft.sentinels.events import (
    SENTINEL_EVENT_TYPES,
    SentinelData,
    SentinelError,
    SentinelErrorType,
    SentinelLoaded,
    SentinelOutput,
    SentinelTokens,
    SentinelTriggered,
    SentinelUnloaded,
    UnloadReason,
)
from weft.sentinels.outputs import (
    DEFAULT_JOIN,
    OutputPlan,
    OutputWriter,
    SchemaError,
    load_schema,
    plan_outputs,
    schema_problem,
)
from weft.sentinels.providers import (
    LlmRequest,
    LlmResponse,
    Message,
    Provider,
    ProviderError,
    ProviderRegistry,
    price,
)
from weft.sentinels.template import Template, TemplateError, compile_template
from weft.sentinels.triggers import SentinelSpec, Trigger, TriggerEngine

__all__ = [
    "CONNECTION_EVENT_TYPES",
    "AttachedSentinel",
    "CodonInfo",
    "LoadCache",
    "LoadFailure",
    "Prepared",
    "SentinelManager",
    "compile_prompt",
    "prepare",
    "prompt_source",
]

CONNECTION_EVENT_TYPES: Final = frozenset(
    ("server.ready", "handshake.response", "pong", "history.batch", "incomplete.codon")
)
"""Targeted connection events (reference §4.4, category C): never fed."""
_FATAL_PROVIDER_ERRORS: Final = frozenset(("auth", "configuration"))
_CHARS_PER_TOKEN: Final = 4
"""The estimate behind ``maxTokens`` trimming (no tokenizer is at hand for
every provider; a quarter of the characters is the usual rule of thumb)."""


@dataclass(frozen=True, slots=True)
class CodonInfo:
    """The codon the sentinels watch (``it.codon`` in templates)."""

    id: str
    name: str
    description: str | None = None
    start_time: str | None = None


@dataclass(frozen=True, slots=True)
class AttachedSentinel:
    """A sentinel entry of a codon, with its config already loaded."""

    config: SentinelConfig
    settings: SentinelSettings | None = None
    base_dir: Path = Path()
    """The folder the config's file references are relative to."""
    source: Literal["file", "inline"] = "inline"
    source_path: str | None = None

    @property
    def required(self) -> bool:
        """``failCodonIfNotLoaded``."""
        return bool(self.settings and self.settings.fail_codon_if_not_loaded)


@dataclass(frozen=True, slots=True)
class LoadFailure:
    """A sentinel that could not load."""

    sentinel_id: str
    message: str
    required: bool


@dataclass
class _Sentinel:
    """One loaded sentinel's state."""

    attached: AttachedSentinel
    model_id: str
    provider: Provider
    model: str
    system: Template | None
    user: Template
    schema: dict[str, Any] | None
    writer: OutputWriter
    state: SentinelState
    history: list[Message] = field(default_factory=list)
    history_file: Path | None = None
    failures: int = 0
    task: asyncio.Task[None] | None = None
    active: bool = True

    @property
    def id(self) -> str:
        return self.attached.config.id

    @property
    def config(self) -> SentinelConfig:
        return self.attached.config

    def reports(self, what: str) -> bool:
        """Whether events of kind ``what`` go out (reportToWebsocket, field by
        field: the codon's settings, then the config, then the reference's
        default: everything but triggers)."""
        settings = self.attached.settings
        for chosen in (
            settings.report_to_websocket if settings else None,
            self.config.report_to_websocket,
        ):
            value = None if chosen is None else getattr(chosen, what)
            if value is not None:
                return bool(value)
        return what != "triggers"


def _strategy_name(
    config: SentinelConfig,
) -> Literal["immediate", "debounce", "count", "timeWindow"]:
    execution = config.execution
    if isinstance(execution, DebounceExecution):
        return "debounce"
    if isinstance(execution, CountExecution):
        return "count"
    if isinstance(execution, TimeWindowExecution):
        return "timeWindow"
    return "immediate"


def _read_prompt(refs: str | list[str], base: Path, what: str) -> str:
    from weft.paths import inside

    parts = [refs] if isinstance(refs, str) else refs
    texts = []
    for ref in parts:
        path = inside(base, ref, what=what)
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise TemplateError(f"cannot read {what} {ref}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise TemplateError(f"{what} {ref} is not UTF-8 text") from None
    return "\n\n".join(texts)


def prompt_source(
    config: SentinelConfig, base: Path, which: Literal["system", "user"]
) -> str | None:
    """A sentinel's system or user prompt as template source (``None``: none):
    its ``*PromptText``, or its ``*PromptFile``(s) read from ``base``. Raises
    :class:`TemplateError` (unreadable, not text, no user prompt) or
    :class:`~weft.errors.UnsafePathError`."""
    if which == "system":
        text, files = config.system_prompt_text, config.system_prompt_file
    else:
        text, files = config.user_prompt_text, config.user_prompt_file
    if files is not None:
        text = _read_prompt(files, base, f"{which}PromptFile")
    if which == "user" and text is None:
        raise TemplateError(f'sentinel "{config.id}" has no user prompt')
    return text or None


def compile_prompt(source: str, sentinel_id: str, which: Literal["system", "user"]) -> Template:
    """A parsed prompt template (raises :class:`TemplateError` naming the line)."""
    return _compiled(source, f"{sentinel_id} {which} prompt")


@dataclass(frozen=True, slots=True)
class Prepared:
    """What loading a sentinel makes of its config, the same for every codon:
    its parsed prompts and its structured-output schema (``weft validate``
    runs the same steps, :func:`weft.sentinels.checks.load_problems`)."""

    system: Template | None
    user: Template
    schema: dict[str, Any] | None


def prepare(config: SentinelConfig, base: Path) -> Prepared:
    """Reads the prompts, parses them, loads the schema. Raises
    :class:`TemplateError`, :class:`SchemaError` or
    :class:`~weft.errors.UnsafePathError`."""
    system = prompt_source(config, base, "system")
    user = prompt_source(config, base, "user")
    assert user is not None
    return Prepared(
        compile_prompt(system, config.id, "system") if system else None,
        compile_prompt(user, config.id, "user"),
        load_schema(config, base),
    )


class LoadCache:
    """What loading a sentinel makes that is the same for every codon of a run
    (its :class:`Prepared` prompts and schema, its :class:`OutputPlan`), so
    a sentinel attached to many codons is read, parsed and its paths checked
    once. Prompt and schema files are read when it first loads."""

    def __init__(self) -> None:
        self._items: dict[tuple[int, int, Path], tuple[AttachedSentinel, Prepared, OutputPlan]] = {}

    def get(
        self, entry: AttachedSentinel, workspace: Path, managed_dir: Path
    ) -> tuple[Prepared, OutputPlan]:
        """The entry's prepared config and output paths (raises what
        :func:`prepare` and :func:`plan_outputs` raise; a failure is not kept)."""
        key = (id(entry.config), id(entry.settings), entry.base_dir)
        found = self._items.get(key)
        if (
            found is not None
            and found[0].config is entry.config
            and found[0].settings is entry.settings
        ):
            return found[1], found[2]
        prepared = prepare(entry.config, entry.base_dir)
        plan = plan_outputs(
            entry.config, entry.settings, workspace=workspace, managed_dir=managed_dir
        )
        self._items[key] = (entry, prepared, plan)
        return prepared, plan


class SentinelManager:
    """The sentinels of one codon (see the module docstring)."""

    def __init__(
        self,
        codon: CodonInfo,
        *,
        registry: ProviderRegistry,
        emit: Callable[[SentinelData], None],
        workspace: Path,
        state_dir: Path,
        clock: Callable[[], int],
        on_states: Callable[[list[SentinelState], float], None] | None = None,
        on_spend: Callable[[float], None] | None = None,
        model_override: str | None = None,
        after_seq: int = 0,
        persist_history: bool = True,
        cache: LoadCache | None = None,
    ) -> None:
        """``workspace`` is the agent's working folder, ``state_dir`` the
        execution's ``.weft`` folder (outputs go to ``sentinels/outputs``,
        conversations to ``sentinels/history``); ``clock`` gives milliseconds
        since the epoch; ``model_override`` replaces every sentinel's model
        (``fake/haiku`` offline); events at or below ``after_seq`` are not
        fed (they came before the codon started); ``persist_history`` false
        (``sentinel.enablePersistence``) keeps conversations in memory only,
        for this codon; ``cache`` keeps what loading made for the next codons
        of the run (without it, every load reads and checks anew);
        ``on_spend`` is told every call's cost as it is known (the budget's
        ledger: whatever the sentinel reports, money spent is counted)."""
        self.codon = codon
        self._cache = cache
        self._registry = registry
        self._emit = emit
        self._on_states = on_states
        self._on_spend = on_spend
        self._workspace = workspace
        self._state_dir = state_dir
        self._clock = clock
        self._override = model_override
        self._after_seq = after_seq
        self._persist = persist_history
        self._sentinels: dict[str, _Sentinel] = {}
        self.failures: list[LoadFailure] = []
        self._engine = TriggerEngine([])
        self._timer: asyncio.Task[None] | None = None
        self._timer_wake: asyncio.Event | None = None
        self._timer_due: int | None = None
        """When the timer task wakes next (``None``: it is not sleeping)."""
        self._closed = False

    # ------------------------------------------------------------------ load

    def load(self, attached: Sequence[AttachedSentinel]) -> list[LoadFailure]:
        """Loads ``attached``; returns the ones that could not load (also kept
        in :attr:`failures`). Emits ``sentinel.loaded`` (lifecycle reporting)
        or ``sentinel.error`` for each."""
        specs: list[SentinelSpec] = []
        now = self._clock()
        for entry in attached:
            config = entry.config
            try:
                sentinel = self._load_one(entry, now)
            except (ProviderError, TemplateError, SchemaError, UnsafePathError, OSError) as e:
                failure = LoadFailure(config.id, str(e), entry.required)
                self.failures.append(failure)
                self._emit(
                    SentinelError(
                        sentinel_id=config.id,
                        codon_id=self.codon.id,
                        error_type="load-failed",
                        message=str(e),
                        retriable=False,
                        consecutive_failure_count=0,
                    )
                )
                continue
            self._sentinels[config.id] = sentinel
            specs.append(SentinelSpec(config.id, config.trigger, config.execution))
            if sentinel.reports("lifecycle"):
                self._emit(
                    SentinelLoaded(
                        sentinel_id=config.id,
                        codon_id=self.codon.id,
                        model=sentinel.model_id,
                        trigger_type="event"
                        if isinstance(config.trigger, EventTrigger)
                        else "sequence",
                        execution_strategy=_strategy_name(config),
                        conversational=config.conversational is not None,
                        source=entry.source,
                        source_path=entry.source_path,
                    )
                )
        self._engine = TriggerEngine(specs)
        self._states_changed()
        return list(self.failures)

    def _load_one(self, entry: AttachedSentinel, now: int) -> _Sentinel:
        config = entry.config
        model_id = self._override or config.model
        provider, model = self._registry.get(model_id)
        managed = self._state_dir / "sentinels" / "outputs"
        if self._cache is not None:
            prepared, plan = self._cache.get(entry, self._workspace, managed)
        else:
            prepared = prepare(config, entry.base_dir)
            plan = plan_outputs(
                config, entry.settings, workspace=self._workspace, managed_dir=managed
            )
        target = plan.target(self.codon.id, iso_from_ms(now).replace(":", "-"))
        sentinel = _Sentinel(
            attached=entry,
            model_id=model_id,
            provider=provider,
            model=model,
            system=prepared.system,
            user=prepared.user,
            schema=prepared.schema,
            writer=OutputWriter(
                target, config.join_string if config.join_string is not None else DEFAULT_JOIN
            ),
            state=SentinelState(
                id=config.id,
                model=model_id,
                loaded_at=iso_from_ms(now),
                llm_call_count=0,
                failed_llm_calls=0,
                total_cost=0.0,
                status="active",
            ),
        )
        if config.conversational is not None and self._persist:
            sentinel.history_file = (
                self._state_dir / "sentinels" / "history" / f"{config.id}-{self.codon.id}.json"
            )
            sentinel.history = _read_history(sentinel.history_file)
        return sentinel

    def required_failure(self) -> str | None:
        """The reason the codon fails when a sentinel marked
        ``failCodonIfNotLoaded`` could not load (``None``: it may run)."""
        required = [f for f in self.failures if f.required]
        if not required:
            return None
        listed = "; ".join(f"{f.sentinel_id}: {f.message}" for f in required)
        return f"Required sentinels failed to load (failCodonIfNotLoaded=true): {listed}"

    # ------------------------------------------------------------------ feed

    def watches(self, event_type: str) -> bool:
        """Whether :meth:`feed` would route an event of ``event_type`` to some
        sentinel (the host decodes only those events' data)."""
        if self._closed or event_type in SENTINEL_EVENT_TYPES:
            return False
        return event_type not in CONNECTION_EVENT_TYPES and self._engine.watches(event_type)

    @property
    def loaded(self) -> int:
        """How many sentinels are loaded and active."""
        return sum(1 for s in self._sentinels.values() if s.active)

    def feed(self, event_type: str, data: Mapping[str, Any], seq: int) -> None:
        """Routes one committed event (call in journal order, after commit)."""
        if self._closed or seq <= self._after_seq:
            return
        if event_type in SENTINEL_EVENT_TYPES or event_type in CONNECTION_EVENT_TYPES:
            return
        fired = self._engine.feed(event_type, data, seq, self._clock())
        if fired:
            self._wake_workers()
        else:
            # Cheap: the engine's lower bound, compared with when the timer
            # wakes; only an earlier deadline needs the timer woken.
            earliest = self._engine.earliest
            if earliest is not None and (self._timer_due is None or earliest < self._timer_due):
                self._ensure_timer()

    def _wake_workers(self) -> None:
        for sentinel in self._sentinels.values():
            if sentinel.active and self._engine.pending(sentinel.id) and sentinel.task is None:
                sentinel.task = asyncio.get_running_loop().create_task(self._work(sentinel))
        self._ensure_timer()

    def _ensure_timer(self) -> None:
        if self._engine.next_deadline() is None:
            return
        if self._timer is None or self._timer.done():
            self._timer_wake = asyncio.Event()
            self._timer = asyncio.get_running_loop().create_task(self._run_timer())
        elif self._timer_wake is not None:
            self._timer_wake.set()

    async def _run_timer(self) -> None:
        """Sleeps until the engine's next deadline, ticks, repeats."""
        wake = self._timer_wake
        assert wake is not None
        while not self._closed:
            deadline = self._engine.next_deadline()
            if deadline is None:
                return
            delay = max(0, deadline - self._clock()) / 1000
            wake.clear()
            self._timer_due = deadline
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=delay)
            self._timer_due = None
            if self._engine.tick(self._clock()):
                self._wake_workers()

    async def _work(self, sentinel: _Sentinel) -> None:
        try:
            while sentinel.active and (trigger := self._engine.pop(sentinel.id)) is not None:
                try:
                    await self._process(sentinel, trigger)
                except Exception as e:  # a provider or writer failing in a way not foreseen
                    await self._failed(
                        sentinel,
                        trigger,
                        "llm-call-failed",
                        f"unexpected {type(e).__name__}: {e}",
                        fatal=False,
                    )
        finally:
            sentinel.task = None

    # ------------------------------------------------------------------ processing

    def _context(self, trigger: Trigger) -> dict[str, Any]:
        # A copy of the events (JSON, so a round trip through orjson is a
        # fast deep copy): a template may assign into what it is given, and
        # the same event data is shared by every sentinel and the journal.
        events = orjson.loads(
            orjson.dumps(
                [
                    {
                        "id": str(e.seq),
                        "type": e.type,
                        "timestamp": iso_from_ms(e.at),
                        "data": e.data,
                    }
                    for e in trigger.events
                ],
                default=dict,
            )
        )
        codon = {"id": self.codon.id, "name": self.codon.name}
        if self.codon.description is not None:
            codon["description"] = self.codon.description
        if self.codon.start_time is not None:
            codon["startTime"] = self.codon.start_time
        return {
            "events": events,
            "codon": codon,
            # When the trigger fired (the reference's queuedAt), not when it is
            # processed: a trigger that waited in the queue describes its moment.
            "world": {"currentTime": iso_from_ms(trigger.at)},
        }

    async def _process(self, sentinel: _Sentinel, trigger: Trigger) -> None:
        """One trigger of one sentinel: render, call the model, check and write
        the output, report it. Each failure ends the trigger with its reason."""
        self._announce(sentinel, trigger)
        try:
            context = self._context(trigger)
            system = sentinel.system.render(context) if sentinel.system else None
            user = sentinel.user.render(context)
        except TemplateError as e:
            await self._failed(sentinel, trigger, "template-render-failed", str(e), fatal=True)
            return
        messages = (*sentinel.history, Message("user", user))
        called_at = self._clock()
        try:
            response = await self._call(sentinel, _request(sentinel, messages, system))
        except ProviderError as e:
            self._count_call(sentinel, called_at, failed=True, cost=0.0)
            fatal = e.kind in _FATAL_PROVIDER_ERRORS
            await self._failed(
                sentinel, trigger, "llm-call-failed", str(e), fatal=fatal, retriable=e.retriable
            )
            return
        cost = price(sentinel.model_id, response.model, response.tokens) or 0.0
        content = await self._checked(sentinel, trigger, response, called_at, cost)
        if content is _REFUSED:
            return
        self._count_call(sentinel, called_at, failed=False, cost=cost)
        if not await self._write(sentinel, trigger, content, called_at, cost, response):
            return
        if sentinel.config.conversational is not None:
            sentinel.history = _trim(
                [*messages, Message("assistant", response.text)], sentinel.config
            )
            await self._save_history(sentinel)
        sentinel.failures = 0
        self._report_output(sentinel, trigger, content, cost, response)
        self._states_changed()

    async def _call(self, sentinel: _Sentinel, request: LlmRequest) -> LlmResponse:
        """One model call, bounded in all by the registry's ``call_timeout``:
        a provider that accepts and never answers (or trickles) must not hold
        the codon in ``completing-sentinels``."""
        limit = self._registry.call_timeout
        try:
            async with asyncio.timeout(limit):
                return await sentinel.provider.complete(request)
        except TimeoutError:
            raise ProviderError(
                "timeout",
                f"{sentinel.model_id} did not answer within {limit:g} s (sentinel.callTimeoutMs)",
                retriable=True,
            ) from None

    def _announce(self, sentinel: _Sentinel, trigger: Trigger) -> None:
        """Counts the trigger and says so (``sentinel.triggered``) when asked to."""
        state = sentinel.state
        sentinel.state = msgspec.structs.replace(state, total_triggers=state.total_triggers + 1)
        if sentinel.reports("triggers"):
            self._emit(
                SentinelTriggered(
                    sentinel_id=sentinel.id,
                    codon_id=self.codon.id,
                    trigger_number=trigger.number,
                    strategy=_strategy_name(sentinel.config),
                    event_count=len(trigger.events),
                    queue_size=self._engine.pending(sentinel.id),
                )
            )

    async def _checked(
        self,
        sentinel: _Sentinel,
        trigger: Trigger,
        response: LlmResponse,
        called_at: int,
        cost: float,
    ) -> Any:
        """The output to keep: the text, or the structured value when it matches
        the schema; :data:`_REFUSED` (the call counted as failed) when it does not."""
        if sentinel.schema is None:
            return response.text
        problem = schema_problem(response.value, sentinel.schema)
        if problem is None:
            return response.value
        self._count_call(sentinel, called_at, failed=True, cost=cost)
        await self._failed(
            sentinel,
            trigger,
            "llm-call-failed",
            f"the structured output does not match the schema: {problem}",
            fatal=False,
            retriable=True,
        )
        return _REFUSED

    async def _write(
        self,
        sentinel: _Sentinel,
        trigger: Trigger,
        content: Any,
        called_at: int,
        cost: float,
        response: LlmResponse,
    ) -> bool:
        """Appends the output to the sentinel's files; False (and the sentinel
        unloaded) when they cannot be written."""
        record = {
            "timestamp": iso_from_ms(called_at),
            "sentinelId": sentinel.id,
            "codonId": self.codon.id,
            "triggerNumber": trigger.number,
            "eventCount": len(trigger.events),
            "cost": cost,
            "tokens": {"input": response.tokens.input, "output": response.tokens.output},
        }
        try:
            await asyncio.to_thread(sentinel.writer.append, content, record)
        except (OSError, UnsafePathError) as e:
            await self._failed(
                sentinel, trigger, "file-write-failed", f"cannot write the output: {e}", fatal=True
            )
            return False
        return True

    def _report_output(
        self,
        sentinel: _Sentinel,
        trigger: Trigger,
        content: Any,
        cost: float,
        response: LlmResponse,
    ) -> None:
        if sentinel.reports("outputs"):
            self._emit(
                SentinelOutput(
                    sentinel_id=sentinel.id,
                    codon_id=self.codon.id,
                    trigger_number=trigger.number,
                    output_type="structured" if sentinel.schema is not None else "text",
                    content=content,
                    cost=cost,
                    tokens=SentinelTokens(
                        input=response.tokens.input, output=response.tokens.output
                    ),
                    event_count=len(trigger.events),
                    model=response.model,
                )
            )

    def _count_call(self, sentinel: _Sentinel, at: int, *, failed: bool, cost: float) -> None:
        state = sentinel.state
        sentinel.state = msgspec.structs.replace(
            state,
            llm_call_count=state.llm_call_count + 1,
            failed_llm_calls=state.failed_llm_calls + (1 if failed else 0),
            total_cost=state.total_cost + cost,
            last_llm_call_at=iso_from_ms(at),
        )
        if cost and self._on_spend is not None:
            self._on_spend(cost)

    async def _failed(
        self,
        sentinel: _Sentinel,
        trigger: Trigger,
        error_type: SentinelErrorType,
        message: str,
        *,
        fatal: bool,
        retriable: bool = False,
    ) -> None:
        handling = sentinel.config.error_handling
        limit = handling.max_consecutive_failures if handling else 3
        unload_on_fatal = handling.unload_on_fatal_error if handling else True
        sentinel.failures += 1
        conversational = sentinel.config.conversational
        if conversational is not None and not conversational.continue_on_error:
            sentinel.history = []  # the conversation starts again after a failure
        if sentinel.reports("errors"):
            self._emit(
                SentinelError(
                    sentinel_id=sentinel.id,
                    codon_id=self.codon.id,
                    error_type=error_type,
                    message=message,
                    retriable=retriable,
                    consecutive_failure_count=sentinel.failures,
                    trigger_number=trigger.number,
                )
            )
        if fatal and unload_on_fatal:
            self._unload_one(sentinel, "fatal-error", error_type)
        elif sentinel.failures >= limit:
            self._unload_one(sentinel, "consecutive-failures", error_type)
        self._states_changed()

    async def _save_history(self, sentinel: _Sentinel) -> None:
        path = sentinel.history_file
        if path is None:
            return
        data = orjson.dumps([{"role": m.role, "content": m.content} for m in sentinel.history])
        await asyncio.to_thread(_write_history, path, data)

    # ------------------------------------------------------------------ drain and unload

    async def drain(self) -> None:
        """Fires every buffered batch now and waits until every queued trigger
        of every active sentinel has been processed."""
        if self._closed:
            return
        self._engine.flush(self._clock())
        while not self._closed:  # a shutdown's unload abandons the queued triggers
            self._wake_workers()
            tasks = [s.task for s in self._sentinels.values() if s.task is not None]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    async def unload(self, reason: UnloadReason = "codon-complete") -> None:
        """Unloads every active sentinel with ``reason`` (after a drain, for
        ``codon-complete``; ``shutdown`` abandons queued triggers)."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for sentinel in self._sentinels.values():
            if sentinel.task is not None:
                sentinel.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sentinel.task
            if sentinel.active:
                self._unload_one(sentinel, reason, None)
        self._states_changed()

    def _unload_one(
        self, sentinel: _Sentinel, reason: UnloadReason, error_type: str | None
    ) -> None:
        sentinel.active = False
        self._engine.remove(sentinel.id)
        state = sentinel.state
        sentinel.state = msgspec.structs.replace(
            state,
            status="unloaded",
            unloaded_at=iso_from_ms(self._clock()),
            # SentinelState has no "shutdown" reason (the core's model): a
            # sentinel ended by a shutdown is unloaded without one.
            unload_reason=None if reason == "shutdown" else reason,
        )
        if sentinel.reports("lifecycle"):
            self._emit(
                SentinelUnloaded(
                    sentinel_id=sentinel.id,
                    codon_id=self.codon.id,
                    reason=reason,
                    final_cost=sentinel.state.total_cost,
                    llm_call_count=sentinel.state.llm_call_count,
                    error_type=error_type,
                )
            )

    # ------------------------------------------------------------------ state

    def states(self) -> list[SentinelState]:
        """Every loaded sentinel's state, in load order."""
        return [s.state for s in self._sentinels.values()]

    @property
    def total_cost(self) -> float:
        """What the codon's sentinels have cost so far (US dollars)."""
        return math.fsum(s.state.total_cost for s in self._sentinels.values())

    def _states_changed(self) -> None:
        if self._on_states is not None:
            self._on_states(self.states(), self.total_cost)


@functools.lru_cache(maxsize=256)
def _compiled(source: str, name: str) -> Template:
    """A parsed template, shared by every codon that attaches the same sentinel
    (a :class:`Template` is immutable; parsing is most of a sentinel's load)."""
    return compile_template(source, name)


def _trim(history: list[Message], config: SentinelConfig) -> list[Message]:
    """The conversation cut to its trimming strategy (whole turns, oldest first)."""
    conversational = config.conversational
    if conversational is None:
        return []
    strategy = conversational.trimming_strategy
    if isinstance(strategy, MaxTurnsTrimming):
        keep = strategy.max_turns * 2
        return history[-keep:] if len(history) > keep else history
    budget = strategy.max_tokens * _CHARS_PER_TOKEN
    while len(history) > 2 and sum(len(m.content) for m in history) > budget:
        history = history[2:]
    return history


def _read_history(path: Path) -> list[Message]:
    try:
        raw = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return []
    if not isinstance(raw, list):
        return []
    return [
        Message(m["role"], m["content"])
        for m in raw
        if isinstance(m, dict)
        and m.get("role") in ("user", "assistant")
        and isinstance(m.get("content"), str)
    ]


def _write_history(path: Path, data: bytes) -> None:
    """A conversational sentinel's history, in Weft's state folder: private
    to the user like the journal it sits beside (the agent's text is in it)."""
    import os

    from weft.filemodes import open_private, private_folder

    private_folder(path.parent)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with open(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


_REFUSED: Final = object()
"""What :meth:`SentinelManager._checked` returns for an output it refused."""


def _request(sentinel: _Sentinel, messages: tuple[Message, ...], system: str | None) -> LlmRequest:
    """The model call of one trigger, from the sentinel's ``llmParams`` and output."""
    params = sentinel.config.llm_params
    structured = sentinel.config.structured_output
    return LlmRequest(
        model=sentinel.model,
        messages=messages,
        system=system,
        temperature=params.temperature if params else 0.0,
        max_output_tokens=params.max_output_tokens if params else 8192,
        max_retries=params.max_retries if params else 2,
        schema=sentinel.schema,
        schema_name=(structured.schema_name if structured else None) or "output",
        schema_description=structured.schema_description if structured else None,
        options=(params.provider_options or {}).get(sentinel.provider.name, {}) if params else {},
    )
