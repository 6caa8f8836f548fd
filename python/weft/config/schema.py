"""The hank file as msgspec Structs: the one definition of its shape.

Everything else about hank files derives from these classes: the JSON
Schema that ``weft schema`` prints (:func:`json_schema`), the structural
walk that reports every problem of a document at once
(:mod:`weft.config.walk`), and the typed objects the loader returns.

Python attributes are snake_case; the JSON names are exactly those of the
reference runtime's hank files (camelCase), so hank files written for it load
unchanged. Optional fields are written by leaving them out: ``null`` is not a
value for them (as in the reference, whose schema rejects it). Lists and
maps default to empty, so consumers can iterate without checks.

Structured sentinel output is described by JSON Schema (inline ``schema``,
``schemaStr`` holding JSON Schema text, or a ``schemaFile``), never by code.

Why one module of over 600 lines: it is the reference for the file format.
Every Struct here is a piece of one document, and a reader checking a field
against the reference runtime's schema should find the whole shape in one
place, in document order, rather than follow imports.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from weft.config.ids import ID_PATTERN, MAX_ID_LENGTH, SENTINEL_ID_PATTERN

__all__ = [
    "AnyRigOp",
    "ArchivePath",
    "Codon",
    "CodonBudget",
    "CommandOp",
    "Condition",
    "ContainerBudget",
    "ContextExceeded",
    "Conversational",
    "CopyOp",
    "CopySpec",
    "CountExecution",
    "DebounceExecution",
    "ErrorHandling",
    "EventTrigger",
    "Hank",
    "HankItem",
    "HankMeta",
    "ImmediateExecution",
    "InterestFilter",
    "IterationLimit",
    "LlmParams",
    "Loop",
    "MaxTokensTrimming",
    "MaxTurnsTrimming",
    "OutputFiles",
    "OutputPaths",
    "Overrides",
    "PatternStep",
    "Refs",
    "ReportToWebsocket",
    "Requirements",
    "RetryConfig",
    "RigCommand",
    "SentinelConfig",
    "SentinelEntry",
    "SentinelExecution",
    "SentinelOutput",
    "SentinelSettings",
    "SentinelSystemSettings",
    "SentinelTrigger",
    "SequenceOptions",
    "SequenceTrigger",
    "ShellCommand",
    "ShellCommandSpec",
    "StructuredOutput",
    "TerminateOn",
    "TimeWindowExecution",
    "TrimmingStrategy",
    "json_schema",
]

NonEmpty = Annotated[str, Meta(min_length=1)]
Ref = Annotated[
    str,
    Meta(
        min_length=1,
        description="A path relative to the hank file's directory; it must stay inside it.",
    ),
]
Refs = Ref | list[Ref]
"""One file reference or several (joined with a blank line)."""
ArchivePath = Annotated[
    str,
    Meta(
        min_length=1,
        description="A path relative to the agent's workspace (no '..', no leading '/').",
    ),
]
PositiveNumber = Annotated[float, Meta(gt=0)]
PositiveInt = Annotated[int, Meta(gt=0)]
ShimIdleTimeout = Annotated[
    int,
    Meta(ge=1, le=1800, description="Seconds without agent output before the session is ended."),
]


class _Object(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every hank-file object: strict, immutable, keyword-only."""


class _Camel(_Object, rename="camel", frozen=True, kw_only=True):
    """An object whose JSON names are the camelCase form of its attributes."""


# --------------------------------------------------------------------------- commands


class RigCommand(_Camel, frozen=True, kw_only=True):
    """The shell command of a rig ``command`` operation."""

    run: Annotated[str, Meta(min_length=1, description="Shell command to execute.")]
    working_directory: Annotated[
        Literal["project", "lastCopied"],
        Meta(
            description=(
                "Where the command runs: 'project' (the agent's workspace) or 'lastCopied' "
                "(the target of the last copy operation)."
            )
        ),
    ] = "project"


class ShellCommandSpec(_Camel, frozen=True, kw_only=True):
    """The shell command of a ``beforeCopy`` step."""

    run: Annotated[str, Meta(min_length=1, description="Shell command to execute.")]
    working_directory: Literal["project"] = "project"


class CopySpec(_Object, frozen=True, kw_only=True):
    """Source and target of a rig ``copy`` operation."""

    from_: Annotated[
        str,
        Meta(
            min_length=1,
            description="Source file or directory, relative to the hank file's directory.",
        ),
    ] = msgspec.field(name="from")
    to: Annotated[
        str,
        Meta(
            min_length=1,
            description=(
                "Target path relative to the agent's workspace (full path including the name)."
            ),
        ),
    ]


