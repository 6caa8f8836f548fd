"""The rules beyond the schema: continuation, loops, budgets and the warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.config.hankfiles import codon, hank, loop, write_hank

from weft.config import validate_hank
from weft.config.problems import ConfigProblem


def problems(
    tmp_path: Path, doc: dict[str, Any], files: dict[str, str | bytes] | None = None
) -> list[ConfigProblem]:
    return validate_hank(write_hank(tmp_path, doc, files), env={}).problems


def codes(found: list[ConfigProblem], severity: str | None = None) -> set[tuple[str, str]]:
    return {(p.code, p.path) for p in found if severity is None or p.severity == severity}


def test_a_clean_hank_has_no_problems(tmp_path: Path) -> None:
    doc = hank(
        codon("a"),
        codon("b", continuationMode="continue-previous"),
        loop("l", codon("c", continuationMode="continue-previous", onFailure="retry")),
        codon("d"),
    )
    assert problems(tmp_path, doc) == []


# --------------------------------------------------------------------------- continuation


def test_continue_previous_needs_the_same_model(tmp_path: Path) -> None:
    doc = hank(codon("a", model="fake/opus"), codon("b", continuationMode="continue-previous"))
    (p,) = problems(tmp_path, doc)
    assert (p.code, p.path) == ("model_mismatch", "hank[1].model")
    assert '"fake/opus"' in p.message
    assert p.hint is not None
    assert "fresh" in p.hint


def test_a_loop_opener_continues_the_codon_before_the_loop(tmp_path: Path) -> None:
    doc = hank(
        codon("a", model="fake/opus"),
        loop(
            "l",
            codon("b", continuationMode="continue-previous", onFailure="retry"),
            terminateOn={"type": "iterationLimit", "limit": 1},
        ),
    )
    assert codes(problems(tmp_path, doc), "error") == {
        ("model_mismatch", "hank[1].codons[0].model")
    }


def test_a_loop_opener_also_continues_the_loops_last_codon_on_later_iterations(
    tmp_path: Path,
) -> None:
    doc = hank(
        codon("a"),
        loop(
            "l",
            codon("b", continuationMode="continue-previous", onFailure="retry"),
            codon("c", model="fake/opus", onFailure="retry"),
        ),
    )
    found = problems(tmp_path, doc)
    assert codes(found, "error") == {("model_mismatch", "hank[1].codons[0].model")}
    assert "next iteration" in found[0].message


def test_a_single_iteration_loop_never_wraps_around(tmp_path: Path) -> None:
    doc = hank(
        codon("a"),
        loop(
            "l",
            codon("b", continuationMode="continue-previous", onFailure="retry"),
            codon("c", model="fake/opus", onFailure="retry"),
            terminateOn={"type": "iterationLimit", "limit": 1},
        ),
    )
    assert codes(problems(tmp_path, doc), "error") == set()


def test_a_loop_first_in_the_hank_cannot_open_with_continue_previous(tmp_path: Path) -> None:
    doc = hank(loop("l", codon("b", continuationMode="continue-previous", onFailure="retry")))
    assert ("no_previous", "hank[0].codons[0].continuationMode") in codes(problems(tmp_path, doc))


def test_continue_previous_after_a_loop_whose_last_codon_exhausts(tmp_path: Path) -> None:
    doc = hank(
        codon("a"),
        loop("l", codon("b", exhaustWithPrompt="go on", onFailure="retry")),
        codon("c", continuationMode="continue-previous"),
    )
    assert ("continue_after_exhaust", "hank[2].continuationMode") in codes(problems(tmp_path, doc))


def test_a_context_exceeded_loop_of_continuing_codons_then_a_fresh_one_is_valid(
    tmp_path: Path,
) -> None:
    doc = hank(
        codon("a"),
        loop(
            "l",
            codon("b", continuationMode="continue-previous", onFailure="retry"),
            codon("c", continuationMode="continue-previous", onFailure="retry"),
            terminateOn={"type": "contextExceeded"},
        ),
        codon("d"),
    )
    assert problems(tmp_path, doc) == []


# --------------------------------------------------------------------------- warnings


def test_duplicate_names_only_warn(tmp_path: Path) -> None:
    doc = hank(codon("a", name="Same"), codon("b", name="Same"))
    assert codes(problems(tmp_path, doc)) == {("duplicate_name", "hank[1].name")}


def test_rig_operations_in_loops_should_allow_failure(tmp_path: Path) -> None:
    ops = [
        {"type": "command", "command": {"run": "ls"}},
        {"type": "command", "command": {"run": "ls"}, "allowFailure": True},
    ]
    doc = hank(codon("a"), loop("l", codon("b", rigSetup=ops, onFailure="retry")))
    assert codes(problems(tmp_path, doc), "warning") == {
        ("loop_rig", "hank[1].codons[0].rigSetup[0].allowFailure")
    }


def test_abort_inside_a_loop_warns(tmp_path: Path) -> None:
    doc = hank(loop("l", codon("b"), codon("c", onFailure="ignore")))
    assert codes(problems(tmp_path, doc)) == {("loop_abort", "hank[0].codons[0].onFailure")}


def test_auto_compact_warns_where_no_cli_can_switch_it(tmp_path: Path) -> None:
    doc = hank(
        codon("a", model="fake/sonnet", autoCompact=True),
        codon("b", model="fake/gpt-5", autoCompact=True),
        codon("c", model="google/gemini-2.5-pro", autoCompact=False),
    )
    assert codes(problems(tmp_path, doc)) == {("no_effect", "hank[1].autoCompact")}


def test_sentinel_health_check_overrides_are_named_as_having_no_effect(tmp_path: Path) -> None:
    doc = hank(codon("a"))
    doc["overrides"] = {
        "sentinel": {
            "enablePersistence": False,
            "healthCheckGracePeriodMs": 5000,
            "waitForAllHealthChecks": True,
        }
    }
    assert codes(problems(tmp_path, doc), "warning") == {
        ("no_effect", "overrides.sentinel.healthCheckGracePeriodMs"),
        ("no_effect", "overrides.sentinel.waitForAllHealthChecks"),
    }
    doc["overrides"] = {"sentinel": {"healthCheckGracePeriodMs": 2000}}
    assert codes(problems(tmp_path, doc), "warning") == set()


def test_empty_and_huge_prompt_files_warn(tmp_path: Path) -> None:
    doc = hank(
        codon("a", promptText=None, promptFile="empty.md"),
        codon("b", promptText=None, promptFile="huge.md"),
    )
    for c in doc["hank"]:
        del c["promptText"]
    found = problems(tmp_path, doc, {"empty.md": "", "huge.md": b"x" * 1_000_001})
    assert codes(found, "warning") == {
        ("empty_prompt", "hank[0].promptFile"),
        ("large_prompt", "hank[1].promptFile"),
    }


@pytest.mark.parametrize(
    "run",
    [
        "rm -rf /",
        "sudo rm -rf / --no-preserve-root",
        "rm -fr ~",
        "rm -rf $HOME/",
        "cat x > /dev/sda",
        "format c:",
        "del /s /q c:\\",
    ],
)
def test_dangerous_commands_warn(tmp_path: Path, run: str) -> None:
    doc = hank(codon("a", rigSetup=[{"type": "command", "command": {"run": run}}]))
    assert codes(problems(tmp_path, doc)) == {
        ("dangerous_command", "hank[0].rigSetup[0].command.run")
    }


@pytest.mark.parametrize(
    "run", ["rm -rf build/", "rm -rf ./node_modules", "clang-format -i src/a.c", "echo /"]
)
def test_ordinary_commands_do_not_warn(tmp_path: Path, run: str) -> None:
    doc = hank(codon("a", rigSetup=[{"type": "command", "command": {"run": run}}]))
    assert problems(tmp_path, doc) == []


def test_before_copy_commands_are_checked_too(tmp_path: Path) -> None:
    step = {"copy": ["out/**"], "beforeCopy": [{"type": "command", "command": {"run": "rm -rf ~"}}]}
    doc = hank(codon("a", outputFiles=[step]))
    assert codes(problems(tmp_path, doc)) == {
        ("dangerous_command", "hank[0].outputFiles[0].beforeCopy[0].command.run")
    }


def test_continuing_after_an_ignorable_failure_warns(tmp_path: Path) -> None:
    doc = hank(codon("a", onFailure="ignore"), codon("b", continuationMode="continue-previous"))
    assert codes(problems(tmp_path, doc)) == {("continue_after_ignore", "hank[1].continuationMode")}


def test_continuing_a_codon_without_checkpointed_files_warns(tmp_path: Path) -> None:
    doc = hank(codon("a", checkpointedFiles=[]), codon("b", continuationMode="continue-previous"))
    assert codes(problems(tmp_path, doc)) == {
        ("previous_without_checkpoints", "hank[1].continuationMode")
    }


def test_both_global_prompt_forms_warn_that_text_wins(tmp_path: Path) -> None:
    doc = hank(globalSystemPromptFile="g.md", globalSystemPromptText="x")
    (p,) = problems(tmp_path, doc, {"g.md": "global"})
    assert (p.code, p.severity) == ("both_forms", "warning")
    assert "text wins" in p.message


def test_budget_warnings(tmp_path: Path) -> None:
    doc = hank(
        codon("a", exhaustWithPrompt="more", budget={"maxTimeSeconds": 60}),
        codon("b", onFailure="retry", budget={"onExceeded": "fail"}),
        loop(
            "l",
            codon("c", onFailure="retry", budget={"maxDollars": 9, "maxTimeSeconds": 999}),
            budget={"maxDollars": 5, "maxTimeSeconds": 100},
        ),
    )
    assert codes(problems(tmp_path, doc), "warning") == {
        ("budget", "hank[0].budget.maxTimeSeconds"),
        ("budget", "hank[1].budget.onExceeded"),
        ("budget", "hank[2].budget.maxDollars"),
        ("budget", "hank[2].budget.maxTimeSeconds"),
    }


def test_proportional_shares_of_real_children_are_valid(tmp_path: Path) -> None:
    budget = {"maxDollars": 10, "allocation": "proportional", "shares": {"a": 0.5, "l": 0.5}}
    doc = hank(codon("a"), loop("l", codon("b", onFailure="retry")), overrides={"budget": budget})
    assert problems(tmp_path, doc) == []


def test_a_loop_budget_shares_its_own_codons(tmp_path: Path) -> None:
    budget = {"maxDollars": 4, "allocation": "proportional-strict", "shares": {"a": 0.5}}
    doc = hank(codon("a"), loop("l", codon("b", onFailure="retry"), budget=budget))
    assert codes(problems(tmp_path, doc)) == {("budget", "hank[1].budget.shares.a")}


@pytest.mark.parametrize("target", [".", "./", "read_only_data_source", ".weft/x", ".git"])
def test_archive_on_success_may_not_move_the_workspace_the_data_or_state(
    tmp_path: Path, target: str
) -> None:
    doc = hank(codon("a", archiveOnSuccess=["ok", target]))
    assert codes(problems(tmp_path, doc)) == {("bad_value", "hank[0].archiveOnSuccess[1]")}
