//! `read_blob`: one work-tree file read for a checkpoint, as a git blob, in a
//! single call detached from the interpreter.
//!
//! A checkpoint runs on its own thread while the event loop keeps the
//! interpreter busy. Read from Python, a file costs six system calls (lstat,
//! open, fstat, two reads, close), and the interpreter is given up and taken
//! back around each; taking it back waits for the loop to let go, so a
//! one-file checkpoint spent about three times its CPU time waiting. Here the
//! whole read (stat first, so a write after it shows up as a stat change at
//! the next checkpoint) and the blob's id are one detached call.

use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sha1::{Digest, Sha1};

use super::core::os_error;

/// Adds `read_blob` and `FileStat` to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FileStat>()?;
    m.add_function(wrap_pyfunction!(read_blob, m)?)?;
    Ok(())
}

/// The stat data a checkpoint keeps of a file (the fields of
/// `os.stat_result` the git index stores), taken before the file was read.
#[pyclass(frozen, module = "weft._core")]
#[allow(clippy::struct_field_names)] // named as os.stat_result's, which it stands in for
pub struct FileStat {
    #[pyo3(get)]
    st_mode: u32,
    #[pyo3(get)]
    st_ino: u64,
    #[pyo3(get)]
    st_dev: u64,
    #[pyo3(get)]
    st_uid: u32,
    #[pyo3(get)]
    st_gid: u32,
    #[pyo3(get)]
    st_size: u64,
    #[pyo3(get)]
    st_mtime_ns: i128,
    #[pyo3(get)]
    st_ctime_ns: i128,
    /// The wall-clock time (ns since the epoch) just before the stat was
    /// taken: a write after it is stamped no earlier than a clock tick
    /// before it (see `StatCache`).
    #[pyo3(get)]
    taken_ns: i64,
}

#[pymethods]
impl FileStat {
    fn __repr__(&self) -> String {
        format!(
            "FileStat(st_mode={:#o}, st_size={}, st_mtime_ns={})",
            self.st_mode, self.st_size, self.st_mtime_ns
        )
    }
}

/// What is at the path: the kinds git can hold, or something else.
enum Found {
    Missing,
    File { data: Option<Vec<u8>> },
    Link { target: Vec<u8> },
    Dir,
    Other,
}

/// How many times a path that changed kind between its stat and its opening
/// (a file replaced by a link, a fifo or a folder) is looked at again.
const ATTEMPTS: usize = 3;

fn read(path: &PathBuf, max_size: u64) -> std::io::Result<(Found, Option<FileStat>)> {
    for _ in 1..ATTEMPTS {
        if let Some(found) = read_once(path, max_size)? {
            return Ok(found);
        }
    }
    // Still changing kind: whatever it is now, checkpointed as "other" (not
    // held); the next checkpoint sees it again.
    Ok(read_once(path, max_size)?.unwrap_or((Found::Other, None)))
}

/// The wall-clock time in nanoseconds since the epoch.
pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn stat_of(meta: &fs::Metadata, taken_ns: i64) -> FileStat {
    FileStat {
        taken_ns,
        st_mode: meta.mode(),
        st_ino: meta.ino(),
        st_dev: meta.dev(),
        st_uid: meta.uid(),
        st_gid: meta.gid(),
        st_size: meta.size(),
        st_mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        st_ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
    }
}

/// One look at `path`; None when it changed kind between the stat and the open.
fn read_once(path: &PathBuf, max_size: u64) -> std::io::Result<Option<(Found, Option<FileStat>)>> {
    let taken_ns = now_ns();
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if is_gone(&e) => return Ok(Some((Found::Missing, None))),
        Err(e) => return Err(e),
    };
    let mut stat = stat_of(&meta, taken_ns);
    let kind = meta.file_type();
    let found = if kind.is_symlink() {
        match fs::read_link(path) {
            Ok(target) => Found::Link {
                target: target.as_os_str().as_bytes().to_vec(),
            },
            Err(e) if is_gone(&e) => Found::Missing,
            // EINVAL: not a link any more.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
            Err(e) => return Err(e),
        }
    } else if kind.is_file() {
        if meta.size() > max_size {
            Found::File { data: None }
        } else {
            match read_file(path, meta.size()) {
                Ok(Some((data, opened))) => {
                    // The stat of what was opened (taken before it was read).
                    stat = stat_of(&opened, taken_ns);
                    Found::File { data: Some(data) }
                }
                Ok(None) => return Ok(None),
                Err(e) if is_gone(&e) => Found::Missing,
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    } else if kind.is_dir() {
        Found::Dir
    } else {
        debug_assert!(
            kind.is_fifo() || kind.is_socket() || kind.is_block_device() || kind.is_char_device()
        );
        Found::Other
    };
    Ok(Some((found, Some(stat))))
}

/// The content of the regular file at `path` and its stat, or None when it is
/// not one any more: opened without following a link and without waiting (a
/// fifo put in its place would block a plain open for ever), then checked.
fn read_file(path: &PathBuf, size_hint: u64) -> std::io::Result<Option<(Vec<u8>, fs::Metadata)>> {
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() {
        return Ok(None);
    }
    // One read for a file that did not grow since its stat; more if it did.
    let mut data = Vec::with_capacity(usize::try_from(size_hint).unwrap_or(0) + 1);
    file.read_to_end(&mut data)?;
    Ok(Some((data, opened)))
}

fn is_gone(e: &std::io::Error) -> bool {
    // ENOTDIR: a parent is a file now (a folder replaced by one).
    e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// The git object id of a blob holding `data`.
pub(crate) fn blob_id(data: &[u8]) -> [u8; 20] {
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {}\0", data.len()).as_bytes());
    hasher.update(data);
    hasher.finalize().into()
}

type BlobRead = (
    &'static str,
    Option<Py<FileStat>>,
    Option<Py<PyBytes>>,
    Option<Py<PyBytes>>,
);

/// Reads the file at `path` as a checkpoint stores it.
///
/// Returns `(kind, stat, data, sha)`: `kind` is `"file"`, `"link"`,
/// `"dir"`, `"other"` (a socket, fifo or device) or `"missing"` (also when
/// a parent is not a folder); `data` is the content (a link's target) and
/// `sha` its blob id, both `None` for a file larger than `max_size` (the
/// caller stores it another way) and for the kinds git does not hold. Other
/// errors raise `OSError` with the errno.
#[pyfunction]
fn read_blob(py: Python<'_>, path: PathBuf, max_size: u64) -> PyResult<BlobRead> {
    let (found, stat) = py
        .detach(|| {
            read(&path, max_size).map(|(found, stat)| {
                let id = match &found {
                    Found::File { data: Some(data) } => Some(blob_id(data)),
                    Found::Link { target } => Some(blob_id(target)),
                    _ => None,
                };
                ((found, id), stat)
            })
        })
        .map_err(os_error)?;
    let stat = stat.map(|s| Py::new(py, s)).transpose()?;
    let (found, id) = found;
    let sha = id.map(|id| PyBytes::new(py, &id).unbind());
    Ok(match found {
        Found::Missing => ("missing", None, None, None),
        Found::File { data } => (
            "file",
            stat,
            data.map(|d| PyBytes::new(py, &d).unbind()),
            sha,
        ),
        Found::Link { target } => ("link", stat, Some(PyBytes::new(py, &target).unbind()), sha),
        Found::Dir => ("dir", stat, None, None),
        Found::Other => ("other", stat, None, None),
    })
}
