//! The `file://` store: object_store's interface to the files below a root directory, which
//! follows no symbolic link below that root.
//!
//! object_store's `LocalFileSystem` opens paths, and so follows every link on them: a role that
//! may create files inside a table directory (or a table on a shared lake) could make a
//! partition directory a link to elsewhere and have the server write there, or make
//! `.hoodie/hoodie.properties` a link to a file it may not read and read it through a table.
//! Checking a path before opening it does not help, as a link may be swapped in between. This
//! store therefore resolves every path itself, relative to a descriptor of the root directory:
//! with `openat2(2)` and `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH` (Linux 5.6 and later), or,
//! where that is missing, one `openat(..., O_NOFOLLOW | O_DIRECTORY)` per directory, and it
//! creates, renames, links and removes entries with the `*at` calls relative to directories
//! opened that way. The root itself may be reached through links (`/tmp` on some systems, a
//! lake mounted elsewhere): only what is below it is protected.
//!
//! What meets a link:
//! - reads, writes, copies and renames through one fail with
//!   [`object_store::Error::PermissionDenied`], whose message names the link;
//! - listings skip links, as if they were not there: a link is neither listed nor descended
//!   into, and a listing whose prefix is or passes through a link is empty, as a missing one is;
//! - a delete removes a link that is the object itself (never what it points to), and fails
//!   like a read when a link is on the way to it.
//!
//! Everything else is as `LocalFileSystem` does it, which tables written before this store
//! rely on: an object's file name is its path segment exactly as object_store holds it
//! (`city=São Paulo`, `50%`), writes go to a temporary `name#N` in the same directory that is
//! renamed (or, for [`PutMode::Create`], hard-linked) into place, missing directories are
//! created, names ending in `#` and digits are such temporaries (not listed, not addressable),
//! a missing object is [`object_store::Error::NotFound`], also when deleted. Beyond it: only
//! regular files are objects (a FIFO is not opened, so it cannot make a read hang), and
//! `EACCES` is [`object_store::Error::PermissionDenied`] rather than a generic failure.

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Write};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::{Path, PathPart};
use object_store::{
    Attributes, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// The store's name in errors.
const STORE: &str = "NoFollowLocalStore";

/// How directories on the way to an entry are opened: only to be searched and named in `*at`
/// calls, which on Linux `O_PATH` allows without read permission (as a path lookup would).
#[cfg(any(target_os = "linux", target_os = "android"))]
const DIR_SEARCH: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const DIR_SEARCH: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// How a directory to be listed is opened.
const DIR_READ: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// How an object is opened to be read. `O_NONBLOCK` has no effect on a regular file, but
/// keeps the open of a FIFO planted in its place from waiting for a writer forever.
const FILE_READ: OFlags = OFlags::RDONLY.union(OFlags::NONBLOCK).union(OFlags::CLOEXEC);

/// Permissions of new directories and files before the umask, as `std::fs` creates them.
const DIR_MODE: u32 = 0o777;
const FILE_MODE: u32 = 0o666;

/// Permissions of the files local stores create, set by [`set_creation_mode`]; 0 leaves them
/// as the umask does.
static CREATION_MODE: AtomicU32 = AtomicU32::new(0);

/// Sets the permissions of the files local stores create from now on (`None`: as the process's
/// umask leaves them; PostgreSQL's server runs with 0077, so only its OS user could read the
/// lake). New directories get the same permissions with search allowed where reading is. The
/// host sets it from its settings; modes of existing files are never changed.
pub fn set_creation_mode(mode: Option<u32>) {
    CREATION_MODE.store(mode.map_or(0, |m| m & 0o777), Ordering::Relaxed);
}

/// The permissions to give new (files, directories), when set.
fn creation_modes() -> Option<(Mode, Mode)> {
    let file = CREATION_MODE.load(Ordering::Relaxed);
    let directory = file | (file & 0o444) >> 2;
    (file != 0).then(|| (Mode::from_bits_truncate(file as _), Mode::from_bits_truncate(directory as _)))
}

/// `path` made with its missing parents (links on the way followed), each new directory given
/// the [`creation_modes`] through a descriptor of it: a name replaced by a link since it was
/// made is refused, never followed to change another file's mode.
fn make_dirs(path: &FsPath) -> io::Result<()> {
    let missing: Vec<&FsPath> = path.ancestors().take_while(|p| !p.as_os_str().is_empty() && !p.exists()).collect();
    std::fs::create_dir_all(path)?;
    if let Some((_, mode)) = creation_modes() {
        for dir in missing {
            let made = rfs::open(dir, DIR_READ | OFlags::NOFOLLOW, Mode::empty())?;
            rfs::fchmod(&made, mode)?;
        }
    }
    Ok(())
}

/// Set once `openat2` turned out to be missing (`ENOSYS`: a kernel before 5.6), so that later
/// stores walk without trying it first.
static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

/// An [`ObjectStore`] of the files below a root directory that follows no symbolic link below
/// that root (see the [module documentation](self)). Cloning is cheap and shares the root's
/// descriptor.
#[derive(Debug, Clone)]
pub struct NoFollowLocalStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The root, absolute; links on the way to it are followed.
    root: PathBuf,
    /// The root directory as last opened, reused while the root path still names it.
    opened: Mutex<Option<Arc<RootDir>>>,
    /// Whether to resolve with `openat2` (else walk one directory at a time).
    openat2: AtomicBool,
}

/// An open root directory and its identity, by which a root removed and made again (a table
/// dropped and created anew at the same place) is told from the one opened.
#[derive(Debug)]
struct RootDir {
    fd: OwnedFd,
    dev: u64,
    ino: u64,
}

impl NoFollowLocalStore {
    /// The store of the files below `root`, an absolute path. Does no I/O: the root is opened
    /// by the first operation, and made (following links, as it is not below itself) by the
    /// first write if it does not exist.
    pub fn new(root: impl Into<PathBuf>) -> NoFollowLocalStore {
        let openat2 = !OPENAT2_MISSING.load(Ordering::Relaxed);
        NoFollowLocalStore {
            inner: Arc::new(Inner { root: root.into(), opened: Mutex::new(None), openat2: AtomicBool::new(openat2) }),
        }
    }

    /// The store that resolves paths by the walk that stands in for a missing `openat2`: for
    /// tests of that walk on kernels that have `openat2`.
    #[cfg(test)]
    fn walking(root: impl Into<PathBuf>) -> NoFollowLocalStore {
        let store = NoFollowLocalStore::new(root);
        store.inner.openat2.store(false, Ordering::Relaxed);
        store
    }

    /// The root directory of the store.
    pub fn root(&self) -> &FsPath {
        &self.inner.root
    }
}

impl std::fmt::Display for NoFollowLocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{STORE}({})", self.inner.root.display())
    }
}

/// Reads of this many bytes at most, and listings of one directory, run on the calling
/// thread: from the page cache they take microseconds, less than handing them to a thread of
/// the blocking pool and back (a point query made four such round trips, a fifth of its
/// time). Larger reads run on the pool, where they overlap the caller's work.
const INLINE_READ_BYTES: u64 = 256 << 10;

/// Runs blocking file system calls off the async runtime's worker threads, as
/// `LocalFileSystem` does: on tokio's blocking pool inside a runtime, else right here.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn_blocking(f).await?,
        Err(_) => f(),
    }
}

