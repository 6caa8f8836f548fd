//! `StatCache`: the checkpoint index's stat data held in the core, and the
//! full comparison of the work tree against it.
//!
//! A checkpoint without change hints (no inotify, or the first one after a
//! start) must look at every covered file. libgit2's work-tree diff did it in
//! ~17 ms for 5,000 files on the 2-core machine, one `lstat` by full path per
//! file on one thread. Here the tree is walked by directory descriptor (one
//! `fstatat` per entry, resolving one name, never following a link) on up to
//! `threads` threads, and each file's stat is compared with what the cache
//! holds; only the paths that may have changed go back to Python.
//!
//! The cache mirrors the index: [`StatCache::set`] and [`StatCache::remove`]
//! are called wherever the index changes. An entry whose file was modified
//! too close to the moment its stat was taken ("racily clean", as git says)
//! cannot be trusted by its stat alone: a second write in the same clock tick
//! leaves size and times as they were. Such entries are read and hashed
//! during the walk and compared with the blob id held; the same content makes
//! the entry trusted, a different one reports it changed.

use std::ffi::{CStr, CString, OsString};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rustc_hash::FxHashMap;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha1::{Digest, Sha1};

use super::blob::{blob_id, no_folder, now_ns};
use super::core::os_error_at;

/// Adds `StatCache` to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StatCache>()?;
    Ok(())
}

const MODE_FILE: u32 = 0o100_644;
const MODE_EXEC: u32 = 0o100_755;
const MODE_LINK: u32 = 0o120_000;

/// The block a racily clean file is hashed in.
const HASH_BLOCK: usize = 1 << 16;

/// Below this many entries the walk stays on the calling thread (starting
/// threads costs more than they save).
const PARALLEL_FROM: usize = 1024;

/// A file's times, inode and size as the git index keeps them (32-bit
/// seconds, inode and size, truncated as git and libgit2 do).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stat {
    ino: u32,
    size: u32,
    mtime_s: i32,
    mtime_ns: u32,
    ctime_s: i32,
    ctime_ns: u32,
}

impl Stat {
    fn from_ns(ino: u64, size: u64, mtime_ns: i64, ctime_ns: i64) -> Self {
        Self {
            ino: ino as u32,
            size: size as u32,
            mtime_s: mtime_ns.div_euclid(1_000_000_000) as i32,
            mtime_ns: mtime_ns.rem_euclid(1_000_000_000) as u32,
            ctime_s: ctime_ns.div_euclid(1_000_000_000) as i32,
            ctime_ns: ctime_ns.rem_euclid(1_000_000_000) as u32,
        }
    }

    fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            ino: st.st_ino as u32,
            size: st.st_size as u32,
            mtime_s: st.st_mtime as i32,
            mtime_ns: st.st_mtime_nsec as u32,
            ctime_s: st.st_ctime as i32,
            ctime_ns: st.st_ctime_nsec as u32,
        }
    }

    /// The later of the two times, in nanoseconds.
    fn newest_ns(&self) -> i64 {
        let m = i64::from(self.mtime_s) * 1_000_000_000 + i64::from(self.mtime_ns);
        let c = i64::from(self.ctime_s) * 1_000_000_000 + i64::from(self.ctime_ns);
        m.max(c)
    }
}

/// What the cache holds for one indexed path.
#[derive(Debug)]
struct Held {
    /// The index's mode: a file, an executable file or a link.
    mode: u32,
    sha: [u8; 20],
    stat: Stat,
    /// A wall-clock time (ns) at or before the moment `stat` was taken.
    taken_ns: i64,
    /// The scan that last found this path (to find the ones gone).
    seen: AtomicU32,
}

impl Held {
    /// Whether a write after the stat could have left the stat as it was.
    ///
    /// File times come from the kernel's coarse clock, up to a tick (10 ms
    /// at the lowest tick rate) behind the wall clock, so a write after
    /// `taken_ns` is stamped at least `taken_ns - tick`. A file system whose
    /// times have no sub-millisecond part may keep whole seconds (or two):
    /// for those the margin is two seconds.
    fn racy(&self) -> bool {
        let margin = if self.stat.mtime_ns % 1_000_000 == 0 {
            2_000_000_000
        } else {
            20_000_000
        };
        self.stat.newest_ns().saturating_add(margin) > self.taken_ns
    }
}

