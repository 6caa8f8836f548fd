"""Prompt assembly: prompt files, front-matter, template variables, comments, system prompts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.config.prompt import (
    DATA_DIR_NAME,
    PromptMetadata,
    TextSource,
    assemble_prompt,
    render_text,
    split_front_matter,
    template_variables,
)
from weft.config.schema import Codon, Hank
from weft.errors import ConfigError

ROOT = "/work/exec/agent"
VARS = template_variables(ROOT)
DATA = os.path.join(ROOT, DATA_DIR_NAME)


def codon(**fields: Any) -> dict[str, Any]:
    """A codon document with a prompt given by ``fields``."""
    doc: dict[str, Any] = {
        "type": "codon",
        "id": "survey",
        "name": "Survey",
        "model": "sonnet",
        "continuationMode": "fresh",
    }
    doc.update(fields)
    return doc


def make_hank(*items: dict[str, Any], **root: Any) -> Hank:
    """A Hank Struct from item documents and root fields."""
    return msgspec.convert({"hank": list(items), **root}, Hank)


def assemble(tmp_path: Path, *items: dict[str, Any], index: int = 0, **root: Any) -> Any:
    """Assembles the prompt of the hank's ``index``-th item, hank directory ``tmp_path``."""
    hank = make_hank(*items, **root)
    item = hank.hank[index]
    assert isinstance(item, Codon)
    return assemble_prompt(item, tmp_path, VARS, hank=hank)


