"""The plan a resume follows with a changed hank (weft.runtime.run.replan), on plans and states
built from real hanks: what ran must open the new hank unchanged; the rest follows it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tests.runtime.hanks import codon, loop, write_hank

from weft.config.loader import load_hank
from weft.config.schema import Hank
from weft.events.transitions import PlanExtended, PlanTrimmed
from weft.plan import ExecutionPlan
from weft.runtime.run.replan import PrefixChangedError, replan


def hank_of(tmp_path: Path, *items: dict[str, Any]) -> Hank:
    return load_hank(write_hank(tmp_path / "h", *items), check_environment=False).hank


def state_of(
    plan: ExecutionPlan, finished: list[str], failed: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A state document whose plan is ``plan``, ``finished`` completed and ``failed`` failed."""
    codons = [{"codonId": c, "status": "completed"} for c in finished]
    codons += [{"codonId": c, "status": "failed"} for c in failed]
    return {"executionPlan": plan.to_state(), "runs": [{"codons": codons}]}


def ids(plan: ExecutionPlan) -> list[str]:
    return [e.codon_id for e in plan]


def test_an_unchanged_hank_changes_nothing(tmp_path: Path) -> None:
    hank = hank_of(tmp_path, codon("a"), codon("b"))
    result = replan(state_of(ExecutionPlan.from_hank(hank), ["a"]), hank)
    assert not result.changed
    assert result.transitions("r") == []
    assert ids(result.plan) == ["a", "b"]


def test_codons_after_what_ran_follow_the_new_hank(tmp_path: Path) -> None:
    old = hank_of(tmp_path, codon("a"), codon("b"), codon("c"))
    new = hank_of(tmp_path, codon("a"), codon("x"), codon("c", prompt="Edited.\n"))
    result = replan(state_of(ExecutionPlan.from_hank(old), ["a"], failed=("b",)), new)
    assert ids(result.plan) == ["a", "x", "c"]
    assert result.after == "a"
    assert result.dropped == ("b", "c")
    assert [e.codon_id for e in result.inserted] == ["x", "c"]
    trimmed, extended = result.transitions("r")
    assert trimmed.codon_ids == ["b", "c"]  # type: ignore[union-attr]
    assert extended.after_codon_id == "a"  # type: ignore[union-attr]


def test_a_loop_that_ran_keeps_its_iterations(tmp_path: Path) -> None:
    items = (loop("l", codon("x"), codon("y")), codon("c"))
    old = hank_of(tmp_path, *items)
    stored = ExecutionPlan.from_hank(old)
    stored = stored.on_codon_finished("x#0").plan.on_codon_finished("y#0").plan
    assert ids(stored) == ["x#0", "y#0", "x#1", "y#1", "c"]
    new = hank_of(tmp_path, items[0], codon("d"))
    result = replan(state_of(stored, ["x#0", "y#0", "x#1"]), new)
    assert ids(result.plan) == ["x#0", "y#0", "x#1", "y#1", "d"]
    assert result.dropped == ("c",)


def test_nothing_finished_means_the_whole_new_plan(tmp_path: Path) -> None:
    old = hank_of(tmp_path, codon("a"))
    new = hank_of(tmp_path, codon("b"))
    result = replan(state_of(ExecutionPlan.from_hank(old), [], failed=("a",)), new)
    assert ids(result.plan) == ["b"]
    assert result.after is None
    assert result.transitions("r") == []  # a fresh run carries its plan


@pytest.mark.parametrize(
    ("new", "said"),
    [
        ((codon("a", prompt="Other.\n"), codon("b")), "changed a, which already ran"),
        ((codon("b"),), "removed a, which already ran (ran: a; now: b)"),
        ((codon("z"), codon("a")), "no longer starts with what already ran (a)"),
        ((loop("l", codon("x", prompt="Other.\n")),), "removed a, which already ran"),
    ],
)
def test_a_change_to_what_ran_is_refused(
    tmp_path: Path, new: tuple[dict[str, Any], ...], said: str
) -> None:
    old = hank_of(tmp_path, codon("a"), codon("b"))
    state = state_of(ExecutionPlan.from_hank(old), ["a"])
    with pytest.raises(PrefixChangedError, match=said.replace("(", r"\(").replace(")", r"\)")):
        replan(state, hank_of(tmp_path, *new))


