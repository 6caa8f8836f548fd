"""Who may read and who may steer a run: the execution's two tokens.

Every connection presents a token in its handshake; a run's journal holds
file contents, tool output and prompts, so reading it is not free for anyone
on the machine. Each execution has two, made once and kept under ``.weft/``
with mode 0600 so only the execution's owner can read them:

* ``server.token``, the read-write token: it may also steer (skip codons,
  stop the run, roll back);
* ``server-read.token``, the read token: it may only read, so it can be
  handed to a dashboard or a colleague without handing over the run.

Weft's own commands (``weft attach``) read them from there, the read-write one
when it is readable; other clients get one passed with ``--token``. An
explicit opt-in (``weft run --allow-anonymous-read``, the runtime setting
``allowAnonymousRead``) lets token-less read-only clients in, as the
reference runtime does, but only over loopback and never from a web page of
another site (a browser sends its ``Origin``): any site the user visits could
otherwise read the run.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from weft.errors import StoreError

TOKEN_FILE = "server.token"
"""The read-write token's file, under ``.weft/``."""
READ_TOKEN_FILE = "server-read.token"
"""The read token's file, under ``.weft/``."""


@dataclass(frozen=True, slots=True)
class Tokens:
    """An execution's two tokens."""

    readwrite: str
    read: str


def token_path(weft_dir: Path) -> Path:
    """Where an execution keeps its read-write token."""
    return weft_dir / TOKEN_FILE


def read_token_path(weft_dir: Path) -> Path:
    """Where an execution keeps its read token."""
    return weft_dir / READ_TOKEN_FILE


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def _ensure(path: Path) -> str:
    """The token in ``path``, made (mode 0600) if there is none yet.

    A token file others could read is tightened to 0600 first: the token is
    only as secret as the file.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with contextlib.suppress(OSError):
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)
        token = _read(path)
        if token:
            return token
        # An empty file (a crash between create and write): make it again.
        path.unlink(missing_ok=True)
        return _ensure(path)
    except OSError as e:
        raise StoreError(f"{path}: cannot create the server token: {e.strerror}") from e
    token = new_token()
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        # A full disk: no half-written token may stay behind to be trusted.
        path.unlink(missing_ok=True)
        raise StoreError(f"{path}: cannot write the server token: {e.strerror}") from e
    return token


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def ensure_token(weft_dir: Path) -> str:
    """The execution's read-write token, made (mode 0600) if it has none yet."""
    return _ensure(token_path(weft_dir))


def ensure_tokens(weft_dir: Path) -> Tokens:
    """Both of the execution's tokens, each made (mode 0600) if missing."""
    return Tokens(_ensure(token_path(weft_dir)), _ensure(read_token_path(weft_dir)))


def read_token(weft_dir: Path) -> str | None:
    """The execution's read-write token, or None when there is none or it is not readable."""
    return _read(token_path(weft_dir))


def read_read_token(weft_dir: Path) -> str | None:
    """The execution's read token, or None when there is none or it is not readable."""
    return _read(read_token_path(weft_dir))


def client_token(weft_dir: Path) -> tuple[str, Literal["readonly", "readandwrite"]] | None:
    """The best token a client on this machine can read, with the mode it
    grants: the read-write token when readable, else the read token."""
    token = read_token(weft_dir)
    if token is not None:
        return token, "readandwrite"
    token = read_read_token(weft_dir)
    if token is not None:
        return token, "readonly"
    return None


def token_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison of a presented token with the execution's."""
    if given is None:
        return False
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


def is_loopback(address: object) -> bool:
    """Whether a peer address (``(host, port, ...)`` or a host string) is loopback."""
    host = address[0] if isinstance(address, tuple) and address else address
    if not isinstance(host, str):
        return False
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def is_local_origin(origin: str | None) -> bool:
    """Whether a WebSocket request's ``Origin`` is this machine: none at all (not
    a browser), or a page served from localhost or a loopback address."""
    if origin is None:
        return True
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    if host is None:
        return False
    return host == "localhost" or host.endswith(".localhost") or is_loopback(host)