/// Why an operation below the root failed, before it is told as object_store's error (which
/// needs the operation and the path).
#[derive(Debug)]
enum Fail {
    /// A symbolic link was met where a directory or the object itself was to be.
    Link,
    Io(Errno),
}

impl From<Errno> for Fail {
    fn from(errno: Errno) -> Fail {
        Fail::Io(errno)
    }
}

fn errno_of(error: &io::Error) -> Errno {
    Errno::from_io_error(error).unwrap_or(Errno::IO)
}

/// A failed system call on a path.
#[derive(Debug)]
struct Failure {
    doing: &'static str,
    path: PathBuf,
    source: io::Error,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.doing, self.path.display(), self.source)
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// A path refused because a symbolic link is on it (or is it).
#[derive(Debug)]
struct LinkRefused {
    root: PathBuf,
    /// The link, when it could be found again to be named.
    link: Option<PathBuf>,
}

impl std::fmt::Display for LinkRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.link {
            Some(link) => write!(f, "{} is a symbolic link", link.display())?,
            None => f.write_str("a symbolic link is on the way")?,
        }
        write!(f, ", and no symbolic link below {} is followed", self.root.display())
    }
}

impl std::error::Error for LinkRefused {}

/// object_store's error for a failed system call: its kinds for a missing entry, an existing
/// one and a refusal (which name the path themselves), a generic error for the rest.
fn io_error(doing: &'static str, path: PathBuf, errno: Errno) -> object_store::Error {
    let shown = path.display().to_string();
    let source = io::Error::from(errno).into();
    match errno {
        Errno::NOENT => object_store::Error::NotFound { path: shown, source },
        Errno::EXIST => object_store::Error::AlreadyExists { path: shown, source },
        Errno::ACCESS | Errno::PERM => object_store::Error::PermissionDenied { path: shown, source },
        _ => generic(Failure { doing, path, source: io::Error::from(errno) }),
    }
}

fn generic(source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> object_store::Error {
    object_store::Error::Generic { store: STORE, source: source.into() }
}

/// Whether `name` is that of a temporary file of a write in progress (`name#1`), as
/// `LocalFileSystem` tells them: such names are not listed and cannot be addressed.
fn is_staging_name(name: &str) -> bool {
    match name.split_once('#') {
        Some((_, suffix)) => !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// Checks that every segment of a slash-separated relative path names one entry of its
/// directory. object_store's paths hold no empty, `.` or `..` segment already; this is checked
/// again because the walk without `openat2` would follow `..` out of the root.
fn check_segments(path: &str) -> Result<()> {
    if path.is_empty() {
        return Ok(());
    }
    match path.split('/').find(|s| s.is_empty() || *s == "." || *s == ".." || s.contains('\0')) {
        Some(bad) => Err(generic(format!("the path \"{path}\" has the segment \"{bad}\", which names no entry of a directory"))),
        None => Ok(()),
    }
}

/// An object's place below the root.
#[derive(Debug, Clone, Copy)]
struct Rel<'a> {
    /// `a/b/name`.
    path: &'a str,
    /// `a/b`, empty for an object directly in the root.
    parent: &'a str,
    /// `name`.
    name: &'a str,
}

impl<'a> Rel<'a> {
    fn of(location: &'a Path) -> Result<Rel<'a>> {
        let path = location.as_ref();
        check_segments(path)?;
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        if name.is_empty() {
            return Err(generic("the store's root itself is not an object"));
        }
        if is_staging_name(name) {
            return Err(generic(format!("file names ending in '#' and digits are not supported: {path}")));
        }
        Ok(Rel { path, parent, name })
    }
}

/// A directory below the root (or the root itself) to name entries relative to.
enum DirFd<'r> {
    Root(&'r RootDir),
    Owned(OwnedFd),
}

impl AsFd for DirFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Root(root) => root.fd.as_fd(),
            DirFd::Owned(fd) => fd.as_fd(),
        }
    }
}

/// What the engine reads of a `stat`: the field types differ between platforms.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn stat_fields(stat: &Stat) -> (u64, u64, u64, i64, u32) {
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    (stat.st_dev as u64, stat.st_ino as u64, size, stat.st_mtime as i64, stat.st_mtime_nsec as u32)
}

fn file_type(stat: &Stat) -> FileType {
    FileType::from_raw_mode(stat.st_mode)
}

/// An object's metadata, with the ETag `LocalFileSystem` gives it (inode, modification time in
/// microseconds and size, in hex).
fn object_meta(stat: &Stat, location: Path) -> ObjectMeta {
    let (_, _, size, secs, nanos) = stat_fields(stat);
    let last_modified = DateTime::<Utc>::from_timestamp(secs, nanos).unwrap_or_default();
    ObjectMeta { location, last_modified, size, e_tag: Some(e_tag(stat)), version: None }
}

fn e_tag(stat: &Stat) -> String {
    let (_, ino, size, secs, nanos) = stat_fields(stat);
    let micros = if secs < 0 { 0 } else { secs as u128 * 1_000_000 + u128::from(nanos / 1000) };
    format!("{ino:x}-{micros:x}-{size:x}")
}

/// `openat` of one entry of `dir` with `O_NOFOLLOW`, a link it meets told as [`Fail::Link`].
fn open_nofollow(dir: impl AsFd, name: &str, flags: OFlags, mode: Mode) -> std::result::Result<OwnedFd, Fail> {
    rfs::openat(dir.as_fd(), name, flags | OFlags::NOFOLLOW, mode).map_err(|errno| classify(dir.as_fd(), name, errno))
}

/// The failure of opening `name` in `dir`: `ELOOP` under `O_NOFOLLOW` is a link; so is
/// `ENOTDIR` when the entry is a link (what Linux answers for `O_NOFOLLOW | O_DIRECTORY` on
/// one), told from a file where a directory should be by a `stat` of the entry afterwards.
/// An entry that is a directory by then was swapped since the open: for a link, most likely.
fn classify(dir: BorrowedFd<'_>, name: &str, errno: Errno) -> Fail {
    match errno {
        Errno::LOOP => Fail::Link,
        Errno::NOTDIR => match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map(|stat| file_type(&stat)) {
            Ok(FileType::Symlink | FileType::Directory) => Fail::Link,
            _ => Fail::Io(errno),
        },
        _ => Fail::Io(errno),
    }
}

impl Inner {
    /// The root directory, opened again when the root path names another directory than the
    /// one opened before (one `stat` per operation); made first when missing and `create`.
    fn root_dir(&self, create: bool) -> std::result::Result<Arc<RootDir>, Fail> {
        let stat = match rfs::stat(self.root.as_path()) {
            Ok(stat) => stat,
            Err(Errno::NOENT) if create => {
                // Links on the way to the root are followed: only what is below it is guarded.
                make_dirs(&self.root).map_err(|e| Fail::Io(errno_of(&e)))?;
                rfs::stat(self.root.as_path())?
            }
            Err(errno) => return Err(Fail::Io(errno)),
        };
        // The descriptor held keeps the opened directory's inode from being freed, so its
        // number on its device names no other directory while it is held.
        let (dev, ino, ..) = stat_fields(&stat);
        let mut opened = self.opened.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(root) = opened.as_ref().filter(|root| root.dev == dev && root.ino == ino) {
            return Ok(root.clone());
        }
        let fd = rfs::open(self.root.as_path(), DIR_SEARCH, Mode::empty())?;
        let (dev, ino, ..) = stat_fields(&rfs::fstat(&fd)?);
        let root = Arc::new(RootDir { fd, dev, ino });
        *opened = Some(root.clone());
        Ok(root)
    }

