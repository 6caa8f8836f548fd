"""When export is on, where it goes, and the ids: :mod:`weft.telemetry.settings` (pure)."""

from __future__ import annotations

import pytest

from weft.telemetry.settings import (
    DEFAULT_ENDPOINT,
    agent_env,
    attempt_key,
    parse_traceparent,
    resolve,
    run_scope,
    span_id,
    trace_id,
)

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}


@pytest.mark.parametrize(
    ("env", "flag", "setting", "url"),
    [
        ({}, None, False, None),  # off by default
        (ENDPOINT, None, False, "http://collector:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"}, None, False, "http://t:1/x"),
        ({}, True, False, f"{DEFAULT_ENDPOINT}/v1/traces"),
        ({}, None, True, f"{DEFAULT_ENDPOINT}/v1/traces"),
        (ENDPOINT, False, True, None),  # --no-otel wins
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, True, False, None),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, None, False, None),
        (
            {**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"},
            True,
            False,
            "http://collector:4318/v1/traces",
        ),
    ],
)
def test_export_is_on_only_when_asked(
    env: dict[str, str], flag: bool | None, setting: bool, url: str | None
) -> None:
    got = resolve(env, flag=flag, setting=setting)
    assert (None if got is None else got.traces_url) == url


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "garbage",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # unknown version
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    ],
)
def test_a_malformed_traceparent_is_ignored(text: str | None) -> None:
    assert parse_traceparent(text) is None


def test_a_traceparent_round_trips() -> None:
    text = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    parsed = parse_traceparent(text.upper())
    assert parsed is not None
    assert parsed.header() == text


def test_ids_are_derived_from_the_execution_and_the_run() -> None:
    scope = run_scope("exec-1", "1795900581731-lf1d7")
    assert trace_id(scope) == trace_id(run_scope("exec-1", "1795900581731-lf1d7"))
    assert trace_id(scope) != trace_id(run_scope("exec-2", "1795900581731-lf1d7"))
    assert span_id(scope, "run") != span_id(scope, "codon\0a")
    caller = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert trace_id(scope, caller) == 0x0AF7651916CD43DD8448EB211C80319C


def test_the_agent_gets_its_attempt_as_parent_and_no_weft_service_name() -> None:
    settings = resolve({}, flag=True)
    assert settings is not None
    parent = {
        "OTEL_SERVICE_NAME": "weft-ci",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-key=1",
        "OTEL_TRACES_EXPORTER": "otlp",
        "PATH": "/bin",
    }
    scope = run_scope("exec", "run")
    env = agent_env(settings, parent, scope, "a", "2026-01-01T00:00:00.000Z")
    expected = span_id(scope, attempt_key("a", "2026-01-01T00:00:00.000Z"))
    assert env["TRACEPARENT"] == f"00-{trace_id(scope):032x}-{expected:016x}-01"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == DEFAULT_ENDPOINT
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == "x-key=1"  # the collector's key, for its exporter
    assert "OTEL_SERVICE_NAME" not in env
    assert "PATH" not in env
