"""`weft run` spends nothing on a run it would refuse later.

What ``weft validate`` can know on this machine (an agent CLI is there, a
required sentinel would load: its provider has a key, its prompt and schema
read) is checked before the first codon. Before, a hank whose second codon
needed a sentinel with no key ran (and paid for) its first codon, then failed.
"""

from __future__ import annotations

from pathlib import Path

from tests.runtime.hanks import codon, subprocess_environment, weft_cli, write_file, write_hank
from tests.sentinels.test_host import sentinel


def _keyless_env(tmp_path: Path) -> dict[str, str]:
    env = subprocess_environment(tmp_path)
    for name in list(env):
        if name.endswith(
            ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
        ):
            del env[name]
    return env


def _hank(tmp_path: Path, *, required: bool) -> Path:
    watcher = sentinel(
        "watcher",
        model="anthropic/claude-haiku-4-5",
        settings={"failCodonIfNotLoaded": required},
    )
    return write_hank(
        tmp_path / "hank",
        codon("first", write_file("a.md", "one")),
        codon("second", write_file("b.md", "two"), sentinels=[watcher]),
    )


def test_a_required_sentinel_without_its_key_is_refused_before_any_codon(tmp_path: Path) -> None:
    execution = tmp_path / "execution"
    env = _keyless_env(tmp_path)
    done = weft_cli(
        "run", _hank(tmp_path, required=True), "--execution", execution, "--headless", env=env
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'sentinel "watcher" will not load' in done.stderr
    assert "ANTHROPIC_API_KEY" in done.stderr
    assert "fake/haiku" in done.stderr  # the way on offline
    # Nothing ran, nothing was spent: no execution at all.
    assert not (execution / ".weft" / "weft.db").exists()
    assert "first" not in done.stdout
    # weft validate says the same.
    said = weft_cli("validate", _hank(tmp_path, required=True), env=env)
    assert said.returncode != 0
    assert 'sentinel "watcher" will not load' in said.stdout + said.stderr
    # Offline, the same hank runs.
    done = weft_cli(
        "run", _hank(tmp_path, required=True), "--execution", execution, "--headless",
        "--sentinel-model", "fake/haiku", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_sentinel_that_is_not_required_is_a_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    execution = tmp_path / "execution"
    done = weft_cli(
        "run", _hank(tmp_path, required=False), "--execution", execution, "--headless",
        env=_keyless_env(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'weft: warning: sentinel "watcher" will not load' in done.stderr
