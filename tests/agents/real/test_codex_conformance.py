"""Codex 0.163.0 and ``fake-codex`` through ``CodexHarness``, against the local
Responses API mock: the same verdicts and event kinds; per-process tokens on
resume equal to what the mock billed for that process's calls."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.agents.real.conftest import FAKE_ENV, Homes, codex_env
from tests.agents.real.drive import Outcome, drive
from tests.agents.real.mock_openai import OpenAIMock

from weft.agents.codex import CodexHarness
from weft.agents.events import CostSource, ErrorClass
from weft.agents.harness import SessionSpec, Timeouts
from weft.agents.registry import fake_command

TEXT = frozenset({"SessionStarted", "AssistantText", "SessionResult"})
TOOLS = TEXT | {"ToolUse", "ToolResult"}
FAILED = frozenset({"SessionStarted", "SessionResult"})


@dataclass(frozen=True)
class Case:
    name: str
    mock: str
    fake: str | None
    ok: bool = True
    error_class: ErrorClass | None = None
    retriable: bool = False
    kinds: frozenset[str] = TEXT
    env: tuple[tuple[str, str], ...] = ()


CASES = [
    Case("text", "", "@@fake:scenario=success@@"),
    Case("commands", "cmd=2", "@@fake:scenario=command@@", kinds=TOOLS),
    Case("apply_patch", "patch=hello.txt", "@@fake:scenario=file_change@@", kinds=TOOLS),
    Case(
        "429",
        "err=429",
        "@@fake:scenario=turn_failed@@",
        False,
        ErrorClass.RATE_LIMIT,
        True,
        FAILED,
    ),
    Case("500", "err=500", None, False, ErrorClass.OVERLOADED, True, FAILED),
    Case("401", "err=401", None, False, ErrorClass.AUTH, False, FAILED),
    Case("400", "err=400", None, False, ErrorClass.API_ERROR, False, FAILED),
    Case("404 model", "err=404", None, False, ErrorClass.API_ERROR, False, FAILED),
    Case("response.failed", "failed", None, False, ErrorClass.API_ERROR, True, FAILED),
    Case("context window", "ctx", None, False, ErrorClass.CONTEXT_EXCEEDED, False, FAILED),
    Case("cut connection", "cut", None, False, ErrorClass.API_ERROR, True, FAILED),
    Case(
        "missing API key",
        "",
        None,
        False,
        ErrorClass.AUTH,
        False,
        FAILED,
        env=(("OPENAI_API_KEY", "unset"),),
    ),
]


def _spec(
    prompt: str, homes: Homes, env: dict[str, str], *, log: str = "codex.log", **kw: object
) -> SessionSpec:
    return SessionSpec(
        prompt=prompt,
        model="gpt-5.5",
        cwd=homes.work,
        env=env,
        log_path=homes.root / log,
        **{"timeouts": Timeouts(first_output=30, idle=30, stop_grace=5), **kw},  # type: ignore[arg-type]
    )


def _check(out: Outcome, case: Case, who: str) -> None:
    assert out.verdict == (case.ok, case.error_class, case.retriable), (who, out.exited)
    assert case.kinds <= out.kinds, (who, sorted(out.kinds))
    assert not out.unpaired_tools(), who
    assert out.exited.malformed_lines == 0, who


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_real_and_fake_agree(
    case: Case, codex_bin: Path, openai: OpenAIMock, homes: Homes
) -> None:
    marker = uuid.uuid4().hex[:12]
    env = codex_env(openai, homes, **dict(case.env))
    real = await drive(
        CodexHarness([str(codex_bin)]), _spec(f"Task {marker} MOCK[{case.mock}]", homes, env)
    )
    _check(real, case, "real")
    billed = openai.billed(marker)
    if case.ok:
        # gpt-5.5 has no price in Weft's table: unknown, never $0.
        assert real.exited.cost_usd is None
        assert real.exited.cost_source is CostSource.UNPRICED
        assert real.exited.tokens.input + real.exited.tokens.cache_read == sum(
            b.input for b in billed
        )
        assert real.exited.tokens.cache_read == sum(b.cache_read for b in billed)
    if case.name == "apply_patch":
        assert (homes.work / "hello.txt").read_text() == "hello from the mock model\n"
    if case.fake is None:
        return
    fake = await drive(
        CodexHarness(fake_command("codex").command, fake=True),
        _spec(
            f"Task {case.fake}",
            homes,
            {
                "CODEX_HOME": str(homes.root / "fake-home"),
                "FAKE_AGENT_LINE_DELAY_MS": "0",
                **FAKE_ENV,
            },
            log="fake-codex.log",
        ),
    )
    _check(fake, case, "fake")
    _check_keys(homes.root / "codex.log", homes.root / "fake-codex.log")


READS = {
    "thread.started": {"thread_id"},
    "turn.completed": {"usage"},
    "turn.failed": {"error"},
    "error": {"message"},
    "item.started": {"item"},
    "item.completed": {"item"},
}
"""The top-level keys ``CodexParser`` reads, by event type."""
ITEM_READS = {
    "id",
    "type",
    "text",
    "command",
    "aggregated_output",
    "exit_code",
    "status",
    "changes",
}
USAGE_READS = {"input_tokens", "cached_input_tokens", "output_tokens"}


def _raw_keys(log: Path) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for raw in log.read_bytes().splitlines():
        if raw.startswith(b"{"):
            line = json.loads(raw)
            kind = line.get("type", "")
            keys.setdefault(kind, set()).update(line)
            for name in ("item", "usage"):
                if isinstance(line.get(name), dict):
                    item = line[name]
                    sub = (
                        f"{kind}.{name}.{item.get('type', '')}"
                        if name == "item"
                        else f"{kind}.usage"
                    )
                    keys.setdefault(sub, set()).update(item)
    return keys


def _check_keys(real_log: Path, fake_log: Path) -> None:
    """Every key Weft reads that the real CLI printed, the fake printed too."""
    real, fake = _raw_keys(real_log), _raw_keys(fake_log)
    for kind in real.keys() & fake.keys():
        if kind.endswith(".usage"):
            reads = USAGE_READS
        elif ".item." in kind:
            reads = ITEM_READS
        else:
            reads = READS.get(kind, set())
        missing = (real[kind] & reads) - fake[kind]
        assert not missing, (kind, missing)


async def test_resume_counts_each_process_its_own_tokens(
    codex_bin: Path, openai: OpenAIMock, homes: Homes
) -> None:
    harness = CodexHarness([str(codex_bin)])
    env = codex_env(openai, homes)
    marker = uuid.uuid4().hex[:12]
    first = await drive(harness, _spec(f"Remember PAPAYA {marker} MOCK[cmd=1]", homes, env))
    tid = first.exited.session_id
    assert first.exited.ok
    assert tid
    seen = len(openai.posts(marker))
    for turn in ("What was the word?", "Again?"):
        out = await drive(
            harness, _spec(f"{turn} {marker} MOCK[]", homes, env, resume_session_id=tid)
        )
        assert out.exited.ok
        assert out.exited.session_id == tid
        calls = openai.posts(marker)
        mine = [r.billed for r in calls[seen:] if r.billed is not None]
        seen = len(calls)
        assert out.exited.tokens.input + out.exited.tokens.cache_read == sum(b.input for b in mine)
        assert "PAPAYA" in out.text


async def test_unknown_resume_id_is_cannot_resume(
    codex_bin: Path, openai: OpenAIMock, homes: Homes
) -> None:
    for harness, env in (
        (CodexHarness([str(codex_bin)]), codex_env(openai, homes)),
        (
            CodexHarness(fake_command("codex").command, fake=True),
            {"CODEX_HOME": str(homes.codex_home), **FAKE_ENV},
        ),
    ):
        out = await drive(
            harness, _spec("Hello MOCK[]", homes, env, resume_session_id=str(uuid.uuid4()))
        )
        assert out.verdict == (False, ErrorClass.CANNOT_RESUME, False), out.exited


async def test_idle_timeout_and_stop(codex_bin: Path, openai: OpenAIMock, homes: Homes) -> None:
    harness = CodexHarness([str(codex_bin)])
    env = codex_env(openai, homes)
    hang = _spec(
        f"Wait {uuid.uuid4().hex} MOCK[hang]",
        homes,
        env,
        timeouts=Timeouts(first_output=30, idle=2, stop_grace=5),
    )
    out = await drive(harness, hang)
    assert out.verdict == (False, ErrorClass.TIMEOUT, True), out.exited
    marker = uuid.uuid4().hex
    stopped = await drive(
        harness,
        _spec(f"Wait {marker} MOCK[hang]", homes, env),
        stop_after=0.3,
        once=lambda: bool(openai.posts(marker)),
    )
    assert stopped.verdict == (False, ErrorClass.STOPPED, False), stopped.exited