/// The git mode of a kind git holds, from `st_mode`; None for the others.
fn git_mode(st_mode: u32) -> Option<u32> {
    match FileType::from_raw_mode(st_mode) {
        FileType::Symlink => Some(MODE_LINK),
        FileType::RegularFile if st_mode & 0o100 != 0 => Some(MODE_EXEC),
        FileType::RegularFile => Some(MODE_FILE),
        _ => None,
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut path = Vec::with_capacity(dir.len() + 1 + name.len());
    path.extend_from_slice(dir);
    path.push(b'/');
    path.extend_from_slice(name);
    path
}

/// Whether `path` is `root` or inside it (`""` holds everything).
fn under(path: &[u8], root: &[u8]) -> bool {
    root.is_empty()
        || (path.starts_with(root) && (path.len() == root.len() || path[root.len()] == b'/'))
}

/// What one walk found; each thread fills its own, merged at the end.
#[derive(Default)]
struct Found {
    changed: Vec<Vec<u8>>,
    untracked: Vec<Vec<u8>>,
    untracked_dirs: Vec<Vec<u8>>,
    /// Racily clean entries whose content was found unchanged: the new stat.
    trusted: Vec<(Vec<u8>, Stat)>,
    error: Option<(Vec<u8>, std::io::Error)>,
}

impl Found {
    fn merge(&mut self, other: Found) {
        self.changed.extend(other.changed);
        self.untracked.extend(other.untracked);
        self.untracked_dirs.extend(other.untracked_dirs);
        self.trusted.extend(other.trusted);
        if self.error.is_none() {
            self.error = other.error;
        }
    }

    fn fail(&mut self, path: &[u8], errno: Errno) {
        if self.error.is_none() {
            self.error = Some((path.to_vec(), errno.into()));
        }
    }
}

/// A folder to read: its name inside an open parent, and its path.
struct Job {
    parent: Arc<OwnedFd>,
    name: CString,
    path: Vec<u8>,
}

/// The shared stack of folders still to read, and how many are being read.
struct Queue {
    state: Mutex<(Vec<Job>, usize)>,
    changed: Condvar,
}

impl Queue {
    fn next(&self) -> Option<Job> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(job) = state.0.pop() {
                state.1 += 1;
                return Some(job);
            }
            if state.1 == 0 {
                return None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn done(&self, more: Vec<Job>) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.0.extend(more);
        state.1 -= 1;
        self.changed.notify_all();
    }
}

/// One scan's read-only view of the cache.
struct Walk<'a> {
    entries: &'a FxHashMap<Box<[u8]>, Held>,
    dirs: &'a FxHashMap<Box<[u8]>, u32>,
    generation: u32,
    started_ns: i64,
}

/// A folder being read: whatever happens (a panic included), the queue hears
/// that it is done, so the other workers never wait for it for ever.
struct Reading<'q> {
    queue: &'q Queue,
    more: Vec<Job>,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.queue.done(std::mem::take(&mut self.more));
    }
}

