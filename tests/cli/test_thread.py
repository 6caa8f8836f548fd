"""``weft checkpoints``: newest first, with a time column."""

from __future__ import annotations

from typing import Any

from tests.cli.test_executions import made, weft, world  # noqa: F401  (fixtures)

from weft.runtime.run.rollback import checkpoint_rows


def record(codon: str, end: str, sha: str) -> dict[str, Any]:
    return {
        "codonId": codon,
        "status": "completed",
        "startTime": end,
        "endTime": end,
        "completionCheckpoint": sha,
    }


def test_checkpoints_are_listed_newest_first_across_runs() -> None:
    # The state document keeps its runs newest first.
    state = {
        "runs": [
            {"runId": "r2", "codons": [record("b", "2026-01-02T00:00:00Z", "b2")]},
            {
                "runId": "r1",
                "codons": [
                    record("a", "2026-01-01T00:00:00Z", "a1"),
                    record("b", "2026-01-01T01:00:00Z", "b1"),
                ],
            },
        ]
    }
    rows = checkpoint_rows(state, on_thread=["b2", "a1"], exists=["b2", "a1", "b1"])
    assert [r["sha"] for r in rows] == ["b2", "b1", "a1"]
    assert [r["onThread"] for r in rows] == [True, False, True]


def test_rollback_saves_uncheckpointed_changes_to_a_recovery_branch_and_lists_them(
    world: dict[str, Any],  # noqa: F811
) -> None:
    import pygit2

    workspace = world["execution"] / "agentRoot"
    (workspace / "draft.md").write_text("unsaved work\n")
    (workspace / "ignored.txt").write_text("not covered\n")
    done = weft("rollback", "--codon", "a", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Saved 1 uncheckpointed change to recovery/")
    assert lines[1].split() == ["new", "draft.md"]
    branch = lines[0].split(" to ", 1)[1].split()[0]
    git = pygit2.Repository(str(world["execution"] / ".weft" / "checkpoints" / ".weftcheckpoints"))
    tree = git.revparse_single(branch).peel(pygit2.Commit).tree
    assert tree["draft.md"].data == b"unsaved work\n"
    assert not (workspace / "draft.md").exists()  # the rollback restored the covered files
    assert (workspace / "ignored.txt").exists()


def test_rollback_with_discard_saves_nothing(world: dict[str, Any]) -> None:  # noqa: F811
    (world["execution"] / "agentRoot" / "draft.md").write_text("throw away\n")
    done = weft("rollback", "--codon", "a", "--discard", env=world["env"], cwd=world["project"])
    assert done.returncode == 0, done.stderr
    assert "Saved" not in done.stdout
    assert not (world["execution"] / "agentRoot" / "draft.md").exists()