class CopyOp(_Camel, tag_field="type", tag="copy", frozen=True, kw_only=True):
    """Rig operation: copy a file or directory from the hank into the workspace."""

    copy: CopySpec
    allow_failure: Annotated[
        bool, Meta(description="If true, a failure of this operation does not fail the codon.")
    ] = False


class CommandOp(_Camel, tag_field="type", tag="command", frozen=True, kw_only=True):
    """Rig operation: run a shell command in the workspace before the agent starts."""

    command: RigCommand
    allow_failure: Annotated[
        bool, Meta(description="If true, a failure of this operation does not fail the codon.")
    ] = False


AnyRigOp = CopyOp | CommandOp


class ShellCommand(_Camel, tag_field="type", tag="command", frozen=True, kw_only=True):
    """A command run in the workspace before output files are copied."""

    command: ShellCommandSpec


class OutputFiles(_Camel, frozen=True, kw_only=True):
    """Files copied from the workspace to the output directory when the codon succeeds."""

    copy: Annotated[
        list[str],
        Meta(min_length=1, description="Glob patterns, relative to the agent's workspace."),
    ]
    before_copy: Annotated[list[ShellCommand], Meta(description="Commands run before copying.")] = (
        msgspec.field(default_factory=list)
    )


# --------------------------------------------------------------------------- budgets


class RetryConfig(_Camel, frozen=True, kw_only=True):
    """Retries of a codon whose ``onFailure`` is ``retry``.

    The delay before attempt n is ``delayMs * 2**n``, capped at ``maxDelayMs``.
    """

    max_attempts: Annotated[int, Meta(ge=1, le=10)] = 3
    delay_ms: Annotated[int, Meta(ge=0, le=60000)] = 1000
    max_delay_ms: Annotated[int, Meta(ge=0, le=600000)] = 60000


class CodonBudget(_Camel, frozen=True, kw_only=True):
    """Caps on one codon (per iteration inside a loop)."""

    max_dollars: Annotated[PositiveNumber, Meta(description="Cost cap in USD.")] | None = None
    max_time_seconds: (
        Annotated[PositiveNumber, Meta(description="Wall-clock cap in seconds.")] | None
    ) = None
    max_output_tokens: PositiveInt | None = None
    max_context_tokens: PositiveInt | None = None
    on_exceeded: (
        Annotated[
            Literal["complete", "fail"],
            Meta(description="'complete' ends the codon as completed; 'fail' fails it."),
        ]
        | None
    ) = None


class ContainerBudget(_Camel, frozen=True, kw_only=True):
    """A budget shared by children: the whole run (``overrides.budget``) or a loop."""

    max_dollars: Annotated[PositiveNumber, Meta(description="Cost budget in USD.")] | None = None
    max_time_seconds: (
        Annotated[PositiveNumber, Meta(description="Wall-clock budget in seconds.")] | None
    ) = None
    max_tokens: (
        Annotated[
            PositiveInt,
            Meta(
                description=(
                    "Token budget: every token of every attempt (input, output, cache writes "
                    "and reads), for subscriptions that are never charged dollars."
                )
            ),
        ]
        | None
    ) = None
    allocation: Annotated[
        Literal["shared", "proportional", "proportional-strict"],
        Meta(
            description=(
                "'shared': first come, first served; 'proportional': each child gets a share, "
                "unspent money flows back; 'proportional-strict': shares are hard caps."
            )
        ),
    ] = "shared"
    shares: (
        Annotated[
            dict[str, Annotated[float, Meta(gt=0, le=1)]],
            Meta(description="Fraction of the dollar budget per child id (needs proportional*)."),
        ]
        | None
    ) = None
    on_exceeded: Literal["complete", "fail"] | None = None


# --------------------------------------------------------------------------- sentinels


class Condition(_Object, frozen=True, kw_only=True):
    """A test on a dotted path into an event's data.

    ``in``/``notIn`` take a list of strings or numbers; ``contains``/``matches``
    a string (``matches`` a regular expression); ``greaterThan``/``lessThan``
    a number; ``equals``/``notEquals`` a string, number, boolean or null.
    """

    path: Annotated[str, Meta(min_length=1, description="Dotted path into event.data.")]
    operator: Literal[
        "equals",
        "notEquals",
        "in",
        "notIn",
        "contains",
        "matches",
        "greaterThan",
        "lessThan",
    ]
    value: str | int | float | bool | list[str | int | float] | None


