"""weft.clock: stamps in one shape, whatever order the times come in."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from weft.clock import iso_from_ms, utc_now_iso

_MS = st.integers(min_value=0, max_value=4_102_444_800_000)  # 1970 to 2100


def _expected(ms: int) -> str:
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).replace(microsecond=(ms % 1000) * 1000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@given(st.lists(_MS, min_size=1, max_size=20))
def test_every_time_in_any_order_gets_its_own_second(times: list[int]) -> None:
    # The formatted second is cached: jumping back and forth must not reuse a stale one.
    for ms in times:
        assert iso_from_ms(ms) == _expected(ms)
        assert iso_from_ms(ms + 1) == _expected(ms + 1)


def test_now_has_the_shape() -> None:
    stamp = utc_now_iso()
    assert len(stamp) == len("2026-11-21T10:00:00.123Z")
    assert stamp.endswith("Z")
    assert dt.datetime.fromisoformat(stamp).tzinfo is not None


def test_ms_from_iso_reads_weft_stamps_and_refuses_anything_else() -> None:
    from weft.clock import iso_from_ms, ms_from_iso

    for ms in (0, 1_795_826_541_706, 1_800_000_000_123):
        assert ms_from_iso(iso_from_ms(ms)) == ms
    assert ms_from_iso("2026-11-28T01:02:21.706+01:00") == ms_from_iso("2026-11-28T00:02:21.706Z")
    assert ms_from_iso("2026-11-28T00:02:21.706") == ms_from_iso("2026-11-28T00:02:21.706Z")
    for bad in (None, 12, "", "yesterday", "2026-13-01T00:00:00Z"):
        assert ms_from_iso(bad) is None
