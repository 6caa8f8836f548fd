"""The execution's token file and the loopback rule."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from weft.server.auth import (
    client_token,
    ensure_token,
    ensure_tokens,
    is_local_origin,
    is_loopback,
    read_read_token,
    read_token,
    read_token_path,
    token_matches,
    token_path,
)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_token_is_made_once_private_and_then_reused(tmp_path: Path) -> None:
    assert read_token(tmp_path) is None
    token = ensure_token(tmp_path)
    assert len(token) >= 40
    assert mode_of(token_path(tmp_path)) == 0o600
    assert ensure_token(tmp_path) == token == read_token(tmp_path)


def test_a_token_file_others_can_read_is_tightened(tmp_path: Path) -> None:
    token = ensure_token(tmp_path)
    token_path(tmp_path).chmod(0o644)
    assert ensure_token(tmp_path) == token
    assert mode_of(token_path(tmp_path)) == 0o600


def test_an_empty_token_file_is_replaced(tmp_path: Path) -> None:
    token_path(tmp_path).write_text("")
    token = ensure_token(tmp_path)
    assert token
    assert read_token(tmp_path) == token


def test_tokens_compare_exactly() -> None:
    assert token_matches("abc", "abc")
    assert not token_matches("abc", "abd")
    assert not token_matches("abc", None)
    assert not token_matches("abc", "ab")
    assert not token_matches("abc", "abcé")


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        (("127.0.0.1", 5000), True),
        (("127.8.9.1", 5000), True),
        (("::1", 5000, 0, 0), True),
        (("::ffff:127.0.0.1", 5000, 0, 0), True),
        (("10.0.0.2", 5000), False),
        (("::ffff:10.0.0.2", 1, 0, 0), False),
        (("fe80::1%eth0", 1, 0, 0), False),
        ("localhost", False),
        (None, False),
    ],
)
def test_loopback_peers_are_recognised(address: object, loopback: bool) -> None:
    assert is_loopback(address) is loopback


@pytest.mark.parametrize(
    ("origin", "local"),
    [
        (None, True),
        ("http://localhost:3000", True),
        ("http://dash.localhost", True),
        ("http://127.0.0.1:8080", True),
        ("http://[::1]:8080", True),
        ("https://evil.example", False),
        ("http://localhost.evil.example", False),
        ("null", False),
        ("http://[bad", False),
    ],
)
def test_only_pages_served_from_this_machine_count_as_local(
    origin: str | None, local: bool
) -> None:
    assert is_local_origin(origin) is local


def test_both_tokens_are_made_private_distinct_and_reused(tmp_path: Path) -> None:
    tokens = ensure_tokens(tmp_path)
    assert tokens.read != tokens.readwrite
    for path in (token_path(tmp_path), read_token_path(tmp_path)):
        assert mode_of(path) == 0o600
    assert ensure_tokens(tmp_path) == tokens
    assert (read_token(tmp_path), read_read_token(tmp_path)) == (tokens.readwrite, tokens.read)


def test_a_client_takes_the_read_write_token_when_it_can_else_the_read_token(
    tmp_path: Path,
) -> None:
    assert client_token(tmp_path) is None
    tokens = ensure_tokens(tmp_path)
    assert client_token(tmp_path) == (tokens.readwrite, "readandwrite")
    token_path(tmp_path).unlink()  # as if unreadable to this user
    assert client_token(tmp_path) == (tokens.read, "readonly")