class EventTrigger(_Object, tag_field="type", tag="event", frozen=True, kw_only=True):
    """Fire on events of the given types (``*`` for any) that meet every condition."""

    on: Annotated[list[NonEmpty], Meta(min_length=1)]
    conditions: list[Condition] = msgspec.field(default_factory=list)


class InterestFilter(_Object, frozen=True, kw_only=True):
    """The event types a sequence trigger looks at."""

    on: Annotated[list[NonEmpty], Meta(min_length=1)]


class PatternStep(_Object, frozen=True, kw_only=True):
    """One step of a sequence pattern."""

    type: NonEmpty
    conditions: list[Condition] = msgspec.field(default_factory=list)


class SequenceOptions(_Object, frozen=True, kw_only=True):
    """Options of a sequence trigger."""

    consecutive: bool = True
    """The pattern must match the last events of interest in a row (the
    reference's default); false matches it as a subsequence."""


class SequenceTrigger(_Camel, tag_field="type", tag="sequence", frozen=True, kw_only=True):
    """Fire when the events of interest match the pattern in order."""

    interest_filter: InterestFilter
    pattern: Annotated[list[PatternStep], Meta(min_length=1)]
    options: SequenceOptions | None = None


SentinelTrigger = EventTrigger | SequenceTrigger


class ImmediateExecution(_Object, tag_field="strategy", tag="immediate", frozen=True, kw_only=True):
    """Call the model on every trigger."""


class DebounceExecution(_Object, tag_field="strategy", tag="debounce", frozen=True, kw_only=True):
    """Call the model once the triggers have been quiet for ``milliseconds``."""

    milliseconds: Annotated[int, Meta(gt=0, le=300000)]


class CountExecution(_Object, tag_field="strategy", tag="count", frozen=True, kw_only=True):
    """Call the model every ``threshold`` triggers."""

    threshold: Annotated[int, Meta(gt=0, le=1000)]


class TimeWindowExecution(
    _Object, tag_field="strategy", tag="timeWindow", frozen=True, kw_only=True
):
    """Call the model at most once per window of ``milliseconds``."""

    milliseconds: Annotated[int, Meta(gt=0, le=3600000)]


SentinelExecution = ImmediateExecution | DebounceExecution | CountExecution | TimeWindowExecution


class MaxTurnsTrimming(_Camel, tag_field="type", tag="maxTurns", frozen=True, kw_only=True):
    """Keep the last ``maxTurns`` turns of the conversation."""

    max_turns: Annotated[int, Meta(gt=0, le=100)]


class MaxTokensTrimming(_Camel, tag_field="type", tag="maxTokens", frozen=True, kw_only=True):
    """Keep the conversation under ``maxTokens`` tokens."""

    max_tokens: Annotated[int, Meta(gt=0, le=100000)]


TrimmingStrategy = MaxTurnsTrimming | MaxTokensTrimming


class Conversational(_Camel, frozen=True, kw_only=True):
    """Keep a conversation history across triggers (needs a system prompt)."""

    trimming_strategy: TrimmingStrategy
    continue_on_error: bool = False


class ErrorHandling(_Camel, frozen=True, kw_only=True):
    """When a failing sentinel is unloaded."""

    max_consecutive_failures: Annotated[int, Meta(ge=1)] = 3
    unload_on_fatal_error: bool = True


class LlmParams(_Camel, frozen=True, kw_only=True):
    """Parameters of the sentinel's model calls."""

    temperature: Annotated[float, Meta(ge=0, le=2)] = 0.0
    max_output_tokens: Annotated[int, Meta(gt=0, le=100000)] = 8192
    max_retries: Annotated[int, Meta(ge=0, le=5)] = 2
    provider_options: dict[str, dict[str, Any]] | None = None


class StructuredOutput(_Camel, frozen=True, kw_only=True):
    """Structured sentinel output, described by JSON Schema (never by code).

    ``object``/``array`` need exactly one of ``schema`` (inline JSON Schema),
    ``schemaStr`` (JSON Schema as JSON text) or ``schemaFile`` (a ``.json``
    file); ``enum`` needs ``enumValues``.
    """

    output: Literal["object", "array", "enum"]
    schema: dict[str, Any] | None = None
    schema_str: (
        Annotated[str, Meta(description="A JSON Schema as JSON text (Zod code is refused).")] | None
    ) = None
    schema_file: Ref | None = None
    enum_values: Annotated[list[str], Meta(min_length=1)] | None = None
    schema_name: str | None = None
    schema_description: str | None = None


