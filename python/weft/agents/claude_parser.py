"""The parser of Claude Code's stream-json output (reference agent-cli-protocols §1, §4-§6).

:class:`ClaudeParser` turns its NDJSON stdout into :mod:`weft.agents.events`:

* **The core.** By default the common lines (``assistant``, ``user`` and
  ``stream_event``, nearly all of them) are parsed by the Rust core
  (:class:`weft._core.ClaudeLineParser`), a batch at a time
  (:meth:`ClaudeParser.feed_many`): it decodes only the fields the events
  need, builds the same events and keeps the usage merge below. Whatever it
  is not sure to read exactly as the Python path does (``system`` and
  ``result`` lines, unknown types, odd shapes, bad UTF-8, the synthetic
  model) it hands back, in order, to the Python path, which shares its
  state. ``ClaudeParser(core=False)`` is the pure-Python parser, kept as the
  reference the core is tested against. One difference: token counts past
  2**63, which msgspec decodes and the core cannot hold, make the line
  malformed there.
* **Decoding** (the Python path). One msgspec decode per line into a tagged
  union of Structs;
  fields Weft does not use (``tool_use_result``, ``slash_commands``, ...) are
  skipped by the decoder without building Python objects. Unknown ``type``
  values are counted, corrupt lines counted and logged, never fatal. A line
  is dispatched on its Struct's class (``stream_event``, ``assistant`` and
  ``user``, nearly every line, by identity; the rest by a dict look-up); the
  rare odd line (bad UTF-8, unknown type, wrong shape) takes a slower path
  that says why. The decode alone is most of this path's time (the
  benchmark's decode floor): every call saved per line counts.
* **Session ids** come only from the top-level ``session_id`` of ``system/init``
  and ``result`` lines, never from nested content an agent could write. With
  ``--resume`` the canonical id follows the alias rule of §1.6, checking which
  transcript exists under ``$CLAUDE_CONFIG_DIR/projects/<sanitized cwd>/``.
* **Usage** on ``assistant`` lines is a snapshot repeated once per content
  block: it is max-merged per ``message.id`` and only the growth is reported
  (:class:`~weft.agents.events.UsageDelta`, priced per request so the
  long-context tier applies). A repeated snapshot is settled without a call,
  a message's first one without the general merge, and the price row is
  looked up once per model, since this runs per line.
  The ``result`` line is authoritative.
* **Cost** is this process's spend: the sum of
  ``model_usage_since_last_result[*].costUSD`` when the line has that field
  (2.1.330 reports ``total_cost_usd`` and ``modelUsage`` cumulatively over a
  resumed session, so taking them would bill earlier codons again), else
  ``total_cost_usd`` (``cost_usd`` in old builds), else the sum of
  ``modelUsage[*].costUSD``, else computed from ``modelUsage`` (or ``usage``)
  with the pricing table, else the live estimate.
* **Verdict** (§1.7): a result line wins over the exit code; it is classified
  by ``subtype`` before ``is_error``, then by the synthetic assistant's error
  code, ``api_error_status`` and the error text. Without a result, the exit
  decides: crash before or after init, or exit 0 without a result.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import msgspec

from weft import _core
from weft.agents import pricing
from weft.agents.adapter_parts import session_exited
from weft.agents.claude_cost import result_cost
from weft.agents.claude_transcripts import transcript_path
from weft.agents.claude_verdict import (
    API_ERROR_CODES,
    INPUT_ERRORS,
    LOGIN,
    NO_CONVERSATION,
    exit_verdict,
    first_retry_after,
    status_class,
    stderr_verdict,
)
from weft.agents.claude_wire import (
    KNOWN_TYPES,
    Assistant,
    RateLimitEvent,
    Result,
    StreamEvent,
    System,
    Usage,
    User,
    as_dict,
    decode_envelope,
    decode_line,
    result_text,
)
from weft.agents.events import (
    AgentEvent,
    AssistantText,
    CostSource,
    ErrorClass,
    RetryNotice,
    SessionExited,
    SessionResult,
    SessionStarted,
    Thinking,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
    UsageWindow,
)
from weft.agents.harness import ProcessEnd, decode_lossy, stopped_verdict
from weft.agents.pricing import round_pico
from weft.agents.vendor_errors import (
    CONTEXT_TEXT,
    classify_api_error,
    default_retriable,
)

log = logging.getLogger(__name__)

_WINDOW_RANK = {"allowed": 0, "allowed_warning": 1, "rejected": 2}
"""How bad each usage-window status is: the worst one reported is the one shown."""

SYNTHETIC_MODEL = "<synthetic>"
_NO_TOKENS = Tokens()
"""The maxima of a message that spent nothing yet."""

_USAGE_WINDOW = 1024
"""Messages whose usage maxima are kept for de-duplication."""


# -- the parser ----------------------------------------------------------------------------


_Prices: TypeAlias = tuple[int, int, int, int, int]
_PriceNumbers: TypeAlias = tuple[_Prices, tuple[tuple[int, _Prices], ...]]
_MessageUsage: TypeAlias = tuple[Usage, Tokens, int | None]
"""A message's latest usage snapshot, its maxima so far (§1.5) and their
cost in nano-dollars (``None``: unpriced)."""


class ClaudeParser:
    """Sans-I/O parser of ``claude -p --output-format stream-json`` output."""

    def __init__(
        self,
        *,
        cwd: Path | None = None,
        config_dir: Path | None = None,
        resume_session_id: str | None = None,
        at: dt.date | None = None,
        table: pricing.PricingTable | None = None,
        core: bool = True,
    ) -> None:
        """``core=False``: parse every line in Python (the reference the core
        is tested against; same events, several times slower)."""
        self._cwd = cwd
        self._config_dir = config_dir
        self._requested = resume_session_id
        # One date per session: cost lookups then hit the table's cache.
        self._at = at or dt.datetime.now(dt.UTC).date()
        self._table = table or pricing.default_table()
        self.session_id: str | None = None
        """The id of the first ``system/init``."""
        self.reported_ids: list[str] = []
        self.model: str | None = None
        self.malformed = 0
        self.unknown_types = 0
        self._usage: OrderedDict[str, _MessageUsage] = OrderedDict()
        """The latest messages' usage maxima (bounded: a message's blocks come
        together, so old entries are never needed again)."""
        # The tokens of every usage delta, summed (five ints, not a Tokens per
        # request).
        self._spent_input = 0
        self._spent_output = 0
        self._spent_cache_creation = 0
        self._spent_cache_read = 0
        self._spent_cache_creation_1h = 0
        self._rows: dict[str, pricing.PriceRow | None] = {}
        """Price rows by model (``None``: unpriced)."""
        self._estimate_nanos: int | None = 0
        self._priced_model: str | None = None
        self._sse_message_id: str | None = None
        self._result: Result | None = None
        self._result_event: SessionResult | None = None
        self._api_error: str | None = None
        self._api_error_text: str | None = None
        self._context_exceeded = False
        """Any sign of exhaustion, automatic compaction included (§6.5)."""
        self._context_error = False
        """An error that says the context ran out (not a compaction)."""
        self._stderr_notes: list[str] = []
        self._window: UsageWindow | None = None
        """The last usage window reported (``rate_limit_event``)."""
        self._core = _core.ClaudeLineParser(self._price_numbers) if core else None
        """The fast path and the state it shares with the Python path (the
        usage maxima, the summed tokens, the estimate, the stream's message
        id); ``None``: the Python attributes above keep that state."""
        self._handlers: dict[type[Any], Callable[[Any], list[AgentEvent]]] = {
            Assistant: self._assistant,
            User: self._user,
            StreamEvent: self._stream_event,
            System: self._system,
            Result: self._on_result,
            RateLimitEvent: self._rate_limit,
        }
        """The line kinds that yield events; the others are read and dropped."""

    # -- StreamParser --

    def feed(self, line: bytes) -> list[AgentEvent]:
        """Parse one stdout line."""
        if self._core is None:
            return self._feed_python(line)
        return self.feed_many([line])

    def feed_many(self, lines: Sequence[bytes]) -> list[AgentEvent]:
        """Parse several stdout lines at once: the events of
        ``[e for line in lines for e in feed(line)]``, for a fraction of the
        cost (one call into the core per batch, decoded without the
        interpreter's lock when the batch is large)."""
        core = self._core
        events: list[AgentEvent] = []
        if core is None:
            for line in lines:
                self._feed_one(line, events)
            return events
        batch = lines if isinstance(lines, list) else list(lines)
        end = len(batch)
        start = 0
        # The core stops at a line it leaves to the Python path; the lines
        # after it wait, since that line may change what they mean.
        while (stop := core.feed(batch, start, events)) < end:
            self._feed_one(batch[stop], events)
            start = stop + 1
        return events

    def _feed_one(self, line: bytes, events: list[AgentEvent]) -> None:
        """The Python path for one line of a batch: a bug on one odd line must
        not lose the batch's other events."""
        try:
            events += self._feed_python(line)
        except Exception:
            log.exception("claude parser failed on a line of %d bytes", len(line))

    def _feed_python(self, line: bytes) -> list[AgentEvent]:
        if line[:1] != b"{":
            line = line.strip()
            if line[:1] != b"{":
                return []  # blank, or text such as "[SandboxDebug] ..."
        try:
            msg = decode_line(line)
        except (msgspec.MsgspecError, UnicodeDecodeError):
            return self._bad_line(line)
        # The three kinds that make almost every line are tested first, by
        # identity: the per-line Python work is ~40% of the parse (the decode
        # is the rest), and a dict look-up and a bound-method call cost more.
        kind = msg.__class__
        if kind is StreamEvent:
            return self._stream_event(msg)
        if kind is Assistant:
            return self._assistant(msg)
        if kind is User:
            return self._user(msg)
        handler = self._handlers.get(kind)
        return [] if handler is None else handler(msg)

    def _bad_line(self, line: bytes) -> list[AgentEvent]:
        """A line the fast path refused: invalid UTF-8 (decoded again with
        U+FFFD), an unknown ``type``, an unexpected shape, or not JSON."""
        try:
            msg = decode_lossy(decode_line, line)
        except msgspec.ValidationError as e:
            return self._odd_line(line, e)
        except msgspec.DecodeError as e:
            self.malformed += 1
            log.warning("corrupt stream-json line (%s): %.200r", e, line)
            return []
        handler = self._handlers.get(msg.__class__)
        return [] if handler is None else handler(msg)

    def stderr(self, line: str) -> list[AgentEvent]:
        """Keep the stderr lines that decide a verdict without a result."""
        if (
            NO_CONVERSATION.search(line) or INPUT_ERRORS.search(line) or LOGIN.search(line)
        ) and len(self._stderr_notes) < 20:
            self._stderr_notes.append(line.strip())
        return []

    def finish(self, end: ProcessEnd) -> list[AgentEvent]:
        """The verdict (§1.7), with the last usage window: a session that
        failed while its window was rejected failed because of it
        (``usage_limit``; reference real-agent-clis §1.10), whatever the
        result's words, which only the CLI's locale decides."""
        exited = self._verdict(end)
        window = self._window
        if window is None:
            return [exited]
        if not exited.ok and end.stopped is None and window.status == "rejected":
            return [
                msgspec.structs.replace(
                    exited, error_class=ErrorClass.USAGE_LIMIT, retriable=False, window=window
                )
            ]
        return [msgspec.structs.replace(exited, window=window)]

    def _verdict(self, end: ProcessEnd) -> SessionExited:
        session_id, aliases = self._canonical_id()
        result = self._result
        if result is not None and self._result_event is not None:
            ev = self._result_event
            ok = ev.ok
            if ok and end.exit_code != 0:
                log.warning(
                    "claude reported success but exited with %s; the result wins",
                    end.exit_code if end.exit_code is not None else f"signal {end.signal}",
                )
            if ok:
                error_class, retriable, message = None, False, None
            elif end.stopped is not None:
                error_class, retriable, message = stopped_verdict(end.stopped)
            else:
                error_class, retriable = ev.error_class or ErrorClass.ERROR_RESULT, False
                retriable = self._retriable(error_class, ev)
                message = self._result_message(result)
            texts = [result.result or "", *map(str, result.errors), self._api_error_text or ""]
            return session_exited(
                end,
                error_class=error_class,
                retriable=retriable,
                message=message,
                retry_after_ms=None if ok else first_retry_after(texts, end.stderr_tail),
                result_seen=True,
                session=(session_id, aliases),
                cost=(ev.cost_usd, ev.cost_source),
                tokens=ev.tokens,
                malformed_lines=self.malformed,
                unknown_types=self.unknown_types,
                context_exceeded=self._context_exceeded,
            )
        error_class, retriable, message = self._no_result_verdict(end)
        cost, source, tokens = self._estimate()
        return session_exited(
            end,
            error_class=error_class,
            retriable=retriable,
            message=message,
            retry_after_ms=first_retry_after(
                [self._api_error_text or "", *self._stderr_notes], end.stderr_tail
            ),
            result_seen=False,
            session=(session_id, aliases),
            cost=(cost, source),
            tokens=tokens,
            malformed_lines=self.malformed,
            unknown_types=self.unknown_types,
            context_exceeded=self._context_exceeded,
        )

    # -- line kinds --

    def _odd_line(self, line: bytes, error: msgspec.ValidationError) -> list[AgentEvent]:
        try:
            # Lossy: a line refused for its bytes too (invalid UTF-8 in its type).
            kind = decode_lossy(decode_envelope, line).type
        except msgspec.MsgspecError:
            kind = None
        if isinstance(kind, str) and kind not in KNOWN_TYPES:
            self.unknown_types += 1
            log.debug("ignoring stream-json type %r", kind)
        else:
            self.malformed += 1
            log.warning("stream-json line of an unexpected shape (%s): %.200r", error, line)
        return []

    def _system(self, msg: System) -> list[AgentEvent]:
        sub = msg.subtype
        if sub == "init":
            sid = msg.session_id
            if not sid:
                self.malformed += 1
                log.warning("system/init line without a session_id")
                return []
            if sid not in self.reported_ids:
                self.reported_ids.append(sid)
            if msg.model:
                self.model = msg.model
            if self.session_id is not None:
                return []  # a later init (after compaction): recorded as an alias
            self.session_id = sid
            return [
                SessionStarted(
                    session_id=sid,
                    model=msg.model,
                    cwd=msg.cwd,
                    tools=[t if isinstance(t, str) else str(t) for t in msg.tools],
                    agent_version=msg.claude_code_version,
                )
            ]
        if sub == "api_retry":
            error = msg.error if isinstance(msg.error, str) else None
            delay = msg.retry_delay_ms
            return [
                RetryNotice(
                    attempt=msg.attempt or 0,
                    max_retries=msg.max_retries,
                    delay_ms=int(delay) if delay is not None else None,
                    error=error,
                    status=msg.error_status,
                )
            ]
        if sub == "compact_boundary":
            meta = msg.compact_metadata
            if meta is not None and meta.trigger != "manual":
                self._context_exceeded = True
        return []

    def _assistant(self, msg: Assistant) -> list[AgentEvent]:
        message = msg.message
        mid = message.id
        model = message.model
        events: list[AgentEvent] = []
        if model == SYNTHETIC_MODEL:
            self._synthetic(msg)
        content = message.content
        if content.__class__ is list:
            sub = msg.parent_tool_use_id is not None
            for block in content:
                kind = block.type
                if kind == "text":
                    if block.text is not None:
                        events.append(AssistantText(text=block.text, message_id=mid, subagent=sub))
                elif kind == "tool_use":
                    events.append(
                        ToolUse(
                            tool_use_id=block.id or "",
                            name=block.name or "",
                            input=as_dict(block.input),
                            message_id=mid,
                            subagent=sub,
                        )
                    )
                elif kind == "thinking" and block.thinking:
                    events.append(Thinking(text=block.thinking, message_id=mid, subagent=sub))
        usage = message.usage
        if usage is not None and mid is not None and self._core is not None:
            core_delta = self._core_usage(mid, model, usage)
            if core_delta is not None:
                events.append(core_delta)
        elif usage is not None and mid is not None:
            entry = self._usage.get(mid)
            if entry is None:
                delta = self._first_usage(mid, model, usage)
            elif usage != entry[0]:
                delta = self._usage_delta(mid, model, usage, entry)
            else:
                # The same snapshot repeated for the next content block (most
                # assistant lines): settled here, without a call.
                return events
            if delta is not None:
                events.append(delta)
        return events

    def _core_usage(self, mid: str, model: str | None, usage: Usage) -> UsageDelta | None:
        """The usage merge of a line the core left to this path, made in the
        core, whose state it is."""
        assert self._core is not None
        split = usage.cache_creation
        try:
            return self._core.usage(
                mid,
                model,
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_creation_input_tokens,
                usage.cache_read_input_tokens,
                None
                if split is None
                else (split.ephemeral_5m_input_tokens, split.ephemeral_1h_input_tokens),
            )
        except OverflowError:
            # Token counts past 2**63 (msgspec takes any integer; the core's
            # are 64-bit): not a usage this parser can have seen for real.
            self.malformed += 1
            log.warning("usage of message %s out of range; ignored", mid)
            return None

    def _price_numbers(self, model: str) -> _PriceNumbers | None:
        """The core's price row of ``model``: the numbers of the table's row
        (the core applies the formula, never the table's matching rules)."""
        row = self._table.lookup(model, self._at)
        if row is None:
            return None
        return _numbers(row.prices), tuple(
            (tier.above_prompt_tokens, _numbers(tier.prices)) for tier in row.tiers
        )

    def _synthetic(self, msg: Assistant) -> None:
        content = msg.message.content
        texts = [b.text for b in content if b.text] if isinstance(content, list) else [content]
        text = "\n".join(t for t in texts if t)
        if msg.error:
            self._api_error = msg.error
        if text:
            self._api_error_text = text
            stripped = text.strip()
            if stripped == "API Error: terminated" or (
                "exceeded the" in text and "output token maximum" in text
            ):
                self._context_exceeded = self._context_error = True

    def _first_usage(self, mid: str, model: str | None, usage: Usage) -> UsageDelta | None:
        """A message's first snapshot (one per API request): all of it is new.
        The common case of the merge, written out flat: it runs per request."""
        usage_by_message = self._usage
        if len(usage_by_message) >= _USAGE_WINDOW:
            usage_by_message.popitem(last=False)
        if model and model != SYNTHETIC_MODEL:
            self._priced_model = model
        split = usage.cache_creation
        one_hour = split.ephemeral_1h_input_tokens if split is not None else 0
        n_in = usage.input_tokens
        n_out = usage.output_tokens
        n_write = usage.cache_creation_input_tokens
        n_read = usage.cache_read_input_tokens
        tokens = Tokens(
            input=n_in,
            output=n_out,
            cache_creation=n_write,
            cache_read=n_read,
            cache_creation_1h=one_hour,
        )
        if n_in + n_out + n_write + n_read == 0 and one_hour == 0:
            # Nothing spent: the maxima stay at zero (not these counts, which a
            # broken stream's negative one can sum to zero), as when merged.
            usage_by_message[mid] = (usage, _NO_TOKENS, 0)
            return None
        cost = None if model is None else self._cost_nanos(model, tokens)
        usage_by_message[mid] = (usage, tokens, cost)
        if cost is None:
            delta_cost = None
            self._estimate_nanos = None
        else:
            delta_cost = cost / 1e9
            if self._estimate_nanos is not None:
                self._estimate_nanos += cost
        self._spent_input += n_in
        self._spent_output += n_out
        self._spent_cache_creation += n_write
        self._spent_cache_read += n_read
        self._spent_cache_creation_1h += one_hour
        return UsageDelta(model=model, tokens=tokens, cost_usd=delta_cost, message_id=mid)

    def _usage_delta(
        self, mid: str, model: str | None, usage: Usage, entry: _MessageUsage
    ) -> UsageDelta | None:
        """Max-merges a changed snapshot into the message's maxima; the
        growth, priced."""
        _, old, old_cost = entry
        split = usage.cache_creation
        new = Tokens(
            input=max(old.input, usage.input_tokens),
            output=max(old.output, usage.output_tokens),
            cache_creation=max(old.cache_creation, usage.cache_creation_input_tokens),
            cache_read=max(old.cache_read, usage.cache_read_input_tokens),
            cache_creation_1h=max(
                old.cache_creation_1h, split.ephemeral_1h_input_tokens if split else 0
            ),
        )
        if new == old:
            self._usage[mid] = (usage, old, old_cost)
            return None
        tokens = Tokens(
            input=new.input - old.input,
            output=new.output - old.output,
            cache_creation=new.cache_creation - old.cache_creation,
            cache_read=new.cache_read - old.cache_read,
            cache_creation_1h=new.cache_creation_1h - old.cache_creation_1h,
        )
        cost = None if model is None else self._cost_nanos(model, new)
        self._usage[mid] = (usage, new, cost)
        if cost is None or old_cost is None:
            delta_cost = None
            self._estimate_nanos = None
        else:
            delta_nanos = cost - old_cost
            delta_cost = delta_nanos / 1e9
            if self._estimate_nanos is not None:
                self._estimate_nanos += delta_nanos
        self._spent_input += tokens.input
        self._spent_output += tokens.output
        self._spent_cache_creation += tokens.cache_creation
        self._spent_cache_read += tokens.cache_read
        self._spent_cache_creation_1h += tokens.cache_creation_1h
        return UsageDelta(model=model, tokens=tokens, cost_usd=delta_cost, message_id=mid)

    def _cost_nanos(self, model: str, tokens: Tokens) -> int | None:
        """``table.cost_nanos(model, tokens, at, per_request=True)`` with the
        row looked up once per model (this runs once per API message)."""
        try:
            row = self._rows[model]
        except KeyError:
            row = self._table.lookup(model, self._at)
            if len(self._rows) < 64:
                self._rows[model] = row
        if row is None:
            return None
        prices = row.prices_for(tokens, True) if row.tiers else row.prices
        return round_pico(prices.cost_pico(tokens))

    def _user(self, msg: User) -> list[AgentEvent]:
        content = msg.message.content
        if content.__class__ is not list:
            return []  # a replayed prompt
        sub = msg.parent_tool_use_id is not None
        events: list[AgentEvent] = []
        for block in content:
            if block.type == "tool_result":
                value = block.content
                events.append(
                    ToolResult(
                        tool_use_id=block.tool_use_id or "",
                        # Most results are one string: kept as it is, without a call.
                        content=value if value.__class__ is str else result_text(value),
                        is_error=block.is_error is True,
                        subagent=sub,
                    )
                )
        return events

    def _stream_event(self, msg: StreamEvent) -> list[AgentEvent]:
        event = msg.event
        core = self._core
        if event.type == "content_block_delta":
            delta = event.delta
            if delta is not None and delta.type == "text_delta" and delta.text:
                return [
                    AssistantText(
                        text=delta.text,
                        message_id=self._sse_message_id if core is None else core.sse_message_id,
                        partial=True,
                        subagent=msg.parent_tool_use_id is not None,
                    )
                ]
        elif event.type == "message_start" and event.message is not None:
            if core is None:
                self._sse_message_id = event.message.id
            else:
                core.sse_message_id = event.message.id
        return []

    def _rate_limit(self, msg: RateLimitEvent) -> list[AgentEvent]:
        info = msg.rate_limit_info
        if info is None or not info.status:
            return []
        status, resets_at, window, used = info.status, info.resetsAt, info.rateLimitType, None
        for name, w in (info.unifiedWindows or {}).items():
            # The overall status can say "allowed" while a window warns.
            if w.status and _WINDOW_RANK.get(w.status, 0) > _WINDOW_RANK.get(status, 0):
                status, resets_at, window = w.status, w.resetsAt or resets_at, name
            if name == window and w.utilization is not None:
                used = w.utilization
        if used is None:
            used = info.utilization
        event = UsageWindow(
            status=status,
            resets_at_ms=None if resets_at is None else int(resets_at * 1000),
            window=window,
            utilization=used,
        )
        self._window = event
        return [event]

    def _on_result(self, r: Result) -> list[AgentEvent]:
        self._result = r
        if r.session_id and r.session_id not in self.reported_ids:
            self.reported_ids.append(r.session_id)
        ok = r.subtype == "success" and not r.is_error
        texts = [r.result or "", *map(str, r.errors)]
        if r.is_error and any(CONTEXT_TEXT.search(t) for t in texts):
            self._context_exceeded = self._context_error = True
        error_class = None if ok else self._result_class(r)
        cost, source, tokens, per_model = result_cost(
            r,
            model=self.model,
            fallback_model=self._priced_model if self._core is None else self._core.priced_model,
            table=self._table,
            at=self._at,
        )
        event = SessionResult(
            ok=ok,
            subtype=r.subtype or None,
            is_error=r.is_error,
            text=r.result,
            errors=[str(e) for e in r.errors],
            session_id=r.session_id,
            cost_usd=cost,
            cost_source=source,
            tokens=tokens,
            model_usage=per_model,
            num_turns=r.num_turns,
            duration_ms=r.duration_ms,
            error_class=error_class,
            context_exceeded=self._context_exceeded,
        )
        self._result_event = event
        return [event]

    # -- verdict helpers --

    def _result_class(self, r: Result) -> ErrorClass:
        sub = r.subtype
        if sub == "error_max_turns":
            return ErrorClass.MAX_TURNS
        if sub == "error_max_budget_usd":
            return ErrorClass.BUDGET
        errors = [str(e) for e in r.errors]
        if any(NO_CONVERSATION.search(e) for e in errors):
            return ErrorClass.CANNOT_RESUME
        if self._context_error or r.terminal_reason == "blocking_limit":
            return ErrorClass.CONTEXT_EXCEEDED
        if sub == "error_max_structured_output_retries":
            return ErrorClass.ERROR_RESULT
        found = self._api_class(r)
        if found is not None:
            return found[0]
        if sub == "success":  # is_error with a success subtype: a disguised API error
            return ErrorClass.API_ERROR
        return ErrorClass.ERROR_RESULT

    def _api_class(self, r: Result) -> tuple[ErrorClass, bool] | None:
        if self._api_error is not None and self._api_error in API_ERROR_CODES:
            return API_ERROR_CODES[self._api_error]
        if r.api_error_status is not None:
            by_status = status_class(r.api_error_status)
            if by_status is not None:
                return by_status
        for text in (self._api_error_text, r.result, *map(str, r.errors)):
            if text:
                found = classify_api_error(text)
                if found is not None:
                    return found
        return None

    def _retriable(self, error_class: ErrorClass, ev: SessionResult) -> bool:
        if error_class is ErrorClass.API_ERROR:
            assert self._result is not None
            found = self._api_class(self._result)
            return found[1] if found is not None else True
        return default_retriable(error_class)

    def _result_message(self, r: Result) -> str:
        for text in (*map(str, r.errors), r.result, self._api_error_text):
            if text:
                return text
        if r.subtype == "error_max_turns":
            return "claude reached its maximum number of turns (--max-turns)"
        if r.subtype == "error_max_budget_usd":
            return "claude reached its spending cap (--max-budget-usd)"
        return f"claude ended with result {r.subtype or '(no subtype)'}"

    def _no_result_verdict(self, end: ProcessEnd) -> tuple[ErrorClass, bool, str]:
        if end.stopped is not None:
            return stopped_verdict(end.stopped)
        found = stderr_verdict(" ".join(self._stderr_notes) + "\n" + end.stderr_tail)
        if found is not None:
            return found
        if self._context_error:
            return ErrorClass.CONTEXT_EXCEEDED, False, self._api_error_text or "context exceeded"
        return exit_verdict(end, started=self.session_id is not None)

    def _canonical_id(self) -> tuple[str | None, list[str]]:
        chain: list[str] = []
        for sid in (self._requested, *self.reported_ids):
            if sid and sid not in chain:
                chain.append(sid)
        if not self.reported_ids:
            return self._requested, chain
        latest = self.reported_ids[-1]
        candidates = [latest]
        if self._requested and self._requested != latest:
            candidates.append(self._requested)
        elif len(self.reported_ids) > 1:
            candidates.extend(reversed(self.reported_ids[:-1]))
        if len(candidates) > 1 and self._cwd is not None and self._config_dir is not None:
            for sid in candidates:
                if transcript_path(self._config_dir, self._cwd, sid) is not None:
                    return sid, chain
        return latest, chain

    # -- cost --

    def _estimate(self) -> tuple[float | None, CostSource, Tokens]:
        if self._core is not None:
            n_in, n_out, n_write, n_read, one_hour = self._core.spent
            nanos = self._core.estimate_nanos
        else:
            n_in, n_out = self._spent_input, self._spent_output
            n_write, n_read = self._spent_cache_creation, self._spent_cache_read
            one_hour = self._spent_cache_creation_1h
            nanos = self._estimate_nanos
        tokens = Tokens(
            input=n_in,
            output=n_out,
            cache_creation=n_write,
            cache_read=n_read,
            cache_creation_1h=one_hour,
        )
        if nanos is None:
            return None, CostSource.UNPRICED, tokens
        return nanos / 1e9, CostSource.ESTIMATE, tokens


def _numbers(prices: pricing.Prices) -> _Prices:
    return (
        prices.input,
        prices.cache_write_5m,
        prices.cache_write_1h,
        prices.cache_read,
        prices.output,
    )
