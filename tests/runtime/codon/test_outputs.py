"""outputFiles, beforeCopy and a codon's env in its commands, end to end on the fake agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.runtime.hanks import (
    Seen,
    codon,
    codon_records,
    fake_environment,
    read_state,
    run_hank,
    write_file,
    write_hank,
)

from weft.cli import main
from weft.runtime.codon.outputs import MAX_RENAME_TRIES, OutputError, free_name
from weft.runtime.run.runtime import RunOutcome, RuntimeOptions


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


async def run(hank: Path, execution: Path, **options: object) -> tuple[RunOutcome, Seen]:
    return await run_hank(hank, execution, RuntimeOptions(serve=False, **options))  # type: ignore[arg-type]


def report_codon(**fields: object) -> dict[str, object]:
    return codon(
        "report",
        write_file("report/a.md", "A")
        + write_file("report/deep/b.md", "B")
        # The data link and what no glob names stay behind.
        + write_file("other.txt", "no"),
        files=["report/**", "*.txt"],
        **fields,
    )


async def test_on_success_before_copy_runs_then_the_globs_are_copied(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        report_codon(
            env={"MY_VAR": "hello-world"},
            outputFiles=[
                {
                    "copy": ["report/**", "stamp.txt"],
                    "beforeCopy": [
                        {"type": "command", "command": {"run": "echo MY_VAR=$MY_VAR > stamp.txt"}}
                    ],
                }
            ],
        ),
    )
    out = tmp_path / "out"
    outcome, seen = await run(hank, tmp_path / "ex", output_dir=out)
    assert outcome.exit_code == 0, outcome.message
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "report/a.md",
        "report/deep/b.md",
        "stamp.txt",
    ]
    assert (out / "stamp.txt").read_text() == "MY_VAR=hello-world\n"
    assert any("Copied 3 output file(s) of report" in d["message"] for d in seen.of("info"))


async def test_a_codon_env_reaches_its_rig_commands(tmp_path: Path) -> None:
    # Hankweave's test-env-in-rig-setup: the rig writes the codon's variable.
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "rig",
            files=["*.txt"],
            env={"MY_VAR": "hello-world"},
            rigSetup=[{"type": "command", "command": {"run": "echo MY_VAR=$MY_VAR > env.txt"}}],
        ),
    )
    outcome, _ = await run(hank, tmp_path / "ex")
    assert outcome.exit_code == 0, outcome.message
    assert (tmp_path / "ex/agentRoot/env.txt").read_text() == "MY_VAR=hello-world\n"


async def test_an_existing_file_is_kept_and_the_new_one_renamed_unless_overwrite(
    tmp_path: Path,
) -> None:
    hank = write_hank(tmp_path / "hank", report_codon(outputFiles=[{"copy": ["report/a.md"]}]))
    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    (out / "report/a.md").write_text("old")
    outcome, seen = await run(hank, tmp_path / "ex", output_dir=out)
    assert outcome.exit_code == 0, outcome.message
    assert (out / "report/a.md").read_text() == "old"
    renamed = [p for p in (out / "report").iterdir() if p.name != "a.md"]
    assert len(renamed) == 1
    assert renamed[0].name.startswith("a_1_")
    assert renamed[0].suffix == ".md"
    assert renamed[0].read_text() == "A"
    assert any("exists, written as" in d["message"] for d in seen.of("info"))

    outcome, _ = await run(hank, tmp_path / "ex2", output_dir=out, overwrite_output=True)
    assert outcome.exit_code == 0, outcome.message
    assert (out / "report/a.md").read_text() == "A"


async def test_without_an_output_dir_nothing_is_copied(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "hank", report_codon(outputFiles=[{"copy": ["report/**"]}]))
    outcome, seen = await run(hank, tmp_path / "ex")
    assert outcome.exit_code == 0
    assert not any("output file" in d["message"] for d in seen.of("info"))


async def test_a_failed_before_copy_is_reported_and_the_copy_goes_on(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        report_codon(
            outputFiles=[
                {
                    "copy": ["report/a.md"],
                    "beforeCopy": [{"type": "command", "command": {"run": "gambozino --version"}}],
                }
            ]
        ),
    )
    out = tmp_path / "out"
    outcome, seen = await run(hank, tmp_path / "ex", output_dir=out)
    assert outcome.exit_code == 0, outcome.message
    assert (out / "report/a.md").read_text() == "A"
    assert any("beforeCopy command 1" in d["message"] for d in seen.of("error"))


async def test_a_copy_that_cannot_be_made_fails_the_codon_and_the_run(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "hank", report_codon(outputFiles=[{"copy": ["report/a.md"]}]))
    out = tmp_path / "out"
    out.mkdir()
    (out / "report").write_text("a file where a folder must go")
    outcome, _ = await run(hank, tmp_path / "ex", output_dir=out)
    assert outcome.exit_code == 1
    record = codon_records(read_state(tmp_path / "ex"))["report"]
    assert record["status"] == "failed"
    assert record["failureReason"]["type"] == "output_copy"
    assert "outputFiles of report" in record["failureReason"]["message"]


@settings(max_examples=25, deadline=None)  # each example writes up to 103 files
@given(st.integers(min_value=0, max_value=MAX_RENAME_TRIES + 3))
def test_free_name_takes_the_first_free_counter_and_refuses_after_the_limit(taken: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "notes.tar.md"
        target.write_text("x")
        for n in range(1, taken + 1):
            (Path(folder) / f"notes.tar_{n}_S.md").write_text("x")
        if taken >= MAX_RENAME_TRIES:
            with pytest.raises(OutputError, match="--overwrite-output"):
                free_name(target, "S")
        else:
            assert free_name(target, "S").name == f"notes.tar_{taken + 1}_S.md"


def test_weft_run_takes_the_output_dir_and_warns_when_there_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hank = write_hank(tmp_path / "hank", report_codon(outputFiles=[{"copy": ["report/**"]}]))
    base = ["run", str(hank), "--headless"]
    assert main([*base, "--execution", str(tmp_path / "a")]) == 0
    assert "report declare outputFiles, but no output directory is set" in capsys.readouterr().out

    out = tmp_path / "out"
    assert main([*base, "--execution", str(tmp_path / "b"), "-o", str(out)]) == 0
    assert f"Output files go to {out}" in capsys.readouterr().out
    assert (out / "report/deep/b.md").read_text() == "B"

    assert main([*base, "--execution", str(tmp_path / "c"), "--output", str(out)]) == 0
    assert "is not empty" in capsys.readouterr().out


def test_overwrite_output_without_an_output_dir_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hank = write_hank(tmp_path / "hank", report_codon(outputFiles=[{"copy": ["report/**"]}]))
    argv = ["run", str(hank), "--headless", "--execution", str(tmp_path / "x")]
    assert main([*argv, "--overwrite-output"]) == 2
    assert "--overwrite-output needs an output directory" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_an_output_dir_inside_the_execution_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hank = write_hank(tmp_path / "hank", report_codon(outputFiles=[{"copy": ["report/**"]}]))
    execution = tmp_path / "x"
    argv = ["run", str(hank), "--headless", "--execution", str(execution)]
    assert main([*argv, "-o", str(execution / "agentRoot" / "out")]) == 2
    assert "is inside" in capsys.readouterr().err
    assert not execution.exists()


_NAMES = st.sampled_from(["a.md", "b.txt", "report", ".git", ".weft", "read_only_data_source", "x"])
_PATTERNS = st.lists(
    st.sampled_from(["**", "*", "**/*.md", "report/**", "*/*", "read_only_data_source/**", ".*"]),
    min_size=1,
    max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_NAMES, min_size=1, max_size=3), max_size=8), _PATTERNS)
def test_globs_match_files_only_never_git_weft_or_the_data_unless_named(
    paths: list[list[str]], patterns: list[str]
) -> None:
    import tempfile

    from weft.runtime.codon.outputs import _matches

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for parts in paths:
            target = root.joinpath(*parts)
            if any(
                p.is_file() for p in [target, *target.parents] if p != root and root in p.parents
            ):
                continue
            if target.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("x")
        try:
            found = _matches(patterns, root)
        except OutputError:
            return
        names_data = any(p.startswith("read_only_data_source") for p in patterns)
        for relative in found:
            parts = Path(relative).parts
            assert (root / relative).is_file()
            assert parts[0] not in (".git", ".weft")
            assert names_data or parts[0] != "read_only_data_source"
        assert found == sorted(set(found))


def test_a_symlink_leading_out_of_the_workspace_fails_the_copy(tmp_path: Path) -> None:
    from weft.runtime.codon.outputs import OutputResult, _copy_step

    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "leak.txt").symlink_to(secret)
    with pytest.raises(OutputError, match="leads out of the workspace"):
        _copy_step(["*.txt"], workspace, tmp_path / "out", False, "S", OutputResult())
    assert not (tmp_path / "out" / "leak.txt").exists()
