"""The checkpoint log: a checkpoint's new objects and branch move, appended in one write.

Writing a checkpoint straight into git costs three file creations (the pack,
its index, the branch's lock file) and two renames. On a virtual machine's
ext4 a creation costs 0.15-0.3 ms, several times the rest of a small
checkpoint. So the repository that owns a run (it holds the runtime lock)
appends each checkpoint to this log instead, one ``write`` of one record, and
moves the records into git in batches (:meth:`CheckpointLog.take`): one pack
for all their objects, each branch moved once, then the log is emptied.

The log is as durable as the git files it stands for: neither is fsync'd, and
both survive the process being killed. Whoever opens the repository next
replays what the log still holds (the owner moves it into git; a read-only
opener overlays its branch tips), so a checkpoint whose SHA the journal
recorded is never lost to a batch not yet written.

Record: ``b"WCL1"``, the payload's length and CRC-32 (big-endian u32 each),
then the payload, msgpack ``[[[kind, sha, data], ...], [[refname, sha], ...]]``.
A record cut short by a crash fails its length or CRC; it and anything after
it are ignored, and the owner empties the log once it has replayed the rest.
An append that fails (a full disk) cuts its partial record off again.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

#: The log's name inside the git directory (git ignores files it does not know there).
LOG_NAME = "weft-checkpoint.log"
_MAGIC = b"WCL1"
_HEADER = struct.Struct(">4sII")

Obj = tuple[int, bytes, bytes]
"""``(kind, binary sha, body)`` of one git object."""

_Payload = tuple[list[Obj], list[tuple[str, str]]]
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Payload)


@dataclass
class Replayed:
    """What a log holds: its objects (by SHA) and the last tip of each branch it moved."""

    objects: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)
    tips: dict[str, str] = field(default_factory=dict)
    records: int = 0
    #: The commit of the last whole record: the owner's newest checkpoint (its HEAD).
    head: str | None = None
    #: Bytes of a record cut short (or damaged) at the end, ignored.
    torn: int = 0
    #: Where the last whole record ends.
    end: int = 0


def read_log(path: Path) -> Replayed:
    """The whole records of the log at ``path`` (an absent log is empty)."""
    out = Replayed()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return out
    offset = 0
    while offset < len(data):
        if len(data) - offset < _HEADER.size:
            break
        magic, size, crc = _HEADER.unpack_from(data, offset)
        body = data[offset + _HEADER.size : offset + _HEADER.size + size]
        if magic != _MAGIC or len(body) != size or zlib.crc32(body) != crc:
            break
        try:
            objects, refs = _decoder.decode(body)
        except msgspec.MsgspecError:
            break
        for kind, sha, obj in objects:
            out.objects[sha] = (kind, obj)
        for refname, sha in refs:
            out.tips[refname] = sha
            out.head = sha
        out.records += 1
        offset += _HEADER.size + size
    out.end = offset
    out.torn = len(data) - offset
    return out


class CheckpointLog:
    """The owner's open log, emptied when opened (the opener replayed it first):
    appends records and remembers what they hold until taken."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Objects appended and not yet in git, by binary SHA.
        self.objects: dict[bytes, tuple[int, bytes]] = {}
        #: Branch tips moved and not yet in git, by refname.
        self.tips: dict[str, str] = {}
        self.records = 0
        #: Payload bytes held (objects' bodies), for the flush threshold.
        self.size = 0
        #: When the oldest record held was appended (``time.monotonic()``; 0 when empty).
        self.since = 0.0
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._offset = 0
        self.clear()

    def append(self, objects: list[Obj], refs: list[tuple[str, str]]) -> None:
        """Adds one record (one ``write``); raises ``OSError`` with nothing kept on failure."""
        body = _encoder.encode((objects, refs))
        record = _HEADER.pack(_MAGIC, len(body), zlib.crc32(body)) + body
        try:
            view = memoryview(record)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            # A partial record (a full disk): cut it off so the log stays whole.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._offset)
                os.lseek(self._fd, self._offset, os.SEEK_SET)
            raise
        self._offset += len(record)
        for kind, sha, data in objects:
            if sha not in self.objects:
                self.objects[sha] = (kind, data)
                self.size += len(data)
        for refname, commit in refs:
            self.tips[refname] = commit
        if not self.records:
            self.since = time.monotonic()
        self.records += 1

    def clear(self) -> None:
        """Empties the log: everything it held is in git now."""
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        self._offset = 0
        self.objects.clear()
        self.tips.clear()
        self.records = 0
        self.size = 0
        self.since = 0.0

    def close(self) -> None:
        """Closes the file (what it holds stays for the next opener)."""
        with contextlib.suppress(OSError):
            os.close(self._fd)


__all__ = ["LOG_NAME", "CheckpointLog", "Obj", "Replayed", "read_log"]
