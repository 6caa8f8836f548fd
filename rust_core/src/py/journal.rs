//! `JournalAppender`: the journal's batches inserted and committed in one call
//! detached from the interpreter; `JournalPages`: a replaying client's pages
//! read and joined the same way.
//!
//! Python's `sqlite3` gives the interpreter up around every row it inserts and
//! takes it back after; on the writer thread, each time, the event loop's
//! thread is held up until the writer lets go again. A batch of a few hundred
//! rows meant hundreds of such hand-overs during a codon. Here the rows are
//! copied out once, then the transaction (inserts, commit, the WAL's fsync)
//! runs detached: the writer takes the interpreter once before and once after.
//!
//! The connection goes through the system's `libsqlite3`, which Python's
//! `sqlite3` module also loads: one library in the process, so its locks on
//! the database's files are shared with the Python connections to the same
//! journal. (Two copies of `SQLite` in one process would each drop the other's
//! POSIX locks when closing a file.) `weft.store.journal` checks that it is
//! the same library (a process-wide setting one side writes and the other
//! reads, see `soft_heap_limit`) before using this; otherwise it keeps
//! Python's own inserts.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::sync::MutexExt;
use pyo3::types::PyBytes;
use pyo3::types::PyList;
use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};

use super::core::Outcome;

/// Adds `JournalAppender` and `JournalPages` to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<JournalAppender>()?;
    m.add_class::<JournalPages>()
}

/// One journal row as `weft.store.journal.Row` has it:
/// `(seq, id, timestamp, kind, type, run_id, codon_id, payload)`.
///
/// The strings are borrowed from Python's (no copy, nothing allocated per row),
/// and released after the call, attached again.
type Row = (
    i64,
    PyBackedStr,
    PyBackedStr,
    PyBackedStr,
    PyBackedStr,
    Option<PyBackedStr>,
    Option<PyBackedStr>,
    PyBackedStr,
);

const INSERT: &str = "INSERT INTO events \
    (seq, id, timestamp, kind, type, run_id, codon_id, payload, crc) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

/// A write connection to one journal database (already created and migrated).
#[pyclass(module = "weft._core", frozen)]
pub struct JournalAppender {
    conn: Shared,
}

