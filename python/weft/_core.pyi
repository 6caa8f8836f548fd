"""Type stubs of the compiled core ``weft._core`` (hand-written, checked by mypy.stubtest)."""

from collections.abc import Callable, Iterable, Iterator, Sequence
from os import PathLike
from typing import Any, Literal, final, overload

from weft.agents.events import AgentEvent, UsageDelta

__all__ = [
    "BACKOFF_BASE_MS",
    "BACKOFF_CAP_MS",
    "BUILD_PROFILE",
    "CIRCUIT_STATES",
    "CODON_STATUSES",
    "DEFAULT_MAX_CONSECUTIVE_ERRORS",
    "DEFAULT_MAX_TOTAL_ERRORS",
    "SESSION_STATES",
    "STEP_STATES",
    "TRANSITION_TYPES",
    "WORKSTREAM_STATES",
    "BatchResult",
    "CheckpointInfo",
    "CircuitBreaker",
    "ClaudeLineParser",
    "Core",
    "ExecutionThread",
    "FileStat",
    "Issue",
    "JournalAppender",
    "JournalPages",
    "Outcome",
    "Pattern",
    "SessionEffect",
    "SessionMachine",
    "StatCache",
    "StateValidation",
    "Step",
    "ThreadCodon",
    "ThreadCodons",
    "Workstream",
    "__version__",
    "allowed_transitions",
    "analyze_execution_thread",
    "backoff_ms",
    "circuit_open_message",
    "find_continuation_session_id",
    "is_terminal",
    "read_blob",
    "retry_delay_ms",
    "validate_state",
    "validate_transition",
]

__version__: str
BUILD_PROFILE: str
CODON_STATUSES: tuple[str, ...]
TRANSITION_TYPES: tuple[str, ...]
SESSION_STATES: tuple[str, ...]
BACKOFF_BASE_MS: int
BACKOFF_CAP_MS: int
DEFAULT_MAX_CONSECUTIVE_ERRORS: int
DEFAULT_MAX_TOTAL_ERRORS: int
WORKSTREAM_STATES: tuple[str, ...]
STEP_STATES: tuple[str, ...]
CIRCUIT_STATES: tuple[str, ...]

def validate_transition(
    from_status: str, to_status: str, metadata: dict[str, object] | None = None
) -> None:
    """Raise InvalidTransitionError or MetadataValidationError unless the move is allowed."""

def allowed_transitions(status: str) -> list[str]:
    """The statuses a codon in ``status`` may move to."""

def is_terminal(status: str) -> bool:
    """Whether ``status`` is completed, failed or skipped."""

def validate_state(
    state_json: bytes,
    *,
    checkpoints: list[str] | None = None,
    run_folders: list[str] | None = None,
) -> StateValidation:
    """Check a state document without loading it."""