def write(tmp_path: Path, name: str, text: str) -> str:
    """Writes a file under the hank directory and returns its ref."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return name


def problem_of(caught: pytest.ExceptionInfo[ConfigError]) -> Any:
    """The single problem a ConfigError carries."""
    assert len(caught.value.problems) == 1
    return caught.value.problems[0]


# ----------------------------------------------------------------------------- variables


def test_template_variables_all_point_into_the_agent_root() -> None:
    assert VARS["AGENT_ROOT"] == ROOT
    assert VARS["PROJECT_DIR"] == ROOT
    assert VARS["EXECUTION_DIR"] == ROOT
    assert VARS["DATA_DIR"] == f"{ROOT}/read_only_data_source"


def test_variables_are_replaced_in_every_kind_of_prompt(tmp_path: Path) -> None:
    ref = write(tmp_path, "p.md", "Work in <%AGENT_ROOT%>.\n")
    system = write(tmp_path, "s.md", "Project: <%PROJECT_DIR%>\n")
    got = assemble(
        tmp_path,
        codon(
            promptFile=ref,
            appendSystemPromptText="Data: <%DATA_DIR%>",
            exhaustWithPrompt="Keep going in <%EXECUTION_DIR%>",
        ),
        globalSystemPromptFile=system,
    )

    assert got.text == f"Work in {ROOT}."
    assert got.system_prompt_append == f"Project: {ROOT}\n\nData: {DATA}"
    assert got.exhaust_prompt == f"Keep going in {ROOT}"


def test_an_unknown_variable_names_the_file_the_line_and_the_likely_fix(tmp_path: Path) -> None:
    lines = ["# Task", "", "Read <%DATA_DIR%> first.", "Then write to <%AGENT_ROT%>/out."]
    ref = write(tmp_path, "prompts/task.md", "\n".join(lines) + "\n")

    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(promptFile=ref))

    problem = problem_of(caught)
    assert problem.file == "prompts/task.md"
    assert problem.line == 4
    assert "<%AGENT_ROT%>" in problem.message
    assert "did you mean <%AGENT_ROOT%>" in problem.hint
    assert "<%%AGENT_ROT%>" in problem.hint


def test_line_numbers_count_from_the_top_of_the_file_past_front_matter(tmp_path: Path) -> None:
    text = "---\nname: t\n---\n\n\nfirst\n<%NOPE%>\n"
    ref = write(tmp_path, "p.md", text)

    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(promptFile=ref))

    assert problem_of(caught).line == text.splitlines().index("<%NOPE%>") + 1


def test_an_unknown_variable_in_inline_text_points_at_the_codon_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(id="other"), codon(promptText="ok\n<%WHO%>"), index=1)

    problem = problem_of(caught)
    assert problem.file == "hank.json"
    assert problem.path == "hank[1].promptText"
    assert problem.where == 'codon "survey"'
    assert "line 2 of the text" in problem.message


def test_a_loop_codon_is_located_inside_its_loop(tmp_path: Path) -> None:
    hank = make_hank(
        codon(id="a", promptText="a"),
        {
            "type": "loop",
            "id": "refine",
            "name": "Refine",
            "terminateOn": {"type": "iterationLimit", "limit": 2},
            "codons": [codon(id="b", promptText="b"), codon(id="c", promptText="<%X%>")],
        },
    )
    loop = hank.hank[1]
    assert not isinstance(loop, Codon)

    with pytest.raises(ConfigError) as caught:
        assemble_prompt(loop.codons[1], tmp_path, VARS, hank=hank)

    problem = problem_of(caught)
    assert problem.path == "hank[1].codons[1].promptText"
    assert problem.where == 'loop "refine" > codon "c"'


def test_escaped_variables_and_foreign_template_tags_are_sent_as_written(tmp_path: Path) -> None:
    text = "Keep <%%AGENT_ROOT%> and <%= user.name %> and <% if (x) { %> and 100<% as they are."
    got = assemble(tmp_path, codon(promptText=text))

    assert got.text == (
        "Keep <%AGENT_ROOT%> and <%= user.name %> and <% if (x) { %> and 100<% as they are."
    )


# ----------------------------------------------------------------------------- comments


def test_html_comments_and_their_line_ends_are_removed(tmp_path: Path) -> None:
    ref = write(
        tmp_path,
        "p.md",
        "<!-- author note -->\nStep one.\n<!--\n  a longer note\n  over lines\n-->\nStep two.\n",
    )
    got = assemble(tmp_path, codon(promptFile=ref))

    assert got.text == "Step one.\nStep two."


def test_a_variable_inside_a_comment_is_not_checked(tmp_path: Path) -> None:
    got = assemble(tmp_path, codon(promptText="Do it. <!-- was <%OLD_DIR%> --> Done."))

    assert got.text == "Do it.  Done."


def test_an_unclosed_comment_is_left_for_the_agent_to_see(tmp_path: Path) -> None:
    got = assemble(tmp_path, codon(promptText="a <!-- b"))

    assert got.text == "a <!-- b"


# ----------------------------------------------------------------------------- front-matter


def test_front_matter_becomes_prompt_metadata_and_leaves_the_prompt(tmp_path: Path) -> None:
    ref = write(
        tmp_path,
        "p.md",
        "---\nname: Code analyzer\ndescription: finds patterns\ntags: [analysis, review]\n"
        "version: 1.10\nauthor: Team\n---\n\n# Analyze\nLook closely.\n",
    )
    got = assemble(tmp_path, codon(promptFile=ref))

    assert got.text == "# Analyze\nLook closely."
    assert got.prompt_metadata == PromptMetadata(
        name="Code analyzer",
        description="finds patterns",
        tags=["analysis", "review"],
        version="1.10",  # text, as written: not the number 1.1
        author="Team",
    )


def test_several_prompt_files_are_joined_and_only_the_first_labels_the_prompt(
    tmp_path: Path,
) -> None:
    first = write(tmp_path, "a.md", "---\nname: first\n---\nPart A.\n\n")
    second = write(tmp_path, "b.md", "---\nname: second\n---\nPart B.\n")
    third = write(tmp_path, "c.md", "Part C.")
    got = assemble(tmp_path, codon(promptFile=[first, second, third]))

    assert got.text == "Part A.\n\nPart B.\n\nPart C."
    assert got.prompt_metadata == PromptMetadata(name="first")
    assert got.sources == ("a.md", "b.md", "c.md")


def test_no_front_matter_means_no_metadata(tmp_path: Path) -> None:
    ref = write(tmp_path, "p.md", "Plain prompt\n---\nwith a rule\n")
    got = assemble(tmp_path, codon(promptFile=ref))

    assert got.prompt_metadata is None
    assert got.text == "Plain prompt\n---\nwith a rule"


def test_front_matter_without_a_closing_line_is_prompt_text() -> None:
    metadata, body, first_line = split_front_matter("---\nnot closed\n", file="p.md")

    assert metadata is None
    assert body == "---\nnot closed\n"
    assert first_line == 1


def test_empty_front_matter_is_empty_metadata() -> None:
    metadata, body, first_line = split_front_matter("---\n---\nBody", file="p.md")

    assert metadata == PromptMetadata()
    assert body == "Body"
    assert first_line == 3


@pytest.mark.parametrize(
    ("front", "line", "words"),
    [
        ("name: ok\ntags: [a, b\n", 3, "does not parse"),
        ("- a list\n- not a mapping\n", 2, "mapping"),
        ("name: ok\nmodel: opus\n", 3, "model"),
        ("name: ok\ntags:\n  nested: map\n", 3, "tags"),
    ],
)
def test_bad_front_matter_is_a_clear_error_at_its_line(
    tmp_path: Path, front: str, line: int, words: str
) -> None:
    ref = write(tmp_path, "p.md", f"---\n{front}---\nBody\n")

    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(promptFile=ref))

    problem = problem_of(caught)
    assert problem.file == "p.md"
    assert problem.line == line
    assert words in problem.message
    assert problem.code == "bad_front_matter"
    assert problem.hint


def test_bad_front_matter_in_a_later_file_names_that_file(tmp_path: Path) -> None:
    first = write(tmp_path, "a.md", "Part A.")
    second = write(tmp_path, "b.md", "---\nbogus: 1\n---\nPart B.")

    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(promptFile=[first, second]))

    assert problem_of(caught).file == "b.md"


def test_yaml_tags_cannot_build_objects(tmp_path: Path) -> None:
    ref = write(tmp_path, "p.md", "---\nname: !!python/object/apply:os.getcwd []\n---\nx\n")

    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(promptFile=ref))

    assert problem_of(caught).code == "bad_front_matter"


# ----------------------------------------------------------------------------- system prompt


def test_the_global_system_prompt_comes_before_the_codon_append(tmp_path: Path) -> None:
    g1 = write(tmp_path, "g1.md", "Global one.\n")
    g2 = write(tmp_path, "g2.md", "Global two.\n")
    c1 = write(tmp_path, "c1.md", "Codon one.\n")
    c2 = write(tmp_path, "c2.md", "<!-- hidden -->\nCodon two.\n")
    got = assemble(
        tmp_path,
        codon(promptText="go", appendSystemPromptFile=[c1, c2]),
        globalSystemPromptFile=[g1, g2],
    )

    assert got.system_prompt_append == "Global one.\n\nGlobal two.\n\nCodon one.\n\nCodon two."
    assert got.sources == ("g1.md", "g2.md", "c1.md", "c2.md")


def test_global_text_wins_over_global_files(tmp_path: Path) -> None:
    g = write(tmp_path, "g.md", "from the file")
    got = assemble(
        tmp_path,
        codon(promptText="go"),
        globalSystemPromptFile=g,
        globalSystemPromptText="from the text",
    )

    assert got.system_prompt_append == "from the text"


def test_without_any_system_prompt_there_is_no_append(tmp_path: Path) -> None:
    got = assemble(tmp_path, codon(promptText="go"))

    assert got.system_prompt_append is None
    assert got.exhaust_prompt is None
    assert got.prompt_metadata is None


def test_without_the_hank_only_the_codon_appends(tmp_path: Path) -> None:
    c = msgspec.convert(codon(promptText="go", appendSystemPromptText="mine"), Codon)

    got = assemble_prompt(c, tmp_path, VARS)

    assert got.system_prompt_append == "mine"


# ----------------------------------------------------------------------------- files


def test_a_missing_prompt_file_points_at_the_codon_field(tmp_path: Path) -> None:
    write(tmp_path, "exists.md", "Here.")

    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(promptFile=["exists.md", "missing.md"]))

    problem = problem_of(caught)
    assert problem.code == "bad_ref"
    assert problem.path == "hank[0].promptFile[1]"
    assert "missing.md" in problem.message
    assert problem.where == 'codon "survey"'


@pytest.mark.parametrize("ref", ["../outside.md", "/etc/hostname", "link.md", "fifo.md", "dir"])
def test_unsafe_or_unreadable_references_are_refused(tmp_path: Path, ref: str) -> None:
    hank_dir = tmp_path / "hank"
    hank_dir.mkdir()
    (tmp_path / "outside.md").write_text("secret")
    (hank_dir / "link.md").symlink_to(tmp_path / "outside.md")
    os.mkfifo(hank_dir / "fifo.md")
    (hank_dir / "dir").mkdir()

    with pytest.raises(ConfigError) as caught:
        assemble(hank_dir, codon(appendSystemPromptFile=ref, promptText="go"))

    problem = problem_of(caught)
    assert problem.code == "bad_ref"
    assert problem.path == "hank[0].appendSystemPromptFile"
    assert problem.hint


def test_a_file_that_is_not_utf8_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_bytes(b"fine\nalso fine\nbad \xff byte\n")

    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(promptFile="p.md"))

    problem = problem_of(caught)
    assert problem.code == "bad_encoding"
    assert problem.file == "p.md"
    assert problem.line == 3


def test_a_prompt_that_is_only_front_matter_and_comments_is_refused(tmp_path: Path) -> None:
    ref = write(tmp_path, "p.md", "---\nname: empty\n---\n<!-- TODO: write this -->\n")

    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon(promptFile=ref))

    problem = problem_of(caught)
    assert problem.code == "empty_prompt"
    assert problem.path == "hank[0].promptFile"


def test_a_codon_without_a_prompt_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        assemble(tmp_path, codon())

    assert problem_of(caught).code == "missing_prompt"


# ----------------------------------------------------------------------------- properties

# Text that holds no template or comment syntax of its own.
plain = st.text(st.characters(blacklist_characters="<%>", blacklist_categories=("Cs",)))


@given(st.lists(st.tuples(plain, st.sampled_from(sorted(VARS)))), plain)
def test_rendering_replaces_exactly_the_variables(pieces: list[tuple[str, str]], tail: str) -> None:
    text = "".join(f"{before}<%{name}%>" for before, name in pieces) + tail
    want = "".join(before + VARS[name] for before, name in pieces) + tail

    assert render_text(text, VARS, TextSource("p.md")) == want


@given(plain, plain, plain)
def test_rendering_removes_exactly_the_comments(before: str, note: str, after: str) -> None:
    text = f"{before}<!--{note.replace('--', '')}-->\n{after}"

    assert render_text(text, VARS, TextSource("p.md")) == before + after


@given(st.lists(plain.filter(lambda s: "\n" not in s and "\r" not in s), min_size=1), st.data())
def test_the_reported_line_is_the_line_of_the_unknown_variable(
    lines: list[str], data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(lines) - 1))
    lines[at] += "<%NOT_A_VARIABLE%>"

    with pytest.raises(ConfigError) as caught:
        render_text("\n".join(lines), VARS, TextSource("p.md", first_line=5))

    assert caught.value.problems[0].line == 5 + at
