"""archiveOnSuccess of codons and loops, and archives in rollbacks, on the fake agent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.runtime.hanks import (
    Seen,
    codon,
    fake_environment,
    journal,
    loop,
    run_hank,
    workspace_files,
    write_file,
    write_hank,
)

from weft.cli import main
from weft.config import load_hank
from weft.runtime.codon.archive import read_manifest
from weft.runtime.execution.layout import ExecutionLayout
from weft.runtime.execution.prepare import prepare_execution
from weft.runtime.run.runtime import RunOutcome, Runtime, RuntimeOptions


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


async def run(hank: Path, execution: Path) -> tuple[RunOutcome, Seen]:
    return await run_hank(hank, execution, RuntimeOptions(serve=False))


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def archiving_hank(tmp_path: Path) -> Path:
    return write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "A"), files=["*.md", "notes/**"]),
        codon(
            "b",
            write_file("b.md", "B") + write_file("notes/n.md", "N"),
            files=["*.md", "notes/**"],
            rigSetup=[{"type": "copy", "copy": {"from": "tpl", "to": "site"}}],
            archiveOnSuccess=["site", "notes", "missing"],
        ),
        codon("c", write_file("c.md", "C"), files=["*.md", "notes/**"]),
        files={"tpl/index.html": "<p>hi</p>"},
    )


async def test_a_codon_archives_its_paths_and_reports_the_missing_ones(tmp_path: Path) -> None:
    execution = tmp_path / "x"
    outcome, seen = await run(archiving_hank(tmp_path), execution)
    assert outcome.exit_code == 0, outcome.message
    assert files_under(execution / "rigArchive") == ["b/notes/n.md", "b/site/index.html"]
    assert set(workspace_files(execution)) == {"a.md", "b.md", "c.md"}
    (partial,) = seen.of("archive.partial")
    assert partial["codonId"] == "b"
    assert partial["archivedPaths"] == ["site", "notes"]
    assert partial["failedPaths"] == [{"path": "missing", "error": "not found in the workspace"}]
    assert partial["archiveDir"] == "rigArchive/b"
    # After the codon's completion, before the next codon starts.
    assert seen.position("archive.partial") < seen.position("CodonStarted", "c")


async def test_rollback_moves_back_only_what_the_undone_codons_archived(
    tmp_path: Path,
) -> None:
    hank = archiving_hank(tmp_path)
    execution = tmp_path / "x"
    assert (await run(hank, execution))[0].exit_code == 0

    # To b's own end: b's archive is part of the target, it stays.
    assert await asyncio.to_thread(main, ["rollback", str(execution), "--codon", "b"]) == 0
    assert files_under(execution / "rigArchive") == ["b/notes/n.md", "b/site/index.html"]

    # To a: b is undone, and so is its archive. Its rig copy is removed and its
    # covered notes go back to a's checkpoint (which has none); nothing stays archived.
    assert await asyncio.to_thread(main, ["rollback", str(execution), "--codon", "a"]) == 0
    assert files_under(execution / "rigArchive") == []
    assert workspace_files(execution) == {"a.md": "A"}
    assert read_manifest(ExecutionLayout(execution)).entries == []
    restores = [d for kind, d in journal(execution) if kind == "rollback.archiveRestore"]
    assert restores == [{"codonId": "b", "restoredPaths": ["site", "notes"], "status": "completed"}]

    # b runs again and archives again, in the same place.
    outcome, _seen = await run(hank, execution)
    assert outcome.codons == {"b": "completed", "c": "completed"}
    assert files_under(execution / "rigArchive") == ["b/notes/n.md", "b/site/index.html"]


async def test_a_rollback_restores_an_uncovered_archived_path(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "A") + write_file("logs/run.log", "L"), files=["*.md"]),
        codon("b", write_file("b.md", "B"), files=["*.md"], archiveOnSuccess=["logs"]),
    )
    execution = tmp_path / "x"
    assert (await run(hank, execution))[0].exit_code == 0
    assert "logs/run.log" not in workspace_files(execution)
    assert await asyncio.to_thread(main, ["rollback", str(execution), "--codon", "a"]) == 0
    # a made logs/ and b archived it: back at a, it is where a left it.
    assert workspace_files(execution) == {"a.md": "A", "logs/run.log": "L"}


async def test_loop_codons_archive_per_iteration_and_the_loop_once_at_its_end(
    tmp_path: Path,
) -> None:
    body = codon(
        "w",
        write_file("scratch/s.md", "S") + write_file("final/f.md", "F"),
        files=["*.md"],
        archiveOnSuccess=["scratch"],
    )
    hank = write_hank(
        tmp_path / "hank", {**loop("L", body, limit=2), "archiveOnSuccess": ["final"]}
    )
    execution = tmp_path / "x"
    outcome, seen = await run(hank, execution)
    assert outcome.exit_code == 0, outcome.message
    assert files_under(execution / "rigArchive") == [
        "L-0/w-0/scratch/s.md",
        "L-1/w-1/scratch/s.md",
        "L/final/f.md",
    ]
    done = seen.of("archive.completed")
    assert [(d["codonId"], d.get("loopId"), d["archiveDir"]) for d in done] == [
        ("w#0", None, "rigArchive/L-0/w-0"),
        ("w#1", None, "rigArchive/L-1/w-1"),
        ("w#1", "L", "rigArchive/L"),
    ]


async def test_a_fresh_restart_after_failures_moves_every_archive_back(tmp_path: Path) -> None:
    # A codon that failed under onFailure=ignore still archives (as Hankweave's
    # finalizeCodon does); with no confirmed success the next run starts over,
    # and the workspace must look as it did before any codon ran: nothing archived.
    def hank(fail: bool) -> Path:
        work = write_file("logs/x.md", "L") + (
            "@@fake:scenario=api_error,status=400@@\n" if fail else ""
        )
        return write_hank(
            tmp_path / "hank",
            codon("a", work, files=["*.md"], onFailure="ignore", archiveOnSuccess=["logs"]),
        )

    execution = tmp_path / "x"
    outcome, _ = await run(hank(fail=True), execution)
    assert outcome.codons == {"a": "failed"}
    assert files_under(execution / "rigArchive") == ["a/logs/x.md"]

    prepared = await asyncio.to_thread(
        prepare_execution,
        hank(fail=False),
        None,
        execution_dir=execution,
        interactive=False,
        yes=True,
        base_dir=tmp_path / "managed",
    )
    await Runtime(prepared, load_hank(tmp_path / "hank"), RuntimeOptions(serve=False)).run()
    restores = [d for kind, d in journal(execution) if kind == "rollback.archiveRestore"]
    assert [r["restoredPaths"] for r in restores] == [["logs"]]
    # The new run archived its own logs again.
    assert files_under(execution / "rigArchive") == ["a/logs/x.md"]