#[pymethods]
impl JournalAppender {
    /// Opens the journal at `path` for appending (WAL, `synchronous = FULL`:
    /// a commit returns once the WAL is on disk).
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let conn = py
            .detach(|| -> rusqlite::Result<Connection> {
                let conn = Connection::open(&path)?;
                conn.busy_timeout(Duration::from_secs(10))?;
                conn.pragma_update(None, "synchronous", "FULL")?;
                let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
                if !mode.eq_ignore_ascii_case("wal") {
                    // Whoever created the journal set WAL; anything else is not ours to change.
                    return Err(rusqlite::Error::InvalidQuery);
                }
                Ok(conn)
            })
            .map_err(|e| sqlite_error(py, &e))?;
        Ok(Self {
            conn: Shared(Mutex::new(Some(conn))),
        })
    }

    /// Inserts `rows` (with each payload's CRC-32) in one transaction and
    /// commits it: durable when this returns. Nothing is kept on an error.
    fn append(&self, py: Python<'_>, rows: Vec<Row>) -> PyResult<()> {
        py.detach(|| {
            self.insert(rows.iter().map(
                |(seq, id, timestamp, kind, kind_type, run_id, codon_id, payload)| RowRef {
                    seq: *seq,
                    id,
                    timestamp,
                    kind,
                    kind_type,
                    run_id: run_id.as_deref(),
                    codon_id: codon_id.as_deref(),
                    payload,
                },
            ))
        })
        .map_err(|e| failure_error(py, e))
    }

    /// Journals the `StateManager`'s processed items (`weft.state.Processed`)
    /// as `append` journals their rows (`weft.store.writer.to_row`), building
    /// the rows here: their ids and timestamps are formatted detached, and the
    /// writer thread runs no Python per item (each item's Python cost the
    /// event loop's thread as long, waiting for the interpreter).
    ///
    /// Returns `(payload bytes, whether an applied transition ended a codon
    /// or the run or started a run, run id of the last applied RunStarted)`.
    fn append_processed(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyList>,
    ) -> PyResult<(u64, bool, Option<String>)> {
        let mut rows = Vec::with_capacity(items.len());
        let mut size = 0_u64;
        let mut ended = false;
        let mut started = None;
        for item in items.iter() {
            let row = ItemRow::read(&item)?;
            let outcome = row.outcome.get();
            if outcome.ok && outcome.transition {
                let run_started = outcome.kind == Some("RunStarted");
                ended |= outcome.codon_terminal || outcome.run_ended || run_started;
                if run_started {
                    started.clone_from(&outcome.run_id);
                }
            }
            size += row.payload.len() as u64;
            rows.push(row);
        }
        py.detach(|| {
            let formatted: Vec<(String, String, Cow<'_, str>)> = rows
                .iter()
                .map(|r| {
                    let ms = r.time_ns.div_euclid(1_000_000);
                    (
                        format!("{ms:013}-{:09x}", r.seq),
                        iso_from_ms(ms),
                        String::from_utf8_lossy(&r.payload),
                    )
                })
                .collect();
            self.insert(
                rows.iter()
                    .zip(&formatted)
                    .map(|(r, (id, timestamp, payload))| {
                        let outcome = r.outcome.get();
                        let (kind, kind_type, run_id, codon_id) = match &r.stream {
                            Some(s) => (
                                "event",
                                &*s.kind_type,
                                s.run_id.as_deref(),
                                s.codon_id.as_deref(),
                            ),
                            None => (
                                "transition",
                                outcome.kind.unwrap_or("unknown"),
                                outcome.run_id.as_deref(),
                                outcome.codon_id.as_deref(),
                            ),
                        };
                        RowRef {
                            seq: r.seq,
                            id,
                            timestamp,
                            kind,
                            kind_type,
                            run_id,
                            codon_id,
                            payload,
                        }
                    }),
            )
        })
        .map_err(|e| failure_error(py, e))?;
        Ok((size, ended, started))
    }

    /// Sets `SQLite`'s soft heap limit (process-wide in the library) and returns
    /// the limit now in force: with Python's `PRAGMA soft_heap_limit`, tells
    /// whether both sides use the same library.
    fn soft_heap_limit(&self, py: Python<'_>, limit: i64) -> PyResult<i64> {
        self.conn.soft_heap_limit(py, limit)
    }

    /// Runs `sql` (statements without results, such as a `PRAGMA`) on this connection.
    fn execute_batch(&self, py: Python<'_>, sql: &str) -> PyResult<()> {
        self.conn.attached(py, |conn| conn.execute_batch(sql))
    }

    /// Closes the connection (a second close does nothing).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.conn.close(py)
    }
}

/// The envelope column of a page query's row (text: the payload column is never NULL).
fn envelope<'r>(row: &'r rusqlite::Row<'_>) -> rusqlite::Result<&'r [u8]> {
    match row.get_ref(1)? {
        rusqlite::types::ValueRef::Text(text) => Ok(text),
        other => Err(rusqlite::Error::InvalidColumnType(
            1,
            "envelope".to_owned(),
            other.data_type(),
        )),
    }
}

/// A read-only connection to a journal from which the server replays pages
/// of events, each page read and joined detached from the interpreter.
///
/// Python's `sqlite3` gives the interpreter up and takes it back around every
/// row it steps through: a 2,000-event page meant 2,000 hand-overs with the
/// event loop that is sending the previous page. Like `JournalAppender`, it
/// must go through the `SQLite` library Python's `sqlite3` loads (checked by
/// `weft.server.history` with `soft_heap_limit` before using it).
///
/// The query is `weft.server.history`'s (one text for both readers): it
/// takes `(after, upto, limit)` and gives `(seq, envelope)` rows, oldest first.
#[pyclass(module = "weft._core", frozen)]
pub struct JournalPages {
    conn: Shared,
    query: String,
}

