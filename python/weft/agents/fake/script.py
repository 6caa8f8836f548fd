"""Script mode: ``FAKE_AGENT_SCRIPT=<file.json>`` plays a list of steps.

Each step is an object with one key (§7.1)::

    {"emit": {...}}                        one JSON line, placeholders filled in
    {"raw": "text"}                        a line written verbatim
    {"partial": "text", "then_sleep_ms": N}  text with no newline, then a pause
    {"stderr": "text"}                     to stderr (a newline is added if missing)
    {"sleep_ms": N}
    {"exit": code}
    {"signal": "SIGKILL"}                  die by that signal

Placeholders in the string values of ``emit`` (and in ``raw``, ``partial``,
``stderr``): ``{session_id}`` (alias ``{thread_id}``), ``{cwd}``,
``{model}``, ``{prompt}``; ``{new_uuid}``, ``{new_msg_id}`` and
``{new_tool_id}`` make a fresh id at each occurrence, and ``{uuid}``,
``{msg_id}`` and ``{tool_id}`` repeat the last one made (so a tool_result
can name the tool_use above it). A script that ends without ``exit`` exits 0.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

from weft.agents.fake.common import FakeConfigError, Ids
from weft.agents.fake.output import (
    Emit,
    Exit,
    Kill,
    Partial,
    Raw,
    Sleep,
    Stderr,
    Step,
)

_KINDS = ("emit", "raw", "partial", "stderr", "sleep_ms", "exit", "signal")


def load(path: str) -> list[dict[str, Any]]:
    """Read and check a script file; :class:`FakeConfigError` says what is wrong."""
    where = f"FAKE_AGENT_SCRIPT={path!r}"
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise FakeConfigError(f"{where}: no such file") from None
    except OSError as exc:
        raise FakeConfigError(f"{where}: cannot read it ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise FakeConfigError(
            f"{where}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    if not isinstance(doc, list):
        raise FakeConfigError(f"{where}: the top level must be a list of steps")
    for index, step in enumerate(doc, 1):
        _check(step, f"{where}: step {index}")
    return doc


def _check(step: object, where: str) -> None:
    if not isinstance(step, dict):
        raise FakeConfigError(f'{where}: a step must be an object such as {{"sleep_ms": 10}}')
    keys = [k for k in step if k in _KINDS]
    extra = [k for k in step if k not in _KINDS and k != "then_sleep_ms"]
    if len(keys) != 1 or extra:
        raise FakeConfigError(
            f"{where}: {json.dumps(step)[:80]} must have exactly one of {', '.join(_KINDS)}"
        )
    kind = keys[0]
    value = step[kind]
    if "then_sleep_ms" in step and kind != "partial":
        raise FakeConfigError(f"{where}: then_sleep_ms only goes with partial")
    expected: tuple[type, ...]
    if kind == "emit":
        expected = (dict,)
    elif kind in ("raw", "partial", "stderr", "signal"):
        expected = (str,)
    elif kind == "exit":
        expected = (int,)
    else:
        expected = (int, float)
    if not isinstance(value, expected) or isinstance(value, bool):
        raise FakeConfigError(f"{where}: the value of {kind!r} has the wrong type")
    if kind == "sleep_ms" and isinstance(value, int | float) and value < 0:
        raise FakeConfigError(f"{where}: sleep_ms must not be negative")
    if kind == "signal" and not (
        isinstance(value, str)
        and isinstance(getattr(signal, value, None), int)
        and value.startswith("SIG")
    ):
        raise FakeConfigError(f"{where}: signal must be a signal name such as SIGKILL")


class Placeholders:
    """Fills ``{name}`` placeholders in script strings."""

    def __init__(self, ids: Ids, fixed: dict[str, str]) -> None:
        self.ids = ids
        self.fixed = fixed
        self.last = {"uuid": "", "msg_id": "", "tool_id": ""}

    def fill(self, value: Any) -> Any:
        """``value`` with placeholders replaced in every string (keys too)."""
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        if isinstance(value, dict):
            return {self._text(k): self.fill(v) for k, v in value.items()}
        return value

    def _text(self, text: str) -> str:
        if "{" not in text:
            return text
        for name, value in self.fixed.items():
            text = text.replace("{" + name + "}", value)
        makers = {"uuid": self.ids.uuid4, "msg_id": self.ids.message, "tool_id": self.ids.tool}
        for name, make in makers.items():
            token = "{new_" + name + "}"
            while token in text:
                self.last[name] = make()
                text = text.replace(token, self.last[name], 1)
            text = text.replace("{" + name + "}", self.last[name])
        return text


def steps(script: list[dict[str, Any]], fill: Placeholders) -> Iterator[Step]:
    """The steps of a loaded script."""
    for step in script:
        if "emit" in step:
            yield Emit(fill.fill(step["emit"]))
        elif "raw" in step:
            yield Raw(fill.fill(step["raw"]))
        elif "partial" in step:
            yield Partial(fill.fill(step["partial"]), float(step.get("then_sleep_ms", 0)))
        elif "stderr" in step:
            text = fill.fill(step["stderr"])
            yield Stderr(text if text.endswith("\n") else text + "\n")
        elif "sleep_ms" in step:
            yield Sleep(float(step["sleep_ms"]))
        elif "exit" in step:
            yield Exit(int(step["exit"]))
        else:
            yield Kill(str(step["signal"]))
