"""``weft pack`` and ``weft run`` / ``weft validate`` on a bundle, as a user runs
them (real ``python -m weft`` processes, the fake agent): the same hank packs to
the same bytes, a bundle copied elsewhere runs like its source, and a changed or
malformed bundle is refused with exit 2 and a message, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.bundle.helpers import Entry, locked, member_of, tar_bytes, tiny
from tests.runtime.hanks import (
    codon,
    read_state,
    runs_oldest_first,
    subprocess_environment,
    weft_cli,
    workspace_files,
    write_file,
    write_hank,
)

from weft.bundle.lock import Member, encode_lock


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**subprocess_environment(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def weft(*args: str | Path, env: dict[str, str], cwd: Path | None = None) -> Any:
    if cwd is None:
        return weft_cli(*args, env=env, timeout=120)
    done = subprocess.run(
        [sys.executable, "-m", "weft", *map(str, args)],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


def project(tmp_path: Path) -> Path:
    """A hank whose codons read prompt files and a copied folder, and write files."""
    first = codon("plan", prompt_file="prompts/plan.md")
    first["rigSetup"] = [{"type": "copy", "copy": {"from": "seed", "to": "seed"}}]
    second = codon("build", prompt_file="prompts/build.md", mode="continue-previous")
    return write_hank(
        tmp_path / "src",
        first,
        second,
        files={
            "prompts/plan.md": write_file("plan.md", "the plan") + "Plan it.\n",
            "prompts/build.md": write_file("build.md", "built") + "Build it.\n",
            "seed/notes.md": "seed notes\n",
            "seed/deep/more.md": "more\n",
        },
    )


def summary(lines: str) -> dict[str, Any]:
    """The run's summary without what differs between two runs (ids, times, paths)."""
    for line in lines.splitlines():
        event = json.loads(line)
        if event["type"] == "run.summary":
            data: dict[str, Any] = event["data"]
            drop = {"runId", "wallTimeMs", "message", "execution", "continue", "journal"}
            return {k: v for k, v in data.items() if k not in drop}
    raise AssertionError("no run.summary")


def test_packing_twice_gives_the_same_bytes(tmp_path: Path, env: dict[str, str]) -> None:
    hank = project(tmp_path)
    one = weft("pack", hank.parent, "-o", tmp_path / "one.hank", "--json", env=env)
    two = weft("pack", hank, "-o", tmp_path / "two.hank", env=env)
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert (tmp_path / "one.hank").read_bytes() == (tmp_path / "two.hank").read_bytes()
    said = json.loads(one.stdout)
    assert said["hank"] == "hank.json"
    assert said["files"] == 5
    assert said["bundleHash"] in two.stdout


def test_the_default_output_is_named_after_the_hank_folder(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = project(tmp_path)
    (tmp_path / "here").mkdir()
    done = weft("pack", hank, env=env, cwd=tmp_path / "here")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "here" / "src.hank").is_file()


