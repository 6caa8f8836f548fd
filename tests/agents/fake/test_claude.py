"""fake-claude against the Claude Code wire format (§1, §7): every run is a
real subprocess, checked line by line by :mod:`.wire`."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from .support import Fake
from .wire import UUID4, check_claude, check_costs, exact, formula


def test_success_has_init_one_message_and_a_result(fake: Fake) -> None:
    done = fake.claude("Summarise the repository, please.")
    assert done.code == 0, done.stderr
    run = check_claude(done.lines)
    assert run.types == ["system", "assistant", "result"]
    assert run.result is not None
    assert run.result["subtype"] == "success"
    assert run.result["is_error"] is False
    assert run.result["result"] == run.final_text
    assert "Summarise the repository, please." in run.final_text
    assert run.result["num_turns"] == 1
    assert run.init["model"] == "claude-sonnet-5-5"
    assert run.init["apiKeySource"] == "none"
    assert run.init["cwd"] == str(fake.cwd)
    assert len(run.init["tools"]) == 23
    check_costs(run.result)
    # 2.1.330 made no background (Haiku) call: one modelUsage entry.
    assert set(run.result["modelUsage"]) == {"claude-sonnet-5-5"}
    assert run.result["modelUsage"]["claude-sonnet-5-5"]["contextWindow"] == 1_000_000


def test_versions_before_2_1_330_keep_the_old_aliases_tools_and_background_call(
    fake: Fake,
) -> None:
    run = check_claude(fake.claude("hi", env={"FAKE_AGENT_VERSION": "2.1.329"}).lines)
    assert run.init["model"] == "claude-sonnet-4-5-20250929"
    assert "Glob" in run.init["tools"]
    assert run.result is not None
    assert set(run.result["modelUsage"]) == {
        "claude-sonnet-4-5-20250929",
        "claude-haiku-4-5-20251001",
    }


def test_lines_are_compact_json_flushed_one_per_line(fake: Fake) -> None:
    done = fake.claude("hello")
    for raw in done.out.splitlines():
        obj = json.loads(raw)
        assert raw.decode() == json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def test_api_key_source_follows_the_environment(fake: Fake) -> None:
    done = fake.claude("hi", env={"ANTHROPIC_API_KEY": "sk-test"})
    assert check_claude(done.lines).init["apiKeySource"] == "ANTHROPIC_API_KEY"


def test_model_aliases_resolve_and_price(fake: Fake) -> None:
    for alias, model in (
        ("opus", "claude-opus-5-5"),
        ("haiku", "claude-haiku-5-5"),
        ("claude-opus-4-5-20251101", "claude-opus-4-5-20251101"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1-20250805"),
    ):
        run = check_claude(fake.claude("hi", "--model", alias).lines)
        assert run.init["model"] == model
        assert run.result is not None
        check_costs(run.result)


def test_an_unknown_model_fails_like_the_api(fake: Fake) -> None:
    done = fake.claude("hi", "--model", "gpt-4o")
    assert done.code == 1
    run = check_claude(done.lines)
    assert run.result is not None
    assert run.result["is_error"] is True
    assert run.result["api_error_status"] == 404
    assert "gpt-4o" in run.result["result"]


def test_tool_use_shares_one_message_id_and_usage(fake: Fake) -> None:
    (fake.cwd / "a.txt").write_text("x")
    done = fake.claude("@@fake:scenario=tool_use@@ list things", "--dangerously-skip-permissions")
    assert done.code == 0
    run = check_claude(done.lines)
    assert run.types == ["system", "assistant", "assistant", "user", "assistant", "result"]
    first, second = run.assistants[0], run.assistants[1]
    assert first["message"]["id"] == second["message"]["id"]
    assert first["message"]["usage"] == second["message"]["usage"]
    assert [
        b["type"] for b in (first["message"]["content"][0], second["message"]["content"][0])
    ] == [
        "text",
        "tool_use",
    ]
    assert run.result is not None
    assert run.result["num_turns"] == 2
    (result,) = run.tool_results.values()
    assert result["content"] == "a.txt"
    check_costs(run.result)


def test_parallel_tool_results_come_in_reverse_order(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=parallel_tools@@")
    run = check_claude(done.lines)
    uses = [
        b["message"]["content"][0]["id"]
        for b in run.assistants
        if b["message"]["content"][0]["type"] == "tool_use"
    ]
    results = [u["message"]["content"][0]["tool_use_id"] for u in run.users]
    assert len(uses) == 2
    assert results == list(reversed(uses))
    assert len({a["message"]["id"] for a in run.assistants[:3]}) == 1


def test_tool_error_is_flagged_and_the_run_still_succeeds(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=tool_error@@")
    assert done.code == 0
    run = check_claude(done.lines)
    (user,) = run.users
    assert user["message"]["content"][0]["is_error"] is True
    assert isinstance(user["tool_use_result"], str)
    assert user["tool_use_result"].startswith("Error:")
    assert run.result is not None
    assert run.result["is_error"] is False


def test_thinking_block_precedes_the_text_in_one_message(fake: Fake) -> None:
    run = check_claude(fake.claude("@@fake:scenario=thinking@@ why?").lines)
    blocks = [a["message"]["content"][0] for a in run.assistants]
    assert [b["type"] for b in blocks] == ["thinking", "text"]
    assert blocks[0]["signature"]
    assert run.assistants[0]["message"]["id"] == run.assistants[1]["message"]["id"]


def test_subagent_lines_carry_the_task_id(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=subagent@@ explore")
    run = check_claude(done.lines)
    task = next(t for t in run.tool_uses.values() if t["name"] == "Task")
    inner = [a for a in run.assistants if a["parent_tool_use_id"] == task["id"]]
    assert inner
    assert all(a["message"]["model"] == "claude-haiku-4-5-20251001" for a in inner)
    assert any(u["parent_tool_use_id"] == task["id"] for u in run.users)
    # The subagent's text is not the final answer.
    assert run.result is not None
    assert run.result["result"] not in [a["message"]["content"][0].get("text") for a in inner]
    assert len(run.result["modelUsage"]) == 2
    check_costs(run.result)


def test_multi_model_cost_is_the_sum_over_models(fake: Fake) -> None:
    run = check_claude(fake.claude("@@fake:scenario=multi_model_cost@@").lines)
    assert run.result is not None
    models = run.result["modelUsage"]
    assert set(models) == {"claude-sonnet-5-5", "claude-opus-5-5"}
    check_costs(run.result)
    total = sum((formula(m, e) for m, e in models.items()), Decimal(0))
    assert exact(run.result["total_cost_usd"]) == total
    # result.usage covers the main model only: pricing it alone misses money.
    assert formula("claude-sonnet-5-5", models["claude-sonnet-5-5"]) < total


def test_one_hour_cache_writes_are_priced_at_twice_the_input(fake: Fake) -> None:
    run = check_claude(fake.claude("@@fake:scenario=multi_model_cost,cache_ttl=1h@@").lines)
    assert run.result is not None
    usage = run.result["usage"]
    assert (
        usage["cache_creation"]["ephemeral_1h_input_tokens"]
        == usage["cache_creation_input_tokens"]
        > 0
    )
    entry = run.result["modelUsage"]["claude-sonnet-5-5"]
    expected = (
        Decimal(usage["input_tokens"]) * 2
        + Decimal(usage["cache_creation_input_tokens"]) * 4
        + Decimal(usage["cache_read_input_tokens"]) * Decimal("0.10")
        + Decimal(usage["output_tokens"]) * 10
    ) / 1_000_000
    assert exact(entry["costUSD"]) == expected


@pytest.mark.parametrize("how", ["scenario", "env"])
def test_cost_can_be_omitted(fake: Fake, how: str) -> None:
    if how == "scenario":
        done = fake.claude("@@fake:scenario=cost_omitted@@")
    else:
        done = fake.claude("hi", env={"FAKE_AGENT_OMIT_COST": "1"})
    run = check_claude(done.lines)
    assert run.result is not None
    assert "total_cost_usd" not in run.result
    assert all("costUSD" not in e for e in run.result["modelUsage"].values())


def test_partial_messages_deltas_assemble_to_the_text(fake: Fake) -> None:
    done = fake.claude("stream it", "--include-partial-messages")
    run = check_claude(done.lines)
    deltas = [
        line["event"]["delta"]["text"]
        for line in done.lines
        if line["type"] == "stream_event"
        and line["event"]["type"] == "content_block_delta"
        and line["event"]["delta"]["type"] == "text_delta"
    ]
    assert "".join(deltas) == run.final_text
    events = [line["event"]["type"] for line in done.lines if line["type"] == "stream_event"]
    assert events[0] == "message_start"
    assert events[-1] == "message_stop"
    stop = next(
        line
        for line in done.lines
        if line["type"] == "stream_event" and line["event"]["type"] == "message_delta"
    )
    assert run.result is not None
    assert stop["event"]["usage"]["output_tokens"] == run.result["usage"]["output_tokens"]


def test_partial_messages_need_stream_json(fake: Fake) -> None:
    done = fake.run("claude", "-p", "--include-partial-messages", stdin="hi")
    assert done.code == 1
    assert "--include-partial-messages" in done.stderr


def test_retry_notices_come_before_the_answer(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=retry_then_ok,delay_ms=1@@")
    assert done.code == 0
    retries = [line for line in done.lines if line.get("subtype") == "api_retry"]
    assert [r["attempt"] for r in retries] == [1, 2, 3]
    assert {r["error_status"] for r in retries} == {529}
    assert retries[1]["retry_delay_ms"] == 2 * retries[0]["retry_delay_ms"]
    check_claude(done.lines)


def test_api_error_is_a_synthetic_message_and_an_error_result(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=api_error,delay_ms=1@@")
    assert done.code == 1
    run = check_claude(done.lines)
    assert [line["error_status"] for line in done.lines if line.get("subtype") == "api_retry"] == [
        429,
        429,
    ]
    (synthetic,) = run.assistants
    assert synthetic["message"]["model"] == "<synthetic>"
    assert synthetic["error"] == "rate_limit"
    assert run.result is not None
    assert run.result["subtype"] == "success"
    assert run.result["is_error"] is True
    assert run.result["api_error_status"] == 429
    assert run.result["total_cost_usd"] == 0
    assert run.result["modelUsage"] == {}
    assert run.result["result"].startswith("API Error: Request rejected (429)")


def test_auth_error_does_not_retry(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=auth_error@@")
    assert done.code == 1
    run = check_claude(done.lines)
    assert not [line for line in done.lines if line.get("subtype") == "api_retry"]
    assert run.assistants[0]["error"] == "authentication_failed"
    assert run.result is not None
    assert run.result["is_error"] is True
    assert "Please run /login" in run.result["result"]


def test_max_turns_flag_below_the_scripted_turns(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=tool_use@@", "--max-turns", "1")
    assert done.code == 1
    run = check_claude(done.lines, dangling_ok=True)
    assert run.result is not None
    assert run.result["subtype"] == "error_max_turns"
    assert run.result["is_error"] is True
    assert run.result["terminal_reason"] == "max_turns"
    assert run.result["errors"] == ["Reached maximum number of turns (1)"]
    assert run.result["num_turns"] == 2
    # 2.1.330 (verified against the real CLI): N turns are N API calls.
    assert len({a["message"]["id"] for a in run.assistants}) == 1


def test_max_turns_one_allows_one_api_call(fake: Fake) -> None:
    run = check_claude(fake.claude("hi", "--max-turns", "1").lines)
    assert run.result is not None
    assert run.result["subtype"] == "success"


def test_max_turns_one_fails_before_any_reply_before_2_1_330(fake: Fake) -> None:
    done = fake.claude("hi", "--max-turns", "1", env={"FAKE_AGENT_VERSION": "2.1.30"})
    run = check_claude(done.lines)
    assert run.assistants == []
    assert run.result is not None
    assert run.result["subtype"] == "error_max_turns"


def test_max_turns_in_2_0_counts_api_calls(fake: Fake) -> None:
    done = fake.claude("hi", "--max-turns", "1", env={"FAKE_AGENT_VERSION": "2.0.77"})
    run = check_claude(done.lines)
    assert run.result is not None
    assert run.result["subtype"] == "success"


def test_max_turns_scenario_and_legacy_shape(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=max_turns,turns=3@@")
    assert done.code == 1
    run = check_claude(done.lines)
    assert run.result is not None
    assert run.result["errors"] == ["Reached maximum number of turns (3)"]
    legacy = fake.claude("@@fake:scenario=max_turns_legacy,turns=2@@")
    assert legacy.code == 0
    run = check_claude(legacy.lines)
    assert run.result is not None
    assert run.result["subtype"] == "error_max_turns"
    assert run.result["is_error"] is False
    assert "terminal_reason" not in run.result
    assert "result" not in run.result


def test_max_budget_stops_when_the_cost_reaches_it(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=max_budget,usd=0.05@@")
    assert done.code == 1
    run = check_claude(done.lines, dangling_ok=True)
    assert run.result is not None
    assert run.result["subtype"] == "error_max_budget_usd"
    assert run.result["total_cost_usd"] >= 0.05
    flag = fake.claude("hi", "--max-budget-usd", "0.0001")
    run = check_claude(flag.lines)
    assert flag.code == 1
    assert run.result is not None
    assert run.result["subtype"] == "error_max_budget_usd"


def test_error_result_has_errors_and_a_trace(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=error_result@@")
    assert done.code == 1
    assert "Tool execution crashed" in done.stderr
    run = check_claude(done.lines)
    assert run.result is not None
    assert run.result["errors"] == ["Tool execution crashed"]


def test_stream_json_without_verbose_is_refused(fake: Fake) -> None:
    done = fake.run("claude", "-p", "--output-format", "stream-json", stdin="hi")
    assert done.code == 1
    assert done.out == b""
    assert done.stderr.strip() == (
        "Error: When using --print, --output-format=stream-json requires --verbose"
    )


@pytest.mark.parametrize("prompt", ["", "  \n\t "])
def test_empty_prompt_is_refused(fake: Fake, prompt: str) -> None:
    done = fake.claude(prompt)
    assert done.code == 1
    assert done.out == b""
    assert "Input must be provided either through stdin or as a prompt argument" in done.stderr


def test_a_variadic_flag_swallows_a_positional_prompt(fake: Fake) -> None:
    base = ["-p", "--output-format", "stream-json", "--verbose"]
    swallowed = fake.run(
        "claude", *base, "--allowedTools", "Bash", "Read", "do the work", stdin=None
    )
    assert swallowed.code == 1
    assert "Input must be provided" in swallowed.stderr
    for flag in ("--disallowedTools", "--add-dir", "--mcp-config"):
        done = fake.run("claude", *base, flag, "x", "do the work", stdin=None)
        assert done.code == 1, flag
    after_dashes = fake.run(
        "claude", *base, "--allowedTools", "Bash", "--", "do the work", stdin=None
    )
    assert after_dashes.code == 0
    assert "do the work" in check_claude(after_dashes.lines).final_text


def test_positional_prompt_and_stdin_are_both_used(fake: Fake) -> None:
    done = fake.run(
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "first part",
        stdin="second part",
    )
    text = check_claude(done.lines).final_text
    assert "first part" in text
    assert "second part" in text


def test_output_format_json_and_text(fake: Fake) -> None:
    as_json = fake.run("claude", "-p", "--output-format", "json", stdin="hello json")
    result = json.loads(as_json.out)
    assert result["type"] == "result"
    assert "hello json" in result["result"]
    verbose = fake.run("claude", "-p", "--output-format", "json", "--verbose", stdin="hello")
    assert [line["type"] for line in json.loads(verbose.out)] == ["system", "assistant", "result"]
    as_text = fake.run("claude", "-p", stdin="hello text")
    assert as_text.code == 0
    assert as_text.text.strip() == result["result"].replace("hello json", "hello text")


def test_preassigned_session_id_and_its_reuse(fake: Fake) -> None:
    sid = "5a0f8a3e-2f4b-4c1d-9e7a-3b2c1d0e9f8a"
    first = fake.claude("hi", "--session-id", sid)
    assert check_claude(first.lines).session_id == sid
    again = fake.claude("hi", f"--session-id={sid}")
    assert again.code == 1
    assert again.out == b""
    assert again.stderr.strip() == f"Error: Session ID {sid} is already in use."
    bad = fake.claude("hi", "--session-id", "not-a-uuid")
    assert bad.code == 1
    assert "Invalid session ID" in bad.stderr


def test_transcript_records_the_prompt_and_final_usage(fake: Fake) -> None:
    done = fake.claude(
        "@@fake:scenario=tool_use@@ Please look around.", "--dangerously-skip-permissions"
    )
    run = check_claude(done.lines)
    entries = fake.transcript(run.session_id)
    assert entries[0]["type"] == "user"
    assert "Please look around." in entries[0]["message"]["content"]
    parent = None
    for entry in entries:
        for key in (
            "uuid",
            "parentUuid",
            "isSidechain",
            "userType",
            "cwd",
            "sessionId",
            "version",
            "gitBranch",
            "timestamp",
        ):
            assert key in entry, key
        assert entry["parentUuid"] == parent
        assert entry["sessionId"] == run.session_id
        parent = entry["uuid"]
    stored = {
        e["message"]["id"]: e["message"]["usage"] for e in entries if e["type"] == "assistant"
    }
    assert stored.keys() == run.snapshots.keys()
    for msg_id, snapshot in run.snapshots.items():
        assert snapshot["output_tokens"] < stored[msg_id]["output_tokens"]
    assert run.result is not None
    assert sum(u["output_tokens"] for u in stored.values()) == run.result["usage"]["output_tokens"]
    assert any("toolUseResult" in e for e in entries)


def test_no_session_persistence_writes_nothing(fake: Fake) -> None:
    run = check_claude(fake.claude("hi", "--no-session-persistence").lines)
    assert not fake.transcript_path(run.session_id).exists()
    again = fake.claude("more", f"--resume={run.session_id}")
    assert again.code == 1


def test_resume_same_keeps_the_id_and_quotes_the_previous_prompt(fake: Fake) -> None:
    first = check_claude(fake.claude("The secret word is heliotrope.").lines)
    done = fake.claude("What was the word?", f"--resume={first.session_id}")
    assert done.code == 0
    run = check_claude(done.lines)
    assert run.session_id == first.session_id
    assert "heliotrope" in run.final_text
    assert "What was the word?" in run.final_text
    assert run.final_text.startswith("Continuing our session (previous prompt was: ")
    entries = fake.transcript(first.session_id)
    prompts = [
        e["message"]["content"]
        for e in entries
        if e["type"] == "user" and isinstance(e["message"]["content"], str)
    ]
    assert prompts == ["The secret word is heliotrope.", "What was the word?"]
    # The resumed entries chain on from the old ones.
    uuids = [e["uuid"] for e in entries]
    assert all(e["parentUuid"] in (None, *uuids) for e in entries)


def test_resume_mode_new_forks_and_copies_the_history(fake: Fake) -> None:
    first = check_claude(fake.claude("Remember quartz.").lines)
    done = fake.claude(
        "And now?", f"--resume={first.session_id}", env={"FAKE_AGENT_RESUME_MODE": "new"}
    )
    run = check_claude(done.lines)
    assert run.session_id != first.session_id
    assert "quartz" in run.final_text
    copied = fake.transcript(run.session_id)
    assert copied[0]["message"]["content"] == "Remember quartz."
    assert {e["sessionId"] for e in copied} == {run.session_id}
    fork = check_claude(
        fake.claude("Fork it", f"--resume={first.session_id}", "--fork-session").lines
    )
    assert fork.session_id not in (first.session_id, run.session_id)


def test_resume_mode_tag_reports_an_id_without_a_file(fake: Fake) -> None:
    first = check_claude(fake.claude("Remember basalt.").lines)
    done = fake.claude(
        "Next", f"--resume={first.session_id}", env={"FAKE_AGENT_RESUME_MODE": "tag"}
    )
    run = check_claude(done.lines)
    assert run.session_id != first.session_id
    assert not fake.transcript_path(run.session_id).exists()
    old = fake.transcript(first.session_id)
    assert old[-1]["type"] == "assistant"
    assert any(e["message"].get("content") == "Next" for e in old if e["type"] == "user")
    again = fake.claude("Again", f"--resume={run.session_id}")
    assert again.code == 1
    assert "No conversation found" in again.stderr


def test_resume_of_an_unknown_id(fake: Fake) -> None:
    sid = "380b1ed3-03fa-476a-aba1-561bb73eeb75"
    done = fake.claude("hi", f"--resume={sid}")
    assert done.code == 1
    message = f"No conversation found with session ID: {sid}"
    assert message in done.stderr
    (result,) = done.lines
    assert result["subtype"] == "error_during_execution"
    assert result["errors"] == [message]
    assert result["num_turns"] == 0
    assert "result" not in result
    legacy = fake.claude("hi", f"--resume={sid}", env={"FAKE_AGENT_LEGACY_ERRORS": "1"})
    assert legacy.code == 1
    assert legacy.out == b""
    assert message in legacy.stderr


def test_resume_without_a_value_and_session_id_with_resume(fake: Fake) -> None:
    done = fake.claude("hi", "--resume")
    assert done.code == 1
    assert "--resume without a value" in done.stderr
    sid = "5a0f8a3e-2f4b-4c1d-9e7a-3b2c1d0e9f8a"
    both = fake.claude("hi", "--resume=380b1ed3-03fa-476a-aba1-561bb73eeb75", "--session-id", sid)
    assert both.code == 1
    assert "--fork-session" in both.stderr


def test_continue_picks_the_latest_session(fake: Fake) -> None:
    none = fake.claude("hi", "--continue")
    assert none.code == 1
    assert "No conversation found" in none.stderr
    check_claude(fake.claude("older").lines)
    latest = check_claude(fake.claude("the newest one").lines)
    run = check_claude(fake.claude("go on", "-c").lines)
    assert run.session_id == latest.session_id
    assert "the newest one" in run.final_text


def test_permission_mode_decides_whether_files_change(fake: Fake) -> None:
    prompt = "@@fake:write path=out.txt@@data\n@@end@@"
    denied = check_claude(fake.claude(prompt).lines)
    assert not (fake.cwd / "out.txt").exists()
    assert denied.result is not None
    (denial,) = denied.result["permission_denials"]
    assert denial["tool_name"] == "Write"
    assert denial["tool_input"]["file_path"] == str(fake.cwd / "out.txt")
    assert next(iter(denied.tool_results.values()))["is_error"] is True
    for flags in (
        ["--permission-mode", "acceptEdits"],
        ["--allowedTools", "Write"],
        ["--dangerously-skip-permissions"],
    ):
        (fake.cwd / "out.txt").unlink(missing_ok=True)
        run = check_claude(fake.claude(prompt, *flags).lines)
        assert (fake.cwd / "out.txt").read_text() == "data\n", flags
        assert run.result is not None
        assert run.result["permission_denials"] == []
    (fake.cwd / "out.txt").unlink()
    check_claude(
        fake.claude(prompt, "--dangerously-skip-permissions", "--disallowedTools", "Write").lines
    )
    assert not (fake.cwd / "out.txt").exists()


def test_invalid_permission_mode(fake: Fake) -> None:
    done = fake.claude("hi", "--permission-mode", "yolo")
    assert done.code == 1
    assert "Allowed choices" in done.stderr


def test_nested_claude_code_is_refused(fake: Fake) -> None:
    done = fake.claude("hi", env={"CLAUDECODE": "1"})
    assert done.code == 1
    assert "CLAUDECODE" in done.stderr


def test_seed_makes_runs_repeatable(fake: Fake, tmp_path: Path) -> None:
    env = {"FAKE_AGENT_SEED": "7", "FAKE_AGENT_SCENARIO": "tool_use"}
    a = fake.claude("same prompt", "--no-session-persistence", env=env)
    b = fake.claude("same prompt", "--no-session-persistence", env=env)
    c = fake.claude("same prompt", "--no-session-persistence", env={**env, "FAKE_AGENT_SEED": "8"})
    assert a.out == b.out
    assert a.out != c.out
    check_claude(a.lines)


def test_record_captures_argv_cwd_env_and_stdin(fake: Fake, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    env = {
        "FAKE_AGENT_RECORD": str(record),
        "ANTHROPIC_API_KEY": "sk-secret",
        "ANTHROPIC_BASE_URL": "http://proxy",
    }
    fake.claude("recorded prompt", "--model", "opus", env=env)
    doc = json.loads(record.read_text())
    assert doc["argv"] == ["-p", "--output-format", "stream-json", "--verbose", "--model", "opus"]
    assert doc["cwd"] == str(fake.cwd)
    assert doc["stdin"] == "recorded prompt"
    assert doc["env"]["ANTHROPIC_BASE_URL"] == "http://proxy"
    assert "sk-secret" not in record.read_text()
    failed = fake.run("claude", "-p", "--output-format", "stream-json", stdin="x", env=env)
    assert failed.code == 1
    assert json.loads(record.read_text())["argv"] == ["-p", "--output-format", "stream-json"]


def test_session_ids_are_uuid4(fake: Fake) -> None:
    run = check_claude(fake.claude("hi").lines)
    assert UUID4.match(run.session_id)


# -- 2.1.330 fidelity (each checked against the real CLI in tests/agents/real) ---------------


def test_parallel_tool_results_count_as_turns(fake: Fake) -> None:
    # 2 API calls and 2 tool results: num_turns 3, as the real CLI counts.
    run = check_claude(fake.claude("@@fake:scenario=parallel_tools@@").lines)
    assert run.result is not None
    assert len({a["message"]["id"] for a in run.assistants}) == 2
    assert run.result["num_turns"] == 3


def test_a_large_tool_output_is_spilled_with_a_preview(fake: Fake) -> None:
    size = 3_000_000
    done = fake.claude(f"@@fake:scenario=huge_output,bytes={size},events=5@@")
    assert done.code == 0
    run = check_claude(done.lines)
    (user,) = run.users
    content = user["message"]["content"][0]["content"]
    meta = user["tool_use_result"]
    path = Path(meta["persistedOutputPath"])
    assert content.startswith(
        "<persisted-output>\nOutput too large (2.9MB). Full output saved to: "
    )
    assert content.endswith("\n...\n</persisted-output>")
    assert str(path) in content
    assert path.parent.name == "tool-results"
    assert path.parent.parent.name == run.session_id
    assert fake.claude_dir in path.parents
    assert path.stat().st_size == meta["persistedOutputSize"] == size
    with path.open() as fh:
        head = fh.read(30_000)
    assert meta["stdout"] == head
    assert head[:2048] in content
    assert max(map(len, done.out.split(b"\n"))) < 40_000  # 33 KB in the real CLI
    assert run.result is not None
    assert run.result["num_turns"] == 2


def test_max_tokens_continues_by_itself(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=max_tokens@@ write a lot")
    assert done.code == 0
    run = check_claude(done.lines)
    (nudge,) = run.users
    assert nudge["isSynthetic"] is True
    text = nudge["message"]["content"][0]["text"]
    assert text.startswith("Output token limit hit. Resume directly")
    assert len({a["message"]["id"] for a in run.assistants}) == 2
    assert run.result is not None
    assert (run.result["subtype"], run.result["num_turns"]) == ("success", 2)
    assert run.result["terminal_reason"] == "completed"
    # The nudge is not taken for the user's prompt when the session resumes.
    again = check_claude(fake.claude("go on", f"--resume={run.session_id}").lines)
    assert 'previous prompt was: "write a lot"' in again.final_text


@pytest.mark.parametrize(("status", "error"), [(401, "authentication_failed"), (429, "rate_limit")])
def test_retried_statuses_follow_claude_code_max_retries(
    fake: Fake, status: int, error: str
) -> None:
    env = {"CLAUDE_CODE_MAX_RETRIES": "3"}
    done = fake.claude(f"@@fake:scenario=api_error,status={status},delay_ms=1@@", env=env)
    assert done.code == 1
    retries = [line for line in done.lines if line.get("subtype") == "api_retry"]
    assert [(r["attempt"], r["max_retries"], r["error"]) for r in retries] == [
        (n, 3, error) for n in (1, 2, 3)
    ]


@pytest.mark.parametrize("status", [400, 402, 403, 404, 413])
def test_statuses_that_are_not_retried(fake: Fake, status: int) -> None:
    done = fake.claude(f"@@fake:scenario=api_error,status={status},count=3@@")
    assert done.code == 1
    assert not [line for line in done.lines if line.get("subtype") == "api_retry"]
    run = check_claude(done.lines)
    assert run.result is not None
    assert (run.result["api_error_status"], run.result["num_turns"]) == (status, 1)


def test_thinking_streams_its_token_estimate(fake: Fake) -> None:
    done = fake.claude("@@fake:scenario=thinking@@ why?")
    estimates = [line for line in done.lines if line.get("subtype") == "thinking_tokens"]
    assert len(estimates) == 2
    assert estimates[1]["estimated_tokens"] == sum(e["estimated_tokens_delta"] for e in estimates)
    kinds = [(line["type"], line.get("subtype")) for line in done.lines]
    assert kinds.index(("system", "thinking_tokens")) < kinds.index(("assistant", None))
