"""``fake-claude``'s command line: the options it accepts, the checks the real
CLI makes before a run, and the model an alias resolves to."""

from __future__ import annotations

import json
import os
import re

from weft.agents.fake.argv import FLAG, OPTIONAL, VALUE, VARIADIC, ArgvError, Option, split_list
from weft.agents.fake.argv import parse as parse_argv
from weft.agents.fake.claude_tools import TOOLS_2_1_330
from weft.agents.fake.common import CliError, FakeConfigError, JsonObj, Settings
from weft.agents.fake.pricing import ALIASES, LEGACY_ALIASES

PERMISSION_MODES = ("acceptEdits", "bypassPermissions", "default", "delegate", "dontAsk", "plan")

OPTIONS = (
    Option("print", FLAG, "-p", "--print"),
    Option("output_format", VALUE, "--output-format", choices=("text", "json", "stream-json")),
    Option("input_format", VALUE, "--input-format", choices=("text", "stream-json")),
    Option("verbose", FLAG, "--verbose"),
    Option("partial", FLAG, "--include-partial-messages"),
    Option("replay", FLAG, "--replay-user-messages"),
    Option("model", VALUE, "--model"),
    Option("fallback_model", VALUE, "--fallback-model"),
    Option("append_system_prompt", VALUE, "--append-system-prompt"),
    Option("append_system_prompt_file", VALUE, "--append-system-prompt-file"),
    Option("system_prompt", VALUE, "--system-prompt"),
    Option("system_prompt_file", VALUE, "--system-prompt-file"),
    Option("permission_mode", VALUE, "--permission-mode", choices=PERMISSION_MODES),
    Option("skip_permissions", FLAG, "--dangerously-skip-permissions"),
    Option("allow_skip_permissions", FLAG, "--allow-dangerously-skip-permissions"),
    Option("allowed_tools", VARIADIC, "--allowedTools", "--allowed-tools"),
    Option("disallowed_tools", VARIADIC, "--disallowedTools", "--disallowed-tools"),
    Option("tools", VARIADIC, "--tools"),
    Option("add_dir", VARIADIC, "--add-dir"),
    Option("mcp_config", VARIADIC, "--mcp-config"),
    Option("betas", VARIADIC, "--betas"),
    Option("strict_mcp", FLAG, "--strict-mcp-config"),
    Option("settings", VALUE, "--settings"),
    Option("setting_sources", VALUE, "--setting-sources"),
    Option("agents", VALUE, "--agents"),
    Option("agent", VALUE, "--agent"),
    Option("plugin_dir", VALUE, "--plugin-dir", repeat=True),
    Option("max_turns", VALUE, "--max-turns"),
    Option("max_budget", VALUE, "--max-budget-usd"),
    Option("resume", OPTIONAL, "-r", "--resume"),
    Option("continue", FLAG, "-c", "--continue"),
    Option("fork", FLAG, "--fork-session"),
    Option("session_id", VALUE, "--session-id"),
    Option("no_persist", FLAG, "--no-session-persistence"),
    Option("json_schema", VALUE, "--json-schema"),
    Option("effort", VALUE, "--effort"),
    Option("disable_slash", FLAG, "--disable-slash-commands"),
    Option("permission_prompt_tool", VALUE, "--permission-prompt-tool"),
    Option("debug", OPTIONAL, "-d", "--debug"),
    Option("mcp_debug", FLAG, "--mcp-debug"),
    Option("ide", FLAG, "--ide"),
    Option("version", FLAG, "-v", "--version"),
    Option("help", FLAG, "-h", "--help"),
)

ERR_VERBOSE = "Error: When using --print, --output-format=stream-json requires --verbose"
ERR_EMPTY = (
    "Error: Input must be provided either through stdin or as a prompt argument when using --print"
)
ERR_NESTED = (
    "Error: Claude Code cannot be launched inside another Claude Code session.\n"
    "Nested sessions share runtime resources and will crash all active sessions.\n"
    "To bypass this check, unset the CLAUDECODE environment variable."
)

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

USAGE = """Usage: claude [options] [command] [prompt]

fake-claude: a stand-in for Claude Code (see docs/fake-agents.md).
Supported: -p --output-format text|json|stream-json --verbose --input-format
--model --resume[=id] --continue --fork-session --session-id
--max-turns --max-budget-usd --permission-mode --dangerously-skip-permissions
--allowedTools/--disallowedTools/--tools/--add-dir/--mcp-config (variadic)
--include-partial-messages --replay-user-messages --no-session-persistence
"""


