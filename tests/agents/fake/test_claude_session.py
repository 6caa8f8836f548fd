"""Claude sessions on disk: project directory names and which session a run uses."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from weft.agents.fake.claude_session import resolve_session, sanitize_cwd
from weft.agents.fake.common import CliError


def test_sanitized_project_directory_names() -> None:
    assert sanitize_cwd("/") == "-"
    long = "/" + "a" * 300
    name = sanitize_cwd(long)
    assert name.startswith("-" + "a" * 199 + "-")
    assert len(name) > 201
    assert sanitize_cwd(long) == name
    assert sanitize_cwd(long + "b") != name


def test_sanitize_replaces_every_non_alphanumeric(tmp_path: Path) -> None:
    odd = tmp_path / "my.proj_x y"
    odd.mkdir()
    name = sanitize_cwd(str(odd))
    assert name.endswith("-my-proj-x-y")
    assert all(c.isalnum() or c == "-" for c in name)


_COUNTER = itertools.count()


def _ids() -> Callable[[], str]:
    return lambda: f"00000000-0000-4000-8000-{next(_COUNTER):012d}"


def test_resolve_session_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    work = tmp_path / "work"
    work.mkdir()
    new = resolve_session(
        str(work),
        resume=None,
        continue_=False,
        session_id=None,
        fork=False,
        resume_mode="same",
        new_id=_ids(),
    )
    assert new.session_id == new.file_id
    assert new.path is not None
    assert not new.missing
    Path(new.path).parent.mkdir(parents=True)
    Path(new.path).write_text(
        '{"type":"user","uuid":"u1","message":{"role":"user","content":"hello"}}\n'
    )
    for mode, same_id, same_file in (
        ("same", True, True),
        ("new", False, False),
        ("tag", False, True),
    ):
        got = resolve_session(
            str(work),
            resume=new.session_id,
            continue_=False,
            session_id=None,
            fork=False,
            resume_mode=mode,
            new_id=_ids(),
        )
        assert (got.session_id == new.session_id) is same_id, mode
        assert (got.path == new.path) is same_file, mode
        assert got.previous_prompt == "hello"
        assert got.parent == "u1"
    missing = resolve_session(
        str(work),
        resume="nope",
        continue_=False,
        session_id=None,
        fork=False,
        resume_mode="same",
        new_id=_ids(),
    )
    assert missing.missing
    assert missing.session_id == "nope"
    with pytest.raises(CliError, match="already in use"):
        resolve_session(
            str(work),
            resume=None,
            continue_=False,
            session_id=new.session_id,
            fork=False,
            resume_mode="same",
            new_id=_ids(),
        )
