//! `JournalAppender`: the journal's batches inserted and committed in one call
//! detached from the interpreter.
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

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::sync::MutexExt;
use rusqlite::{params, Connection, TransactionBehavior};

/// Adds `JournalAppender` to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<JournalAppender>()
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
    conn: Mutex<Option<Connection>>,
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
            conn: Mutex::new(Some(conn)),
        })
    }

    /// Inserts `rows` (with each payload's CRC-32) in one transaction and
    /// commits it: durable when this returns. Nothing is kept on an error.
    fn append(&self, py: Python<'_>, rows: Vec<Row>) -> PyResult<()> {
        py.detach(|| {
            // Detached: waiting for the lock here holds no one else up.
            let mut guard = self
                .conn
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(conn) = guard.as_mut() else {
                return Err(Failure::Closed);
            };
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut insert = tx.prepare_cached(INSERT)?;
                for (seq, id, timestamp, kind, kind_type, run_id, codon_id, payload) in &rows {
                    let payload: &str = payload;
                    let crc = crc32fast::hash(payload.as_bytes());
                    insert.execute(params![
                        seq,
                        &**id,
                        &**timestamp,
                        &**kind,
                        &**kind_type,
                        run_id.as_deref(),
                        codon_id.as_deref(),
                        payload,
                        crc
                    ])?;
                }
            }
            // Dropped without a commit on any error above: rolled back.
            tx.commit()?;
            Ok(())
        })
        .map_err(|e| match e {
            Failure::Closed => PyValueError::new_err("the journal appender is closed"),
            Failure::Sqlite(e) => sqlite_error(py, &e),
        })
    }

    /// Sets `SQLite`'s soft heap limit (process-wide in the library) and returns
    /// the limit now in force: with Python's `PRAGMA soft_heap_limit`, tells
    /// whether both sides use the same library.
    fn soft_heap_limit(&self, py: Python<'_>, limit: i64) -> PyResult<i64> {
        self.with_conn(py, |conn| {
            conn.pragma_update_and_check(None, "soft_heap_limit", limit, |r| r.get(0))
        })
    }

    /// Runs `sql` (statements without results, such as a `PRAGMA`) on this connection.
    fn execute_batch(&self, py: Python<'_>, sql: &str) -> PyResult<()> {
        self.with_conn(py, |conn| conn.execute_batch(sql))
    }

    /// Closes the connection (a second close does nothing).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let conn = self
            .conn
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

impl JournalAppender {
    fn with_conn<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send,
    ) -> PyResult<T> {
        let guard = self
            .conn
            .lock_py_attached(py)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let conn = guard
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("the journal appender is closed"))?;
        f(conn).map_err(|e| sqlite_error(py, &e))
    }
}

enum Failure {
    Closed,
    Sqlite(rusqlite::Error),
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
