"""Command-line parsing that behaves like the real CLIs' parsers.

Claude Code uses commander.js, Codex clap, Gemini yargs. What matters for
the tests is shared: ``--name value`` and ``--name=value``; options whose
value is optional (``--resume [id]``) take the next word only when it does
not start with ``-``; and **variadic** options (``--allowedTools <tools...>``)
swallow every following word up to the next option, so a prompt placed after
them becomes a tool name. ``--`` ends the options. Unknown options are
accepted and recorded, as §7.1 asks.
"""

from __future__ import annotations

from collections.abc import Sequence

FLAG = "flag"
VALUE = "value"
OPTIONAL = "optional"
VARIADIC = "variadic"


class ArgvError(Exception):
    """The command line does not parse; the message is the CLI's own style."""


class Option:
    """One option: its destination, kind and spellings."""

    __slots__ = ("choices", "dest", "kind", "names", "repeat")

    def __init__(
        self,
        dest: str,
        kind: str,
        *names: str,
        choices: Sequence[str] | None = None,
        repeat: bool = False,
    ) -> None:
        self.dest = dest
        self.kind = kind
        self.names = names
        self.choices = tuple(choices) if choices else None
        self.repeat = repeat

    @property
    def label(self) -> str:
        """How error messages name the option: ``--model <value>``."""
        shape = {
            FLAG: "",
            VALUE: " <value>",
            OPTIONAL: " [value]",
            VARIADIC: " <values...>",
        }[self.kind]
        return ", ".join(self.names) + shape


class Parsed:
    """The result of parsing: option values, positionals, unknown options."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.positionals: list[str] = []
        self.unknown: list[str] = []
        self.rest_index: int | None = None
        """With ``stop_at_positional``: the index of the first positional."""

    def flag(self, dest: str) -> bool:
        """Whether a flag was given."""
        return self.values.get(dest) is True

    def one(self, dest: str) -> str | None:
        """A single-valued option (the last one given wins)."""
        value = self.values.get(dest)
        if isinstance(value, list):
            return str(value[-1]) if value else None
        return value if isinstance(value, str) else None

    def given(self, dest: str) -> bool:
        """Whether the option appeared at all (``--resume`` with no value too)."""
        return dest in self.values

    def many(self, dest: str) -> list[str]:
        """All values of a variadic or repeatable option."""
        value = self.values.get(dest)
        if isinstance(value, list):
            return [str(v) for v in value]
        if isinstance(value, str):
            return [value]
        return []


def parse(
    argv: Sequence[str], options: Sequence[Option], *, stop_at_positional: bool = False
) -> Parsed:
    """Parse ``argv`` (without the program name) against ``options``."""
    table: dict[str, Option] = {}
    for spec in options:
        for name in spec.names:
            table[name] = spec
    parsed = Parsed()
    i = 0
    n = len(argv)
    while i < n:
        word = argv[i]
        if word == "--":
            parsed.positionals.extend(argv[i + 1 :])
            break
        if not word.startswith("-") or word == "-" or _is_number(word):
            if stop_at_positional:
                parsed.rest_index = i
                return parsed
            parsed.positionals.append(word)
            i += 1
            continue
        name, eq, inline = word.partition("=")
        option = table.get(name)
        if option is None:
            parsed.unknown.append(word)
            i += 1
            continue
        i += 1
        if option.kind == FLAG:
            if eq:
                raise ArgvError(f"error: option '{option.label}' does not take an argument")
            parsed.values[option.dest] = True
            continue
        if option.kind == VALUE:
            if eq:
                value = inline
            elif i < n:
                value = argv[i]
                i += 1
            else:
                raise ArgvError(f"error: option '{option.label}' argument missing")
            _check_choice(option, value)
            _store(parsed, option, value)
            continue
        if option.kind == OPTIONAL:
            if eq:
                parsed.values[option.dest] = inline
            elif i < n and not argv[i].startswith("-"):
                parsed.values[option.dest] = argv[i]
                i += 1
            else:
                parsed.values[option.dest] = None
            continue
        # Variadic: everything up to the next word that looks like an option.
        taken: list[str] = []
        if eq:
            taken.append(inline)
        else:
            while i < n and (not argv[i].startswith("-") or argv[i] == "-"):
                taken.append(argv[i])
                i += 1
        if not taken:
            raise ArgvError(f"error: option '{option.label}' argument missing")
        previous = parsed.values.get(option.dest)
        merged = list(previous) if isinstance(previous, list) else []
        parsed.values[option.dest] = merged + taken
    return parsed


def _store(parsed: Parsed, option: Option, value: str) -> None:
    if option.repeat:
        previous = parsed.values.get(option.dest)
        merged = list(previous) if isinstance(previous, list) else []
        merged.append(value)
        parsed.values[option.dest] = merged
    else:
        parsed.values[option.dest] = value


def _check_choice(option: Option, value: str) -> None:
    if option.choices is not None and value not in option.choices:
        raise ArgvError(
            f"error: option '{option.label}' argument '{value}' is invalid. "
            f"Allowed choices are {', '.join(option.choices)}."
        )


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def split_list(values: Sequence[str]) -> list[str]:
    """Split tool lists the way Claude Code does: on commas and spaces, but
    not inside parentheses (``Bash(git log:*)`` stays one entry)."""
    out: list[str] = []
    for value in values:
        depth = 0
        current = ""
        for char in value:
            if char == "(":
                depth += 1
            elif char == ")":
                depth = max(0, depth - 1)
            if char in ", " and depth == 0:
                if current:
                    out.append(current)
                current = ""
            else:
                current += char
        if current:
            out.append(current)
    return out
