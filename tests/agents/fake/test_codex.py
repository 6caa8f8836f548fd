"""fake-codex against the ``codex exec --json`` wire format (§2, §7.4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .support import Fake
from .wire import check_codex


def test_success_stream_and_thread_id(fake: Fake) -> None:
    done = fake.codex("Describe the project.")
    assert done.code == 0, done.stderr
    run = check_codex(done.lines)
    assert run.thread_id[14] == "7", "thread ids are UUIDv7"
    assert "Describe the project." in run.final_text
    assert done.lines[-1]["type"] == "turn.completed"


def test_command_item_starts_and_completes(fake: Fake) -> None:
    (fake.cwd / "README.md").write_text("x")
    run = check_codex(fake.codex("@@fake:scenario=command@@").lines)
    (command,) = run.kinds("command_execution")
    states = run.items[command["id"]]
    assert [s["status"] for s in states] == ["in_progress", "completed"]
    assert command["exit_code"] == 0
    assert command["aggregated_output"] == "README.md\n"


def test_file_directives_change_files_in_a_writable_sandbox(fake: Fake) -> None:
    (fake.cwd / "app.py").write_text("x = 1\n")
    prompt = (
        "@@fake:write path=notes/a.md@@hello\n@@end@@"
        '@@fake:edit path=app.py old="x = 1" new="x = 2"@@'
        "@@fake:bash@@ echo ran > ran.txt @@end@@"
    )
    done = fake.codex(prompt, "--sandbox", "workspace-write")
    run = check_codex(done.lines)
    assert (fake.cwd / "notes" / "a.md").read_text() == "hello\n"
    assert (fake.cwd / "app.py").read_text() == "x = 2\n"
    assert (fake.cwd / "ran.txt").read_text() == "ran\n"
    changes = [c for item in run.kinds("file_change") for c in item["changes"]]
    assert changes == [
        {"path": str(fake.cwd / "notes" / "a.md"), "kind": "add"},
        {"path": str(fake.cwd / "app.py"), "kind": "update"},
    ]
    assert all(item["status"] == "completed" for item in run.kinds("file_change"))


def test_read_only_sandbox_blocks_writes(fake: Fake) -> None:
    run = check_codex(fake.codex("@@fake:write path=a.txt@@x@@end@@ @@fake:bash touch b@@").lines)
    assert [i["status"] for i in run.kinds("file_change")] == ["failed"]
    assert [i["status"] for i in run.kinds("command_execution")] == ["failed"]
    assert not (fake.cwd / "a.txt").exists()
    assert not (fake.cwd / "b").exists()


def test_file_change_scenario_writes_a_file(fake: Fake) -> None:
    run = check_codex(fake.codex("@@fake:scenario=file_change@@", "--full-auto").lines)
    assert (fake.cwd / "CHANGES.md").exists()
    assert run.kinds("file_change")[0]["changes"][0]["kind"] == "add"


@pytest.mark.parametrize(("variant", "code"), [("", 1), (",variant=exit0", 0)])
def test_turn_failed_exit_codes(fake: Fake, variant: str, code: int) -> None:
    done = fake.codex(f"@@fake:scenario=turn_failed{variant}@@")
    assert done.code == code
    run = check_codex(done.lines)
    assert run.failed is not None
    assert run.usage is None
    assert done.lines[-2]["type"] == "error"
    assert done.lines[-1]["type"] == "turn.failed"


def test_completed_then_nonzero(fake: Fake) -> None:
    done = fake.codex("@@fake:scenario=completed_then_nonzero@@")
    assert done.code == 1
    assert check_codex(done.lines).usage is not None


def test_resume_keeps_the_thread_and_accumulates_usage(fake: Fake) -> None:
    first = fake.codex("Remember the number 4817.")
    one = check_codex(first.lines)
    files = list((fake.codex_home / "sessions").rglob(f"rollout-*-{one.thread_id}.jsonl"))
    assert len(files) == 1
    meta = json.loads(files[0].read_text().splitlines()[0])
    assert meta["type"] == "session_meta"
    assert meta["payload"]["id"] == one.thread_id
    done = fake.run(
        "codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "resume",
        one.thread_id,
        "-",
        stdin="What number?",
    )
    two = check_codex(done.lines)
    assert two.thread_id == one.thread_id
    assert "4817" in two.final_text
    assert "What number?" in two.final_text
    assert two.final_text.startswith("Continuing the thread (previous prompt was: ")
    assert one.usage is not None
    assert two.usage is not None
    for key in ("input_tokens", "cached_input_tokens", "output_tokens"):
        assert two.usage[key] > one.usage[key], key
    last = fake.run(
        "codex", "exec", "--json", "--skip-git-repo-check", "resume", "--last", stdin="And again?"
    )
    assert check_codex(last.lines).thread_id == one.thread_id


def test_resume_of_an_unknown_thread(fake: Fake) -> None:
    done = fake.run(
        "codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "resume",
        "0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77",
        "-",
        stdin="hi",
    )
    assert done.code == 1
    assert done.out == b""
    assert "0199c3a1-5e2b-7c40-9d11-6a2f8e0b4c77" in done.stderr


def test_ephemeral_writes_no_session(fake: Fake) -> None:
    check_codex(fake.codex("hi", "--ephemeral").lines)
    assert not (fake.codex_home / "sessions").exists()


def test_legacy_item_type(fake: Fake) -> None:
    run = check_codex(fake.codex("@@fake:scenario=legacy_item_type@@").lines, legacy=True)
    assert run.kinds("assistant_message")
    assert not run.kinds("agent_message")
    assert all("type" not in states[-1] for states in run.items.values())


def test_git_check(fake: Fake) -> None:
    outside = fake.run("codex", "exec", "--json", "-", stdin="hi")
    assert outside.code == 1
    assert "--skip-git-repo-check was not specified" in outside.stderr
    (fake.cwd / ".git").mkdir()
    inside = fake.run("codex", "exec", "--json", "-", stdin="hi")
    assert inside.code == 0
    check_codex(inside.lines)


def test_ask_for_approval_is_not_an_exec_option(fake: Fake) -> None:
    misplaced = fake.run(
        "codex", "exec", "--json", "--skip-git-repo-check", "-a", "never", "-", stdin="hi"
    )
    assert misplaced.code == 2
    assert "unexpected argument '--ask-for-approval'" in misplaced.stderr
    placed = fake.run(
        "codex", "-a", "never", "exec", "--json", "--skip-git-repo-check", "-", stdin="hi"
    )
    assert placed.code == 0


def test_image_flag_swallows_the_prompt(fake: Fake) -> None:
    done = fake.run(
        "codex", "exec", "--json", "--skip-git-repo-check", "--image", "a.png", "do it", stdin=b""
    )
    assert done.code == 1
    assert "No prompt provided via stdin." in done.stderr
    ok = fake.run(
        "codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--image",
        "a.png",
        "--",
        "do it",
        stdin=None,
    )
    assert "do it" in check_codex(ok.lines).final_text


def test_positional_prompt_with_stdin_block(fake: Fake) -> None:
    done = fake.run(
        "codex", "exec", "--json", "--skip-git-repo-check", "summarise", stdin="file body"
    )
    assert "summarise <stdin> file body </stdin>" in check_codex(done.lines).final_text


def test_cd_option_moves_the_working_directory(fake: Fake, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    fake.run(
        "codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-C",
        str(other),
        "--yolo",
        "-",
        stdin="@@fake:write path=x@@1@@end@@",
    )
    assert (other / "x").read_text() == "1"


def test_human_output_and_last_message_file(fake: Fake, tmp_path: Path) -> None:
    last = tmp_path / "last.txt"
    done = fake.run(
        "codex",
        "exec",
        "--skip-git-repo-check",
        "-o",
        str(last),
        "-",
        stdin="@@fake:say All good.@@",
    )
    assert done.code == 0
    assert done.text == "All good.\n"
    assert "tokens used" in done.stderr
    assert last.read_text() == "All good."


def test_empty_prompt(fake: Fake) -> None:
    done = fake.codex("   ")
    assert done.code == 1
    assert "No prompt provided via stdin." in done.stderr


def test_record_and_model(fake: Fake, tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    fake.codex(
        "hi", "-m", "gpt-5", env={"FAKE_AGENT_RECORD": str(record), "OPENAI_API_KEY": "sk-x"}
    )
    doc = json.loads(record.read_text())
    assert doc["argv"][-3:] == ["-m", "gpt-5", "-"]
    assert doc["stdin"] == "hi"
    assert doc["env"]["OPENAI_API_KEY"].startswith("<redacted")
