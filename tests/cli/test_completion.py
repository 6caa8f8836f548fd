"""``weft completion``: the scripts loaded into real shells, asked to complete.

bash sources shtab's script and calls its completion function; fish sources
the generated script and answers ``complete -C`` (what it does on Tab). fish
is optional on a developer's machine; CI installs it and sets
``WEFT_REQUIRE_FISH=1``, so there a missing fish fails instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weft.cli import COMMANDS
from weft.cli.completion import script
from weft.cli.fish_completion import _quote


@pytest.fixture(scope="module")
def fish() -> str:
    found = shutil.which("fish")
    if found is None:
        if os.environ.get("WEFT_REQUIRE_FISH") == "1":
            pytest.fail("WEFT_REQUIRE_FISH=1 but fish is not on PATH")
        pytest.skip("fish is not on PATH")
    return found


@pytest.fixture(scope="module")
def fish_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fish") / "weft.fish"
    path.write_text(script("fish"))
    return path


def shell(argv: list[str], cwd: Path | None = None) -> str:
    """Runs a shell command line; its standard output (it must exit 0, silently)."""
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr  # the script loads without a complaint
    return done.stdout


def fish_complete(fish: str, script_path: Path, line: str, cwd: Path | None = None) -> list[str]:
    """What fish offers for ``line`` (the candidates, without descriptions)."""
    program = f"source {script_path}; complete -C {_quote(line)}"
    out = shell([fish, "--no-config", "-c", program], cwd)
    return [row.split("\t")[0] for row in out.splitlines()]


def bash_complete(words: list[str], cwd: Path | None = None) -> list[str]:
    """What the bash script offers when the cursor is at the end of ``words``."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script('bash')}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
        f'COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}; _shtab_weft; '
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = shell(["bash", "--norc", "--noprofile", "-c", program], cwd)
    return [line for line in out.splitlines() if line]


def test_bash_completes_commands_subcommands_and_choices() -> None:
    assert bash_complete(["weft", "ru"]) == ["run"]
    assert set(bash_complete(["weft", ""])) == set(COMMANDS)
    assert set(bash_complete(["weft", "batch", "re"])) == {
        "resume",
        "retry",
        "reset-breaker",
        "rebuild",
    }
    assert set(bash_complete(["weft", "batch", "s"])) == {"status", "schema", "skip"}
    assert set(bash_complete(["weft", "completion", ""])) == {"bash", "zsh", "tcsh", "fish"}


def test_bash_completes_a_batch_file_argument_as_a_file(tmp_path: Path) -> None:
    (tmp_path / "steps.toml").write_text("")
    assert bash_complete(["weft", "batch", "run", "st"], cwd=tmp_path) == ["steps.toml"]


def test_fish_completes_every_command_and_their_descriptions(fish: str, fish_script: Path) -> None:
    assert set(fish_complete(fish, fish_script, "weft ")) == set(COMMANDS)
    assert fish_complete(fish, fish_script, "weft ru") == ["run"]
    described = shell([fish, "--no-config", "-c", f"source {fish_script}; complete -C 'weft ru'"])
    assert described.startswith("run\trun a hank")


def test_fish_follows_nested_commands_and_skips_option_values(fish: str, fish_script: Path) -> None:
    batch_run = fish_complete(fish, fish_script, "weft batch run --")
    assert "--workers" in batch_run
    assert "--max-cost" not in batch_run
    assert set(fish_complete(fish, fish_script, "weft batch re")) == {
        "resume",
        "retry",
        "reset-breaker",
        "rebuild",
    }
    # "batch" here is --model's value, not the command: still weft run's options.
    run = fish_complete(fish, fish_script, "weft run -m batch --")
    assert "--max-cost" in run
    assert "--workers" not in run
    assert fish_complete(fish, fish_script, "weft run --model=batch --max-c") == ["--max-cost"]


def test_fish_completes_choices_files_and_folders_where_each_belongs(
    fish: str, fish_script: Path, tmp_path: Path
) -> None:
    (tmp_path / "hank.json").write_text("{}")
    (tmp_path / "hold").mkdir()
    assert set(fish_complete(fish, fish_script, "weft completion ")) == {
        "bash",
        "zsh",
        "tcsh",
        "fish",
    }
    assert fish_complete(fish, fish_script, "weft batch run --engine ") == ["local", "ray"]
    assert set(fish_complete(fish, fish_script, "weft run ", cwd=tmp_path)) == {
        "hank.json",
        "hold/",
    }
    # --execution names a folder; a positional execution may be a hank too.
    assert fish_complete(fish, fish_script, "weft run --execution ", cwd=tmp_path) == ["hold/"]
    assert set(fish_complete(fish, fish_script, "weft status ", cwd=tmp_path)) == {
        "hank.json",
        "hold/",
    }
    # Ids and text complete nothing rather than file names.
    assert fish_complete(fish, fish_script, "weft rollback --codon ", cwd=tmp_path) == []
    assert fish_complete(fish, fish_script, "weft logs --run ", cwd=tmp_path) == []
    # weft show CODON [EXECUTION]: nothing for the codon, then files and folders.
    assert fish_complete(fish, fish_script, "weft show ", cwd=tmp_path) == []
    assert set(fish_complete(fish, fish_script, "weft show build ", cwd=tmp_path)) == {
        "hank.json",
        "hold/",
    }
    assert fish_complete(fish, fish_script, "weft show build x ", cwd=tmp_path) == []
    assert fish_complete(fish, fish_script, "weft batch retry -- f.toml ", cwd=tmp_path) == []
    # A command's subcommands come only as its first word.
    assert "resume" in fish_complete(fish, fish_script, "weft batch ", cwd=tmp_path)
    assert "resume" not in fish_complete(fish, fish_script, "weft batch x ", cwd=tmp_path)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=30),
        max_size=8,
    )
)
def test_a_quoted_word_reads_back_unchanged_in_fish(texts: list[str]) -> None:
    """Descriptions come from help texts: quotes, backslashes, ``$`` and
    parentheses must reach fish as written."""
    found = shutil.which("fish")
    if found is None:
        if os.environ.get("WEFT_REQUIRE_FISH") == "1":
            pytest.fail("WEFT_REQUIRE_FISH=1 but fish is not on PATH")
        pytest.skip("fish is not on PATH")
    program = "printf '%s\\0' " + " ".join(_quote(t) for t in texts) if texts else "true"
    done = subprocess.run(
        [found, "--no-config", "-c", program], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] if texts else []
    assert printed == texts