@final
class Outcome:
    """The outcome of one transition: applied, or rejected with a reason."""

    @property
    def seq(self) -> int: ...
    @property
    def transition(self) -> bool: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def run_id(self) -> str | None: ...
    @property
    def codon_id(self) -> str | None: ...
    @property
    def ok(self) -> bool: ...
    @property
    def code(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def from_status(self) -> str | None: ...
    @property
    def to_status(self) -> str | None: ...
    @property
    def missing(self) -> list[str]: ...
    @property
    def invalid(self) -> list[tuple[str, str]]: ...
    @property
    def codon_terminal(self) -> bool: ...
    @property
    def run_ended(self) -> bool: ...

@final
class BatchResult:
    """Counts of an ``apply_batch`` call, with the rejected outcomes only."""

    @property
    def first_seq(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def applied(self) -> int: ...
    @property
    def rejected(self) -> list[Outcome]: ...

@final
class Issue:
    """One finding of a state validation."""

    @property
    def kind(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def path(self) -> str: ...

@final
class StateValidation:
    """Errors and warnings of a state validation."""

    @property
    def valid(self) -> bool: ...
    @property
    def errors(self) -> list[Issue]: ...
    @property
    def warnings(self) -> list[Issue]: ...

@final
class Core:
    """One execution's state, its ordered transition queue and its cost cache."""

    def __new__(
        cls,
        state_json: bytes | None = None,
        *,
        checkpoints: list[str] | None = None,
        run_folders: list[str] | None = None,
        next_seq: int | None = None,
    ) -> Core: ...
    def submit(self, event: bytes) -> int:
        """Enqueue one encoded transition; returns its sequence number at once."""
    def emit(self, event: bytes) -> int:
        """Enqueue a stream event: it takes its place in the order, the state is untouched."""
    def submit_many(self, events: list[bytes]) -> int:
        """Enqueue several transitions in order; returns the first sequence number."""
    def drain(self, max_events: int | None = None) -> list[Outcome]:
        """Apply up to ``max_events`` pending transitions in order."""
    def apply(self, event: bytes) -> Outcome:
        """Apply one transition now; the queue must be empty."""
    def apply_batch(self, events: bytes) -> BatchResult:
        """Apply a JSON array of transitions now; the queue must be empty."""
    def apply_many(self, events: list[bytes]) -> BatchResult:
        """Apply a list of transitions now (the replay path); the queue must be empty."""
    def skip_to(self, next_seq: int) -> None:
        """Move the numbering forward so the next submission gets ``next_seq``."""
    def snapshot_json(self) -> bytes:
        """The state.json snapshot: the document plus ``journalSeq``."""
    def write_snapshot_json(self, path: str | PathLike[str]) -> int:
        """Writes :meth:`snapshot_json`'s document to ``path`` (created or
        truncated), fsyncs it and returns its size; streamed, never held whole."""
    @property
    def journal_seq(self) -> int | None: ...
    @property
    def pending(self) -> int: ...
    @property
    def next_seq(self) -> int: ...
    @property
    def warnings(self) -> list[Issue]: ...
    @property
    def current_run_id(self) -> str | None: ...
    @property
    def run_count(self) -> int: ...
    @property
    def codon_record_count(self) -> int: ...
    def state_json(self) -> bytes:
        """The state document in the state.json layout."""
    def total_cost(self) -> float:
        """Cost of every codon record of every run, in dollars. O(1)."""
    def current_run_cost(self) -> float:
        """Cost of the active run so far (0 when none). O(1)."""
    def run_cost(self, run_id: str) -> float | None:
        """Cost of one run, or None for an unknown run. O(1)."""
    def codon_cost(self, run_id: str, codon_id: str) -> float | None:
        """getCodonCost of a codon's latest record in a run, or None. O(1)."""
    def codon_status(self, run_id: str, codon_id: str) -> str | None:
        """Status of a codon's latest record in a run, or None."""
    def execution_thread(
        self,
        checkpoints: Iterable[str] | None = None,
        target_run_id: str | None = None,
        validate_checkpoints: bool = True,
    ) -> ExecutionThread:
        """The execution thread of the live state (no JSON round trip)."""

def analyze_execution_thread(
    state_json: str | bytes,
    checkpoints: Iterable[str] | None = None,
    target_run_id: str | None = None,
    validate_checkpoints: bool = True,
) -> ExecutionThread:
    """The execution thread of a state document, ending in ``target_run_id`` or the latest run."""

def find_continuation_session_id(thread: ExecutionThread, codon_id: str) -> str | None:
    """The session a continue-previous ``codon_id`` resumes, or None."""

_CheckpointType = Literal["rig-setup", "completed", "error", "skipped"]
_RunStatus = Literal["running", "completed", "failed", "crashed"]

@final
class CheckpointInfo:
    """A checkpoint of a thread codon that exists in git."""

    @property
    def type(self) -> _CheckpointType: ...
    @property
    def sha(self) -> str: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class ThreadCodon:
    """One codon of an execution thread, with its run and its place in the history."""

    @property
    def codon(self) -> dict[str, Any]: ...
    @property
    def codon_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def run_status(self) -> _RunStatus: ...
    @property
    def run_start_time(self) -> str: ...
    @property
    def run_end_time(self) -> str | None: ...
    @property
    def git_branch(self) -> str: ...
    @property
    def global_index(self) -> int: ...
    @property
    def run_index(self) -> int: ...
    @property
    def codon_index_in_run(self) -> int: ...
    @property
    def validated_checkpoints(self) -> tuple[CheckpointInfo, ...]: ...
    @property
    def continuation_session_id(self) -> str | None: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class ThreadCodons:
    """The codons of a thread, newest first: a read-only sequence whose items are made when read."""

    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, key: int, /) -> ThreadCodon: ...
    @overload
    def __getitem__(self, key: slice, /) -> list[ThreadCodon]: ...
    def __iter__(self) -> Iterator[ThreadCodon]: ...

@final
class ExecutionThread:
    """The execution thread: every codon of a continuation chain, newest first."""

    @property
    def codons(self) -> ThreadCodons: ...
    @property
    def total_runs(self) -> int: ...
    @property
    def has_running_codon(self) -> bool: ...
    @property
    def next_codon_id(self) -> str | None: ...
    @property
    def failed(self) -> bool: ...
    def __len__(self) -> int: ...
    def find_continuation_session_id(self, codon_id: str) -> str | None:
        """The session a continue-previous ``codon_id`` resumes, or None."""
    def to_json(self) -> bytes:
        """The whole thread as JSON, in the seed's camelCase shape."""

def backoff_ms(n: int) -> int:
    """Cool-down after the ``n``-th consecutive error: ``min(2000 * 2**(n-1), 60000)`` ms."""

@final
class SessionEffect:
    """A side effect of a session-machine transition, for the caller to perform."""

    @property
    def kind(self) -> str: ...
    @property
    def prompt(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def session_seq(self) -> int | None: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class SessionMachine:
    """The agent-session supervisor machine of seed 002 (decides; performs nothing)."""

    def __new__(
        cls,
        *,
        max_consecutive_errors: int = 5,
        max_total_errors: int = 20,
    ) -> SessionMachine: ...
    @property
    def state(self) -> str: ...
    @property
    def is_stopped(self) -> bool: ...
    @property
    def cooldown_ms(self) -> int | None: ...
    @property
    def parked_ms(self) -> int | None: ...
    @property
    def consecutive_errors(self) -> int: ...
    @property
    def total_errors(self) -> int: ...
    @property
    def session_seq(self) -> int: ...
    @property
    def max_consecutive_errors(self) -> int: ...
    @property
    def max_total_errors(self) -> int: ...
    def worktree_ready(self) -> list[SessionEffect]:
        """``WorktreeReady``."""
    def prompt_ready(self, prompt: str) -> list[SessionEffect]:
        """``PromptReady(prompt)``."""
    def session_started(self, seq: int) -> list[SessionEffect]:
        """``SessionStarted(seq)``."""
    def session_exited(
        self, outcome: Literal["Success", "Error", "Timeout"], message: str | None = None
    ) -> list[SessionEffect]:
        """``SessionExited(outcome)``; ``message`` goes with ``"Error"`` only."""
    def urgent_message(self) -> list[SessionEffect]:
        """``UrgentMessage``."""
    def grace_exceeded(self) -> list[SessionEffect]:
        """``GraceExceeded``."""
    def backoff_elapsed(self) -> list[SessionEffect]:
        """``BackoffElapsed``."""
    def window_closed(self, wait_ms: int) -> list[SessionEffect]:
        """``WindowClosed(wait_ms)``: park on a closed usage window (no error counted)."""
    def window_opened(self) -> list[SessionEffect]:
        """``WindowOpened``: the usage window is open."""
    def operator_stop(self) -> list[SessionEffect]:
        """``OperatorStop`` (valid in every state)."""
    def fatal_error(self, message: str) -> list[SessionEffect]:
        """``FatalError(message)`` (valid in every state)."""

# ---- agent streams ----------------------------------------------------------

_Prices = tuple[int, int, int, int, int]

@final
class ClaudeLineParser:
    """The fast path of ``weft.agents.claude_parser``: the common stream-json
    lines of a batch parsed to events, and the per-session state they share."""

    def __new__(
        cls, price_row: Callable[[str], tuple[_Prices, Sequence[tuple[int, _Prices]]] | None]
    ) -> ClaudeLineParser: ...
    def feed(self, lines: list[bytes], start: int, events: list[AgentEvent]) -> int:
        """Parse ``lines[start:]`` in order, appending their events to
        ``events``; the index of the first line the core leaves to the Python
        path (the caller parses it, then calls again after it), or ``len(lines)``."""
    def usage(
        self,
        message_id: str,
        model: str | None,
        input: int,
        output: int,
        cache_creation: int,
        cache_read: int,
        split: tuple[int, int] | None,
    ) -> UsageDelta | None:
        """Record a usage snapshot the Python path read; what it added, if anything."""
    @property
    def sse_message_id(self) -> str | None: ...
    @sse_message_id.setter
    def sse_message_id(self, value: str | None) -> None: ...
    @property
    def priced_model(self) -> str | None: ...
    @property
    def spent(self) -> tuple[int, int, int, int, int]: ...
    @property
    def estimate_nanos(self) -> int | None: ...

# ---- checkpoints: a work-tree file read as a git blob ---------------------

@final
class FileStat:
    """The stat data a checkpoint keeps of a file, taken before it was read."""

    @property
    def st_mode(self) -> int: ...
    @property
    def st_ino(self) -> int: ...
    @property
    def st_dev(self) -> int: ...
    @property
    def st_uid(self) -> int: ...
    @property
    def st_gid(self) -> int: ...
    @property
    def st_size(self) -> int: ...
    @property
    def st_mtime_ns(self) -> int: ...
    @property
    def st_ctime_ns(self) -> int: ...
    @property
    def taken_ns(self) -> int:
        """The wall-clock time (ns) just before the stat was taken."""

def read_blob(
    path: str | PathLike[str], max_size: int, *, root: str | PathLike[str] | None = None
) -> tuple[
    Literal["file", "link", "dir", "other", "missing"],
    FileStat | None,
    bytes | None,
    bytes | None,
]:
    """Read the file at ``path`` as a checkpoint stores it, detached from the
    interpreter for a file over 64 KiB: ``(kind, stat, data, sha)``; ``data`` and ``sha`` are None
    for a file over ``max_size`` and for kinds git does not hold. With
    ``root``, ``path`` is relative to it and no link below it is followed (a
    parent that is one reads as ``"missing"``)."""

@final
class Pattern:
    """A regular expression (Rust ``regex`` syntax) matched in time linear in
    the text, whatever the pattern: finite automata, no backtracking. The
    compiled program and its DFA cache are bounded (1 MiB each)."""

    def __new__(cls, source: str) -> Pattern:
        """Compile ``source``; ``ValueError`` with the engine's message when it
        is not valid (a backreference, look-around) or compiles too large."""
    @property
    def source(self) -> str:
        """The pattern's source."""
    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in ``text`` (detached from
        the interpreter for a text over 4 KiB)."""

@final
class JournalPages:
    """A read-only connection to a journal whose replay pages are read and
    joined detached from the interpreter, through the system's SQLite library."""

    def __new__(cls, path: str | PathLike[str], query: str) -> JournalPages:
        """Opens the journal read-only; ``query`` takes ``(after, upto, limit)``
        and gives ``(seq, envelope)`` rows, oldest first."""
    def page(self, after: int, upto: int, limit: int, max_bytes: int) -> tuple[bytes, int, int]:
        """The envelopes of the events in ``(after, upto]`` joined by commas (at
        most ``limit``; the page stops at the event that brings it to
        ``max_bytes``, a comma each counted): ``(envelopes, count, last seq)``."""
    def rows(self, after: int, upto: int, limit: int) -> list[tuple[int, bytes]]:
        """The envelopes of the events in ``(after, upto]``, at most ``limit``, with their seqs."""
    def soft_heap_limit(self, limit: int) -> int:
        """Sets SQLite's process-wide soft heap limit; returns the limit in force."""
    def close(self) -> None:
        """Closes the connection (again: nothing)."""

@final
class JournalAppender:
    """A write connection to a journal (already created, migrated, in WAL
    mode) whose batches are inserted and committed detached from the
    interpreter, through the system's SQLite library."""

    def __new__(cls, path: str | PathLike[str]) -> JournalAppender: ...
    def append(
        self, rows: Sequence[tuple[int, str, str, str, str, str | None, str | None, str]]
    ) -> None:
        """Inserts ``rows`` (each payload with its CRC-32) in one transaction and
        commits it (durable on return); raises ``sqlite3.OperationalError``."""
    def append_processed(self, items: list[Any]) -> tuple[int, bool, str | None]:
        """Journals the StateManager's processed items (``weft.state.Processed``:
        ``seq``, ``time_ns``, ``payload``, ``stream``, ``outcome``) as ``append``
        journals their rows, the rows built here; returns their payload bytes,
        whether an applied transition ended a codon or the run or started a run,
        and the run id of the last applied ``RunStarted``."""
    def soft_heap_limit(self, limit: int) -> int:
        """Sets SQLite's process-wide soft heap limit; returns the limit in force."""
    def execute_batch(self, sql: str) -> None:
        """Runs ``sql`` (statements without results) on this connection."""
    def close(self) -> None:
        """Closes the connection (again: nothing)."""

@final
class StatCache:
    """The checkpoint index's stat data, kept in the core for the full
    comparison of the work tree (a walk by folder descriptor on threads)."""

    def __init__(self) -> None: ...
    def __len__(self) -> int: ...
    def load(
        self,
        entries: list[tuple[bytes, int, bytes, int, int, int, int, int, int]],
        taken_ns: int,
    ) -> None:
        """Replace the contents with index entries ``(path, mode, sha, ino,
        size, mtime_s, mtime_ns, ctime_s, ctime_ns)`` whose stat data was taken
        at or after ``taken_ns``."""
    def set(
        self, path: bytes, mode: int, sha: bytes, stat: tuple[int, int, int, int], taken_ns: int
    ) -> None:
        """Record ``path`` as ``(mode, sha)`` with ``stat`` = (inode, size,
        mtime ns, ctime ns) taken at or after ``taken_ns``."""
    def remove(self, path: bytes) -> None:
        """Forget ``path`` (nothing if it is not held)."""
    def racy_paths(self) -> list[str]:
        """The held paths whose stat alone cannot vouch for their content."""
    def scan(
        self, root: str, roots: list[bytes], threads: int
    ) -> tuple[list[str], list[str], list[str], list[str]]:
        """Compare the work tree at ``root`` under ``roots`` (``b""`` is all;
        empty parts and nested roots are dropped):
        ``(changed, gone, untracked, untracked_dirs)``."""

# ---- seed 004: workstreams, steps, circuit breakers -------------------------

def retry_delay_ms(
    retry_count: int, *, base_delay_ms: int = 1000, max_delay_ms: int = 60000
) -> int:
    """``min(base_delay_ms * 2**retry_count, max_delay_ms)``: the wait before the next retry."""

def circuit_open_message(retry_in_ms: int) -> str:
    """The seed's text for a refused request: ``circuit is open, retry in 58 seconds``."""

@final
class Workstream:
    """A seed-004 workstream; a refused move raises ``InvalidTransitionError``, changes nothing."""

    def __new__(
        cls, max_retries: int = 0, *, base_delay_ms: int = 1000, max_delay_ms: int = 60000
    ) -> Workstream: ...
    @staticmethod
    def restore(
        state: str,
        *,
        max_retries: int = 0,
        retry_count: int = 0,
        retry_ready_at_ms: int | None = None,
        base_delay_ms: int = 1000,
        max_delay_ms: int = 60000,
    ) -> Workstream:
        """A workstream rebuilt from stored values through the machine's own transitions."""
    @property
    def state(self) -> str: ...
    @property
    def is_terminal(self) -> bool: ...
    @property
    def retry_count(self) -> int: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def base_delay_ms(self) -> int: ...
    @property
    def max_delay_ms(self) -> int: ...
    @property
    def retry_ready_at_ms(self) -> int | None: ...
    @property
    def retry_eligible(self) -> bool: ...
    def valid_targets(self) -> list[str]:
        """Targets the seed's table allows from the current state, guards aside."""
    def transition(self, to: str, step_states: Iterable[str] = ..., *, now_ms: int = 0) -> None:
        """Move to ``to`` or raise ``InvalidTransitionError``."""
    def __copy__(self) -> Workstream: ...

@final
class Step:
    """A seed-004 step; a refused move raises ``InvalidTransitionError``, changes nothing."""

    def __new__(
        cls,
        max_retries: int = 0,
        *,
        expected_exit_codes: Iterable[int] = ...,
        base_delay_ms: int = 1000,
        max_delay_ms: int = 60000,
    ) -> Step: ...
    @staticmethod
    def restore(
        state: str,
        *,
        max_retries: int = 0,
        retry_count: int = 0,
        retry_ready_at_ms: int | None = None,
        expected_exit_codes: Iterable[int] = ...,
        base_delay_ms: int = 1000,
        max_delay_ms: int = 60000,
    ) -> Step:
        """A step rebuilt from stored values through the machine's own transitions."""
    @property
    def state(self) -> str: ...
    @property
    def is_terminal(self) -> bool: ...
    @property
    def blocks_dependents(self) -> bool: ...
    @property
    def retry_count(self) -> int: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def expected_exit_codes(self) -> list[int]: ...
    @property
    def base_delay_ms(self) -> int: ...
    @property
    def max_delay_ms(self) -> int: ...
    @property
    def retry_ready_at_ms(self) -> int | None: ...
    @property
    def retry_eligible(self) -> bool: ...
    def valid_targets(self) -> list[str]:
        """Targets the seed's table allows from the current state, guards aside."""
    def exit_target(self, exit_code: int | None) -> str:
        """The state a run ending with ``exit_code`` leads to; changes nothing."""
    def finish(self, exit_code: int | None) -> str:
        """``S_RUNNING -> exit_target(exit_code)``; returns the new state."""
    def transition(
        self,
        to: str,
        *,
        dependency_states: Iterable[str] = ...,
        exit_code: int | None = None,
        now_ms: int = 0,
    ) -> None:
        """Move to ``to`` or raise ``InvalidTransitionError``."""
    def __copy__(self) -> Step: ...

@final
class CircuitBreaker:
    """A seed-004 circuit breaker for one tool or provider (``CLOSED``, ``OPEN``, ``HALF_OPEN``)."""

    def __new__(
        cls, *, failure_threshold: int = 5, cooldown_ms: int = 60000, success_threshold: int = 1
    ) -> CircuitBreaker: ...
    @staticmethod
    def restore(
        state: str,
        *,
        consecutive_failures: int = 0,
        half_open_successes: int = 0,
        opened_at_ms: int | None = None,
        probe_started_at_ms: int | None = None,
        failure_threshold: int = 5,
        cooldown_ms: int = 60000,
        success_threshold: int = 1,
    ) -> CircuitBreaker:
        """A breaker rebuilt from stored values through the machine's own calls."""
    @property
    def state(self) -> str: ...
    @property
    def consecutive_failures(self) -> int: ...
    @property
    def half_open_successes(self) -> int: ...
    @property
    def opened_at_ms(self) -> int | None: ...
    @property
    def probe_in_flight(self) -> bool: ...
    @property
    def failure_threshold(self) -> int: ...
    @property
    def cooldown_ms(self) -> int: ...
    @property
    def success_threshold(self) -> int: ...
    def allow_request(self, now_ms: int) -> int | None:
        """``None`` if a request may go now; otherwise the milliseconds to wait."""
    def record_success(self, now_ms: int) -> None:
        """Report that an allowed request succeeded."""
    def record_failure(self, now_ms: int) -> None:
        """Report that an allowed request failed."""
    def reset(self) -> None:
        """Force ``CLOSED`` with all counters cleared (Recovery 3)."""
    def __copy__(self) -> CircuitBreaker: ...
