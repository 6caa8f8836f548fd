"""Fuzzing the loader: random JSON, random mutations of valid hanks, broken bytes.

Whatever the input, nothing escapes but a ConfigError, every problem names a
JSON path, and whatever passes the checks converts to Structs that round-trip.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft.config import Hank, load_hank, validate_hank
from weft.config.loader import HankReport
from weft.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/hank.json"))

FUZZ = settings(
    # WEFT_FUZZ_EXAMPLES raises the count for a long local hunt.
    max_examples=int(os.environ.get("WEFT_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

MEANINGFUL = st.sampled_from(
    [
        "codon",
        "loop",
        "copy",
        "command",
        "fresh",
        "continue-previous",
        "contextExceeded",
        "iterationLimit",
        "sonnet",
        "fake/opus",
        "nope-model",
        "../escape.md",
        "/etc/passwd",
        "prompts",
        ".",
        "",
        "retry",
        "ignore",
        "lastCopied",
        "*",
        "event",
        "sequence",
        "debounce",
        "a#1",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    MEANINGFUL,
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), MEANINGFUL), children, max_size=4),
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        "hank",
        "type",
        "id",
        "name",
        "model",
        "continuationMode",
        "promptFile",
        "promptText",
        "codons",
        "terminateOn",
        "rigSetup",
        "sentinels",
        "sentinelConfig",
        "budget",
        "onFailure",
        "retryConfig",
        "trackedFiles",
        "exhaustWithPrompt",
        "limit",
        "copy",
        "from",
        "to",
    ]
)


def check_report(report: HankReport) -> None:
    """The invariants every outcome must satisfy."""
    assert all(p.code != "internal" for p in report.problems), report.problems
    for p in report.problems:
        assert p.path
        assert p.file
        assert p.message
    if report.loaded is not None:
        plain = msgspec.to_builtins(report.loaded.hank)
        assert msgspec.convert(plain, Hank) == report.loaded.hank
        json.dumps(plain)
    else:
        assert report.errors


def load_checked(path: Path) -> None:
    """load_hank agrees with validate_hank, and raises nothing but ConfigError."""
    report = validate_hank(path, env={})
    if report.valid:
        load_hank(path, env={})
        return
    with pytest.raises(ConfigError) as raised:
        load_hank(path, env={})
    assert raised.value.problems == report.problems


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def example_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("examples")
    out = []
    for example in EXAMPLES:
        target = base / example.name
        shutil.copytree(example, target)
        out.append(target)
    return out


@FUZZ
@given(doc=JSON)
def test_random_json_documents(doc: Any, workdir: Path) -> None:
    path = workdir / "random.json"
    path.write_text(json.dumps(doc))
    check_report(validate_hank(path, env={}))
    load_checked(path)


@FUZZ
@given(items=st.lists(JSON, min_size=1, max_size=4))
def test_random_items_in_a_hank_array(items: list[Any], workdir: Path) -> None:
    path = workdir / "items.json"
    path.write_text(json.dumps({"hank": items}))
    check_report(validate_hank(path, env={}))


def _locations(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_locations(v, (*path, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_locations(v, (*path, i)))
    return out


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


def mutate(doc: Any, data: st.DataObject) -> Any:
    """One random structural mutation of ``doc`` (which it may replace)."""
    locations = _locations(doc)
    where = data.draw(st.sampled_from(locations), label="where")
    op = data.draw(
        st.sampled_from(["replace", "delete", "insert", "rename", "duplicate", "meaningful"]),
        label="op",
    )
    if not where:
        return data.draw(JSON) if op == "replace" else doc
    parent, key = _get(doc, where[:-1]), where[-1]
    if op == "replace":
        parent[key] = data.draw(JSON, label="value")
    elif op == "meaningful":
        parent[key] = data.draw(MEANINGFUL, label="value")
    elif op == "delete":
        del parent[key]
    elif op == "duplicate":
        if isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[key] = [parent[key], copy.deepcopy(parent[key])]
    else:
        target = parent[key]
        if isinstance(target, dict):
            new_key = data.draw(st.one_of(KEYS, st.text(max_size=6)), label="key")
            if op == "rename" and target:
                old = data.draw(st.sampled_from(sorted(target)), label="old")
                target[new_key] = target.pop(old)
            else:
                target[new_key] = data.draw(JSON, label="value")
        elif isinstance(target, list):
            target.append(data.draw(JSON, label="value"))
    return doc


@FUZZ
@given(data=st.data())
def test_mutated_example_hanks(data: st.DataObject, example_dirs: list[Path]) -> None:
    directory = data.draw(st.sampled_from(example_dirs), label="example")
    doc = json.loads((directory / "hank.json").read_text())
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="mutations")):
        doc = mutate(doc, data)
    path = directory / "mutant.json"
    path.write_text(json.dumps(doc))
    check_report(validate_hank(path, env={}))
    load_checked(path)


@FUZZ
@given(data=st.data())
def test_broken_bytes_of_example_hanks(data: st.DataObject, example_dirs: list[Path]) -> None:
    directory = data.draw(st.sampled_from(example_dirs), label="example")
    text = bytearray((directory / "hank.json").read_bytes())
    cut = data.draw(st.integers(min_value=0, max_value=len(text)), label="cut")
    if data.draw(st.booleans(), label="truncate"):
        text = text[:cut]
    else:
        text[min(cut, len(text) - 1)] = data.draw(st.integers(0, 255), label="byte")
    path = directory / "broken.json"
    path.write_bytes(bytes(text))
    check_report(validate_hank(path, env={}))
    load_checked(path)


def test_the_examples_are_valid_before_mutation(example_dirs: list[Path]) -> None:
    assert len(example_dirs) >= 5
    for directory in example_dirs:
        report = validate_hank(directory)
        check_report(report)
        assert report.valid, report.problems