def test_a_packed_hank_copied_elsewhere_runs_like_its_source(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = project(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text("some input\n")
    assert weft("pack", hank, "-o", tmp_path / "x.hank", env=env).returncode == 0
    source_plan = json.loads(weft("validate", hank, "--json", env=env).stdout)
    # The fake agent seeded, and both runs in the same execution folder (the
    # first moved away after), so that the same prompts give the same figures.
    env = {**env, "FAKE_AGENT_SEED": "7"}
    source = weft("run", hank, data, "--json", "--execution", tmp_path / "x", env=env)
    assert source.returncode == 0, source.stderr
    (tmp_path / "x").rename(tmp_path / "a")
    # Elsewhere, with the source folder gone: only the bundle is there to read.
    away = tmp_path / "elsewhere"
    away.mkdir()
    shutil.copy(tmp_path / "x.hank", away / "x.hank")
    shutil.rmtree(hank.parent)
    plan = json.loads(weft("validate", "x.hank", "--json", env=env, cwd=away).stdout)
    ran = weft("run", "x.hank", data, "--json", "--execution", tmp_path / "x", env=env, cwd=away)
    assert ran.returncode == 0, ran.stderr
    (tmp_path / "x").rename(tmp_path / "b")
    assert plan["valid"] is True
    assert plan["tree"] == source_plan["tree"]
    assert summary(ran.stdout) == summary(source.stdout)
    assert summary(ran.stdout)["codons"]["completed"] == 2
    assert workspace_files(tmp_path / "b") == workspace_files(tmp_path / "a")
    assert workspace_files(tmp_path / "b")["seed/deep/more.md"] == "more\n"
    runs = runs_oldest_first(read_state(tmp_path / "b"))
    assert [c["codonId"] for c in runs[0]["codons"]] == ["plan", "build"]


def test_a_changed_bundle_is_refused_by_run_and_validate(
    tmp_path: Path, env: dict[str, str]
) -> None:
    lock = encode_lock("hank.json", {e.name: member_of(e) for e in tiny()}, "test")
    changed = [Entry("hank.lock", lock), tiny()[0], Entry("prompt.md", b"Say goodbye.\n")]
    (tmp_path / "x.hank").write_bytes(tar_bytes(changed))  # the true lock, a changed prompt
    for command in (["validate", "x.hank"], ["run", "x.hank", "--headless"]):
        done = weft(*command, env=env, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert "x.hank does not match its hank.lock:\n  prompt.md: content changed" in done.stderr
    assert not (tmp_path / "managed").exists()  # nothing was run
    refused = weft("run", "x.hank", "--json", env=env, cwd=tmp_path)
    assert json.loads(refused.stdout.splitlines()[-1])["type"] == "run.refused"


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"", "not a readable bundle"),
        (b"plain text, not an archive\n" * 30, "not a readable bundle"),
        (tar_bytes([Entry("../x", b"out")]), "climbs out of the bundle"),
        (tar_bytes([Entry("/etc/x", b"out")]), "absolute path"),
        (
            tar_bytes(locked([*tiny(), Entry("l", kind="symlink", target="../../x")])),
            "points outside the bundle",
        ),
    ],
)
def test_a_malformed_bundle_is_refused_cleanly(
    tmp_path: Path, env: dict[str, str], data: bytes, said: str
) -> None:
    (tmp_path / "bad.hank").write_bytes(data)
    for command in (["validate", "bad.hank"], ["run", "bad.hank", "--headless"]):
        done = weft(*command, env=env, cwd=tmp_path)
        assert done.returncode == 2
        assert said in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.hank", "cache"]


def test_a_lock_listing_more_than_the_member_quota_is_refused_at_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    empty = Member(
        "file", 0o644, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    members = {"hank.json": empty, **{f"f/{i:05}": empty for i in range(50_001)}}
    lock = encode_lock("hank.json", members, "test")
    (tmp_path / "huge.hank").write_bytes(tar_bytes([Entry("hank.lock", lock), Entry("hank.json")]))
    done = weft("validate", "huge.hank", env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert "huge.hank: the bundle has over 50,000 members" in done.stderr


def test_an_invalid_hank_is_not_packed(tmp_path: Path, env: dict[str, str]) -> None:
    hank = write_hank(tmp_path / "src", codon("a", prompt_file="missing.md"))
    done = weft("pack", hank, "-o", tmp_path / "x.hank", env=env)
    assert done.returncode == 2
    assert "missing.md" in done.stderr
    assert "nothing was packed" in done.stderr
    assert not (tmp_path / "x.hank").exists()


def test_an_output_that_cannot_be_written_is_a_clean_error(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = project(tmp_path)
    done = weft("pack", hank, "-o", tmp_path / "no" / "such" / "x.hank", env=env)
    assert done.returncode == 2
    assert "cannot write the bundle" in done.stderr


def test_a_bundle_with_execution_is_the_hank_not_the_data(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = project(tmp_path)
    assert weft("pack", hank, "-o", tmp_path / "x.hank", env=env).returncode == 0
    first = weft("run", tmp_path / "x.hank", "--execution", tmp_path / "e", "--headless", env=env)
    assert first.returncode == 0, first.stderr
    # Again on the same execution: the bundle names the same extracted hank, so the
    # execution is complete (taken as data, it would be refused as other data).
    again = weft("run", tmp_path / "x.hank", "--execution", tmp_path / "e", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert summary(again.stdout)["status"] == "nothing_to_do"
