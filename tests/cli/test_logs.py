"""``weft logs`` and ``weft show CODON``: what the agents said, read from the journal."""

from __future__ import annotations

import json
from typing import Any

from tests.cli.test_executions import made, weft, world  # noqa: F401  (fixtures)


def test_logs_print_each_codons_messages_oldest_first(world: dict[str, Any]) -> None:  # noqa: F811
    done = weft("logs", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr
    heads = [line for line in done.stdout.splitlines() if line.startswith("── ")]
    assert [h.split()[1] for h in heads] == ["a", "b"]
    assert "Work on a." in done.stdout
    assert "> " not in done.stdout  # tool calls only with --tools


def test_logs_as_json_lines_filtered_by_run(world: dict[str, Any]) -> None:  # noqa: F811
    lines = weft("logs", "--json", "--tools", env=world["env"], cwd=world["project"])
    events = [json.loads(line) for line in lines.stdout.splitlines()]
    assert events
    assert {e["type"] for e in events} <= {"assistant.action", "tool.result"}
    run_id = events[0]["runId"]
    same = weft("logs", "--run", run_id, "--json", env=world["env"], cwd=world["project"])
    assert same.stdout.strip()
    other = weft("logs", "--run", "nope", "--json", env=world["env"], cwd=world["project"])
    assert other.stdout == ""


def test_show_prints_one_codons_record_then_its_messages(world: dict[str, Any]) -> None:  # noqa: F811
    done = weft("show", "b", world["execution"], env=world["env"], cwd=world["project"].parent)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("b  run ")
    assert "completed" in first
    assert "Work on b." in done.stdout
    assert "Work on a." not in done.stdout


def test_show_of_a_codon_that_never_ran_names_those_that_did(world: dict[str, Any]) -> None:  # noqa: F811
    done = weft("show", "zzz", env=world["env"], cwd=world["project"])
    assert done.returncode == 2
    assert "codon 'zzz' has not run in this execution (codons that ran: a, b)" in done.stderr
