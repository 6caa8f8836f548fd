"""Loading hank files: what a valid one becomes, and how problems are reported."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import pytest
from tests.config.hankfiles import DROP, codon, hank, loop, write_hank

from weft.config import (
    Codon,
    CommandOp,
    CopyOp,
    Hank,
    Loop,
    SentinelConfig,
    load_hank,
    validate_hank,
)
from weft.config.schema import IterationLimit
from weft.errors import ConfigError


def test_a_valid_hank_loads_with_the_reference_defaults(tmp_path: Path) -> None:
    doc = hank(codon("a", promptText=DROP, promptFile="prompts/a.md"))
    loaded = load_hank(write_hank(tmp_path, doc, {"prompts/a.md": "hello"}))
    (c,) = loaded.hank.hank
    assert isinstance(c, Codon)
    assert (c.id, c.model, c.continuation_mode, c.prompt_file) == (
        "a",
        "fake/sonnet",
        "fresh",
        "prompts/a.md",
    )
    assert c.on_failure == "abort"
    assert c.max_extensions == 100
    assert c.auto_compact is False
    assert c.rig_setup == []
    assert c.retry_config is None
    assert loaded.warnings == []
    assert loaded.directory == tmp_path.resolve()
    assert loaded.resolve("prompts/a.md").read_text() == "hello"


def test_a_file_path_and_its_directory_load_the_same_hank(tmp_path: Path) -> None:
    write_hank(tmp_path, hank(codon("a"), codon("b")))
    assert load_hank(tmp_path).hank == load_hank(tmp_path / "hank.json").hank


def test_the_digest_is_of_the_file_bytes(tmp_path: Path) -> None:
    write_hank(tmp_path, hank())
    expected = hashlib.sha256((tmp_path / "hank.json").read_bytes()).hexdigest()
    assert load_hank(tmp_path).sha256 == expected


def test_a_directory_without_a_hank_suggests_init(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_hank(tmp_path)
    (problem,) = raised.value.problems
    assert problem.code == "no_file"
    assert "weft init" in (problem.hint or "")


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_hank(tmp_path / "nope.json")
    assert raised.value.problems[0].code == "no_file"


def test_the_error_names_file_item_path_and_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = hank(codon("a"), codon("b"), codon("review", continuationMode="contine"))
    write_hank(tmp_path, doc)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as raised:
        load_hank("hank.json")
    (problem,) = raised.value.errors
    assert str(problem) == (
        'hank.json: hank[2] (codon "review") .continuationMode: expected "fresh" or '
        '"continue-previous", got "contine"'
    )
    assert problem.hint == 'did you mean "continue-previous"?'
    assert problem.item == "hank[2]"
    assert problem.where == 'codon "review"'


def test_a_loop_codon_is_named_with_its_loop(tmp_path: Path) -> None:
    doc = hank(codon("a"), loop("refine", codon("b", onFailure="wrong")))
    with pytest.raises(ConfigError) as raised:
        load_hank(write_hank(tmp_path, doc))
    (problem,) = raised.value.errors
    assert problem.where == 'loop "refine" > codon "b"'
    assert problem.path == "hank[1].codons[0].onFailure"


def test_every_error_of_every_codon_is_reported_in_one_pass(tmp_path: Path) -> None:
    items = [codon("ok")]
    items += [codon(f"c{i}", onFailure="nope", trackedFiles=[]) for i in range(5)]
    items += [codon("ok")]  # a duplicate id
    doc = hank(*items, meta={"name": ""}, overrides={"modle": "x"})
    with pytest.raises(ConfigError) as raised:
        load_hank(write_hank(tmp_path, doc))
    found = {(p.code, p.path) for p in raised.value.errors}
    for i in range(1, 6):
        assert ("bad_value", f"hank[{i}].onFailure") in found
        assert ("unknown_key", f"hank[{i}].trackedFiles") in found
    assert ("duplicate_id", "hank[6].id") in found
    assert ("bad_value", "meta.name") in found
    assert ("missing_key", "meta.version") in found
    assert ("unknown_key", "overrides.modle") in found
    assert len(raised.value.errors) == len(found) == 14


def test_problems_are_listed_in_document_order(tmp_path: Path) -> None:
    doc = hank(
        codon("a", onFailure="x"),
        codon("a", model="nope"),  # duplicate id and unroutable model, found by the rules
        codon("c", onFailure="y"),
    )
    with pytest.raises(ConfigError) as raised:
        load_hank(write_hank(tmp_path, doc))
    paths = [p.path for p in raised.value.errors]
    assert paths == ["hank[0].onFailure", "hank[1].id", "hank[1].model", "hank[2].onFailure"]


def test_overrides_model_fills_codons_without_one(tmp_path: Path) -> None:
    doc = hank(codon("a", model=DROP), codon("b", model="fake/opus"), overrides={"model": "opus"})
    loaded = load_hank(write_hank(tmp_path, doc))
    assert [c.model for c, _ in loaded.codons()] == ["opus", "fake/opus"]


def test_the_model_override_replaces_every_model_before_checking(tmp_path: Path) -> None:
    doc = hank(
        codon("a", model="opus"),
        codon("b", model="llama", continuationMode="continue-previous"),
    )
    directory = write_hank(tmp_path, doc)
    with pytest.raises(ConfigError):
        load_hank(directory)
    loaded = load_hank(directory, model="fake/sonnet")
    assert {c.model for c, _ in loaded.codons()} == {"fake/sonnet"}


def test_codons_lists_loop_members_with_their_loop(tmp_path: Path) -> None:
    doc = hank(
        codon("a"),
        loop("l", codon("b", onFailure="retry"), codon("c", onFailure="retry")),
        codon("d"),
    )
    loaded = load_hank(write_hank(tmp_path, doc))
    assert [(c.id, lp.id if lp else None) for c, lp in loaded.codons()] == [
        ("a", None),
        ("b", "l"),
        ("c", "l"),
        ("d", None),
    ]
    the_loop = loaded.hank.hank[1]
    assert isinstance(the_loop, Loop)
    assert the_loop.terminate_on == IterationLimit(limit=3)


def test_a_loaded_hank_round_trips_through_plain_json(tmp_path: Path) -> None:
    doc = hank(
        codon(
            "a",
            rigSetup=[
                {"type": "copy", "copy": {"from": "t", "to": "x"}},
                {"type": "command", "command": {"run": "ls"}, "allowFailure": True},
            ],
            outputFiles=[{"copy": ["x/**"]}],
            env={"A": "1"},
            budget={"maxDollars": 1.5},
        ),
        loop("l", codon("b", continuationMode="continue-previous", onFailure="retry")),
        meta={"name": "n", "version": "1"},
        overrides={"budget": {"maxDollars": 3}},
        **{"$schema": "./hank.schema.json"},
    )
    loaded = load_hank(write_hank(tmp_path, doc, {"t/a.txt": "x"}))
    plain = msgspec.to_builtins(loaded.hank)
    assert json.loads(json.dumps(plain)) == plain
    assert msgspec.convert(plain, Hank) == loaded.hank
    assert plain["$schema"] == "./hank.schema.json"
    assert plain["hank"][0]["type"] == "codon"
    assert plain["hank"][0]["rigSetup"][0] == {
        "type": "copy",
        "copy": {"from": "t", "to": "x"},
        "allowFailure": False,
    }


def test_the_documented_flat_copy_form_is_normalised_with_a_warning(tmp_path: Path) -> None:
    doc = hank(codon("a", rigSetup=[{"type": "copy", "from": "t", "to": "x"}]))
    loaded = load_hank(write_hank(tmp_path, doc, {"t/a.txt": "x"}))
    c = loaded.hank.hank[0]
    assert isinstance(c, Codon)
    (op,) = c.rig_setup
    assert isinstance(op, CopyOp)
    assert (op.copy.from_, op.copy.to) == ("t", "x")
    assert [w.code for w in loaded.warnings] == ["flat_copy"]


def test_a_single_output_files_object_becomes_a_list_with_a_warning(tmp_path: Path) -> None:
    doc = hank(codon("a", outputFiles={"copy": ["out/**"]}))
    loaded = load_hank(write_hank(tmp_path, doc))
    c = loaded.hank.hank[0]
    assert isinstance(c, Codon)
    assert [o.copy for o in c.output_files] == [["out/**"]]
    assert [w.code for w in loaded.warnings] == ["output_files_object"]


def test_a_byte_order_mark_is_tolerated(tmp_path: Path) -> None:
    write_hank(tmp_path, b"\xef\xbb\xbf" + json.dumps(hank()).encode())
    assert load_hank(tmp_path).hank.hank[0].id == "a"


def test_rig_ops_keep_their_order_and_kinds(tmp_path: Path) -> None:
    ops = [
        {"type": "command", "command": {"run": "mkdir a"}},
        {"type": "copy", "copy": {"from": "t", "to": "a/t"}},
        {"type": "command", "command": {"run": "ls", "workingDirectory": "lastCopied"}},
    ]
    loaded = load_hank(write_hank(tmp_path, hank(codon("a", rigSetup=ops)), {"t/x": "1"}))
    c = loaded.hank.hank[0]
    assert isinstance(c, Codon)
    kinds = [type(op) for op in c.rig_setup]
    assert kinds == [CommandOp, CopyOp, CommandOp]
    last = c.rig_setup[2]
    assert isinstance(last, CommandOp)
    assert last.command.working_directory == "lastCopied"


SENTINEL = {
    "id": "narrator",
    "name": "Narrator",
    "model": "anthropic/claude-haiku-4-5",
    "trigger": {"type": "event", "on": ["*"]},
    "execution": {"strategy": "debounce", "milliseconds": 1000},
    "userPromptFile": "prompts/user.md",
}


def test_sentinel_files_load_with_refs_relative_to_themselves(tmp_path: Path) -> None:
    doc = hank(codon("a", sentinels=[{"sentinelConfig": "sentinels/narrator.json"}]))
    files = {
        "sentinels/narrator.json": json.dumps(SENTINEL),
        "sentinels/prompts/user.md": "what happened?",
    }
    loaded = load_hank(write_hank(tmp_path, doc, files))
    config = loaded.sentinel_configs[loaded.resolve("sentinels/narrator.json")]
    assert isinstance(config, SentinelConfig)
    assert config.id == "narrator"
    assert loaded.warnings == []


def test_a_broken_optional_sentinel_only_warns(tmp_path: Path) -> None:
    doc = hank(codon("a", sentinels=[{"sentinelConfig": "s.json"}]))
    broken = {**SENTINEL, "execution": {"strategy": "sometimes"}}
    loaded = load_hank(write_hank(tmp_path, doc, {"s.json": json.dumps(broken)}))
    assert loaded.sentinel_configs == {}
    codes = {(w.code, w.file.endswith("s.json")) for w in loaded.warnings}
    assert ("bad_sentinel", False) in codes
    assert ("bad_value", True) in codes  # reported against the sentinel's own file


def test_a_broken_required_sentinel_is_an_error_in_its_own_file(tmp_path: Path) -> None:
    doc = hank(
        codon(
            "a",
            sentinels=[{"sentinelConfig": "s.json", "settings": {"failCodonIfNotLoaded": True}}],
        )
    )
    broken = {**SENTINEL, "userPromptFile": "../../etc/passwd"}
    with pytest.raises(ConfigError) as raised:
        load_hank(write_hank(tmp_path, doc, {"s.json": json.dumps(broken)}))
    in_sentinel = [p for p in raised.value.errors if p.file.endswith("s.json")]
    assert [(p.code, p.path) for p in in_sentinel] == [("bad_ref", "userPromptFile")]


def test_requirements_accept_the_weft_prefixed_variable(tmp_path: Path) -> None:
    directory = write_hank(tmp_path, hank(requirements={"env": ["API_KEY"]}))
    with pytest.raises(ConfigError):
        load_hank(directory, env={})
    load_hank(directory, env={"API_KEY": "x"})
    load_hank(directory, env={"WEFT_API_KEY": "x"})
    load_hank(directory, env={}, check_environment=False)


def test_requirements_find_tools_on_the_given_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "mytool"
    tool.write_text("#!/bin/sh\n")
    directory = write_hank(tmp_path / "h", hank(requirements={"tools": ["mytool"]}))
    with pytest.raises(ConfigError):
        load_hank(directory, env={"PATH": str(tmp_path)})
    tool.chmod(0o755)
    load_hank(directory, env={"PATH": str(bin_dir)})


def test_validate_reports_instead_of_raising(tmp_path: Path) -> None:
    report = validate_hank(write_hank(tmp_path, hank(codon(id=7))))
    assert not report.valid
    assert report.loaded is None
    assert [p.path for p in report.errors] == ["hank[0].id"]
    assert report.document == hank(codon(id=7))


def test_a_sentinel_file_used_by_many_codons_is_checked_and_reported_once(tmp_path: Path) -> None:
    entry = {"sentinelConfig": "s.json"}
    doc = hank(*(codon(f"c{i}", sentinels=[entry]) for i in range(3)))
    broken = {k: v for k, v in SENTINEL.items() if k != "userPromptFile"}
    broken.update(userPromptText="x", execution={"strategy": "sometimes"})
    report = validate_hank(write_hank(tmp_path, doc, {"s.json": json.dumps(broken)}))
    assert report.valid
    in_file = [p for p in report.warnings if p.file == str(tmp_path / "s.json")]
    pointers = [p for p in report.warnings if p.code == "bad_sentinel"]
    assert [(p.code, p.path) for p in in_file] == [("bad_value", "execution.strategy")]
    assert [p.path for p in pointers] == [
        f"hank[{i}].sentinels[0].sentinelConfig" for i in range(3)
    ]


def test_a_sentinel_file_that_is_not_json_reports_line_and_column(tmp_path: Path) -> None:
    entry = {"sentinelConfig": "s.json", "settings": {"failCodonIfNotLoaded": True}}
    directory = write_hank(tmp_path, hank(codon(sentinels=[entry])), {"s.json": '{\n  "id": x\n}'})
    with pytest.raises(ConfigError) as raised:
        load_hank(directory)
    (bad,) = [p for p in raised.value.errors if p.code == "bad_json"]
    assert (bad.line, bad.column) == (2, 9)
