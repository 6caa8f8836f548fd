"""Traces of real ``weft run`` processes, read back from a real OTLP/HTTP receiver.

Every test runs ``python -m weft`` on the fake agent with the OpenTelemetry
variables a user sets, and decodes what the SDK put on the wire
(:mod:`tests.telemetry.receiver`): the span tree, the ``gen_ai.*`` attributes,
the costs against ``weft status --json`` (the one fold), the agent's
``TRACEPARENT``, ``weft export-trace`` of the same execution, and a collector
that is down or refuses.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    codon,
    loop,
    scenario,
    subprocess_environment,
    weft_cli,
    write_file,
    write_hank,
)
from tests.telemetry.receiver import Receiver, Span, closed_port, otlp_receiver

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass
class Traced:
    """One traced run: what the receiver got, the execution, its status, the agent's env."""

    spans: list[Span]
    execution: Path
    status: dict[str, Any]
    agent_env: dict[str, str]
    env: dict[str, str]
    stdout: str
    stderr: str
    url: str
    receiver: Receiver

    def named(self, prefix: str) -> list[Span]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def children(self, parent: Span) -> list[Span]:
        return [s for s in self.spans if s.parent_id == parent.span_id]


def _hank(root: Path, record: Path) -> Path:
    return write_hank(
        root / "traced",
        codon("a", write_file("a.md", "alpha\n"), record=record),
        codon("b", write_file("b.md", "beta\n")),
    )


