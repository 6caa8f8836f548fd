"""How a Claude session's verdict is read from the CLI's own words: its
stderr notes (unknown session, bad input, login), the error codes of its
synthetic assistant message, HTTP statuses, and the stderr line that names
the error. The API vocabulary shared with the other adapters is in
:mod:`weft.agents.vendor_errors`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from weft.agents.adapter_parts import crash_verdict
from weft.agents.events import ErrorClass
from weft.agents.harness import ProcessEnd
from weft.agents.vendor_errors import parse_retry_after

NO_CONVERSATION = re.compile(r"no conversation found", re.I)
INPUT_ERRORS = re.compile(
    r"is already in use|input must be provided|requires --verbose|unknown option"
    r"|--resume without a value|error: option",
    re.I,
)
LOGIN = re.compile(r"invalid api key|please run /login|not logged in", re.I)
API_ERROR_CODES: dict[str, tuple[ErrorClass, bool]] = {
    "authentication_failed": (ErrorClass.AUTH, False),
    "billing_error": (ErrorClass.BILLING, False),
    "rate_limit": (ErrorClass.RATE_LIMIT, True),
    "server_error": (ErrorClass.OVERLOADED, True),
    "overloaded": (ErrorClass.OVERLOADED, True),
    "invalid_request": (ErrorClass.API_ERROR, False),
    "model_not_found": (ErrorClass.API_ERROR, False),
    "max_output_tokens": (ErrorClass.CONTEXT_EXCEEDED, False),
}


def status_class(status: int) -> tuple[ErrorClass, bool] | None:
    """The class and retriability of an HTTP status, or ``None``."""
    if status == 429:
        return ErrorClass.RATE_LIMIT, True
    if status in (401, 403):
        return ErrorClass.AUTH, False
    if status == 402:
        return ErrorClass.BILLING, False
    if status == 408:
        return ErrorClass.API_ERROR, True
    if status == 529 or 500 <= status < 600:
        return ErrorClass.OVERLOADED, True
    if 400 <= status < 500:
        return ErrorClass.API_ERROR, False
    return None


_ERROR_LINE = re.compile(r"^\s*(?:[A-Z]\w*)?(?:Error|Exception)\b|^\s*error:", re.I)


def last_error_line(text: str) -> str:
    """The line of a stderr tail that says what went wrong: the last one
    naming an error (``TypeError: ...``, ``Error: ...``), else the last one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if _ERROR_LINE.match(line):
            return line[:500]
    return lines[-1][:500] if lines else ""


def matching_line(text: str, pattern: re.Pattern[str]) -> str:
    """The first line of ``text`` that ``pattern`` matches, else the error line."""
    for line in text.splitlines():
        if pattern.search(line):
            return line.strip()[:500]
    return last_error_line(text)


def first_retry_after(texts: Sequence[str], stderr_tail: str) -> int | None:
    """The first retry delay named in ``texts``, then in the stderr tail."""
    for text in (*texts, stderr_tail):
        if text:
            found = parse_retry_after(text)
            if found is not None:
                return found
    return None


def stderr_verdict(notes: str) -> tuple[ErrorClass, bool, str] | None:
    """The verdict the CLI's own stderr words give a session without a
    result (unknown session, bad input, login), or ``None``."""
    for cls, pattern in (
        (ErrorClass.CANNOT_RESUME, NO_CONVERSATION),
        (ErrorClass.INPUT_ERROR, INPUT_ERRORS),
        (ErrorClass.AUTH, LOGIN),
    ):
        if pattern.search(notes):
            return cls, False, matching_line(notes, pattern)
    return None


def exit_verdict(end: ProcessEnd, *, started: bool) -> tuple[ErrorClass, bool, str]:
    """The verdict of a session that ended without a result and without
    words that name the cause: by its exit, and whether it had started."""
    last = last_error_line(end.stderr_tail)
    suffix = f": {last}" if last else ""
    if end.exit_code == 0:
        return ErrorClass.NO_RESULT, started, "claude exited 0 without a result line" + suffix
    return crash_verdict(
        end,
        started=started,
        suffix=suffix,
        before="claude died before starting a session",
        mid="claude died mid-run without a result",
    )