class ClaudeOptions:
    """The parsed command line, checked."""

    def __init__(self, argv: list[str]) -> None:
        try:
            parsed = parse_argv(argv, OPTIONS)
        except ArgvError as exc:
            raise CliError(str(exc)) from None
        self.parsed = parsed
        self.unknown = parsed.unknown
        self.print = parsed.flag("print")
        self.output_format = parsed.one("output_format") or "text"
        self.input_format = parsed.one("input_format") or "text"
        self.verbose = parsed.flag("verbose")
        self.partial = parsed.flag("partial")
        self.replay = parsed.flag("replay")
        self.model_arg = parsed.one("model")
        self.resume_given = parsed.given("resume")
        self.resume = parsed.one("resume")
        self.continue_ = parsed.flag("continue")
        self.fork = parsed.flag("fork")
        self.session_id = parsed.one("session_id")
        self.no_persist = parsed.flag("no_persist")
        self.positionals = parsed.positionals
        skip = parsed.flag("skip_permissions")
        self.permission_mode = parsed.one("permission_mode") or (
            "bypassPermissions" if skip else "default"
        )
        self.allowed = split_list(parsed.many("allowed_tools"))
        self.disallowed = split_list(parsed.many("disallowed_tools"))
        self.tools_arg = split_list(parsed.many("tools")) if parsed.given("tools") else None
        self.mcp_configs = parsed.many("mcp_config")
        self.max_turns = self._positive_int("--max-turns <turns>", parsed.one("max_turns"))
        self.max_budget = self._positive_float(
            "--max-budget-usd <amount>", parsed.one("max_budget")
        )
        self.auto_compact = _auto_compact(parsed.one("settings"))
        """Claude Code compacts a full context by itself unless ``--settings``
        says ``autoCompactEnabled: false``."""

    @staticmethod
    def _positive_int(label: str, raw: str | None) -> int | None:
        if raw is None:
            return None
        if not raw.strip().isdigit() or int(raw) < 1:
            raise CliError(f"error: option '{label}' argument '{raw}' is invalid.")
        return int(raw)

    @staticmethod
    def _positive_float(label: str, raw: str | None) -> float | None:
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not value > 0:
            raise CliError(f"error: option '{label}' argument '{raw}' is invalid.")
        return value

    def tools(self, defaults: tuple[str, ...] = TOOLS_2_1_330) -> list[str]:
        """The ``tools`` list of the init line (``defaults`` unless the flags
        say otherwise)."""
        base = list(defaults)
        if self.tools_arg is not None:
            if self.tools_arg in ([], [""]):
                base = []
            elif self.tools_arg != ["default"]:
                base = [t for t in self.tools_arg if t]
        denied = {t for t in self.disallowed if "(" not in t}
        return [t for t in base if t not in denied]

    def mcp_servers(self) -> list[JsonObj]:
        """``mcp_servers`` of the init line, from ``--mcp-config``."""
        servers: list[JsonObj] = []
        for item in self.mcp_configs:
            text = item
            if not item.lstrip().startswith("{"):
                try:
                    with open(item, encoding="utf-8") as fh:
                        text = fh.read()
                except OSError as exc:
                    raise CliError(
                        f"Error: Invalid MCP configuration:\nMCP config file not found: {item}"
                    ) from exc
            try:
                doc = json.loads(text)
            except json.JSONDecodeError:
                raise CliError(
                    f"Error: Invalid MCP configuration:\nMCP config is not a valid JSON: {item}"
                ) from None
            entries = doc.get("mcpServers") if isinstance(doc, dict) else None
            if isinstance(entries, dict):
                servers.extend({"name": name, "status": "connected"} for name in entries)
        return servers


def resolve_model(arg: str | None, settings: Settings) -> str:
    """The model id the init line reports: aliases map to full ids (the 5.5
    models from 2.1.330, the 4.5 ones before)."""
    env = os.environ
    model = arg or env.get("ANTHROPIC_MODEL") or "sonnet"
    overrides = {
        "sonnet": env.get("ANTHROPIC_DEFAULT_SONNET_MODEL"),
        "opus": env.get("ANTHROPIC_DEFAULT_OPUS_MODEL"),
        "haiku": env.get("ANTHROPIC_DEFAULT_HAIKU_MODEL"),
    }
    if model in ALIASES:
        aliases = ALIASES if settings.version_at_least(2, 1, 330) else LEGACY_ALIASES
        return overrides[model] or aliases[model]
    return model


def check_options(opts: ClaudeOptions, settings: Settings) -> None:
    """The checks Claude Code makes before it starts a run."""
    if opts.unknown and settings.strict_flags:
        raise CliError(f"error: unknown option '{opts.unknown[0].split('=')[0]}'")
    if os.environ.get("CLAUDECODE") == "1" and settings.version_at_least(2, 1):
        raise CliError(ERR_NESTED)
    if not opts.print:
        raise FakeConfigError("interactive mode is not emulated; run it headless with -p (--print)")
    if opts.output_format == "stream-json" and not opts.verbose:
        raise CliError(ERR_VERBOSE)
    if opts.input_format == "stream-json" and opts.output_format != "stream-json":
        raise CliError("Error: --input-format=stream-json requires output-format=stream-json.")
    if opts.partial and opts.output_format != "stream-json":
        raise CliError(
            "Error: --include-partial-messages requires --print and --output-format=stream-json."
        )
    if opts.resume_given and not opts.resume:
        raise CliError("Error: --resume without a value requires interactive mode (no --print).")
    opts.mcp_servers()  # a bad --mcp-config fails before any output
    if opts.session_id is not None:
        if not _UUID.match(opts.session_id):
            raise CliError("Error: Invalid session ID. Must be a valid UUID.")
        if (opts.resume or opts.continue_) and not opts.fork:
            raise CliError(
                "Error: --session-id can only be used with --continue or --resume "
                "if --fork-session is also specified."
            )


def _auto_compact(settings: str | None) -> bool:
    """``autoCompactEnabled`` of ``--settings`` (JSON text or a file), default true."""
    if not settings:
        return True
    text = settings
    if not settings.lstrip().startswith("{"):
        try:
            with open(settings, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            raise CliError(f"Error: Settings file not found: {settings}") from None
    try:
        doc = json.loads(text)
    except ValueError:
        raise CliError("Error: Invalid JSON provided to --settings") from None
    return not (isinstance(doc, dict) and doc.get("autoCompactEnabled") is False)