    /// `openat2` of `path` (relative, not empty) beneath the root, following no link; `None`
    /// when the walk must do it instead (no `openat2`, or it kept racing with renames).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn openat2(&self, root: &RootDir, path: &str, flags: OFlags) -> Option<std::result::Result<OwnedFd, Fail>> {
        use rustix::fs::ResolveFlags;
        if !self.openat2.load(Ordering::Relaxed) {
            return None;
        }
        // EAGAIN: a rename or mount elsewhere raced with the lookup, which the kernel does not
        // retry itself under RESOLVE_BENEATH.
        for _ in 0..4 {
            match rfs::openat2(&root.fd, path, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH) {
                Ok(fd) => return Some(Ok(fd)),
                Err(Errno::AGAIN) => continue,
                Err(Errno::NOSYS) => {
                    OPENAT2_MISSING.store(true, Ordering::Relaxed);
                    self.openat2.store(false, Ordering::Relaxed);
                    return None;
                }
                // Container seccomp filters that do not know openat2 answer EPERM; the walk
                // gives the real answer (and its own EPERM, if that is one).
                Err(Errno::PERM) => return None,
                // ELOOP: a link under RESOLVE_NO_SYMLINKS; EXDEV: a way out of the root, which
                // plain names cannot take, but a refusal all the same.
                Err(Errno::LOOP | Errno::XDEV) => return Some(Err(Fail::Link)),
                Err(errno) => return Some(Err(Fail::Io(errno))),
            }
        }
        None
    }

    /// `openat2` where there is none: always the walk.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn openat2(&self, _root: &RootDir, _path: &str, _flags: OFlags) -> Option<std::result::Result<OwnedFd, Fail>> {
        None
    }

    /// Opens the directories of `dirs` (slash-separated, relative) from the root one at a
    /// time with `O_NOFOLLOW`, making missing ones when `create`.
    fn walk<'r>(&self, root: &'r RootDir, dirs: &str, create: bool) -> std::result::Result<DirFd<'r>, Fail> {
        let mut at = DirFd::Root(root);
        for name in dirs.split('/').filter(|s| !s.is_empty()) {
            // A directory removed each time right after it was made ends the retries.
            let mut tries = 0;
            let next = loop {
                match open_nofollow(&at, name, DIR_SEARCH, Mode::empty()) {
                    Ok(fd) => break fd,
                    Err(Fail::Io(Errno::NOENT)) if create && tries < 8 => {
                        tries += 1;
                        match rfs::mkdirat(&at, name, Mode::from_bits_truncate(DIR_MODE as _)) {
                            Ok(()) => {
                                // Through a descriptor of the new directory itself (its name
                                // could be a link by now; O_PATH ones take no fchmod).
                                if let Some((_, mode)) = creation_modes() {
                                    let made = open_nofollow(&at, name, DIR_READ, Mode::empty())?;
                                    rfs::fchmod(&made, mode)?;
                                }
                                continue;
                            }
                            Err(Errno::EXIST) => continue,
                            Err(errno) => return Err(Fail::Io(errno)),
                        }
                    }
                    Err(fail) => return Err(fail),
                }
            };
            at = DirFd::Owned(next);
        }
        Ok(at)
    }

    /// The directory `dirs` (slash-separated, relative; empty for the root) to name entries
    /// in, made with its missing parents when `create`.
    fn parent<'r>(&self, root: &'r RootDir, dirs: &str, create: bool) -> std::result::Result<DirFd<'r>, Fail> {
        if dirs.is_empty() {
            return Ok(DirFd::Root(root));
        }
        match self.openat2(root, dirs, DIR_SEARCH) {
            Some(Ok(fd)) => return Ok(DirFd::Owned(fd)),
            Some(Err(Fail::Io(Errno::NOENT))) if create => {}
            Some(Err(fail)) => return Err(fail),
            None => {}
        }
        self.walk(root, dirs, create)
    }

    /// Opens `path` (slash-separated, relative; empty for the root) with `flags`.
    fn open(&self, root: &RootDir, path: &str, flags: OFlags) -> std::result::Result<OwnedFd, Fail> {
        if path.is_empty() {
            // "." is the root itself, whatever it is reached by.
            return Ok(rfs::openat(&root.fd, ".", flags, Mode::empty())?);
        }
        if let Some(opened) = self.openat2(root, path, flags) {
            return opened;
        }
        let (dirs, name) = path.rsplit_once('/').unwrap_or(("", path));
        let dir = self.walk(root, dirs, false)?;
        open_nofollow(&dir, name, flags, Mode::empty())
    }

    /// The first link on `path` below the root, to name it in an error (found again by path:
    /// for the message only).
    fn find_link(&self, path: &str) -> Option<PathBuf> {
        let mut at = self.root.clone();
        for name in path.split('/').filter(|s| !s.is_empty()) {
            at.push(name);
            match std::fs::symlink_metadata(&at) {
                Ok(meta) if meta.file_type().is_symlink() => return Some(at),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// object_store's error for `fail` while `doing` something to `path`.
    fn error(&self, doing: &'static str, path: &str, fail: Fail) -> object_store::Error {
        let full = if path.is_empty() { self.root.clone() } else { self.root.join(path) };
        match fail {
            Fail::Link => object_store::Error::PermissionDenied {
                path: full.display().to_string(),
                source: Box::new(LinkRefused { root: self.root.clone(), link: self.find_link(path) }),
            },
            Fail::Io(errno) => io_error(doing, full, errno),
        }
    }

    /// Opens an object to read it: a regular file, reached through no link.
    fn open_object(&self, location: &Path) -> Result<(File, ObjectMeta)> {
        let rel = Rel::of(location)?;
        let fail = |fail| self.error("reading", rel.path, fail);
        let root = self.root_dir(false).map_err(fail)?;
        let fd = self.open(&root, rel.path, FILE_READ).map_err(fail)?;
        let stat = rfs::fstat(&fd).map_err(|errno| fail(Fail::Io(errno)))?;
        match file_type(&stat) {
            FileType::RegularFile => Ok((File::from(fd), object_meta(&stat, location.clone()))),
            // As LocalFileSystem: a directory is no object.
            FileType::Directory => Err(fail(Fail::Io(Errno::NOENT))),
            _ => Err(generic(format!("reading {}: not a regular file", self.root.join(rel.path).display()))),
        }
    }

    fn put(&self, location: &Path, payload: &PutPayload, mode: &PutMode) -> Result<PutResult> {
        let rel = Rel::of(location)?;
        let fail = |fail| self.error("writing", rel.path, fail);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let root = self.root_dir(true).map_err(fail)?;
            let dir = self.parent(&root, rel.parent, true).map_err(fail)?;
            let (mut file, staged) = match stage(&dir, rel.name) {
                Ok(staged) => staged,
                // The directory was removed since it was opened (emptied by a cleaner): again.
                Err(Errno::NOENT) if attempt < 3 => continue,
                Err(errno) => return Err(fail(Fail::Io(errno))),
            };
            let written = payload
                .iter()
                .try_for_each(|chunk| file.write_all(chunk))
                .map_err(|e| errno_of(&e))
                .and_then(|()| rfs::fstat(&file));
            // Closed before it is renamed, as LocalFileSystem does for FUSE file systems that
            // upload on close.
            drop(file);
            let placed = written.and_then(|stat| {
                match mode {
                    PutMode::Create => {
                        // A hard link fails when the name is taken (by anything, a link too),
                        // where a rename would replace it.
                        rfs::linkat(&dir, &staged, &dir, rel.name, AtFlags::empty())?;
                        let _ = rfs::unlinkat(&dir, &staged, AtFlags::empty());
                    }
                    // A rename replaces a link at the name itself, never what it points to.
                    _ => rfs::renameat(&dir, &staged, &dir, rel.name)?,
                }
                Ok(stat)
            });
            return match placed {
                Ok(stat) => Ok(PutResult { e_tag: Some(e_tag(&stat)), version: None }),
                Err(errno) => {
                    let _ = rfs::unlinkat(&dir, &staged, AtFlags::empty());
                    Err(fail(Fail::Io(errno)))
                }
            };
        }
    }

    fn delete(&self, location: &Path) -> Result<()> {
        let rel = Rel::of(location)?;
        let fail = |fail| self.error("deleting", rel.path, fail);
        let root = self.root_dir(false).map_err(fail)?;
        let dir = self.parent(&root, rel.parent, false).map_err(fail)?;
        // unlinkat removes a link at the name itself, not what it points to.
        rfs::unlinkat(&dir, rel.name, AtFlags::empty()).map_err(|errno| fail(Fail::Io(errno)))
    }

    /// Copies `from` to `to` by a hard link, replacing `to` through a temporary name and a
    /// rename ([`Transfer::Copy`]) or failing when `to` exists ([`Transfer::CopyIfNotExists`]);
    /// or renames `from` to `to`, replacing it ([`Transfer::Rename`]).
    fn transfer(&self, from: &Path, to: &Path, how: Transfer) -> Result<()> {
        let (source, target) = (Rel::of(from)?, Rel::of(to)?);
        let doing = match how {
            Transfer::Rename => "renaming",
            Transfer::Copy | Transfer::CopyIfNotExists => "copying",
        };
        let fail_from = |fail| self.error(doing, source.path, fail);
        let fail_to = |fail| self.error(doing, target.path, fail);
        let root = self.root_dir(false).map_err(fail_from)?;
        let from_dir = self.parent(&root, source.parent, false).map_err(fail_from)?;
        // A link is not an object: moving or linking one would not follow it, but the copy
        // of a link is no copy of an object either.
        match rfs::statat(&from_dir, source.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if file_type(&stat) == FileType::Symlink => return Err(fail_from(Fail::Link)),
            Ok(_) => {}
            Err(errno) => return Err(fail_from(Fail::Io(errno))),
        }
        let to_dir = self.parent(&root, target.parent, true).map_err(fail_to)?;
        match how {
            Transfer::Rename => {
                rfs::renameat(&from_dir, source.name, &to_dir, target.name).map_err(|errno| fail_from(Fail::Io(errno)))
            }
            Transfer::CopyIfNotExists => {
                rfs::linkat(&from_dir, source.name, &to_dir, target.name, AtFlags::empty()).map_err(|errno| match errno {
                    Errno::EXIST => fail_to(Fail::Io(errno)),
                    _ => fail_from(Fail::Io(errno)),
                })
            }
            Transfer::Copy => {
                let mut n = 0u64;
                loop {
                    n += 1;
                    let staged = format!("{}#{n}", target.name);
                    match rfs::linkat(&from_dir, source.name, &to_dir, &staged, AtFlags::empty()) {
                        Ok(()) => {}
                        Err(Errno::EXIST) => continue,
                        Err(errno) => return Err(fail_from(Fail::Io(errno))),
                    }
                    return rfs::renameat(&to_dir, &staged, &to_dir, target.name).map_err(|errno| {
                        let _ = rfs::unlinkat(&to_dir, &staged, AtFlags::empty());
                        fail_to(Fail::Io(errno))
                    });
                }
            }
        }
    }

    /// The objects below `prefix`, at any depth. Links are skipped, not followed.
    fn list(&self, prefix: &str) -> Vec<Result<ObjectMeta>> {
        if let Err(e) = check_segments(prefix) {
            return vec![Err(e)];
        }
        let Some(top) = self.open_listing(prefix).transpose() else { return Vec::new() };
        let top = match top {
            Ok(top) => top,
            Err(e) => return vec![Err(e)],
        };
        let mut listed = Vec::new();
        // Directories still to read, each with the open parent to open it in: a parent stays
        // open only while children of it wait, so open descriptors stay few.
        let mut waiting: Vec<(Arc<rfs::Dir>, String, String)> = Vec::new();
        let mut next = Some((top, prefix.to_owned()));
        loop {
            if let Some((fd, location)) = next.take() {
                self.list_into(fd, &location, &mut listed, &mut waiting);
            }
            let Some((parent, name, location)) = waiting.pop() else { break };
            let Ok(parent_fd) = parent.fd() else { continue };
            match open_nofollow(parent_fd, &name, DIR_READ, Mode::empty()) {
                Ok(fd) => next = Some((fd, location)),
                // Removed, or made a link or a file, since it was read: as if not there.
                Err(Fail::Link | Fail::Io(Errno::NOENT | Errno::NOTDIR)) => {}
                Err(fail) => listed.push(Err(self.error("listing", &location, fail))),
            }
        }
        listed
    }

    /// The directory `prefix` opened to be listed; `None` when there is none to list (missing,
    /// a file, or a link, which listings skip).
    fn open_listing(&self, prefix: &str) -> Result<Option<OwnedFd>> {
        let root = match self.root_dir(false) {
            Ok(root) => root,
            Err(Fail::Io(Errno::NOENT)) => return Ok(None),
            Err(fail) => return Err(self.error("listing", prefix, fail)),
        };
        match self.open(&root, prefix, DIR_READ) {
            Ok(fd) => Ok(Some(fd)),
            Err(Fail::Link | Fail::Io(Errno::NOENT | Errno::NOTDIR)) => Ok(None),
            Err(fail) => Err(self.error("listing", prefix, fail)),
        }
    }

    /// Lists the directory `fd` at `location`: its objects into `listed`, its directories
    /// into `waiting`.
    fn list_into(
        &self,
        fd: OwnedFd,
        location: &str,
        listed: &mut Vec<Result<ObjectMeta>>,
        waiting: &mut Vec<(Arc<rfs::Dir>, String, String)>,
    ) {
        let entries = match self.read_dir(fd, location) {
            Ok(entries) => entries,
            Err(e) => return listed.push(Err(e)),
        };
        let dir = Arc::new(entries.dir);
        for entry in entries.entries {
            match entry {
                Err(e) => listed.push(Err(e)),
                Ok(Entry::Dir(name, location)) => waiting.push((dir.clone(), name, location)),
                Ok(Entry::Object(meta)) => listed.push(Ok(meta)),
            }
        }
    }

    /// Reads the entries of the directory `fd` at `location`: objects (regular files that
    /// are not temporaries of a write, with their metadata) and directories. Links and other
    /// kinds of files are left out.
    fn read_dir(&self, fd: OwnedFd, location: &str) -> Result<Listing> {
        let fail = |errno| self.error("listing", location, Fail::Io(errno));
        let mut dir = rfs::Dir::new(fd).map_err(fail)?;
        let mut names = Vec::new();
        for entry in &mut dir {
            let entry = entry.map_err(fail)?;
            let name = entry.file_name();
            if name != c"." && name != c".." {
                names.push((name_of(name, location), entry.file_type()));
            }
        }
        let dir_fd = dir.fd().map_err(fail)?;
        let mut entries = Vec::with_capacity(names.len());
        for (name, kind) in names {
            let name = match name {
                Ok(name) => name,
                Err(e) => {
                    entries.push(Err(e));
                    continue;
                }
            };
            let path = if location.is_empty() { name.clone() } else { format!("{location}/{name}") };
            let stat_now = || rfs::statat(dir_fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW);
            let (kind, mut stat) = match kind {
                FileType::Unknown => match stat_now() {
                    Ok(stat) => (file_type(&stat), Some(stat)),
                    Err(Errno::NOENT) => continue,
                    Err(errno) => {
                        entries.push(Err(self.error("listing", &path, Fail::Io(errno))));
                        continue;
                    }
                },
                kind => (kind, None),
            };
            match kind {
                FileType::Directory => match Path::parse(&path) {
                    Ok(_) => entries.push(Ok(Entry::Dir(name, path))),
                    Err(e) => entries.push(Err(e.into())),
                },
                FileType::RegularFile if !is_staging_name(&name) => {
                    if stat.is_none() {
                        match stat_now() {
                            Ok(now) => stat = Some(now),
                            // Deleted since the directory was read.
                            Err(Errno::NOENT) => continue,
                            Err(errno) => {
                                entries.push(Err(self.error("listing", &path, Fail::Io(errno))));
                                continue;
                            }
                        }
                    }
                    let Some(stat) = stat else { continue };
                    // Replaced by a link or a directory since the directory was read: skipped.
                    if file_type(&stat) != FileType::RegularFile {
                        continue;
                    }
                    match Path::parse(&path) {
                        Ok(location) => entries.push(Ok(Entry::Object(object_meta(&stat, location)))),
                        Err(e) => entries.push(Err(e.into())),
                    }
                }
                // Links (never followed), temporaries of writes, FIFOs, sockets, devices.
                _ => {}
            }
        }
        Ok(Listing { dir, entries })
    }

    /// The objects directly in `prefix` and the directories in it.
    fn list_with_delimiter(&self, prefix: &str) -> Result<ListResult> {
        check_segments(prefix)?;
        let empty = ListResult { common_prefixes: Vec::new(), objects: Vec::new() };
        let Some(fd) = self.open_listing(prefix)? else { return Ok(empty) };
        let listing = self.read_dir(fd, prefix)?;
        let mut common_prefixes = BTreeSet::new();
        let mut objects = Vec::new();
        for entry in listing.entries {
            match entry? {
                Entry::Dir(_, location) => {
                    common_prefixes.insert(Path::parse(location)?);
                }
                Entry::Object(meta) => objects.push(meta),
            }
        }
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(ListResult { common_prefixes: common_prefixes.into_iter().collect(), objects })
    }
}

/// A directory's entries as read, and the directory, open to name them in.
struct Listing {
    dir: rfs::Dir,
    entries: Vec<Result<Entry>>,
}

enum Entry {
    /// A directory: its name and location.
    Dir(String, String),
    Object(ObjectMeta),
}

/// A file name as a segment of object_store's paths: the name itself, which must be UTF-8
/// and free of control characters, as `LocalFileSystem` requires of names it lists.
fn name_of(name: &CStr, location: &str) -> Result<String> {
    let invalid = |why: String| generic(format!("listing {location}: the file name {name:?} {why}"));
    let name = name.to_str().map_err(|_| invalid("is not UTF-8".to_owned()))?;
    PathPart::parse(name).map_err(|e| invalid(e.to_string()))?;
    Ok(name.to_owned())
}

/// Makes a new temporary file `name#N` in `dir` for a write to `name`.
fn stage(dir: &DirFd<'_>, name: &str) -> std::result::Result<(File, String), Errno> {
    let mut n = 0u64;
    loop {
        n += 1;
        let staged = format!("{name}#{n}");
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rfs::openat(dir, staged.as_str(), flags, Mode::from_bits_truncate(FILE_MODE as _)) {
            Ok(fd) => {
                if let Some((mode, _)) = creation_modes() {
                    if let Err(errno) = rfs::fchmod(&fd, mode) {
                        let _ = rfs::unlinkat(dir, staged.as_str(), AtFlags::empty());
                        return Err(errno);
                    }
                }
                return Ok((File::from(fd), staged));
            }
            // Another write's temporary (or one a crash left behind).
            Err(Errno::EXIST) => continue,
            Err(errno) => return Err(errno),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Transfer {
    Copy,
    CopyIfNotExists,
    Rename,
}

/// Reads `range` of `file` (of `len` bytes, read from `path`), which must start inside it;
/// a range that ends past the end is cut there, as object_store's ranges are.
fn read_range(file: &File, len: u64, path: &FsPath, range: Range<u64>) -> Result<Bytes> {
    if range.start >= len {
        return Err(generic(format!(
            "reading {}: the range {}..{} starts after the end of the file ({len} bytes)",
            path.display(),
            range.start,
            range.end
        )));
    }
    let wanted = range.end.min(len).saturating_sub(range.start);
    let mut buffer = vec![0u8; usize::try_from(wanted).map_err(generic)?];
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], range.start + filled as u64) {
            Ok(0) => {
                return Err(generic(format!(
                    "reading {}: the file ended after {filled} of {wanted} bytes from {}",
                    path.display(),
                    range.start
                )))
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error("reading", path.to_path_buf(), errno_of(&e))),
        }
    }
    Ok(buffer.into())
}

#[async_trait]
impl ObjectStore for NoFollowLocalStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        // As LocalFileSystem: no versions to compare, no attributes to keep.
        if matches!(opts.mode, PutMode::Update(_)) || !opts.attributes.is_empty() {
            return Err(object_store::Error::NotImplemented);
        }
        let (inner, location) = (self.inner.clone(), location.clone());
        blocking(move || inner.put(&location, &payload, &opts.mode)).await
    }

    /// A buffered upload, written as one [`ObjectStore::put`] when completed: the engine
    /// writes whole objects, so none is large enough to need parts on disk.
    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            return Err(object_store::Error::NotImplemented);
        }
        Ok(Box::new(BufferedUpload { store: self.clone(), location: location.clone(), parts: Vec::new() }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let (inner, location) = (self.inner.clone(), location.clone());
        blocking(move || {
            let (file, meta) = inner.open_object(&location)?;
            options.check_preconditions(&meta)?;
            let range = match &options.range {
                Some(range) => range.as_range(meta.size).map_err(generic)?,
                None => 0..meta.size,
            };
            let path = inner.root.join(location.as_ref());
            Ok(GetResult { payload: GetResultPayload::File(file, path), meta, range, attributes: Attributes::default() })
        })
        .await
    }

    async fn get_range(&self, location: &Path, range: Range<u64>) -> Result<Bytes> {
        let mut bytes = self.get_ranges(location, std::slice::from_ref(&range)).await?;
        Ok(bytes.pop().unwrap_or_default())
    }

    /// All ranges from one open of the file (the Parquet reader's column chunks).
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let bytes: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        let (inner, location, ranges) = (self.inner.clone(), location.clone(), ranges.to_vec());
        let read = move || {
            let (file, meta) = inner.open_object(&location)?;
            let path = inner.root.join(location.as_ref());
            ranges.into_iter().map(|range| read_range(&file, meta.size, &path, range)).collect()
        };
        match bytes <= INLINE_READ_BYTES {
            true => read(),
            false => blocking(read).await,
        }
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        let (inner, location) = (self.inner.clone(), location.clone());
        blocking(move || Ok(inner.open_object(&location)?.1)).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        let (inner, location) = (self.inner.clone(), location.clone());
        blocking(move || inner.delete(&location)).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (inner, prefix) = (self.inner.clone(), prefix.cloned().unwrap_or_default());
        futures::stream::once(blocking(move || Ok(inner.list(prefix.as_ref()))))
            .flat_map(|listed| futures::stream::iter(listed.unwrap_or_else(|e| vec![Err(e)])))
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix.cloned().unwrap_or_default().as_ref())
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        let (inner, from, to) = (self.inner.clone(), from.clone(), to.clone());
        blocking(move || inner.transfer(&from, &to, Transfer::Copy)).await
    }

    async fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let (inner, from, to) = (self.inner.clone(), from.clone(), to.clone());
        blocking(move || inner.transfer(&from, &to, Transfer::Rename)).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        let (inner, from, to) = (self.inner.clone(), from.clone(), to.clone());
        blocking(move || inner.transfer(&from, &to, Transfer::CopyIfNotExists)).await
    }
}