def test_a_changed_loop_codon_that_ran_is_refused(tmp_path: Path) -> None:
    old = hank_of(tmp_path, loop("l", codon("x")), codon("c"))
    new = hank_of(tmp_path, loop("l", codon("x", prompt="Other.\n")), codon("c"))
    state = state_of(ExecutionPlan.from_hank(old), ["x#0"])
    with pytest.raises(PrefixChangedError, match=r"changed x#0, which already ran"):
        replan(state, new)


@given(
    old=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True),
    ran=st.integers(min_value=0, max_value=6),
    tail=st.lists(st.sampled_from("abcdefghxyz"), max_size=5, unique=True),
)
@settings(max_examples=60, deadline=None)
def test_the_journaled_change_turns_the_stored_plan_into_the_new_one(
    tmp_path_factory: pytest.TempPathFactory, old: list[str], ran: int, tail: list[str]
) -> None:
    tmp = tmp_path_factory.mktemp("h")
    ran = min(ran, len(old))
    done = old[:ran]
    new_ids = done + [c for c in tail if c not in done]
    assume(new_ids)  # a hank has at least one item
    stored = ExecutionPlan.from_hank(hank_of(tmp, *(codon(c) for c in old)))
    result = replan(state_of(stored, done), hank_of(tmp, *(codon(c) for c in new_ids)))
    assert ids(result.plan) == new_ids
    # Applying the transitions as the reducer does gives the same plan.
    plan = ids(stored)
    for transition in result.transitions("r"):
        if isinstance(transition, PlanTrimmed):
            plan = [c for c in plan if c not in transition.codon_ids]
        else:
            assert isinstance(transition, PlanExtended)
            at = plan.index(transition.after_codon_id) + 1
            plan[at:at] = [e.codon_id for e in transition.entries]
    if result.after is not None:
        assert plan == new_ids
    else:
        assert not done  # nothing ran: the run is a fresh one, with the new plan


def test_a_new_model_keeps_what_ran_and_moves_every_codon_not_yet_run(tmp_path: Path) -> None:
    items = (codon("a"), loop("l", codon("x"), codon("y")), codon("c"))
    old = hank_of(tmp_path, *items)
    stored = ExecutionPlan.from_hank(old).on_codon_finished("x#0").plan
    stored = stored.on_codon_finished("y#0").plan
    # a, x#0, y#0 and x#1 ran on fake/sonnet; y#1 (planned) and c did not.
    new = load_hank(tmp_path / "h" / "hank.json", model="fake/gpt-5", check_environment=False)
    result = replan(state_of(stored, ["a", "x#0", "y#0", "x#1"]), new.hank)
    models = {e.codon_id: e.codon.model for e in result.plan}
    assert models == {
        "a": "fake/sonnet",
        "x#0": "fake/sonnet",
        "y#0": "fake/sonnet",
        "x#1": "fake/sonnet",
        "y#1": "fake/gpt-5",
        "c": "fake/gpt-5",
    }
    assert result.after == "y#1"
    assert result.dropped == ("c",)
    assert [e.codon_id for e in result.inserted] == ["c"]


def test_a_model_change_beside_another_change_to_what_ran_is_still_refused(
    tmp_path: Path,
) -> None:
    old = hank_of(tmp_path, codon("a"), codon("b"))
    new = hank_of(tmp_path, codon("a", prompt="Other.\n", model="fake/gpt-5"), codon("b"))
    with pytest.raises(PrefixChangedError, match="changed a, which already ran"):
        replan(state_of(ExecutionPlan.from_hank(old), ["a"]), new)
