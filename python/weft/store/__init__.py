"""The durable store of an execution: SQLite journal, state.json snapshots, lock.

See ``docs/store.md`` for the schema, the durability guarantees and recovery.
"""

from weft.store.execution import ExecutionStore, weft_dir_of
from weft.store.journal import Journal, JournalEvent
from weft.store.lock import LockInfo, RuntimeLock
from weft.store.recovery import Recovery, rebuild, recover
from weft.store.writer import StoreWriter

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
