"""``weft export`` then ``weft import`` end to end on the fake agent: the
imported execution reads as the source does, a fork's archive carries the
checkpoints it read from its source, a continued import finishes, and damaged
or hostile archives are refused without writing anything outside the target."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from tests.fork.test_clone import SEVEN, completed, seven
from tests.runtime.hanks import subprocess_environment, weft_cli


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


def weft(*args: str | Path, env: dict[str, str]) -> Any:
    return weft_cli(*args, env=env, timeout=120)


def status(execution: Path, env: dict[str, str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(weft("status", execution, "--json", env=env).stdout)
    for key in ("execution", "lock", "notes", "stateSource", "forkedFrom"):
        doc.pop(key, None)
    return doc


def test_an_imported_execution_reads_as_its_source(tmp_path: Path, env: dict[str, str]) -> None:
    hank = seven(tmp_path)
    source = tmp_path / "x"
    assert weft("run", hank, "--execution", source, "--headless", env=env).returncode == 0
    made = weft("export", source, "-o", tmp_path / "x.weftx", env=env)
    assert made.returncode == 0, made.stderr
    done = weft("import", tmp_path / "x.weftx", "--to", tmp_path / "elsewhere" / "y", env=env)
    assert done.returncode == 0, done.stderr
    imported = tmp_path / "elsewhere" / "y"
    assert status(imported, env) == status(source, env)
    for command in ("thread", "checkpoints"):
        a = json.loads(weft(command, source, "--json", env=env).stdout)
        b = json.loads(weft(command, imported, "--json", env=env).stdout)
        assert json.dumps(b).replace(str(imported), str(source)) == json.dumps(a), command
    diff = json.loads(weft("diff", source, imported, "--json", env=env).stdout)
    assert diff["divergedAt"] is None
    assert sorted(p.name for p in (imported / "agentRoot").glob("*.md")) == [
        f"{c}.md" for c in SEVEN
    ]


def test_a_fork_s_archive_continues_without_its_source(tmp_path: Path, env: dict[str, str]) -> None:
    hank = seven(tmp_path)
    source = tmp_path / "x"
    assert weft("run", hank, "--execution", source, "--headless", env=env).returncode == 0
    fork = tmp_path / "f"
    assert weft("fork", source, "--from", "c5", "--to", fork, "--no-run", env=env).returncode == 0
    assert weft("export", fork, "-o", tmp_path / "f.weftx", env=env).returncode == 0
    # The fork read its checkpoints from the source: the archive must carry them.
    shutil.rmtree(source)
    shutil.rmtree(fork)
    shutil.rmtree(tmp_path / "hank")  # the imported execution runs the archive's hank
    assert weft("import", tmp_path / "f.weftx", "--to", tmp_path / "moved", env=env).returncode == 0
    ran = weft("run", "--execution", tmp_path / "moved", "--headless", env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert completed(tmp_path / "moved") == SEVEN[4:]
    assert weft("checkpoints", tmp_path / "moved", env=env).returncode == 0


def _archive(tmp_path: Path, env: dict[str, str]) -> Path:
    hank = seven(tmp_path)
    source = tmp_path / "x"
    assert weft("run", hank, "--execution", source, "--headless", env=env).returncode == 0
    out = tmp_path / "x.weftx"
    assert weft("export", source, "-o", out, env=env).returncode == 0
    return out


def _rewrite(archive: Path, out: Path, change: Any) -> Path:
    """A copy of ``archive`` with ``change(members)`` applied: (TarInfo, bytes | None) pairs."""
    with tarfile.open(archive, "r:gz") as tar:
        members = [
            (m, tar.extractfile(m).read() if m.isfile() else None)  # type: ignore[union-attr]
            for m in tar.getmembers()
        ]
    members = change(members)
    with tarfile.open(out, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return out


def _extra(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> Any:
    def change(members: list[Any]) -> list[Any]:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = link
        return [*members, (info, b"x" if kind == tarfile.REGTYPE else None)]

    return change


def _flip_byte(members: list[Any]) -> list[Any]:
    out = []
    for info, data in members:
        if info.name.endswith("c3.md") and data:
            data = bytes([data[0] ^ 1]) + data[1:]
        out.append((info, data))
    return out


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (_extra("../escaped"), "not a plain relative path"),
        (_extra("/tmp/escaped-absolute"), "absolute path"),
        (_extra("agentRoot/link", tarfile.SYMTYPE, "../../../etc/passwd"), "links outside"),
        (_extra("agentRoot/dev", tarfile.CHRTYPE), "device"),
        (_extra("agentRoot/new.md"), "does not match its manifest"),
        (_flip_byte, "does not match its checksum"),
    ],
    ids=["dotdot", "absolute", "symlink-out", "device", "unlisted", "flipped-byte"],
)
def test_a_hostile_or_damaged_archive_is_refused_and_writes_nothing(
    tmp_path: Path, env: dict[str, str], damage: Any, words: str
) -> None:
    bad = _rewrite(_archive(tmp_path, env), tmp_path / "bad.weftx", damage)
    target = tmp_path / "in"
    target.mkdir()
    before = sorted(tmp_path.rglob("*"))
    done = weft("import", bad, "--to", target / "y", env=env)
    assert done.returncode == 2
    assert words in done.stderr
    assert sorted(tmp_path.rglob("*")) == before
    assert not Path("/tmp/escaped-absolute").exists()


@pytest.mark.parametrize("cut", [0, 10, 1000, -100])
def test_a_truncated_or_foreign_file_is_refused(
    tmp_path: Path, env: dict[str, str], cut: int
) -> None:
    data = _archive(tmp_path, env).read_bytes()
    bad = tmp_path / "bad.weftx"
    bad.write_bytes(data[:cut] if cut else b"not an archive at all")
    done = weft("import", bad, "--to", tmp_path / "y", env=env)
    assert done.returncode == 2
    assert "weft: error:" in done.stderr
    assert not (tmp_path / "y").exists()
