"""``matches`` patterns end to end: what the linear engine cannot do is refused
by ``weft validate`` (and ``weft run``) with the sentinel, the condition, the
pattern, why and how to fix; every sentinel config of the test suite still
loads; and a real ``weft run`` whose agent writes hostile text for an evil
pattern finishes in seconds (the backtracking engine before it hung)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    codon,
    journal,
    subprocess_environment,
    weft_cli,
    weft_run_argv,
    write_file,
    write_hank,
)
from tests.sentinels.offline import without_model_keys

from weft.sentinels.config import load_sentinel_config
from weft.sentinels.jsregex import PatternError, compile_js_pattern

CONFIGS = Path(__file__).parent / "configs"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    without_model_keys(monkeypatch)


def _watcher(pattern: str, ident: str = "watcher") -> dict[str, Any]:
    """An inline sentinel on the fake model, woken by a file whose content matches."""
    return {
        "sentinelConfig": {
            "id": ident,
            "name": f"Sentinel {ident}",
            "model": "fake/haiku",
            "trigger": {
                "type": "event",
                "on": ["file.updated"],
                "conditions": [{"path": "content", "operator": "matches", "value": pattern}],
            },
            "execution": {"strategy": "immediate"},
            "userPromptText": "@@sentinel:say seen@@",
        }
    }


@pytest.mark.parametrize(
    ("pattern", "why", "hint"),
    [
        (r"(\w+) \1", r'backreference "\1" is not supported', "write the repeated text out"),
        (r"(?<w>a)\k<w>", r'backreference "\k<...>" is not supported', "repeated text"),
        (r"foo(?=bar)", 'look-ahead "(?=" is not supported', "a(?=b) -> ab"),
        (r"foo(?!bar)", 'look-ahead "(?!" is not supported', "split the check"),
        (r"(?<=a)b", 'look-behind "(?<=" is not supported', "match the surrounding text"),
        (r"(?<!a)b", 'look-behind "(?<!" is not supported', "match the surrounding text"),
        (r"(?m)^abc", '"(?m" is not supported (of the inline flags, only (?i)', "[^\\n]*"),
        (r"a{1000}{1000}", "the compiled pattern is larger than 1024 KiB", "smaller repetition"),
        (r"(ab", "not a valid regular expression: unclosed group", "JavaScript syntax"),
        (r"a\Bb", '"\\B" (not at a word boundary) is not supported', "\\b where a boundary"),
    ],
)
def test_validate_refuses_what_linear_matching_cannot_do(
    tmp_path: Path, pattern: str, why: str, hint: str
) -> None:
    hank = write_hank(tmp_path / "h", codon("a", sentinels=[_watcher(pattern)]))
    done = weft_cli("validate", hank, env=subprocess_environment(tmp_path), timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout + done.stderr
    where = 'hank[0] (codon "a") .sentinels[0].sentinelConfig.trigger.conditions[0].value'
    assert where in out
    said = (
        f'sentinel "watcher": the matches condition on "content" cannot use the pattern '
        f"{json.dumps(pattern)}: {why}"
    )
    assert said in out
    if "supported" in why and "flags" not in why:
        assert "Weft matches agent output in linear time" in out
    assert hint in out


def test_run_refuses_it_too_before_any_agent_starts(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "h", codon("a", sentinels=[_watcher(r"(?<=a)b")]))
    run = weft_cli(
        "run", hank, "--execution", tmp_path / "x", "--headless",
        env=subprocess_environment(tmp_path),
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert 'cannot use the pattern "(?<=a)b": look-behind' in run.stdout + run.stderr
    assert not (tmp_path / "x" / ".weft").exists()


def test_a_refused_pattern_in_a_sequence_step_names_that_step(tmp_path: Path) -> None:
    entry = _watcher("a")
    entry["sentinelConfig"]["trigger"] = {
        "type": "sequence",
        "interestFilter": {"on": ["file.updated"]},
        "pattern": [
            {"type": "file.updated"},
            {
                "type": "file.updated",
                "conditions": [{"path": "content", "operator": "matches", "value": "(?=x)"}],
            },
        ],
    }
    hank = write_hank(tmp_path / "h", codon("a", sentinels=[entry]))
    done = weft_cli("validate", hank, env=subprocess_environment(tmp_path), timeout=60)
    assert done.returncode == 2
    assert "trigger.pattern[1].conditions[0].value" in done.stdout
    assert 'look-ahead "(?=" is not supported' in done.stdout


def test_the_compiled_pattern_refuses_as_validate_does() -> None:
    with pytest.raises(PatternError) as caught:
        compile_js_pattern(r"(?<=a)b")
    assert "linear time" in caught.value.reason
    assert caught.value.hint


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.sentinel.json")), ids=lambda p: p.stem)
def test_the_hankweave_sentinel_configs_still_load(config: Path) -> None:
    loaded = load_sentinel_config(config)
    assert loaded.id


def test_a_run_whose_agent_writes_hostile_text_for_an_evil_pattern_finishes(
    tmp_path: Path,
) -> None:
    """``^(a+)+$`` on ``"a" * 40 + "!"``: Python's ``re`` needed about 2**40
    steps (days, holding the interpreter, so not even SIGTERM stopped the run).
    The file's second content matches, so the sentinel must wake exactly once:
    the condition was evaluated, not skipped."""
    prompt = write_file("notes.md", "a" * 40 + "!") + "@@fake:sleep ms=200@@\n"
    prompt += write_file("notes.md", "a" * 40)
    hank = write_hank(tmp_path / "h", codon("a", prompt, sentinels=[_watcher("^(a+)+$")]))
    execution = tmp_path / "x"
    started = time.monotonic()
    try:
        done = subprocess.run(
            weft_run_argv(hank, execution),
            env=subprocess_environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=90,  # the old engine never finishes: fail rather than hang
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("weft run hung matching ^(a+)+$ against the agent's text")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    events = journal(execution)
    contents = [d.get("path") for k, d in events if k == "file.updated"]
    assert contents.count("notes.md") == 2, contents
    # One output: woken by the second content only.
    outputs = [d["content"] for k, d in events if k == "sentinel.output"]
    assert outputs == ["seen"]
    assert elapsed < 60, f"{elapsed:.1f}s"
