"""fake-gemini against Gemini CLI's stream-json format (§3, §7.4)."""

from __future__ import annotations

import json

import pytest

from weft.agents.events import ErrorClass, SessionExited, SessionResult
from weft.agents.gemini import GeminiParser
from weft.agents.harness import ProcessEnd

from .support import Fake
from .wire import check_gemini


def test_success_stream(fake: Fake) -> None:
    done = fake.gemini("Explain the build.")
    assert done.code == 0, done.stderr
    run = check_gemini(done.lines)
    assert 2 <= run.deltas <= 5
    assert "Explain the build." in run.text
    assert run.result is not None
    assert run.result["status"] == "success"
    assert done.lines[1]["content"] == "Explain the build."


def test_yolo_prints_a_banner_and_writes_files(fake: Fake) -> None:
    done = fake.gemini(
        "@@fake:write path=g.txt@@hi@@end@@ @@fake:edit path=g.txt old=hi new=ho@@", "-y"
    )
    first = done.out.split(b"\n", 1)[0]
    assert not first.startswith(b"{")
    assert b"YOLO" in first
    run = check_gemini(done.lines)
    assert (fake.cwd / "g.txt").read_text() == "ho"
    names = [t["tool_name"] for t in run.tools.values()]
    assert names == ["write_file", "replace"]
    assert all(r["status"] == "success" for r in run.results.values())


def test_without_auto_approval_write_tools_are_missing(fake: Fake) -> None:
    run = check_gemini(fake.gemini("@@fake:write path=g.txt@@hi@@end@@").lines)
    (result,) = run.results.values()
    assert result["status"] == "error"
    assert result["error"]["type"] == "tool_not_registered"
    assert not (fake.cwd / "g.txt").exists()
    check_gemini(
        fake.gemini("@@fake:write path=g.txt@@hi@@end@@", "--approval-mode", "auto_edit").lines
    )
    assert (fake.cwd / "g.txt").read_text() == "hi"


def test_tool_and_tool_error(fake: Fake) -> None:
    run = check_gemini(fake.gemini("@@fake:scenario=tool@@").lines)
    assert [t["tool_name"] for t in run.tools.values()] == ["list_directory"]
    failed = check_gemini(fake.gemini("@@fake:scenario=tool_error@@").lines)
    (result,) = failed.results.values()
    assert result["status"] == "error"
    assert result["error"]["type"] == "file_not_found"


@pytest.mark.parametrize(
    ("scenario", "code", "error_type"),
    [("turn_limit", 53, "MaxSessionTurnsError"), ("api_error", 1, "ApiError")],
)
def test_error_results_and_exit_codes(
    fake: Fake, scenario: str, code: int, error_type: str
) -> None:
    done = fake.gemini(f"@@fake:scenario={scenario}@@")
    assert done.code == code
    run = check_gemini(done.lines)
    assert run.result is not None
    assert run.result["status"] == "error"
    assert run.result["error"]["type"] == error_type


def test_bad_input_and_empty_prompt_exit_42(fake: Fake) -> None:
    bad = fake.gemini("@@fake:scenario=bad_input@@")
    assert bad.code == 42
    assert bad.out == b""
    assert bad.stderr
    empty = fake.gemini("")
    assert empty.code == 42
    assert "No input provided" in empty.stderr
    both = fake.run("gemini", "-p", "x", "positional", stdin=None)
    assert both.code == 42


def test_warning_event_is_not_fatal(fake: Fake) -> None:
    run = check_gemini(fake.gemini("@@fake:scenario=warning@@").lines)
    assert run.warnings
    assert run.result is not None
    assert run.result["status"] == "success"