def _status(execution: Path, env: dict[str, str]) -> dict[str, Any]:
    done = weft_cli("status", execution, "--json", env=env)
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def _run(tmp: Path, extra_env: dict[str, str], *argv: str) -> Traced:
    record = tmp / "agent-a.json"
    hank = _hank(tmp, record)
    env = subprocess_environment(tmp)
    with otlp_receiver() as receiver:
        env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, **extra_env}
        done = weft_cli("run", hank, "--headless", *argv, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        spans = list(receiver.spans)
    (execution,) = (tmp / "managed").iterdir()
    recorded = json.loads(record.read_text())
    return Traced(
        spans,
        execution,
        _status(execution, env),
        recorded["env"],
        env,
        done.stdout,
        done.stderr,
        receiver.url,
        receiver,
    )


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Traced:
    return _run(tmp_path_factory.mktemp("traced"), {})


def test_a_run_is_one_trace_run_codon_attempt_session_tool(traced: Traced) -> None:
    (run,) = [s for s in traced.spans if not s.parent_id]
    assert run.name == f"weft run {traced.execution.name}"
    assert {s.trace_id for s in traced.spans} == {run.trace_id}
    assert len({s.span_id for s in traced.spans}) == len(traced.spans)
    codons = traced.children(run)
    assert sorted(s.name for s in codons) == ["weft codon a", "weft codon b"]
    for codon_span in codons:
        (attempt,) = traced.children(codon_span)
        assert attempt.name == f"invoke_agent {codon_span.attributes['weft.codon.id']}"
        kinds = Counter(
            s.name.split(" ")[0] + " " + s.name.split(" ")[1] for s in traced.children(attempt)
        )
        assert kinds == {"weft session": 1, "weft checkpoint": 1}
        (session,) = [s for s in traced.children(attempt) if s.name.startswith("weft session")]
        (tool,) = traced.children(session)
        assert tool.name == "execute_tool Write"
        # Children sit inside their parents' time.
        assert codon_span.start_ns <= attempt.start_ns <= session.start_ns <= tool.start_ns
        assert tool.end_ns <= session.end_ns <= attempt.end_ns <= run.end_ns
    assert run.resource["service.name"] == "weft"


def test_spans_carry_the_gen_ai_conventions(traced: Traced) -> None:
    (run,) = [s for s in traced.spans if not s.parent_id]
    assert run.attributes["gen_ai.operation.name"] == "invoke_workflow"
    sessions = {d["codonId"]: d["sessionId"] for d in _journal(traced.execution, "codon.started")}
    for attempt in traced.named("invoke_agent"):
        a = attempt.attributes
        assert a["gen_ai.operation.name"] == "invoke_agent"
        assert a["gen_ai.provider.name"] == "anthropic"
        assert a["gen_ai.request.model"] == "fake/sonnet"
        assert a["gen_ai.response.model"].startswith("claude-")
        assert a["gen_ai.usage.input_tokens"] > 0
        assert a["gen_ai.usage.output_tokens"] > 0
        assert a["gen_ai.conversation.id"] == sessions[a["weft.codon.id"]]
    for tool in traced.named("execute_tool"):
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.name"] == "Write"
        assert tool.attributes["gen_ai.tool.call.id"]
        # Content is opt-in: neither the arguments nor the result are sent.
        assert "gen_ai.tool.call.arguments" not in tool.attributes
        assert "gen_ai.tool.call.result" not in tool.attributes
    assert not [s for s in traced.spans if "gen_ai.output_messages" in s.attributes]


def test_costs_are_the_journals(traced: Traced) -> None:
    (run,) = [s for s in traced.spans if not s.parent_id]
    (status_run,) = traced.status["runs"]
    assert run.attributes["weft.cost_usd"] == pytest.approx(traced.status["totalCost"], abs=1e-9)
    assert run.attributes["weft.cost_usd"] > 0
    for record in status_run["codons"]:
        (span,) = [
            s
            for s in traced.named("weft codon")
            if s.attributes["weft.codon.id"] == record["codonId"]
        ]
        assert span.attributes["weft.cost_usd"] == pytest.approx(record["cost"], abs=1e-9)
        (attempt,) = traced.children(span)
        assert attempt.attributes["weft.cost_usd"] == pytest.approx(record["cost"], abs=1e-9)


def test_metrics_carry_the_spans_figures(traced: Traced) -> None:
    """Cost, tokens, durations and outcomes as OTel metrics, from the same spans."""
    attempts = traced.named("invoke_agent")
    cost = sum(p.value for p in traced.receiver.last("weft.cost"))
    assert cost == pytest.approx(traced.status["totalCost"], abs=1e-9)
    (outcomes,) = traced.receiver.last("weft.codon.attempts")
    assert (outcomes.attributes, outcomes.value) == ({"weft.status": "completed"}, len(attempts))
    tokens = {
        p.attributes["gen_ai.token.type"]: p
        for p in traced.receiver.last("gen_ai.client.token.usage")
    }
    assert tokens["input"].value == sum(a.attributes["gen_ai.usage.input_tokens"] for a in attempts)
    assert tokens["output"].count == len(attempts)
    (durations,) = traced.receiver.last("gen_ai.client.operation.duration")
    assert durations.count == len(attempts)
    assert durations.attributes["gen_ai.request.model"] == "fake/sonnet"


def test_the_agent_gets_its_attempts_trace_context_and_the_exporter(traced: Traced) -> None:
    (attempt,) = [s for s in traced.named("invoke_agent") if s.attributes["weft.codon.id"] == "a"]
    env = traced.agent_env
    assert env["TRACEPARENT"] == f"00-{attempt.trace_id}-{attempt.span_id}-01"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == traced.url
    assert env["OTEL_TRACES_EXPORTER"] == "otlp"
    assert env["CLAUDE_CODE_ENABLE_TELEMETRY"] == "1"
    assert "OTEL_SERVICE_NAME" not in env  # the agent names its own service


def test_export_trace_of_the_finished_execution_sends_the_same_spans(traced: Traced) -> None:
    with otlp_receiver() as receiver:
        done = weft_cli(
            "export-trace", traced.execution, "--endpoint", receiver.url, env=traced.env
        )
        assert done.returncode == 0, done.stderr
        again = list(receiver.spans)
    assert f"sent {len(traced.spans)} spans (1 run)" in done.stdout
    assert sorted(map(_key, again)) == sorted(map(_key, traced.spans))


def test_the_callers_traceparent_is_the_runs_parent_and_content_is_opt_in(tmp_path: Path) -> None:
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    got = _run(
        tmp_path,
        {"TRACEPARENT": caller, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"},
    )
    (run,) = [s for s in got.spans if s.name.startswith("weft run")]
    assert (run.trace_id, run.parent_id) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert {s.trace_id for s in got.spans} == {run.trace_id}
    tools = got.named("execute_tool")
    assert tools
    assert all(json.loads(t.attributes["gen_ai.tool.call.arguments"]) for t in tools)
    assert got.agent_env["TRACEPARENT"].startswith("00-0af7651916cd43dd8448eb211c80319c-")


def test_a_budget_stop_is_a_span_event_and_the_run_says_how_it_ended(tmp_path: Path) -> None:
    step = codon(
        "step", '@@fake:append path=log.md content="x\\n"@@\n', model="fake/haiku", files=["log.md"]
    )
    hank = write_hank(tmp_path / "grind", loop("grind", step, limit=6))
    env = subprocess_environment(tmp_path)
    with otlp_receiver() as receiver:
        env = {
            **env,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "WEFT_RUNTIME_BUDGET_MAX_DOLLARS": "0.002",
        }
        done = weft_cli("run", hank, "--headless", env=env)
        spans = list(receiver.spans)
    assert done.returncode == 3, done.stdout
    (run,) = [s for s in spans if not s.parent_id]
    assert run.attributes["weft.status"] == "budget"
    (execution,) = (tmp_path / "managed").iterdir()
    assert run.attributes["weft.cost_usd"] == pytest.approx(
        _status(execution, env)["totalCost"], abs=1e-9
    )
    crossed = [
        (name, attrs) for s in spans for name, attrs in s.events if name == "budget.exceeded"
    ]
    assert crossed
    assert crossed[0][1]["weft.scope"] == "run"


def _key(s: Span) -> tuple[Any, ...]:
    return (
        s.trace_id,
        s.span_id,
        s.parent_id,
        s.name,
        s.start_ns,
        s.end_ns,
        sorted(s.attributes.items()),
        s.status,
    )


def test_a_continued_execution_is_one_trace_per_run_and_export_trace_sends_the_same(
    tmp_path: Path,
) -> None:
    """A run stopped by its budget, then continued: two traces, live; exporting the
    execution afterwards sends exactly those spans (the continuation run's fold is
    seeded with the plan its RunStarted does not carry)."""
    step = codon(
        "step", '@@fake:append path=log.md content="x\\n"@@\n', model="fake/haiku", files=["log.md"]
    )
    hank = write_hank(tmp_path / "grind", loop("grind", step, limit=6), codon("last", "Done.\n"))
    env = subprocess_environment(tmp_path)
    with otlp_receiver() as receiver:
        traced = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        capped = {**traced, "WEFT_RUNTIME_BUDGET_MAX_DOLLARS": "0.002"}
        assert weft_cli("run", hank, "--headless", env=capped).returncode == 3
        (execution,) = (tmp_path / "managed").iterdir()
        again = weft_cli(
            "run", "--execution", execution, "--headless", "--max-cost", "5", env=traced
        )
        assert again.returncode == 0, again.stdout
        live = list(receiver.spans)
    runs = [s for s in live if not s.parent_id]
    assert len(runs) == 2
    assert len({s.trace_id for s in live}) == 2
    with otlp_receiver() as receiver:
        done = weft_cli("export-trace", execution, "--endpoint", receiver.url, env=env)
        assert done.returncode == 0, done.stderr
        exported = list(receiver.spans)
    assert "(2 runs)" in done.stdout
    assert sorted(map(_key, exported)) == sorted(map(_key, live))


@pytest.mark.parametrize("collector", ["down", "refusing"])
def test_a_collector_that_is_down_or_refuses_changes_nothing_but_one_warning(
    tmp_path: Path, collector: str
) -> None:
    record = tmp_path / "agent-a.json"
    hank = _hank(tmp_path, record)
    env = subprocess_environment(tmp_path)
    started = time.monotonic()
    off = weft_cli("run", hank, "--headless", "--new", env=env)
    off_seconds = time.monotonic() - started
    assert off.returncode == 0
    with otlp_receiver(refuse=True) as refusing:
        url = refusing.url if collector == "refusing" else f"http://127.0.0.1:{closed_port()}"
        started = time.monotonic()
        done = weft_cli(
            "run", hank, "--headless", "--new", env={**env, "OTEL_EXPORTER_OTLP_ENDPOINT": url}
        )
        on_seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All codons completed" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "traces could not be sent" in line]
    assert len(warnings) == 1, done.stderr
    assert url in warnings[0]
    # One export timeout at most (2 s, once), on a shared machine: generous.
    assert on_seconds < off_seconds + 6, (on_seconds, off_seconds)


def _journal(execution: Path, kind: str) -> list[dict[str, Any]]:
    from tests.runtime.hanks import journal

    return [data for t, data in journal(execution) if t == kind]


def test_a_crashed_session_a_failed_tool_and_a_failed_codon_show_in_the_tree(
    tmp_path: Path,
) -> None:
    """The agent of ``a`` crashes mid tool call (the supervisor resumes it: two
    sessions, the call left unfinished); ``b``'s tool fails; ``c`` fails for good
    (no credentials)."""
    hank = write_hank(
        tmp_path / "rough",
        codon("a", scenario("crash_mid_run")),
        codon("b", scenario("tool_error")),
        codon("c", scenario("auth_error")),
    )
    env = subprocess_environment(tmp_path)
    with otlp_receiver() as receiver:
        env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        done = weft_cli("run", hank, "--headless", env=env)
        spans = list(receiver.spans)
    assert done.returncode == 1, done.stdout
    by_id = {s.span_id: s for s in spans}

    def attempt_of(codon_id: str) -> Span:
        (found,) = [s for s in spans if s.name == f"invoke_agent {codon_id}"]
        return found

    a = attempt_of("a")
    sessions = sorted(
        (s for s in spans if s.parent_id == a.span_id and s.name.startswith("weft session")),
        key=lambda s: s.start_ns,
    )
    assert [s.name for s in sessions] == ["weft session 1", "weft session 2"]
    (cut,) = [s for s in spans if s.parent_id == sessions[0].span_id]
    assert cut.attributes["weft.unfinished"] is True
    assert [name for name, _ in a.events] == ["session.cooldown", "session.resumed"]
    assert a.status == 0  # resumed, then completed
    (failed_tool,) = [
        s
        for s in spans
        if s.name.startswith("execute_tool")
        and by_id[s.parent_id].parent_id == attempt_of("b").span_id
    ]
    assert failed_tool.status == 2
    c = attempt_of("c")
    assert (c.status, c.attributes["weft.status"]) == (2, "failed")
    (run,) = [s for s in spans if not s.parent_id]
    assert (run.status, run.attributes["weft.status"]) == (2, "failed")


def test_sentinel_calls_are_chat_spans_under_their_codon_with_the_journals_costs(
    tmp_path: Path,
) -> None:
    env = subprocess_environment(tmp_path)
    with otlp_receiver() as receiver:
        env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        done = weft_cli("run", EXAMPLES / "sentinels", "--headless", env=env)
        spans = list(receiver.spans)
    assert done.returncode == 0, done.stdout
    (execution,) = (tmp_path / "managed").iterdir()
    status = _status(execution, env)
    (attempt,) = [s for s in spans if s.name.startswith("invoke_agent")]
    calls = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert {s.parent_id for s in calls} == {attempt.span_id}
    assert {s.attributes["weft.sentinel.id"] for s in calls} == {
        "narrator",
        "cost-watch",
        "error-streak",
        "file-watch",
    }
    for call in calls:
        assert call.attributes["gen_ai.request.model"] == "haiku"
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
    spent = sum(s.attributes["weft.cost_usd"] for s in calls)
    assert spent == pytest.approx(status["sentinelCost"], abs=1e-9)
    (run,) = [s for s in spans if not s.parent_id]
    assert run.attributes["weft.sentinel_cost_usd"] == pytest.approx(
        status["sentinelCost"], abs=1e-9
    )


def test_no_otel_beats_the_variable_and_the_continue_command_keeps_the_flag(
    tmp_path: Path,
) -> None:
    hank = write_hank(tmp_path / "flags", codon("a"))
    env = subprocess_environment(tmp_path)
    with otlp_receiver() as receiver:
        env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        off = weft_cli("run", hank, "--headless", "--new", "--no-otel", env=env)
        assert receiver.spans == []
        on = weft_cli("run", hank, "--headless", "--new", "--otel", env=env)
        assert receiver.spans
    (resume_off,) = [
        line for line in off.stdout.splitlines() if line.strip().startswith("continue")
    ]
    (resume_on,) = [line for line in on.stdout.splitlines() if line.strip().startswith("continue")]
    assert resume_off.endswith("--no-otel")
    assert resume_on.endswith("--otel")
    assert f"Traces go to {receiver.url}/v1/traces (--otel)" in on.stdout
