"""Problem records and the ConfigError that carries them."""

from __future__ import annotations

import json

from weft.config.problems import ConfigProblem, format_path, item_label
from weft.errors import ConfigError, WeftError


def test_paths_read_like_javascript() -> None:
    assert format_path(()) == "$"
    assert format_path(("hank", 2, "continuationMode")) == "hank[2].continuationMode"
    assert format_path(("$schema",)) == '["$schema"]'
    assert format_path(("env", "A B")) == 'env["A B"]'
    assert format_path(("shares", "list-tasks")) == "shares.list-tasks"


def test_items_are_labelled_by_kind_and_id() -> None:
    doc = {"hank": [{"id": "a"}, {"type": "loop", "id": "l", "codons": [{"id": "b"}, 3]}, {}]}
    assert item_label(doc, ("hank", 0, "model")) == (("hank", 0), 'codon "a"')
    assert item_label(doc, ("hank", 1, "codons", 0, "id")) == (
        ("hank", 1, "codons", 0),
        'loop "l" > codon "b"',
    )
    assert item_label(doc, ("hank", 1, "codons", 1)) == (
        ("hank", 1, "codons", 1),
        'loop "l" > codon',
    )
    assert item_label(doc, ("hank", 2)) == (("hank", 2), "codon")
    assert item_label(doc, ("hank", 9)) is None
    assert item_label(doc, ("meta", "name")) is None
    assert item_label([], ("hank", 0)) is None


def problem(**kw: object) -> ConfigProblem:
    base: dict[str, object] = {
        "file": "hank.json",
        "path": "meta.name",
        "message": "bad",
        "code": "x",
    }
    base.update(kw)
    return ConfigProblem(**base)  # type: ignore[arg-type]


def test_text_forms() -> None:
    assert str(problem()) == "hank.json: meta.name: bad"
    assert str(problem(severity="warning")) == "hank.json: meta.name: warning: bad"
    assert str(problem(line=3, column=7, path="$")) == "hank.json:3:7: bad"
    inside = problem(path="hank[1].model", item="hank[1]", where='codon "b"')
    assert str(inside) == 'hank.json: hank[1] (codon "b") .model: bad'
    assert problem(hint="fix it").render() == "hank.json: meta.name: bad\n    hint: fix it"


def test_json_form_drops_empty_fields() -> None:
    out = problem(hint="h").to_json()
    assert out == {
        "file": "hank.json",
        "path": "meta.name",
        "message": "bad",
        "code": "x",
        "severity": "error",
        "hint": "h",
    }
    json.dumps(out)


def test_config_error_lists_errors_then_warnings() -> None:
    w = problem(severity="warning", message="doubtful")
    e1, e2 = problem(message="first"), problem(message="second", hint="do this")
    error = ConfigError([w, e1, e2])
    assert isinstance(error, WeftError)
    assert error.errors == [e1, e2]
    lines = str(error).splitlines()
    assert lines[0] == "invalid configuration hank.json: 2 errors, 1 warning"
    assert lines[1:] == [str(e1), str(e2), "    hint: do this", str(w)]
