"""Wall-clock time as Weft writes it: ISO-8601 UTC to the millisecond, ``Z``.

The compiled core never reads a clock; everything that stamps a transition
or an event takes its time from here, so every stamp has the same shape.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

_second: tuple[int, str] = (-1, "")
"""The last second formatted: a codon stamps about ten times, mostly within one."""


def iso_from_ms(ms: int) -> str:
    """A time in milliseconds since the epoch, as ``2026-11-21T10:00:00.123Z``."""
    global _second
    seconds, rest = divmod(ms, 1000)
    last = _second  # one read: another thread may replace it meanwhile
    if last[0] != seconds:
        last = _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{last[1]}.{rest:03d}Z"


def utc_now_iso() -> str:
    """Now, as ``2026-11-21T10:00:00.123Z``."""
    return iso_from_ms(time.time_ns() // 1_000_000)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms_from_iso(stamp: object) -> int | None:
    """Milliseconds since the epoch of an ISO-8601 stamp (UTC when it names no
    zone); ``None`` for anything else."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # Weft stamps UTC
    return (moment - _EPOCH) // timedelta(milliseconds=1)
