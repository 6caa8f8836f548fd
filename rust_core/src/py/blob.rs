//! `read_blob`: one work-tree file read for a checkpoint, as a git blob, in a
//! single call (detached from the interpreter when the file is large).
//!
//! A checkpoint runs on its own thread while the event loop keeps the
//! interpreter busy. Read from Python, a file costs six system calls (lstat,
//! open, fstat, two reads, close), and the interpreter is given up and taken
//! back around each; taking it back waits for the loop to let go, so a
//! one-file checkpoint spent about three times its CPU time waiting. Here the
//! whole read (stat first, so a write after it shows up as a stat change at
//! the next checkpoint) and the blob's id are one call, which gives the
//! interpreter up only for a file over 64 KiB: a short checkpoint runs on
//! the event loop, and every time the loop lets the interpreter go, the
//! journal's writer thread may take it for a while.
//!
//! Everything is read by descriptor: the folder holding the file is opened,
//! then the file by its name in it, never following a link at the end. Given
//! the work tree's `root`, each folder below it is opened by name inside the
//! one before without following a link either, so a folder the agent swapped
//! for a link to elsewhere is never read through.

use std::ffi::{CStr, CString};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
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

fn read(dir: &OwnedFd, name: &CStr, max_size: u64) -> io::Result<(Found, Option<FileStat>)> {
    for _ in 1..ATTEMPTS {
        if let Some(found) = read_once(dir, name, max_size)? {
            return Ok(found);
        }
    }
    // Still changing kind: whatever it is now, checkpointed as "other" (not
    // held); the next checkpoint sees it again.
    Ok(read_once(dir, name, max_size)?.unwrap_or((Found::Other, None)))
}

/// The wall-clock time in nanoseconds since the epoch.
pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn stat_of(st: &rustix::fs::Stat, taken_ns: i64) -> FileStat {
    FileStat {
        taken_ns,
        st_mode: st.st_mode,
        st_ino: st.st_ino,
        st_dev: st.st_dev,
        st_uid: st.st_uid,
        st_gid: st.st_gid,
        st_size: u64::try_from(st.st_size).unwrap_or(0),
        st_mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
        st_ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
    }
}

/// One look at `name` in `dir`; None when it changed kind between the stat
/// and the open.
fn read_once(
    dir: &OwnedFd,
    name: &CStr,
    max_size: u64,
) -> io::Result<Option<(Found, Option<FileStat>)>> {
    let taken_ns = now_ns();
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(e) if is_gone(e) => return Ok(Some((Found::Missing, None))),
        Err(e) => return Err(e.into()),
    };
    let mut stat = stat_of(&st, taken_ns);
    let found = match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => match rustix::fs::readlinkat(dir, name, Vec::new()) {
            Ok(target) => Found::Link {
                target: target.into_bytes(),
            },
            Err(e) if is_gone(e) => Found::Missing,
            // EINVAL: not a link any more.
            Err(Errno::INVAL) => return Ok(None),
            Err(e) => return Err(e.into()),
        },
        FileType::RegularFile if stat.st_size > max_size => Found::File { data: None },
        FileType::RegularFile => match read_file(dir, name, stat.st_size) {
            Ok(Some((data, opened))) => {
                // The stat of what was opened (taken before it was read).
                stat = stat_of(&opened, taken_ns);
                Found::File { data: Some(data) }
            }
            Ok(None) | Err(Errno::LOOP) => return Ok(None),
            Err(e) if is_gone(e) => Found::Missing,
            Err(e) => return Err(e.into()),
        },
        FileType::Directory => Found::Dir,
        // Sockets, fifos, devices.
        _ => Found::Other,
    };
    Ok(Some((found, Some(stat))))
}

/// The content of the regular file `name` in `dir` and its stat, or None when
/// it is not one any more: opened without following a link and without
/// waiting (a fifo put in its place would block a plain open for ever), then
/// checked.
fn read_file(
    dir: &OwnedFd,
    name: &CStr,
    size_hint: u64,
) -> rustix::io::Result<Option<(Vec<u8>, rustix::fs::Stat)>> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    let opened = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(opened.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    // One read for a file that did not change size since its stat: asking
    // one byte more than its size and getting exactly its size means the end
    // was reached, without a second read to see it. A file that grew, or a
    // read that came back shorter (a file that shrank, or a file system that
    // returns short reads), is read on to its end.
    let want = usize::try_from(size_hint).unwrap_or(0) + 1;
    let mut data = vec![0u8; want];
    let mut file = std::fs::File::from(fd);
    let got = loop {
        match file.read(&mut data) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Errno::from_io_error(&e).unwrap_or(Errno::IO)),
        }
    };
    data.truncate(got);
    if got != want - 1 {
        file.read_to_end(&mut data)
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
    }
    Ok(Some((data, opened)))
}

