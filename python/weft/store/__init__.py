"""The durable store of an execution: SQLite journal, state.json snapshots, lock.

:mod:`.journal` (the SQLite journal, its checks at open), :mod:`.schema` (its
migrations), :mod:`.writer` (group commit on a writer thread), :mod:`.snapshot`
(atomic state.json), :mod:`.lock` (one live process), :mod:`.recovery`
(snapshot + journal tail), :mod:`.loss` (journal data provably gone, found
before SQLite papers over it), :mod:`.restore` (a new journal from the newest
snapshot), :mod:`.integrity` (the load-time checks against the disk) and
:mod:`.execution` (the ``.weft/`` folder opened in that order).

See ``docs/store.md`` for the schema, the durability guarantees and recovery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weft.store.execution import ExecutionStore, weft_dir_of
    from weft.store.journal import Journal, JournalEvent
    from weft.store.lock import LockInfo, RuntimeLock
    from weft.store.recovery import Recovery, rebuild, recover
    from weft.store.writer import StoreWriter

_HOMES = {
    "ExecutionStore": "execution",
    "weft_dir_of": "execution",
    "Journal": "journal",
    "JournalEvent": "journal",
    "LockInfo": "lock",
    "RuntimeLock": "lock",
    "Recovery": "recovery",
    "rebuild": "recovery",
    "recover": "recovery",
    "StoreWriter": "writer",
}
"""Where each name lives: loaded on first use, so that a command needing only
the lock (``weft ls``) does not load the journal and the writer."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'weft.store' has no attribute {name!r}")
    return getattr(importlib.import_module(f"weft.store.{home}"), name)


__all__ = [
    "ExecutionStore",
    "Journal",
    "JournalEvent",
    "LockInfo",
    "Recovery",
    "RuntimeLock",
    "StoreWriter",
    "rebuild",
    "recover",
    "weft_dir_of",
]
