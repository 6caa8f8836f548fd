"""CLI-style argument parsing: values, optional values, variadic options."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.agents.fake.argv import (
    FLAG,
    OPTIONAL,
    VALUE,
    VARIADIC,
    ArgvError,
    Option,
    parse,
    split_list,
)

OPTIONS = (
    Option("print", FLAG, "-p", "--print"),
    Option("model", VALUE, "--model"),
    Option("resume", OPTIONAL, "-r", "--resume"),
    Option("tools", VARIADIC, "--allowedTools"),
    Option("mode", VALUE, "--mode", choices=("a", "b")),
    Option("config", VALUE, "-c", repeat=True),
)


def test_values_flags_and_positionals() -> None:
    parsed = parse(["-p", "--model", "opus", "--model=haiku", "prompt"], OPTIONS)
    assert parsed.flag("print")
    assert parsed.one("model") == "haiku"
    assert parsed.positionals == ["prompt"]


def test_a_required_value_may_start_with_a_dash() -> None:
    assert parse(["--model", "-weird"], OPTIONS).one("model") == "-weird"


def test_optional_value_is_not_taken_from_an_option() -> None:
    assert parse(["--resume", "-p"], OPTIONS).one("resume") is None
    assert parse(["--resume", "-p"], OPTIONS).given("resume")
    assert parse(["--resume", "abc"], OPTIONS).one("resume") == "abc"
    assert parse(["--resume=-dash"], OPTIONS).one("resume") == "-dash"


def test_variadic_swallows_until_the_next_option() -> None:
    parsed = parse(["--allowedTools", "Bash", "Read", "the prompt", "-p"], OPTIONS)
    assert parsed.many("tools") == ["Bash", "Read", "the prompt"]
    assert parsed.positionals == []
    ended = parse(["--allowedTools", "Bash", "--", "the prompt"], OPTIONS)
    assert ended.many("tools") == ["Bash"]
    assert ended.positionals == ["the prompt"]
    single = parse(["--allowedTools=Bash", "the prompt"], OPTIONS)
    assert single.many("tools") == ["Bash"]
    assert single.positionals == ["the prompt"]


def test_repeated_values_accumulate_and_unknown_options_are_recorded() -> None:
    parsed = parse(["-c", "a=1", "-c", "b=2", "--future", "--x=y", "p"], OPTIONS)
    assert parsed.many("config") == ["a=1", "b=2"]
    assert parsed.unknown == ["--future", "--x=y"]
    assert parsed.positionals == ["p"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model"], "argument missing"),
        (["--allowedTools"], "argument missing"),
        (["--mode", "c"], "Allowed choices are a, b"),
        (["--print=yes"], "does not take an argument"),
    ],
)
def test_errors(argv: list[str], needle: str) -> None:
    with pytest.raises(ArgvError, match=needle):
        parse(argv, OPTIONS)


def test_stop_at_positional_finds_a_subcommand() -> None:
    parsed = parse(["-c", "x=1", "exec", "--json"], OPTIONS, stop_at_positional=True)
    assert parsed.rest_index == 2
    assert parsed.many("config") == ["x=1"]


def test_split_list_keeps_parenthesised_rules() -> None:
    assert split_list(["Bash(git log:*),Read", "Edit Write"]) == [
        "Bash(git log:*)",
        "Read",
        "Edit",
        "Write",
    ]


names = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8
)


@given(tools=st.lists(names, min_size=1, max_size=6), sep=st.sampled_from([",", " ", ", "]))
def test_split_list_inverts_joining(tools: list[str], sep: str) -> None:
    assert split_list([sep.join(tools)]) == tools
