"""The Structs, and the JSON Schema generated from them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from msgspec import inspect as mi

from weft.config import schema
from weft.config.schema import Codon, Hank, json_schema


def struct_types() -> dict[str, mi.StructType]:
    """Every Struct reachable from Hank, by class name."""
    found: dict[str, mi.StructType] = {}
    stack: list[Any] = [mi.type_info(Hank)]
    while stack:
        t = stack.pop()
        if isinstance(t, mi.Metadata):
            stack.append(t.type)
        elif isinstance(t, mi.StructType):
            if t.cls.__name__ not in found:
                found[t.cls.__name__] = t
                stack.extend(f.type for f in t.fields)
        elif isinstance(t, mi.UnionType):
            stack.extend(t.types)
        elif isinstance(t, mi.ListType):
            stack.append(t.item_type)
        elif isinstance(t, mi.DictType):
            stack.append(t.value_type)
    return found


def test_the_json_schema_has_every_field_of_every_struct() -> None:
    defs = json_schema()["$defs"]
    structs = struct_types()
    assert set(defs) == set(structs)
    for name, t in structs.items():
        names = {f.encode_name for f in t.fields}
        if t.tag_field:
            names.add(t.tag_field)
        assert set(defs[name]["properties"]) == names, name
        assert defs[name]["additionalProperties"] is False, name


def test_json_names_are_the_reference_names() -> None:
    codon_keys = set(Codon.__struct_encode_fields__)
    assert {
        "id",
        "name",
        "description",
        "model",
        "continuationMode",
        "promptFile",
        "promptText",
        "appendSystemPromptFile",
        "appendSystemPromptText",
        "rigSetup",
        "checkpointedFiles",
        "env",
        "outputFiles",
        "archiveOnSuccess",
        "sentinels",
        "onFailure",
        "retryConfig",
        "exhaustWithPrompt",
        "maxExtensions",
        "autoCompact",
        "shimIdleTimeout",
        "budget",
    } == codon_keys
    assert set(Hank.__struct_encode_fields__) == {
        "$schema",
        "meta",
        "overrides",
        "requirements",
        "globalSystemPromptFile",
        "globalSystemPromptText",
        "hank",
    }


def test_a_codon_may_leave_out_type_and_model_but_not_its_mode() -> None:
    codon = json_schema()["$defs"]["Codon"]
    assert set(codon["required"]) == {"id", "name", "continuationMode"}


def test_optional_fields_do_not_accept_null_in_the_schema() -> None:
    text = json.dumps(json_schema()["$defs"]["Codon"])
    assert '"null"' not in text
    condition = json_schema()["$defs"]["Condition"]
    assert {"type": "null"} in condition["properties"]["value"]["anyOf"]


def test_the_schema_is_valid_json_with_descriptions() -> None:
    s = json_schema()
    assert s["$schema"].startswith("https://json-schema.org/")
    assert s["$ref"] == "#/$defs/Hank"
    mode = s["$defs"]["Codon"]["properties"]["continuationMode"]
    assert mode["enum"] == ["continue-previous", "fresh"] or set(mode["enum"]) == {
        "fresh",
        "continue-previous",
    }
    assert "session" in mode["description"]


@pytest.mark.parametrize(
    ("cls", "defaults"),
    [
        (schema.RetryConfig, {"maxAttempts": 3, "delayMs": 1000, "maxDelayMs": 60000}),
        # Unset fields, merged codon over config; the reference's defaults
        # (all but triggers) apply in SentinelManager (tests/sentinels/test_manager.py).
        (
            schema.ReportToWebsocket,
            {"lifecycle": None, "errors": None, "outputs": None, "triggers": None},
        ),
        (schema.ErrorHandling, {"maxConsecutiveFailures": 3, "unloadOnFatalError": True}),
        (
            schema.LlmParams,
            {"temperature": 0.0, "maxOutputTokens": 8192, "maxRetries": 2, "providerOptions": None},
        ),
        (
            schema.ContainerBudget,
            {
                "maxDollars": None,
                "maxTimeSeconds": None,
                "maxTokens": None,  # Weft's: a ceiling in tokens (subscriptions pay no dollars)
                "allocation": "shared",
                "shares": None,
                "onExceeded": None,
            },
        ),
    ],
)
def test_defaults_are_the_references(cls: type, defaults: dict[str, Any]) -> None:
    assert msgspec.to_builtins(msgspec.convert({}, cls)) == defaults


def test_structs_are_immutable() -> None:
    c = msgspec.convert({"id": "a", "name": "A", "model": "m", "continuationMode": "fresh"}, Codon)
    with pytest.raises(AttributeError):
        c.id = "b"  # type: ignore[misc]


def test_the_reference_page_documents_every_field() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "hank-file.md").read_text()
    for name, t in struct_types().items():
        for f in t.fields:
            word = r"(?<![A-Za-z])" + re.escape(f.encode_name) + r"(?![A-Za-z])"
            assert re.search(word, page), f"{name}.{f.encode_name} is not documented"
