"""The closed usage windows every Weft process of the user sees.

One JSON file (``$WEFT_USAGE_WINDOWS``, else
``$XDG_STATE_HOME/weft/usage-windows.json``, else
``~/.local/state/weft/usage-windows.json``), mode 0600, holding one entry per
provider whose window is closed::

    {"version": 1, "windows": {"anthropic": {"resetsAtMs": ..., "window": "five_hour",
                                             "recordedAtMs": ..., "source": "exec-id/codon"}}}

Why a file: a window is the account's, not the run's. The next codon of the
same run, another ``weft run`` started by cron, and every step of a
``weft batch`` (in process, isolated or on another worker of this machine)
must hold back until it opens rather than each spend a session to learn it.

Every change is a read-modify-write under an exclusive ``flock`` on a lock
file beside it, written to a temporary file and renamed, so readers never see
a torn file. A file that cannot be read or parsed counts as no window closed
(the worst case is one session that learns it again) and is replaced on the
next write. Entries whose reset has passed are dropped when read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from weft.filemodes import open_private, private_folder

__all__ = ["ENV", "ClosedWindow", "WindowRegistry", "default_path"]

ENV = "WEFT_USAGE_WINDOWS"
"""The registry's file, when not the default."""


class ClosedWindow(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A provider refuses sessions until ``resets_at_ms`` (epoch ms)."""

    provider: str = ""
    resets_at_ms: int
    window: str | None = None
    """The provider's name for the window (``five_hour``, ``seven_day``)."""
    recorded_at_ms: int = 0
    source: str = ""
    """Who saw it closed: ``<execution id>/<codon id>``."""


class _File(msgspec.Struct, kw_only=True):
    version: int = 1
    windows: dict[str, ClosedWindow] = msgspec.field(default_factory=dict)


_decode = msgspec.json.Decoder(_File).decode
_encode = msgspec.json.Encoder().encode


def default_path() -> Path:
    """Where the registry is, by the environment."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or os.path.join("~", ".local", "state")
    return Path(state).expanduser() / "weft" / "usage-windows.json"


@dataclass(slots=True)
class WindowRegistry:
    """Reads and records closed windows in :attr:`path`."""

    path: Path
    _seen: tuple[int, int, int] | None = field(default=None, repr=False)
    _cached: _File = field(default_factory=lambda: _File(), repr=False)

    @classmethod
    def default(cls) -> WindowRegistry:
        """The registry at :func:`default_path`."""
        return cls(default_path())

    def closed(self, provider: str, now_ms: int) -> ClosedWindow | None:
        """The window of ``provider`` when it is closed at ``now_ms``."""
        found = self._current().windows.get(provider)
        if found is None or found.resets_at_ms <= now_ms:
            return None
        return msgspec.structs.replace(found, provider=provider)

    def all_closed(self, now_ms: int) -> list[ClosedWindow]:
        """Every window closed at ``now_ms``, by provider name."""
        windows = self._current().windows
        return [
            msgspec.structs.replace(w, provider=p)
            for p, w in sorted(windows.items())
            if w.resets_at_ms > now_ms
        ]

    def close(
        self,
        provider: str,
        resets_at_ms: int,
        *,
        window: str | None,
        source: str,
        now_ms: int,
    ) -> ClosedWindow:
        """Records ``provider`` closed until ``resets_at_ms`` (a later reset
        already recorded wins); the entry now in force."""
        with self._locked():
            data = self._read()
            self._prune(data, now_ms)
            old = data.windows.get(provider)
            entry = ClosedWindow(
                resets_at_ms=resets_at_ms, window=window, recorded_at_ms=now_ms, source=source
            )
            if old is None or old.resets_at_ms < resets_at_ms:
                data.windows[provider] = entry
            else:
                entry = old
            self._write(data)
        return msgspec.structs.replace(entry, provider=provider)

    def open(self, provider: str, now_ms: int) -> bool:
        """Forgets ``provider``'s window (a session went through); whether one was recorded."""
        if provider not in self._current().windows:
            return False
        with self._locked():
            data = self._read()
            self._prune(data, now_ms)
            found = data.windows.pop(provider, None) is not None
            self._write(data)
        return found

    # -- the file ------------------------------------------------------------------

    def _current(self) -> _File:
        """The file as last written, read again only when it changed: every
        codon asks before its agent starts, and the answer is nearly always
        "no such file" (one ``stat``)."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._seen, self._cached = None, _File()
            return self._cached
        seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        if seen != self._seen:
            self._seen, self._cached = seen, self._read()
        return self._cached

    def _read(self) -> _File:
        try:
            return _decode(self.path.read_bytes())
        except (OSError, msgspec.ValidationError, msgspec.DecodeError):
            return _File()

    @staticmethod
    def _prune(data: _File, now_ms: int) -> None:
        for provider in [p for p, w in data.windows.items() if w.resets_at_ms <= now_ms]:
            del data.windows[provider]

    def _write(self, data: _File) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "wb") as f:
            f.write(_encode(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if not self.path.parent.exists():
            # Only made, never tightened: a user may point it into a shared folder.
            private_folder(self.path.parent)
        fd = open_private(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