#[pymethods]
impl JournalPages {
    /// Opens the journal at `path` read-only (it must exist); pages are read
    /// with `query`.
    #[new]
    fn new(py: Python<'_>, path: PathBuf, query: String) -> PyResult<Self> {
        let conn = py
            .detach(|| -> rusqlite::Result<Connection> {
                let conn = Connection::open_with_flags(
                    &path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                conn.busy_timeout(Duration::from_secs(10))?;
                Ok(conn)
            })
            .map_err(|e| sqlite_error(py, &e))?;
        Ok(Self {
            conn: Shared(Mutex::new(Some(conn))),
            query,
        })
    }

    /// The envelopes of the events in `(after, upto]`, oldest first, joined
    /// by commas: at most `limit` of them, and the page stops at the event
    /// that brings it to `max_bytes` (counted with a comma each). Returns
    /// `(envelopes, count, last seq)` (`after` when there is none).
    fn page<'py>(
        &self,
        py: Python<'py>,
        after: i64,
        upto: i64,
        limit: i64,
        max_bytes: usize,
    ) -> PyResult<(Bound<'py, PyBytes>, usize, i64)> {
        let (joined, count, last) = py
            .detach(|| -> Result<(Vec<u8>, usize, i64), Failure> {
                let guard = self.conn.detached()?;
                let mut stmt = guard.prepare_cached(&self.query)?;
                let mut rows = stmt.query(params![after, upto, limit])?;
                let (mut joined, mut count, mut last, mut size) = (Vec::new(), 0, after, 0);
                while let Some(row) = rows.next()? {
                    let envelope = envelope(row)?;
                    if count > 0 {
                        joined.push(b',');
                    }
                    joined.extend_from_slice(envelope);
                    size += envelope.len() + 1;
                    count += 1;
                    last = row.get(0)?;
                    if size >= max_bytes {
                        break;
                    }
                }
                Ok((joined, count, last))
            })
            .map_err(|e| failure_error(py, e))?;
        Ok((PyBytes::new(py, &joined), count, last))
    }

    /// The envelopes of the events in `(after, upto]`, oldest first, at most
    /// `limit`, each with its seq.
    fn rows<'py>(
        &self,
        py: Python<'py>,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> PyResult<Vec<(i64, Bound<'py, PyBytes>)>> {
        let rows = py
            .detach(|| -> Result<Vec<(i64, Vec<u8>)>, Failure> {
                let guard = self.conn.detached()?;
                let mut stmt = guard.prepare_cached(&self.query)?;
                let rows = stmt
                    .query_map(params![after, upto, limit], |row| {
                        Ok((row.get(0)?, envelope(row)?.to_vec()))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            })
            .map_err(|e| failure_error(py, e))?;
        Ok(rows
            .into_iter()
            .map(|(seq, envelope)| (seq, PyBytes::new(py, &envelope)))
            .collect())
    }

    /// Sets `SQLite`'s soft heap limit (process-wide in the library) and
    /// returns the limit now in force (see `JournalAppender.soft_heap_limit`).
    fn soft_heap_limit(&self, py: Python<'_>, limit: i64) -> PyResult<i64> {
        self.conn.soft_heap_limit(py, limit)
    }

    /// Closes the connection (a second close does nothing).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.conn.close(py)
    }
}

impl JournalAppender {
    /// Inserts `rows` in one transaction and commits it (detached: waiting
    /// for the connection's lock here holds no one else up).
    fn insert<'r>(&self, rows: impl Iterator<Item = RowRef<'r>>) -> Result<(), Failure> {
        let mut conn = self.conn.detached()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut insert = tx.prepare_cached(INSERT)?;
            for r in rows {
                insert.execute(params![
                    r.seq,
                    r.id,
                    r.timestamp,
                    r.kind,
                    r.kind_type,
                    r.run_id,
                    r.codon_id,
                    r.payload,
                    crc32fast::hash(r.payload.as_bytes())
                ])?;
            }
        }
        // Dropped without a commit on any error above: rolled back.
        tx.commit()?;
        Ok(())
    }
}

/// A connection both classes hold: taken out on close (None after).
struct Shared(Mutex<Option<Connection>>);

/// The connection, locked, while detached (`Failure::Closed` after a close).
struct Locked<'a>(MutexGuard<'a, Option<Connection>>);

impl std::ops::Deref for Locked<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.0.as_ref().expect("checked when locked")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.0.as_mut().expect("checked when locked")
    }
}