class ReportToWebsocket(_Object, frozen=True, kw_only=True):
    """Which sentinel events are sent to clients. A field not given (None) is
    the sentinel config's, else the default: lifecycle, errors and outputs
    on, triggers off (a codon's settings are merged field by field over the
    config, as in the reference)."""

    lifecycle: bool | None = None
    errors: bool | None = None
    outputs: bool | None = None
    triggers: bool | None = None


class SentinelOutput(_Camel, frozen=True, kw_only=True):
    """Where the sentinel writes."""

    format: Literal["text", "json", "jsonl"] | None = None
    file: str | None = None
    last_value_file: str | None = None


class SentinelConfig(_Camel, frozen=True, kw_only=True):
    """A sentinel: an LLM observer of a codon's events."""

    id: Annotated[str, Meta(min_length=1, max_length=MAX_ID_LENGTH, pattern=SENTINEL_ID_PATTERN)]
    name: NonEmpty
    description: str | None = None
    model: Annotated[str, Meta(min_length=1, description="A full provider/model id.")]
    trigger: SentinelTrigger
    execution: SentinelExecution
    system_prompt_file: Refs | None = None
    system_prompt_text: str | None = None
    user_prompt_file: Refs | None = None
    user_prompt_text: str | None = None
    conversational: Conversational | None = None
    error_handling: ErrorHandling | None = None
    llm_params: LlmParams | None = None
    structured_output: StructuredOutput | None = None
    join_string: (
        Annotated[str, Meta(description="Separator of text outputs (default '\\n---\\n').")] | None
    ) = None
    report_to_websocket: ReportToWebsocket | None = None
    output: SentinelOutput | None = None


class OutputPaths(_Camel, frozen=True, kw_only=True):
    """Per-codon output paths of a sentinel (they win over the config's)."""

    log_file: str | None = None
    last_value_file: str | None = None


class SentinelSettings(_Camel, frozen=True, kw_only=True):
    """Codon-specific settings of a sentinel."""

    fail_codon_if_not_loaded: Annotated[
        bool, Meta(description="A sentinel that cannot load fails the codon.")
    ] = False
    output_paths: OutputPaths | None = None
    report_to_websocket: ReportToWebsocket | None = None


class SentinelEntry(_Camel, frozen=True, kw_only=True):
    """A sentinel attached to a codon: its config (a file or inline) and settings."""

    sentinel_config: Annotated[
        Ref | SentinelConfig,
        Meta(description="Path to a sentinel config JSON file, or the config inline."),
    ]
    settings: SentinelSettings | None = None


# --------------------------------------------------------------------------- codons and loops


class Codon(_Camel, tag_field="type", tag="codon", frozen=True, kw_only=True):
    """One agent session: a prompt, a model, how it continues, and what surrounds it.

    ``type`` may be left out (it defaults to ``codon``).
    """

    id: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=MAX_ID_LENGTH,
            pattern=ID_PATTERN,
            description="Unique across the hank, loops included; one safe file-name component.",
        ),
    ]
    name: Annotated[str, Meta(min_length=1, description="Shown in the UI and logs.")]
    description: str | None = None
    model: Annotated[
        str,
        Meta(
            min_length=1,
            description=(
                "sonnet, opus, haiku, claude-..., gpt-..., gemini-..., provider/model, or "
                "fake/<model>. May be left out when overrides.model is set (the loader fills "
                "it in, so a loaded codon always has one)."
            ),
        ),
    ]
    continuation_mode: Annotated[
        Literal["fresh", "continue-previous"],
        Meta(
            description=(
                "'fresh' starts a new agent session; 'continue-previous' resumes the previous "
                "codon's session (same model required)."
            )
        ),
    ]
    prompt_file: Refs | None = None
    prompt_text: str | None = None
    append_system_prompt_file: Refs | None = None
    append_system_prompt_text: str | None = None
    rig_setup: Annotated[
        list[AnyRigOp], Meta(description="Operations run before the agent starts, in order.")
    ] = msgspec.field(default_factory=list)
    checkpointed_files: Annotated[
        list[str],
        Meta(description="Globs or names, relative to the workspace, saved in each checkpoint."),
    ] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    output_files: Annotated[
        list[OutputFiles],
        Meta(description="Copy steps run when the codon succeeds and an output dir is set."),
    ] = msgspec.field(default_factory=list)
    archive_on_success: Annotated[
        list[ArchivePath],
        Meta(description="Workspace paths moved to rigArchive/ after success."),
    ] = msgspec.field(default_factory=list)
    sentinels: list[SentinelEntry] = msgspec.field(default_factory=list)
    on_failure: Literal["abort", "retry", "ignore"] = "abort"
    retry_config: RetryConfig | None = None
    exhaust_with_prompt: (
        Annotated[
            str,
            Meta(description="Resume the session with this prompt until its context is full."),
        ]
        | None
    ) = None
    max_extensions: PositiveInt = 100
    auto_compact: bool = False
    shim_idle_timeout: ShimIdleTimeout | None = None
    budget: CodonBudget | None = None