fn is_gone(e: Errno) -> bool {
    // ENOTDIR: a parent is a file now (a folder replaced by one).
    e == Errno::NOENT || e == Errno::NOTDIR
}

/// Whether opening a folder without following a link failed because there is
/// no folder under that name: nothing, a file, or (ELOOP) a link.
pub(crate) fn no_folder(e: Errno) -> bool {
    is_gone(e) || e == Errno::LOOP
}

/// The folder holding `path` and the name in it, or None when there is no
/// such folder (a parent missing, a file, or, below `root`, a link).
///
/// Without `root` the folder is opened by its path, links and all. With it,
/// `path` is relative to `root` and each folder below `root` is opened by name
/// inside the one before, never following a link: a folder swapped for a link
/// to elsewhere while a checkpoint runs is not read through.
fn folder_of(root: Option<&Path>, path: &Path) -> io::Result<Option<(OwnedFd, CString)>> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let bytes = path.as_os_str().as_bytes();
    let (parent, name) = match bytes.iter().rposition(|b| *b == b'/') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (&b""[..], bytes),
    };
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let Some(root) = root else {
        let parent: &[u8] = if parent.is_empty() && !bytes.starts_with(b"/") {
            b"."
        } else if parent.is_empty() {
            b"/"
        } else {
            parent
        };
        return match rustix::fs::open(parent, flags, Mode::empty()) {
            Ok(fd) => Ok(Some((fd, name))),
            Err(e) if no_folder(e) => Ok(None),
            Err(e) => Err(e.into()),
        };
    };
    let mut dir = rustix::fs::open(root, flags, Mode::empty())?;
    for part in parent.split(|b| *b == b'/').filter(|p| !p.is_empty()) {
        if part == b"." || part == b".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a path below the root may not hold . or ..",
            ));
        }
        let part = CString::new(part).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        match rustix::fs::openat(&dir, &part, flags | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(fd) => dir = fd,
            Err(e) if no_folder(e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some((dir, name)))
}

/// The git object id of a blob holding `data`.
pub(crate) fn blob_id(data: &[u8]) -> [u8; 20] {
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {}\0", data.len()).as_bytes());
    hasher.update(data);
    hasher.finalize().into()
}

/// Files up to this size are read without detaching from the interpreter.
const DETACH_BYTES: u64 = 64 * 1024;

/// What one look at a path found, its blob id, and its stat.
type Looked = ((Found, Option<[u8; 20]>), Option<FileStat>);

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
/// a parent is not a folder, or with `root`, a parent below it is a link);
/// `data` is the content (a link's target) and `sha` its blob id, both `None`
/// for a file larger than `max_size` (the caller stores it another way) and
/// for the kinds git does not hold. With `root`, `path` is relative to it.
/// Other errors raise `OSError` with the errno.
#[pyfunction]
#[pyo3(signature = (path, max_size, *, root = None))]
fn read_blob(
    py: Python<'_>,
    path: PathBuf,
    max_size: u64,
    root: Option<PathBuf>,
) -> PyResult<BlobRead> {
    let look = |limit: u64| -> io::Result<Looked> {
        let Some((dir, name)) = folder_of(root.as_deref(), &path)? else {
            return Ok(((Found::Missing, None), None));
        };
        read(&dir, &name, limit).map(|(found, stat)| {
            let id = match &found {
                Found::File { data: Some(data) } => Some(blob_id(data)),
                Found::Link { target } => Some(blob_id(target)),
                _ => None,
            };
            ((found, id), stat)
        })
    };
    // A small file is read holding the interpreter: giving it up and taking
    // it back costs more than the read when another thread (the journal's
    // writer) takes it meanwhile. A larger one is looked at again, detached.
    let mut looked = look(max_size.min(DETACH_BYTES)).map_err(os_error)?;
    if let ((Found::File { data: None }, _), Some(stat)) = &looked {
        if stat.st_size <= max_size {
            looked = py.detach(|| look(max_size)).map_err(os_error)?;
        }
    }
    let (found, stat) = looked;
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
