"""The ``weft`` command line: version, help, exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from weft import __version__
from weft.cli import main


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_names_the_package_and_the_core_build(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    assert main([flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"weft {__version__} (core: ")
    assert "build)" in out


def test_version_and_status_load_no_run_machinery() -> None:
    """Start-up stays short: neither loads the runtime, the views or the agents."""
    code = (
        "import sys; from weft.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept BaseException:\n    pass\n"
        "print('loaded:' + ','.join(m for m in sys.modules if m.startswith(("
        "'weft.runtime.run.runtime', "
        "'weft.cli.view', 'weft.agents', 'weft.server', 'uvloop', 'pygit2'))))"
    )
    for argv in (["-V"], ["status", "/nonexistent"]):
        done = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.stdout.splitlines()[-1] == "loaded:", done.stdout


def test_no_command_prints_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: weft" in capsys.readouterr().err


def test_an_unknown_option_is_a_usage_error_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "weft", "--frobnicate"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --frobnicate" in done.stderr
    assert "Traceback" not in done.stderr


def test_ctrl_c_before_a_command_handles_it_exits_130_without_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from weft.cli import validate

    def interrupted(_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(validate, "run", interrupted)
    assert main(["validate", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "weft: interrupted"
