"""The journal database's schema, versioned with ``PRAGMA user_version``.

Each migration moves the schema up one version inside one transaction. A
database newer than this Weft refuses to open rather than be misread.
"""

from __future__ import annotations

import sqlite3

from weft.errors import StoreError

MIGRATIONS: tuple[str, ...] = (
    # 1: the journal and the audit trail over it.
    """
    CREATE TABLE events (
        seq       INTEGER PRIMARY KEY,          -- journal order = submission order
        id        TEXT    NOT NULL,             -- <13-digit ms>-<9 base36>
        timestamp TEXT    NOT NULL,             -- ISO-8601 UTC, when it was submitted
        kind      TEXT    NOT NULL CHECK (kind IN ('transition', 'event')),
        type      TEXT    NOT NULL,             -- RunStarted, CodonTransitioned, error, ...
        run_id    TEXT,
        codon_id  TEXT,
        payload   TEXT    NOT NULL              -- the exact encoded JSON
    );
    CREATE INDEX events_by_codon ON events (run_id, codon_id, seq);
    CREATE INDEX events_by_type ON events (type, seq);
    CREATE VIEW transitions AS
        SELECT seq,
               run_id,
               codon_id,
               type,
               json_extract(payload, '$.data.from')     AS from_status,
               json_extract(payload, '$.data.to')       AS to_status,
               json_extract(payload, '$.data.metadata') AS metadata,
               timestamp                                AS at
          FROM events
         WHERE kind = 'transition';
    """,
    # 2: a CRC-32 of each payload, so a row altered after it was written is
    # found when the journal opens (NULL for rows written before version 2);
    # and the state a restored journal starts from (``weft store rebuild
    # --from-snapshot``): the fold begins there instead of from nothing.
    """
    ALTER TABLE events ADD COLUMN crc INTEGER;
    CREATE TABLE baseline (
        seq    INTEGER PRIMARY KEY,             -- the state reflects the journal through seq
        source TEXT    NOT NULL,                -- the snapshot it came from (state.json, ...)
        state  TEXT    NOT NULL                 -- the state document
    );
    """,
)

VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Brings the schema to :data:`VERSION`; refuses a newer database."""
    (current,) = conn.execute("PRAGMA user_version").fetchone()
    if current > VERSION:
        raise StoreError(
            f"{path}: the journal has schema version {current}, newer than this Weft "
            f"understands ({VERSION}); upgrade Weft to open it"
        )
    for version in range(current, VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