class IterationLimit(_Object, tag_field="type", tag="iterationLimit", frozen=True, kw_only=True):
    """End the loop after ``limit`` iterations."""

    limit: Annotated[int, Meta(ge=1)]


class ContextExceeded(_Object, tag_field="type", tag="contextExceeded", frozen=True, kw_only=True):
    """End the loop when a codon in it runs out of context (that codon then completes)."""


TerminateOn = IterationLimit | ContextExceeded


class Loop(_Camel, tag_field="type", tag="loop", frozen=True, kw_only=True):
    """Codons repeated until ``terminateOn`` holds. Loops do not nest."""

    id: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=MAX_ID_LENGTH,
            pattern=ID_PATTERN,
            description="Unique across the hank; one safe file-name component.",
        ),
    ]
    name: NonEmpty
    description: str | None = None
    terminate_on: TerminateOn
    codons: Annotated[list[Codon], Meta(min_length=1)]
    budget: ContainerBudget | None = None
    archive_on_success: Annotated[
        list[ArchivePath], Meta(description="Archived once, when the loop ends.")
    ] = msgspec.field(default_factory=list)


HankItem = Codon | Loop


# --------------------------------------------------------------------------- root


class HankMeta(_Object, frozen=True, kw_only=True):
    """Metadata for sharing and indexing."""

    name: NonEmpty
    version: NonEmpty
    description: str | None = None
    author: str | None = None


class SentinelSystemSettings(_Camel, frozen=True, kw_only=True):
    """Settings of the sentinel system."""

    enable_persistence: bool | None = None
    health_check_grace_period_ms: PositiveInt | None = None
    wait_for_all_health_checks: bool | None = None


class Overrides(_Camel, frozen=True, kw_only=True):
    """The hank author's runtime overrides (above weft.json, below env and CLI)."""

    model: Annotated[str, Meta(description="Default model of codons that name none.")] | None = None
    data_hash_time_limit: PositiveInt | None = None
    sentinel: SentinelSystemSettings | None = None
    shim_idle_timeout: ShimIdleTimeout | None = None
    budget: ContainerBudget | None = None


class Requirements(_Object, frozen=True, kw_only=True):
    """What must be present before the hank runs."""

    env: Annotated[
        list[NonEmpty], Meta(description="Variables that must be set (X or WEFT_X).")
    ] = msgspec.field(default_factory=list)
    tools: Annotated[list[NonEmpty], Meta(description="Programs that must be on PATH.")] = (
        msgspec.field(default_factory=list)
    )


class Hank(_Camel, frozen=True, kw_only=True):
    """A hank file: an ordered pipeline of codons and loops."""

    schema_url: Annotated[str, Meta(description="JSON Schema URL for editors.")] | None = (
        msgspec.field(default=None, name="$schema")
    )
    meta: HankMeta | None = None
    overrides: Overrides | None = None
    requirements: Requirements | None = None
    global_system_prompt_file: Refs | None = None
    global_system_prompt_text: str | None = None
    hank: Annotated[list[HankItem], Meta(min_length=1, description="The pipeline, in order.")]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of hank files, generated from the Structs.

    Adjustments keep it faithful to what the loader accepts: a codon's
    ``type`` and ``model`` may be left out (the loader fills them in), and
    optional fields do not accept ``null``.
    """
    schema: dict[str, Any] = msgspec.json.schema(Hank)
    for name, definition in schema["$defs"].items():
        properties = definition.get("properties", {})
        for prop in properties.values():
            if prop.get("default", ...) is None and "anyOf" in prop:
                del prop["default"]
                prop["anyOf"] = [t for t in prop["anyOf"] if t != {"type": "null"}]
                if len(prop["anyOf"]) == 1:
                    prop.update(prop.pop("anyOf")[0])
        if name == "Codon":
            # overrides.model (or --model) can stand in for a codon's model.
            definition["required"] = [
                r for r in definition["required"] if r not in ("type", "model")
            ]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Weft hank file",
        **schema,
    }