impl Shared {
    /// Locks the connection from detached code (waiting here holds no one else up).
    fn detached(&self) -> Result<Locked<'_>, Failure> {
        let guard = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            return Err(Failure::Closed);
        }
        Ok(Locked(guard))
    }

    /// Runs `f` on the connection, attached (short statements only).
    fn attached<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send,
    ) -> PyResult<T> {
        let guard = self
            .0
            .lock_py_attached(py)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let conn = guard
            .as_ref()
            .ok_or_else(|| failure_error(py, Failure::Closed))?;
        f(conn).map_err(|e| sqlite_error(py, &e))
    }

    /// Sets `SQLite`'s soft heap limit (process-wide in the library) and returns
    /// the limit now in force.
    fn soft_heap_limit(&self, py: Python<'_>, limit: i64) -> PyResult<i64> {
        self.attached(py, |conn| {
            conn.pragma_update_and_check(None, "soft_heap_limit", limit, |r| r.get(0))
        })
    }

    /// Closes the connection (a second close does nothing).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let conn = self
            .0
            .lock_py_attached(py)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(conn) = conn {
            py.detach(|| conn.close().map_err(|(_, e)| e))
                .map_err(|e| sqlite_error(py, &e))?;
        }
        Ok(())
    }
}

/// One row, borrowed, as it goes into the `INSERT`.
struct RowRef<'r> {
    seq: i64,
    id: &'r str,
    timestamp: &'r str,
    kind: &'r str,
    kind_type: &'r str,
    run_id: Option<&'r str>,
    codon_id: Option<&'r str>,
    payload: &'r str,
}

/// A stream event's journal columns (`weft.state.StreamEvent`).
struct StreamColumns {
    kind_type: PyBackedStr,
    run_id: Option<PyBackedStr>,
    codon_id: Option<PyBackedStr>,
}

/// What one processed item gives its row, read while attached.
struct ItemRow {
    seq: i64,
    time_ns: i64,
    payload: PyBackedBytes,
    stream: Option<StreamColumns>,
    outcome: Py<Outcome>,
}

impl ItemRow {
    fn read(item: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = item.py();
        let stream = item.getattr(intern!(py, "stream"))?;
        let stream = if stream.is_none() {
            None
        } else {
            Some(StreamColumns {
                kind_type: stream.getattr(intern!(py, "type"))?.extract()?,
                run_id: stream.getattr(intern!(py, "run_id"))?.extract()?,
                codon_id: stream.getattr(intern!(py, "codon_id"))?.extract()?,
            })
        };
        Ok(Self {
            seq: item.getattr(intern!(py, "seq"))?.extract()?,
            time_ns: item.getattr(intern!(py, "time_ns"))?.extract()?,
            payload: item.getattr(intern!(py, "payload"))?.extract()?,
            stream,
            outcome: item
                .getattr(intern!(py, "outcome"))?
                .cast_into::<Outcome>()?
                .unbind(),
        })
    }
}

/// `ms` since the epoch as `weft.clock.iso_from_ms` writes it:
/// `2026-11-21T10:00:00.123Z` (UTC; years 1000 to 9999 have four digits).
fn iso_from_ms(ms: i64) -> String {
    let (secs, rest) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{rest:03}Z",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

enum Failure {
    Closed,
    Sqlite(rusqlite::Error),
}

fn failure_error(py: Python<'_>, e: Failure) -> PyErr {
    match e {
        Failure::Closed => PyValueError::new_err("the journal connection is closed"),
        Failure::Sqlite(e) => sqlite_error(py, &e),
    }
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure::Sqlite(e)
    }
}

/// `e` as Python's `sqlite3` would raise it (`OperationalError` with `SQLite`'s
/// own words, "database or disk is full"; `IntegrityError` for a constraint),
/// so the store treats both alike.
fn sqlite_error(py: Python<'_>, e: &rusqlite::Error) -> PyErr {
    let text = match e {
        rusqlite::Error::SqliteFailure(_, Some(message)) => message.clone(),
        rusqlite::Error::InvalidQuery => "the journal is not in WAL mode".to_owned(),
        other => other.to_string(),
    };
    // The class Python's sqlite3 would pick for the same result code.
    let class = match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ConstraintViolation) => "IntegrityError",
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase) => {
            "DatabaseError"
        }
        _ => "OperationalError",
    };
    let raised = py
        .import("sqlite3")
        .and_then(|m| m.getattr(class))
        .and_then(|kind| kind.call1((text.clone(),)));
    match raised {
        Ok(error) => PyErr::from_value(error),
        Err(_) => PyRuntimeError::new_err(text),
    }
}