impl Walk<'_> {
    fn work(&self, queue: &Queue) -> Found {
        let mut found = Found::default();
        while let Some(job) = queue.next() {
            let mut reading = Reading {
                queue,
                more: Vec::new(),
            };
            reading.more = self.read_dir(job, &mut found);
        }
        found
    }

    fn read_dir(&self, job: Job, found: &mut Found) -> Vec<Job> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&*job.parent, &job.name, flags, Mode::empty()) {
            Ok(fd) => Arc::new(fd),
            Err(e) if no_folder(e) => return Vec::new(),
            Err(e) => {
                found.fail(&job.path, e);
                return Vec::new();
            }
        };
        drop(job.parent);
        let dir = match Dir::read_from(&*fd) {
            Ok(dir) => dir,
            Err(e) => {
                found.fail(&job.path, e);
                return Vec::new();
            }
        };
        let mut more = Vec::new();
        for entry in dir {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    found.fail(&job.path, e);
                    break;
                }
            };
            let name = entry.file_name();
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." || bytes == b".git" {
                continue;
            }
            let path = join(&job.path, bytes);
            if entry.file_type() == FileType::Directory {
                self.dir_entry(&fd, name, path, found, &mut more);
                continue;
            }
            match rustix::fs::statat(&*fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => self.entry(&fd, name, path, &st, found, &mut more),
                Err(e) if no_folder(e) => {}
                Err(e) => found.fail(&path, e),
            }
        }
        more
    }

    fn dir_entry(
        &self,
        parent: &Arc<OwnedFd>,
        name: &CStr,
        path: Vec<u8>,
        found: &mut Found,
        more: &mut Vec<Job>,
    ) {
        if let Some(held) = self.entries.get(path.as_slice()) {
            // A file the index holds is a folder now.
            held.seen.store(self.generation, Ordering::Relaxed);
            found.changed.push(path.clone());
        }
        if self.dirs.contains_key(path.as_slice()) {
            more.push(Job {
                parent: Arc::clone(parent),
                name: name.to_owned(),
                path,
            });
        } else {
            // Nothing under it is indexed: Python decides whether a pattern
            // can reach inside and whether it is ignored.
            found.untracked_dirs.push(path);
        }
    }

    fn entry(
        &self,
        parent: &Arc<OwnedFd>,
        name: &CStr,
        path: Vec<u8>,
        st: &rustix::fs::Stat,
        found: &mut Found,
        more: &mut Vec<Job>,
    ) {
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            // The folder's entry type was unknown (some file systems say so).
            self.dir_entry(parent, name, path, found, more);
            return;
        }
        let Some(held) = self.entries.get(path.as_slice()) else {
            if git_mode(st.st_mode).is_some() {
                found.untracked.push(path);
            }
            return;
        };
        held.seen.store(self.generation, Ordering::Relaxed);
        let stat = Stat::of(st);
        if git_mode(st.st_mode) != Some(held.mode) || stat != held.stat {
            found.changed.push(path);
        } else if held.racy() {
            match same_content(parent, name, held, &stat) {
                Ok(true) => found.trusted.push((path, stat)),
                Ok(false) | Err(_) => found.changed.push(path),
            }
        }
    }
}

/// Whether the file `name` in `parent`, which has `stat`, still holds the
/// blob `held.sha`. Anything unexpected (it changed kind, stat or length
/// while being read) answers false: the caller reads it again. A file is
/// hashed as it is read, a block at a time: never held whole in memory.
fn same_content(
    parent: &OwnedFd,
    name: &CStr,
    held: &Held,
    stat: &Stat,
) -> rustix::io::Result<bool> {
    if held.mode == MODE_LINK {
        let target = rustix::fs::readlinkat(parent, name, Vec::new())?;
        return Ok(blob_id(target.as_bytes()) == held.sha);
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(parent, name, flags, Mode::empty())?;
    let opened = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(opened.st_mode) != FileType::RegularFile
        || Stat::of(&opened) != *stat
    {
        return Ok(false);
    }
    let size = u64::try_from(opened.st_size).unwrap_or(0);
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {size}\0").as_bytes());
    let mut file = std::fs::File::from(fd);
    let mut block = vec![0u8; HASH_BLOCK];
    let mut read = 0u64;
    loop {
        let n = file
            .read(&mut block)
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if read > size {
            return Ok(false); // it grew while being read
        }
        hasher.update(&block[..n]);
    }
    let id: [u8; 20] = hasher.finalize().into();
    Ok(read == size && id == held.sha)
}

/// The stat data of the checkpoint index, kept in the core for the full
/// work-tree comparison (see the module documentation).
#[pyclass(module = "weft._core")]
#[derive(Default)]
pub struct StatCache {
    entries: FxHashMap<Box<[u8]>, Held>,
    /// Every folder holding an indexed path (at any depth), and how many.
    dirs: FxHashMap<Box<[u8]>, u32>,
    generation: u32,
}

/// An index entry as `load` takes it: path, mode, blob id, inode, size,
/// mtime seconds and nanoseconds, ctime seconds and nanoseconds.
type LoadEntry = (Vec<u8>, u32, Vec<u8>, u32, u32, i32, u32, i32, u32);

/// What `scan` returns: changed, gone, untracked files, untracked folders.
type ScanResult = (Vec<OsString>, Vec<OsString>, Vec<OsString>, Vec<OsString>);

impl StatCache {
    fn insert(&mut self, path: &[u8], held: Held) {
        if self.entries.insert(path.into(), held).is_none() {
            for (i, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
                *self.dirs.entry(path[..i].into()).or_insert(0) += 1;
            }
        }
    }

    fn walk(&mut self, root: &[u8], roots: &[Vec<u8>], threads: usize) -> Found {
        // Zero is what a new entry holds: never a scan's number.
        self.generation = self.generation.checked_add(1).unwrap_or(1);
        let walk = Walk {
            entries: &self.entries,
            dirs: &self.dirs,
            generation: self.generation,
            started_ns: now_ns(),
        };
        let mut found = Found::default();
        let base = match rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                found.fail(root, e);
                return found;
            }
        };
        let queue = Queue {
            state: Mutex::new((Vec::new(), 0)),
            changed: Condvar::new(),
        };
        let mut jobs = Vec::new();
        for r in roots {
            start_root(&walk, &base, r, &mut found, &mut jobs);
        }
        queue
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0 = jobs;
        if threads <= 1 || self.entries.len() < PARALLEL_FROM {
            found.merge(walk.work(&queue));
        } else {
            std::thread::scope(|s| {
                let helpers: Vec<_> = (1..threads)
                    .map(|_| s.spawn(|| walk.work(&queue)))
                    .collect();
                found.merge(walk.work(&queue));
                for helper in helpers {
                    match helper.join() {
                        Ok(part) => found.merge(part),
                        Err(panic) => std::panic::resume_unwind(panic),
                    }
                }
            });
        }
        let started = walk.started_ns;
        for (path, stat) in &found.trusted {
            if let Some(held) = self.entries.get_mut(path.as_slice()) {
                held.stat = *stat;
                held.taken_ns = started;
            }
        }
        found
    }
}