/// An upload whose parts are kept in memory, in the order given, until it completes.
#[derive(Debug)]
struct BufferedUpload {
    store: NoFollowLocalStore,
    location: Path,
    parts: Vec<PutPayload>,
}

#[async_trait]
impl MultipartUpload for BufferedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.parts.push(data);
        Box::pin(futures::future::ready(Ok(())))
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let payload: PutPayload = std::mem::take(&mut self.parts).into_iter().flatten().collect();
        self.store.put(&self.location, payload).await
    }

    async fn abort(&mut self) -> Result<()> {
        self.parts.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::storage::{Storage, StorageUri};
    use std::os::unix::fs::symlink;

    /// A lake root and a directory outside it, in a temporary directory of their own.
    struct Lake {
        _dir: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        storage: Storage,
    }

    impl Lake {
        fn outside_file(&self, name: &str, content: &str) -> PathBuf {
            let path = self.outside.join(name);
            std::fs::write(&path, content).unwrap();
            path
        }
    }

    fn storage_of(root: &FsPath) -> Storage {
        Storage::open(&StorageUri::parse(&format!("file://{}", root.display())).unwrap(), &Default::default()).unwrap()
    }

    /// [`storage_of`] with the store that walks instead of using `openat2`.
    fn walking_storage_of(root: &FsPath) -> Storage {
        let storage = storage_of(root);
        Storage { store: Arc::new(NoFollowLocalStore::walking(root)), prefix: Path::default(), ..storage }
    }

    /// The lakes each case runs on: one opened as the engine opens `file://` locations
    /// (`openat2` on this kernel), one resolving by the walk that stands in for a missing
    /// `openat2`.
    fn lakes() -> Vec<Lake> {
        [false, true]
            .into_iter()
            .map(|walking| {
                let dir = tempfile::tempdir().unwrap();
                let (root, outside) = (dir.path().join("lake"), dir.path().join("outside"));
                std::fs::create_dir_all(&root).unwrap();
                std::fs::create_dir_all(&outside).unwrap();
                let storage = if walking { walking_storage_of(&root) } else { storage_of(&root) };
                Lake { _dir: dir, root, outside, storage }
            })
            .collect()
    }

    #[track_caller]
    fn assert_refused<T: std::fmt::Debug>(result: crate::error::Result<T>, what: &str) {
        let err = result.expect_err(what);
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{what}: {err}");
        assert!(err.to_string().contains("is a symbolic link, and no symbolic link below"), "{what}: {err}");
    }

    async fn names(storage: &Storage, relative: &str) -> Vec<String> {
        let mut names: Vec<String> = storage.list_recursive(relative).await.unwrap().into_iter().map(|(n, _)| n).collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_linked_partition_directory_leads_nowhere() {
        for lake in lakes() {
            let storage = &lake.storage;
            let secret = lake.outside_file("secret.parquet", "outside bytes");
            symlink(&lake.outside, lake.root.join("city=x")).unwrap();
            storage.put("city=y/inside", Bytes::from_static(b"inside")).await.unwrap();

            assert_refused(storage.get("city=x/secret.parquet").await, "get");
            assert_refused(storage.get_if_exists("city=x/secret.parquet").await, "get_if_exists");
            assert_refused(storage.size("city=x/secret.parquet").await, "size");
            // The Parquet reader's ranged reads.
            {
                use parquet::arrow::async_reader::AsyncFileReader;
                let mut reader = storage.parquet_reader("city=x/secret.parquet", Some(13));
                assert!(reader.get_bytes(0..4).await.is_err(), "get_range");
                assert!(reader.get_byte_ranges(vec![0..2, 4..6]).await.is_err(), "get_ranges");
            }

            assert_refused(storage.put("city=x/new", Bytes::from_static(b"new")).await, "put");
            assert_refused(storage.put("city=x/deeper/new", Bytes::from_static(b"new")).await, "put in a new directory");
            assert_refused(storage.put_if_absent("city=x/lock", Bytes::from_static(b"me")).await, "put_if_absent");
            let mut outside: Vec<_> = std::fs::read_dir(&lake.outside).unwrap().map(|e| e.unwrap().file_name()).collect();
            outside.sort();
            assert_eq!(outside, ["secret.parquet"], "nothing was made outside");

            assert_eq!(names(storage, "").await, ["city=y/inside"], "listings skip the link");
            assert!(names(storage, "city=x").await.is_empty());
            assert!(storage.list_dir("city=x").await.unwrap().is_empty());
            let (objects, dirs) = storage.list_dir_and_subdirs("").await.unwrap();
            assert!(objects.is_empty());
            assert_eq!(dirs, ["city=y"]);

            assert_refused(storage.delete("city=x/secret.parquet").await, "delete");
            assert_eq!(std::fs::read_to_string(&secret).unwrap(), "outside bytes");
        }
    }

    #[tokio::test]
    async fn a_linked_file_is_not_read() {
        for lake in lakes() {
            let storage = &lake.storage;
            let secret = lake.outside_file("secret.properties", "password=hunter2");
            std::fs::create_dir_all(lake.root.join(".hoodie")).unwrap();
            let link = lake.root.join(".hoodie/hoodie.properties");
            symlink(&secret, &link).unwrap();

            let err = storage.get(".hoodie/hoodie.properties").await.unwrap_err();
            assert!(!err.to_string().contains("hunter2"), "{err}");
            assert_refused(Err::<(), _>(err), "get");
            assert_refused(storage.size(".hoodie/hoodie.properties").await, "size");
            assert!(storage.list_dir(".hoodie").await.unwrap().is_empty(), "listings skip the link");
            // A create meets the link (the name is taken) and must not claim it by the
            // content read through it.
            assert_refused(storage.put_if_absent(".hoodie/hoodie.properties", Bytes::from("password=hunter2")).await, "put_if_absent");

            // A write replaces the link, not the file it points to.
            storage.put(".hoodie/hoodie.properties", Bytes::from_static(b"mine")).await.unwrap();
            assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
            assert_eq!(storage.get(".hoodie/hoodie.properties").await.unwrap(), Bytes::from_static(b"mine"));
            assert_eq!(std::fs::read_to_string(&secret).unwrap(), "password=hunter2");

            // A delete removes a link itself.
            symlink(&secret, lake.root.join(".hoodie/planted")).unwrap();
            storage.delete(".hoodie/planted").await.unwrap();
            assert!(std::fs::symlink_metadata(lake.root.join(".hoodie/planted")).is_err());
            assert_eq!(std::fs::read_to_string(&secret).unwrap(), "password=hunter2");
        }
    }

    #[tokio::test]
    async fn a_directory_swapped_for_a_link_after_use_is_refused() {
        for lake in lakes() {
            let storage = &lake.storage;
            for dir in ["p", "q/r"] {
                let object = format!("{dir}/a");
                storage.put(&object, Bytes::from_static(b"inside")).await.unwrap();
                assert_eq!(storage.get(&object).await.unwrap(), Bytes::from_static(b"inside"));
                assert_eq!(storage.size(&object).await.unwrap(), 6);

                let real = lake.root.join(dir);
                std::fs::rename(&real, real.with_extension("old")).unwrap();
                symlink(&lake.outside, &real).unwrap();
                lake.outside_file("a", "outside");

                assert_refused(storage.get(&object).await, "get");
                assert_refused(storage.size(&object).await, "size");
                assert_refused(storage.put(&format!("{dir}/b"), Bytes::from_static(b"b")).await, "put");
                assert_refused(storage.put_if_absent(&format!("{dir}/c"), Bytes::from_static(b"c")).await, "put_if_absent");
                assert_refused(storage.delete(&object).await, "delete");
                assert!(!names(storage, "").await.iter().any(|n| n.starts_with(&format!("{dir}/"))));
                assert_eq!(std::fs::read_to_string(lake.outside.join("a")).unwrap(), "outside");
                assert!(!lake.outside.join("b").exists() && !lake.outside.join("c").exists());
            }
            // The object itself swapped for a link.
            storage.put("f", Bytes::from_static(b"inside")).await.unwrap();
            assert_eq!(storage.get("f").await.unwrap(), Bytes::from_static(b"inside"));
            std::fs::remove_file(lake.root.join("f")).unwrap();
            symlink(lake.outside.join("a"), lake.root.join("f")).unwrap();
            assert_refused(storage.get("f").await, "get of a file swapped for a link");
            assert_refused(storage.size("f").await, "size of a file swapped for a link");
        }
    }

    #[tokio::test]
    async fn a_link_swapped_in_while_in_use_is_never_followed() {
        for lake in lakes() {
            let storage = &lake.storage;
            storage.put("p/a", Bytes::from_static(b"inside")).await.unwrap();
            lake.outside_file("a", "outside");
            symlink(&lake.outside, lake.root.join("swap")).unwrap();
            // Exchanges the directory and the link, atomically, until told to stop.
            let stop = Arc::new(AtomicBool::new(false));
            let swapper = {
                let (stop, root) = (stop.clone(), lake.root.clone());
                std::thread::spawn(move || {
                    let mut swaps = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        rfs::renameat_with(rfs::CWD, root.join("p").as_path(), rfs::CWD, root.join("swap").as_path(), rfs::RenameFlags::EXCHANGE)
                            .unwrap();
                        swaps += 1;
                    }
                    swaps
                })
            };
            let (mut read, mut refused) = (0, 0);
            for i in 0..400 {
                match storage.get("p/a").await {
                    Ok(bytes) => {
                        assert_eq!(bytes, Bytes::from_static(b"inside"), "read through the link");
                        read += 1;
                    }
                    Err(e) => {
                        assert!(matches!(e.kind(), ErrorKind::PermissionDenied | ErrorKind::NotFound), "{e}");
                        refused += 1;
                    }
                }
                let _ = storage.put(&format!("p/w{i}"), Bytes::from_static(b"w")).await;
                let _ = storage.put_if_absent(&format!("p/c{i}"), Bytes::from_static(b"c")).await;
            }
            stop.store(true, Ordering::Relaxed);
            assert!(swapper.join().unwrap() > 0);
            let outside: Vec<_> = std::fs::read_dir(&lake.outside).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(outside, ["a"], "nothing was written through the link");
            assert!(read > 0 && refused > 0, "both sides of the swap were met ({read} read, {refused} refused)");
        }
    }

    #[tokio::test]
    async fn a_root_reached_through_a_link_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(&real).unwrap();
        symlink(&real, dir.path().join("via")).unwrap();
        // Through the link, and below it a root the first write makes.
        for (root, on_disk) in [(dir.path().join("via"), real.clone()), (dir.path().join("via/new/t"), real.join("new/t"))] {
            for walking in [false, true] {
                let storage = if walking { walking_storage_of(&root) } else { storage_of(&root) };
                let name = format!("p/object-{walking}");
                storage.put(&name, Bytes::from_static(b"x")).await.unwrap();
                assert_eq!(std::fs::read(on_disk.join(&name)).unwrap(), b"x");
                assert_eq!(storage.get(&name).await.unwrap(), Bytes::from_static(b"x"));
                assert_eq!(storage.size(&name).await.unwrap(), 1);
                assert!(names(&storage, "").await.contains(&name));
                assert_eq!(storage.list_dir_and_subdirs("").await.unwrap().1, ["p"]);
                assert!(storage.put_if_absent("lock", Bytes::from_static(b"me")).await.unwrap());
                storage.delete("lock").await.unwrap();
                storage.delete(&name).await.unwrap();
                assert!(!on_disk.join(&name).exists());
            }
        }
    }

    #[tokio::test]
    async fn a_root_made_again_is_used() {
        for lake in lakes() {
            let storage = &lake.storage;
            storage.put("a", Bytes::from_static(b"1")).await.unwrap();
            std::fs::remove_dir_all(&lake.root).unwrap();
            assert_eq!(storage.get("a").await.unwrap_err().kind(), ErrorKind::NotFound);
            assert!(names(storage, "").await.is_empty());
            storage.put("b", Bytes::from_static(b"2")).await.unwrap();
            assert_eq!(std::fs::read(lake.root.join("b")).unwrap(), b"2");
            // Moved away and made again: the new directory is the root.
            std::fs::rename(&lake.root, lake.root.with_extension("old")).unwrap();
            std::fs::create_dir(&lake.root).unwrap();
            storage.put("c", Bytes::from_static(b"3")).await.unwrap();
            assert_eq!(names(storage, "").await, ["c"]);
        }
    }

    #[test]
    fn a_fifo_is_not_opened() {
        for lake in lakes() {
            let storage = lake.storage.clone();
            rfs::mkfifoat(rfs::CWD, lake.root.join("fifo").as_path(), Mode::from_bits_truncate(0o600)).unwrap();
            let (sent, received) = std::sync::mpsc::channel();
            // Where a FIFO is opened, the read waits for a writer: on a thread of its own.
            std::thread::spawn(move || {
                let read = futures::executor::block_on(storage.get("fifo"));
                let listed = futures::executor::block_on(storage.list_dir(""));
                let _ = sent.send((read.map(|_| ()), listed.map(|l| l.len())));
            });
            let (read, listed) = received.recv_timeout(std::time::Duration::from_secs(20)).expect("the read of a FIFO returns");
            assert!(read.unwrap_err().to_string().contains("not a regular file"));
            assert_eq!(listed.unwrap(), 0);
        }
    }

    #[tokio::test]
    async fn temporaries_of_writes_are_neither_listed_nor_left() {
        for lake in lakes() {
            let storage = &lake.storage;
            std::fs::write(lake.root.join("left#1"), "crashed write").unwrap();
            storage.put("left", Bytes::from_static(b"written")).await.unwrap();
            assert!(storage.put_if_absent("made", Bytes::from_static(b"once")).await.unwrap());
            assert!(!storage.put_if_absent("made", Bytes::from_static(b"twice")).await.unwrap());
            assert_eq!(names(storage, "").await, ["left", "made"]);
            let mut on_disk: Vec<_> = std::fs::read_dir(&lake.root).unwrap().map(|e| e.unwrap().file_name()).collect();
            on_disk.sort();
            assert_eq!(on_disk, ["left", "left#1", "made"]);
            assert!(storage.get("left#1").await.is_err(), "a temporary's name is no object's");
        }
    }

    /// What `LocalFileSystem` answers, this store answers, for what the engine asks of it.
    #[tokio::test]
    async fn answers_as_local_file_system_does() {
        use futures::TryStreamExt;
        use object_store::local::LocalFileSystem;
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let theirs: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(a.path()).unwrap());
        let ours: Arc<dyn ObjectStore> = Arc::new(NoFollowLocalStore::new(b.path()));
        for store in [&theirs, &ours] {
            for (name, content) in [("d/x", "0123456789"), ("d/e/y", "yy"), ("z", ""), ("d/city=São Paulo/50%", "s")] {
                store.put(&Path::parse(name).unwrap(), Bytes::from(content).into()).await.unwrap();
            }
        }
        let (x, missing) = (Path::from("d/x"), Path::from("d/nope"));
        for range in [object_store::GetRange::Bounded(2..5), (8..20).into(), (3..).into(), object_store::GetRange::Suffix(4), object_store::GetRange::Suffix(40)] {
            let get = |store: Arc<dyn ObjectStore>| {
                let options = GetOptions { range: Some(range.clone()), ..Default::default() };
                let x = x.clone();
                async move { store.get_opts(&x, options).await.unwrap().bytes().await.unwrap() }
            };
            assert_eq!(get(theirs.clone()).await, get(ours.clone()).await, "{range}");
        }
        for store in [&theirs, &ours] {
            assert_eq!(store.get_range(&x, 1..3).await.unwrap(), Bytes::from_static(b"12"));
            assert_eq!(store.get_range(&x, 8..30).await.unwrap(), Bytes::from_static(b"89"));
            assert!(store.get_range(&x, 10..12).await.is_err());
            assert_eq!(store.get_ranges(&x, &[0..1, 5..7]).await.unwrap(), [Bytes::from_static(b"0"), Bytes::from_static(b"56")]);
            assert_eq!(store.head(&x).await.unwrap().size, 10);
            assert!(matches!(store.get(&missing).await, Err(object_store::Error::NotFound { .. })));
            assert!(matches!(store.head(&missing).await, Err(object_store::Error::NotFound { .. })));
            assert!(matches!(store.delete(&missing).await, Err(object_store::Error::NotFound { .. })));
            assert!(matches!(store.get(&Path::from("d")).await, Err(object_store::Error::NotFound { .. })), "a directory");
            let create = PutOptions { mode: PutMode::Create, ..Default::default() };
            assert!(matches!(store.put_opts(&x, "new".into(), create).await, Err(object_store::Error::AlreadyExists { .. })));
            let update = PutOptions { mode: PutMode::Update(object_store::UpdateVersion { e_tag: None, version: None }), ..Default::default() };
            assert!(matches!(store.put_opts(&x, "new".into(), update).await, Err(object_store::Error::NotImplemented)));
        }
        let listing = |store: Arc<dyn ObjectStore>, prefix: Option<&'static str>| async move {
            let prefix = prefix.map(Path::from);
            let mut all: Vec<(String, u64)> =
                store.list(prefix.as_ref()).map_ok(|m| (m.location.to_string(), m.size)).try_collect().await.unwrap();
            all.sort();
            let one = store.list_with_delimiter(prefix.as_ref()).await.unwrap();
            let mut objects: Vec<(String, u64)> = one.objects.iter().map(|m| (m.location.to_string(), m.size)).collect();
            objects.sort();
            let prefixes: Vec<String> = one.common_prefixes.iter().map(|p| p.to_string()).collect();
            (all, objects, prefixes)
        };
        for prefix in [None, Some("d"), Some("d/e"), Some("nope"), Some("d/x")] {
            let listed = listing(ours.clone(), prefix).await;
            assert_eq!(listing(theirs.clone(), prefix).await, listed, "{prefix:?}");
        }
        assert_eq!(listing(ours.clone(), None).await.0.len(), 4);
        // Copies and renames, and a multipart upload, as the trait has them.
        for store in [&theirs, &ours] {
            store.copy(&x, &Path::from("c/x")).await.unwrap();
            assert!(matches!(store.copy_if_not_exists(&x, &Path::from("c/x")).await, Err(object_store::Error::AlreadyExists { .. })));
            store.rename(&Path::from("c/x"), &Path::from("r/x")).await.unwrap();
            assert_eq!(store.get(&Path::from("r/x")).await.unwrap().bytes().await.unwrap(), Bytes::from_static(b"0123456789"));
            assert!(matches!(store.get(&Path::from("c/x")).await, Err(object_store::Error::NotFound { .. })));
            let mut upload = store.put_multipart(&Path::from("m")).await.unwrap();
            upload.put_part("ab".into()).await.unwrap();
            upload.put_part("cd".into()).await.unwrap();
            upload.complete().await.unwrap();
            assert_eq!(store.get(&Path::from("m")).await.unwrap().bytes().await.unwrap(), Bytes::from_static(b"abcd"));
        }
    }

    /// New files and directories take the creation mode where one is set (the umask's
    /// otherwise); a new table directory too, made with its missing parents.
    #[tokio::test]
    async fn new_files_and_directories_take_the_creation_mode() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &FsPath| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lake/table");
        set_creation_mode(Some(0o640));
        let written = async {
            for storage in [storage_of(&root), walking_storage_of(&root)] {
                storage.put("p=1/deeper/a.parquet", Bytes::from_static(b"a")).await.unwrap();
                storage.put("b.parquet", Bytes::from_static(b"b")).await.unwrap();
            }
        };
        written.await;
        set_creation_mode(None);
        for made in [dir.path().join("lake"), root.clone(), root.join("p=1"), root.join("p=1/deeper")] {
            assert_eq!(mode(&made), 0o750, "{}", made.display());
        }
        assert_eq!((mode(&root.join("p=1/deeper/a.parquet")), mode(&root.join("b.parquet"))), (0o640, 0o640));
    }
}