def test_resume_latest_and_by_id(fake: Fake) -> None:
    first = check_gemini(fake.gemini("The colour is vermilion.").lines)
    files = list(fake.gemini_home.rglob("session-*.json"))
    assert len(files) == 1
    saved = json.loads(files[0].read_text())
    assert saved["sessionId"] == first.session_id
    assert [m["type"] for m in saved["messages"]] == ["user", "gemini"]
    by_id = check_gemini(fake.gemini("Which colour?", "--resume", first.session_id).lines)
    assert by_id.session_id == first.session_id
    assert "vermilion" in by_id.text
    assert by_id.text.startswith("Resuming the session (previous prompt was: ")
    latest = check_gemini(fake.gemini("Again?", "--resume", "latest").lines)
    assert latest.session_id == first.session_id
    assert "Which colour?" in latest.text
    missing = fake.gemini("hi", "--resume", "nope")
    assert missing.code == 42
    assert "nope" in missing.stderr


def test_prompt_flag_positional_and_stdin(fake: Fake) -> None:
    flag = fake.run("gemini", "-p", "from the flag", "-o", "stream-json", stdin=None)
    assert "from the flag" in check_gemini(flag.lines).text
    positional = fake.run("gemini", "-o", "stream-json", "from", "words", stdin=None)
    assert "from words" in check_gemini(positional.lines).text
    mixed = fake.run("gemini", "-p", "question", "-o", "stream-json", stdin="context")
    assert mixed.lines[1]["content"] == "context\n\nquestion"


def test_allowed_tools_is_variadic(fake: Fake) -> None:
    done = fake.run(
        "gemini", "-o", "stream-json", "--allowed-tools", "write_file", "the prompt", stdin=None
    )
    assert done.code == 42
    ok = fake.run(
        "gemini",
        "-o",
        "stream-json",
        "--allowed-tools",
        "write_file",
        "-p",
        "@@fake:write path=z@@1@@end@@",
        stdin=None,
    )
    check_gemini(ok.lines)
    assert (fake.cwd / "z").read_text() == "1"


def test_json_and_text_output(fake: Fake) -> None:
    as_json = fake.run("gemini", "-p", "hello", "-o", "json", stdin=None)
    doc = json.loads(as_json.out)
    assert "hello" in doc["response"]
    assert doc["stats"]["input_tokens"] > 0
    as_text = fake.run("gemini", "-p", "hello", stdin=None)
    assert as_text.text.strip() == doc["response"]


def test_yolo_and_approval_mode_conflict(fake: Fake) -> None:
    done = fake.run("gemini", "-p", "x", "-y", "--approval-mode", "yolo", stdin=None)
    assert done.code == 1
    assert "Cannot use both" in done.stderr


def test_context_full_refuses_the_prompt_that_overflows_as_the_api_does(fake: Fake) -> None:
    # Prompts 1 and 2 of the session fit; the third (a resume) is refused.
    for prompt in ("List the tasks.", "Next task."):
        args = () if prompt.startswith("List") else ("--resume", "latest")
        fine = fake.gemini(f"@@fake:scenario=context_full,after=3@@ {prompt}", *args)
        assert fine.code == 0, fine.stderr
    full = fake.gemini("@@fake:scenario=context_full,after=3@@ Next.", "--resume", "latest")
    assert full.code == 1
    run = check_gemini(full.lines)
    assert run.result is not None
    assert run.result["status"] == "error"
    assert run.result["error"]["type"] == "ApiError"
    assert (
        "exceeds the maximum number of tokens allowed (1048576)" in (run.result["error"]["message"])
    )
    assert run.result["stats"]["total_tokens"] == 0  # a refused request is not billed
    # What Weft's Gemini parser makes of it: the context is exhausted, not retriable.
    parser = GeminiParser(model="gemini-2.5-pro", pricer=lambda model, tokens: 0.0)
    events = [e for line in full.out.split(b"\n") for e in parser.feed(line)]
    events += parser.finish(ProcessEnd(exit_code=1, signal=None, stderr_tail="", stopped=None))
    (result,) = [e for e in events if isinstance(e, SessionResult)]
    assert result.context_exceeded
    assert result.error_class is ErrorClass.CONTEXT_EXCEEDED
    exited = events[-1]
    assert isinstance(exited, SessionExited)
    assert exited.context_exceeded
    assert not exited.retriable
