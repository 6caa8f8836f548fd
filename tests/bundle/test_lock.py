"""The pure rules of a bundle: member names, links resolved in the member table,
the lock's encoding and its comparison with an archive."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.bundle.errors import BundleError
from weft.bundle.lock import (
    Lock,
    Member,
    Quotas,
    bundle_hash,
    compare,
    decode_lock,
    encode_lock,
    member_name_problem,
    normal_mode,
    symlink_problem,
)

A = Member("file", 0o644, "a" * 64, 3)
B = Member("file", 0o644, "b" * 64, 4)


@pytest.mark.parametrize(
    "name",
    ["", "/etc/passwd", "../x", "a/../../x", "a/..", "a//b", "./a", "a/./b", "a\\b", "C:x",
     "a\x00b", "a\nb", "a/"],
)  # fmt: skip
def test_names_that_could_leave_or_confuse_the_folder_are_refused(name: str) -> None:
    assert member_name_problem(name) is not None


@pytest.mark.parametrize("name", ["hank.json", "a/b/c.md", "..a", "a..b/c", "é/ü.md", ".hidden"])
def test_plain_relative_names_are_accepted(name: str) -> None:
    assert member_name_problem(name) is None


def link(target: str) -> Member:
    return Member("symlink", 0o777, target=target)


@pytest.mark.parametrize(
    ("members", "name", "escapes"),
    [
        ({"l": link("x")}, "l", False),
        ({"d": Member("dir", 0o755), "d/l": link("../x")}, "d/l", False),
        ({"l": link("../x")}, "l", True),
        ({"l": link("/etc/passwd")}, "l", True),
        ({"d": Member("dir", 0o755), "d/l": link("../../x")}, "d/l", True),
        # each link lexically inside, together outside: a -> . then b -> a/..
        ({"a": link("."), "b": link("a/..")}, "b", True),
        ({"a": link("b"), "b": link("a")}, "a", True),  # a cycle: refused, not followed forever
        ({"s": Member("dir", 0o755), "a": link("s"), "b": link("a/..")}, "b", False),
    ],
)
def test_a_link_is_resolved_through_the_member_table(
    members: dict[str, Member], name: str, escapes: bool
) -> None:
    assert (symlink_problem(name, members) is not None) is escapes


def test_a_cycle_through_a_path_is_an_error_not_a_hang() -> None:
    members = {"a": link("a/x")}
    assert "cycle" in (symlink_problem("a", members) or "")


def test_modes_keep_only_whether_a_file_runs() -> None:
    assert normal_mode("file", 0o100600) == 0o644
    assert normal_mode("file", 0o100700) == 0o755
    assert normal_mode("dir", 0o40700) == 0o755


def test_the_lock_round_trips_and_its_bytes_do_not_depend_on_order() -> None:
    one = encode_lock("hank.json", {"hank.json": A, "p.md": B}, "1.0")
    two = encode_lock("hank.json", {"p.md": B, "hank.json": A}, "1.0")
    assert one == two
    lock = decode_lock(one)
    assert lock.members == {"hank.json": A, "p.md": B}
    assert lock.bundle_hash == bundle_hash("hank.json", {"hank.json": A, "p.md": B})
    assert lock.created_by == "weft 1.0"


def test_the_bundle_hash_ignores_the_weft_version_but_not_a_mode() -> None:
    a = decode_lock(encode_lock("hank.json", {"hank.json": A}, "1.0")).bundle_hash
    b = decode_lock(encode_lock("hank.json", {"hank.json": A}, "2.0")).bundle_hash
    c = bundle_hash("hank.json", {"hank.json": Member("file", 0o755, A.sha256, A.size)})
    assert a == b != c


def test_a_hankweave_lock_with_numeric_modes_and_runtime_min_is_read() -> None:
    members = {"hank.json": {"sha256": "a" * 64, "size": 3, "mode": 420}}
    doc = {"bundleHash": "f" * 64, "members": members, "runtime": {"min": "0.12.0"}}
    lock = decode_lock(orjson.dumps(doc))
    assert lock.members["hank.json"].mode == 0o644
    assert lock.runtime_min == "0.12.0"
    assert lock.hank == "hank.json"


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        (b"not json", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b'{"members": {}}', "names the hank"),
        (b'{"lockVersion": 9, "members": {}}', "lockVersion"),
        (b'{"members": {"../x": {"sha256": "' + b"a" * 64 + b'"}}}', "climbs out"),
        (b'{"members": {"hank.json": {"sha256": "zz"}}}', "sha256"),
        (b'{"members": {"hank.json": {"sha256": "' + b"a" * 64 + b'", "size": 1}}}', "bundleHash"),
        (b'{"members": {"x": {"type": "socket"}}}', "unknown member type"),
        (b'{"members": {"x": {"type": "dir", "mode": "rwx"}}}', "mode"),
    ],
)
def test_a_malformed_lock_is_refused_with_what_is_wrong(doc: bytes, said: str) -> None:
    with pytest.raises(BundleError, match=said):
        decode_lock(doc)


def lock_of(members: dict[str, Member]) -> Lock:
    return decode_lock(encode_lock("hank.json", members, "t"))


@pytest.mark.parametrize(
    ("found", "said"),
    [
        ({"hank.json": A}, "p.md: listed in hank.lock but missing"),
        ({"hank.json": A, "p.md": B, "x": B}, "x: in the archive but not listed"),
        ({"hank.json": A, "p.md": A}, "p.md: content changed"),
        ({"hank.json": A, "p.md": Member("file", 0o755, B.sha256, B.size)}, "p.md: mode 0755"),
        ({"hank.json": A, "p.md": Member("dir", 0o755)}, "p.md: a dir in the archive"),
        ({"hank.json": A, "p.md": Member("file", 0o644, B.sha256, 9)}, "p.md: 9 bytes"),
    ],
)
def test_any_difference_from_the_lock_is_refused_and_named(
    found: dict[str, Member], said: str
) -> None:
    lock = lock_of({"hank.json": A, "p.md": B})
    compare(lock, {"hank.json": A, "p.md": B}, "x.hank")  # the same: accepted
    with pytest.raises(BundleError, match=said):
        compare(lock, found, "x.hank")


def test_an_edited_lock_is_refused_even_when_the_archive_matches_it() -> None:
    lock = lock_of({"hank.json": A})
    edited = Lock(lock.hank, {"hank.json": B}, lock.bundle_hash)
    with pytest.raises(BundleError, match=r"bundleHash"):
        compare(edited, {"hank.json": B}, "x.hank")


def test_quotas_say_which_limit() -> None:
    q = Quotas(member_bytes=10, total_bytes=15, members=2)
    q.check_member("a", 10)
    with pytest.raises(BundleError, match=r"member a is 11 bytes"):
        q.check_member("a", 11)
    with pytest.raises(BundleError, match=r"over 15 bytes"):
        q.check_total(16)
    with pytest.raises(BundleError, match=r"over 2 members"):
        q.check_count(3)


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", "c"]), min_size=1, max_size=6))
def test_an_accepted_name_never_climbs(parts: list[str]) -> None:
    name = "/".join(parts)
    if member_name_problem(name) is None:
        depth = 0
        for part in name.split("/"):
            depth += -1 if part == ".." else 1
            assert depth > 0