/// Queues (or compares) one scan root: a folder is read by the workers, a
/// file compared at once; a root under a link or a file is not there.
fn start_root(
    walk: &Walk<'_>,
    base: &Arc<OwnedFd>,
    root: &[u8],
    found: &mut Found,
    jobs: &mut Vec<Job>,
) {
    let parts: Vec<&[u8]> = root
        .split(|b| *b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    if parts
        .iter()
        .any(|p| *p == b".git" || *p == b"." || *p == b"..")
    {
        return;
    }
    let Some((last, parents)) = parts.split_last() else {
        // The whole work tree: its top folder is always read.
        jobs.push(Job {
            parent: Arc::clone(base),
            name: c".".to_owned(),
            path: Vec::new(),
        });
        return;
    };
    let mut dir = Arc::clone(base);
    let mut path = Vec::new();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for part in parents {
        path = join(&path, part);
        let Ok(name) = CString::new(*part) else {
            return;
        };
        match rustix::fs::openat(&*dir, &name, flags, Mode::empty()) {
            Ok(fd) => dir = Arc::new(fd),
            Err(e) if no_folder(e) => return,
            Err(e) => {
                found.fail(&path, e);
                return;
            }
        }
    }
    let Ok(name) = CString::new(*last) else {
        return;
    };
    let path = join(&path, last);
    match rustix::fs::statat(&*dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => walk.entry(&dir, &name, path, &st, found, jobs),
        Err(e) if no_folder(e) => {}
        Err(e) => found.fail(&path, e),
    }
}

/// `roots` without empty parts (`a//b/` is `a/b`) and without the roots
/// inside others, so each path is found once.
fn normal_roots(roots: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut clean: Vec<Vec<u8>> = roots
        .iter()
        .map(|r| {
            r.split(|b| *b == b'/')
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join(&b'/')
        })
        .collect();
    clean.sort_unstable();
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(clean.len());
    for root in clean {
        if !kept.iter().any(|k| under(&root, k)) {
            kept.push(root);
        }
    }
    kept
}

fn os(paths: Vec<Vec<u8>>) -> Vec<OsString> {
    paths.into_iter().map(OsString::from_vec).collect()
}

#[pymethods]
impl StatCache {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    fn __len__(&self) -> usize {
        self.entries.len()
    }

    /// Replaces the contents with index entries (see `_core.pyi`), whose
    /// stat data was taken at or after `taken_ns`.
    fn load(&mut self, entries: Vec<LoadEntry>, taken_ns: i64) -> PyResult<()> {
        self.entries.clear();
        self.dirs.clear();
        for (path, mode, sha, ino, size, mtime_s, mtime_ns, ctime_s, ctime_ns) in entries {
            let sha = sha_of(&sha)?;
            let stat = Stat {
                ino,
                size,
                mtime_s,
                mtime_ns,
                ctime_s,
                ctime_ns,
            };
            self.insert(&path, held(mode, sha, stat, taken_ns));
        }
        Ok(())
    }

    /// Records `path` as `(mode, sha)` with `stat` = (inode, size, mtime ns,
    /// ctime ns), taken at or after `taken_ns`.
    fn set(
        &mut self,
        path: &[u8],
        mode: u32,
        sha: &[u8],
        stat: (u64, u64, i64, i64),
        taken_ns: i64,
    ) -> PyResult<()> {
        let sha = sha_of(sha)?;
        let (ino, size, mtime_ns, ctime_ns) = stat;
        let stat = Stat::from_ns(ino, size, mtime_ns, ctime_ns);
        if let Some(held) = self.entries.get_mut(path) {
            held.mode = mode;
            held.sha = sha;
            held.stat = stat;
            held.taken_ns = taken_ns;
        } else {
            self.insert(path, held(mode, sha, stat, taken_ns));
        }
        Ok(())
    }

    /// Forgets `path` (nothing if it is not held).
    fn remove(&mut self, path: &[u8]) {
        if self.entries.remove(path).is_some() {
            for (i, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
                let dir = &path[..i];
                if let Some(count) = self.dirs.get_mut(dir) {
                    *count -= 1;
                    if *count == 0 {
                        self.dirs.remove(dir);
                    }
                }
            }
        }
    }

    /// The paths whose stat alone cannot vouch for their content (see the
    /// module documentation), sorted.
    fn racy_paths(&self) -> Vec<OsString> {
        let mut paths: Vec<Vec<u8>> = self
            .entries
            .iter()
            .filter(|(_, held)| held.racy())
            .map(|(path, _)| path.to_vec())
            .collect();
        paths.sort_unstable();
        os(paths)
    }

    /// Compares the work tree under `root` with the cache, for the paths
    /// under `roots` (`b""` is all; empty parts and nested roots are
    /// dropped), on up to `threads` threads.
    ///
    /// Returns `(changed, gone, untracked, untracked_dirs)`: held paths whose
    /// kind, mode or stat differ, or whose content differs when the stat
    /// could not vouch for it (racy entries are read and hashed here); held
    /// paths not found; files and links nothing holds; and folders under
    /// which nothing is held, not entered. `.git` entries are skipped, links
    /// are never followed. An error reading a folder or a file's stat raises
    /// `OSError` naming the path.
    fn scan(
        &mut self,
        py: Python<'_>,
        root: OsString,
        roots: Vec<Vec<u8>>,
        threads: usize,
    ) -> PyResult<ScanResult> {
        let root = root.into_vec();
        let roots = normal_roots(&roots);
        let (found, gone) = py.detach(|| {
            let found = self.walk(&root, &roots, threads);
            let generation = self.generation;
            let mut gone: Vec<Vec<u8>> = self
                .entries
                .iter()
                .filter(|(path, held)| {
                    held.seen.load(Ordering::Relaxed) != generation
                        && roots.iter().any(|r| under(path, r))
                })
                .map(|(path, _)| path.to_vec())
                .collect();
            gone.sort_unstable();
            (found, gone)
        });
        if let Some((path, e)) = found.error {
            return Err(os_error_at(&e, OsString::from_vec(path)));
        }
        let Found {
            mut changed,
            mut untracked,
            mut untracked_dirs,
            ..
        } = found;
        changed.sort_unstable();
        untracked.sort_unstable();
        untracked_dirs.sort_unstable();
        Ok((os(changed), os(gone), os(untracked), os(untracked_dirs)))
    }
}

fn held(mode: u32, sha: [u8; 20], stat: Stat, taken_ns: i64) -> Held {
    Held {
        mode,
        sha,
        stat,
        taken_ns,
        seen: AtomicU32::new(0),
    }
}

fn sha_of(sha: &[u8]) -> PyResult<[u8; 20]> {
    sha.try_into()
        .map_err(|_| PyValueError::new_err(format!("a blob id is 20 bytes, not {}", sha.len())))
}
