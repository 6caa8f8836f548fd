"""Who may steer a run: the execution's token and the loopback rule.

Read-write clients (they can skip codons, stop the run, roll back) must
present the execution's token in their handshake. The token is made once per
execution, kept in ``.weft/server.token`` with mode 0600 so only its owner can
read it; Weft's own commands read it from there, other clients get it with
``--token``. Read-only clients need no token when they connect over loopback,
unless they are a web page from elsewhere (a browser sends its ``Origin``):
any site the user visits could otherwise read the run.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from weft.errors import StoreError

TOKEN_FILE = "server.token"


def token_path(weft_dir: Path) -> Path:
    """Where an execution keeps its token."""
    return weft_dir / TOKEN_FILE


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def ensure_token(weft_dir: Path) -> str:
    """The execution's token, made (mode 0600) if it has none yet.

    A token file others could read is tightened to 0600 first: the token is
    only as secret as the file.
    """
    path = token_path(weft_dir)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with contextlib.suppress(OSError):
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)
        token = read_token(weft_dir)
        if token:
            return token
        # An empty file (a crash between create and write): make it again.
        path.unlink(missing_ok=True)
        return ensure_token(weft_dir)
    except OSError as e:
        raise StoreError(f"{path}: cannot create the server token: {e.strerror}") from e
    token = new_token()
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    return token


def read_token(weft_dir: Path) -> str | None:
    """The execution's token, or None when there is none or it is not readable."""
    try:
        text = token_path(weft_dir).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def token_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison of a presented token with the execution's."""
    if given is None:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


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
