"""The shadow repository on disk: isolated from the user's git setup, built crash-safely, repaired.

Layout: ``<execution>/.weft/checkpoints/.weftcheckpoints`` is a git directory
whose work tree is the agent's workspace (set when it is opened, so the
execution folder can move). It has one branch per run (``run-<runId>``),
``main`` with the initial empty commit, ``recovery/*`` branches, and a detached
HEAD at the checkpoint the workspace was last synchronised with.

Isolation: libgit2 is told to read no global, XDG, system or ProgramData
configuration, so nothing in ``~/.gitconfig`` (autocrlf, excludesFile, hooks,
signing, templates) can change what a checkpoint holds. The repository's own
config pins the settings that matter, and ``info/attributes`` turns off every
content filter so blobs hold the workspace's exact bytes.

Crash safety: a new repository is built in a temporary sibling folder and
renamed into place, so a crash leaves either nothing or a complete repository.
At open, leftovers are swept (temporary folders, ``*.lock`` files: the runtime
lock guarantees no other Weft process uses this repository) and a damaged
repository is repaired where that loses nothing (a torn HEAD, a missing refs
folder, an unreadable index) or else moved aside to a quarantine folder and
rebuilt. Storage that cannot even be read (permissions, a file where the folder
should be) is never touched: :class:`CheckpointStorageError` says where to look.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pygit2
from pygit2.enums import ConfigLevel, RepositoryOpenFlag

from weft.checkpoints.errors import CheckpointStorageError
from weft.checkpoints.messages import AUTHOR_EMAIL, AUTHOR_NAME
from weft.checkpoints.packs import consolidate_packs, sweep_orphan_packs
from weft.filemodes import private_folder

#: The git directory's name, inside ``.weft/checkpoints/``.
GIT_DIR_NAME = ".weftcheckpoints"
MAIN_BRANCH = "main"
MAIN_REF = "refs/heads/main"
INITIAL_MESSAGE = "Initial checkpoint setup\n"

_CONFIG = f"""[core]
\trepositoryformatversion = 0
\tbare = false
\tfilemode = true
\tsymlinks = true
\tignorecase = false
\tprecomposeunicode = false
\tautocrlf = false
\tsafecrlf = false
\tlogallrefupdates = false
\ttrustctime = true
\tcheckstat = default
\tuntrackedCache = false
\tfsmonitor = false
\texcludesFile = {os.devnull}
\tattributesFile = {os.devnull}
\thooksPath = {os.devnull}
[gc]
\tauto = 0
[commit]
\tgpgsign = false
[tag]
\tgpgsign = false
[init]
\tdefaultBranch = main
[user]
\tname = {AUTHOR_NAME}
\temail = {AUTHOR_EMAIL}
[weft]
\tlayout = 1
"""

_EXCLUDE = """# Weft runtime paths: never checkpointed, whatever checkpointedFiles says.
/read_only_data_source
/rigArchive
.weft
.weft.backup-*
.weftcheckpoints*
"""

# Filters would make blobs differ from the bytes on disk; checkpoints keep the bytes.
_ATTRIBUTES = "* -text -filter -ident -working-tree-encoding\n"

_HEAD_SYMBOLIC = re.compile(r"^ref: refs/[^\s]+\n?$")
_HEAD_DETACHED = re.compile(r"^[0-9a-f]{40}\n?$")


def isolate_libgit2() -> None:
    """Makes libgit2 read no configuration outside the repository (process-wide).

    Weft is the only user of libgit2 in its process; pointing the search paths
    at nothing means ``~/.gitconfig``, ``$XDG_CONFIG_HOME/git/config`` and
    ``/etc/gitconfig`` are never read, whatever ``HOME`` says.
    """
    for level in (ConfigLevel.GLOBAL, ConfigLevel.XDG, ConfigLevel.SYSTEM, ConfigLevel.PROGRAMDATA):
        pygit2.settings.search_path[level] = ""
    # Many small packs accumulate during a run; cap the descriptors libgit2 keeps open.
    pygit2.settings.mwindow_file_limit = 64
    # Checkpoint objects are written as packs libgit2 has not loaded yet; checking that
    # a commit exists before pointing a ref at it would rescan the pack folder each time.
    pygit2.settings.enable_strict_object_creation(False)


def git_environment(git_dir: Path, workspace: Path) -> dict[str, str]:
    """Environment variables for running the git CLI on the shadow repository.

    ``HOME`` and ``XDG_CONFIG_HOME`` point inside the git directory and the
    system config is off, so the user's configuration plays no part. Useful to
    inspect checkpoints (``git log``, ``git fsck``) and for the benchmark baseline.
    """
    home = str(git_dir / "cli-home")
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "TZ")}
    return {
        **keep,
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(workspace),
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_AUTHOR_NAME": AUTHOR_NAME,
        "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
        "GIT_COMMITTER_NAME": AUTHOR_NAME,
        "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
    }


def checkpoint_git_dir(weft_dir: Path) -> Path:
    """Where an execution's shadow repository lives: ``<.weft>/checkpoints/.weftcheckpoints``."""
    return weft_dir / "checkpoints" / GIT_DIR_NAME


@dataclass
class OpenedStorage:
    """A healthy shadow repository, and what was done to make it so."""

    repo: pygit2.Repository
    initial_sha: str
    repairs: list[str] = field(default_factory=list)
    created: bool = False


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def open_storage(git_dir: Path, *, repair: bool = True) -> OpenedStorage:
    """Opens the shadow repository at ``git_dir``, creating, repairing or rebuilding it.

    With ``repair=False`` (an opener beside a live run, which owns the
    repository) nothing is swept, set aside, merged or rebuilt: the owner's
    lock files, temporary and unfinished packs are work in progress, not
    debris. A repository that would need repair is reported instead.
    """
    isolate_libgit2()
    git_dir = Path(os.path.abspath(git_dir))
    repairs: list[str] = []
    parent = git_dir.parent
    try:
        private_folder(parent)
    except OSError as exc:
        raise CheckpointStorageError(
            f"checkpoint storage could not be created: {parent}: {exc.strerror or exc}. "
            "Check that the execution folder is writable."
        ) from exc
    if repair:
        _sweep_temp_dirs(git_dir, repairs)
    if not git_dir.exists() and not git_dir.is_symlink():
        _create(git_dir)
        opened = _open_healthy(git_dir, repairs)
        opened.created = True
        return opened
    _check_readable(git_dir)
    if not repair:
        try:
            return _open_healthy(git_dir, repairs, repair=False)
        except _UnhealthyError as exc:
            raise CheckpointStorageError(
                f"checkpoint repository {git_dir} cannot be read as it is ({exc}); it was "
                "left alone. The run that owns it repairs it when it next starts (`weft run`)."
            ) from exc
    _sweep_locks(git_dir, repairs)
    _set_aside_damaged_objects(git_dir, repairs)
    problem = _structural_problem(git_dir, repairs)
    if problem is not None:
        _quarantine_and_rebuild(git_dir, problem, repairs)
        opened = _open_healthy(git_dir, repairs)
        opened.created = True
        return opened
    try:
        return _open_healthy(git_dir, repairs)
    except _UnhealthyError as exc:
        _quarantine_and_rebuild(git_dir, str(exc), repairs)
        opened = _open_healthy(git_dir, repairs)
        opened.created = True
        return opened


class _UnhealthyError(Exception):
    """The repository opened but does not hold a usable history.

    Control flow inside this module only (it becomes a quarantine and rebuild),
    never raised to a caller, so it is not a :class:`~weft.errors.WeftError`.
    """


def _check_readable(git_dir: Path) -> None:
    if not git_dir.is_dir():
        raise CheckpointStorageError(
            f"checkpoint storage could not be read: {git_dir} is not a folder. Move it aside "
            "(Weft never deletes it) and start again to build a fresh checkpoint repository."
        )
    try:
        names = os.listdir(git_dir)
        for name in ("HEAD", "config"):
            if name in names and (git_dir / name).is_file():
                with open(git_dir / name, "rb") as fh:
                    fh.read(1)
        objects = git_dir / "objects"
        if objects.is_dir():
            os.listdir(objects)
    except PermissionError as exc:
        raise CheckpointStorageError(
            f"checkpoint storage could not be read: {exc.filename}: permission denied. "
            "Fix its permissions (it must be readable and writable by this user)."
        ) from exc
    except OSError as exc:
        raise CheckpointStorageError(
            f"checkpoint storage could not be read: {exc.filename or git_dir}: "
            f"{exc.strerror or exc}. Check the disk and the folder's permissions."
        ) from exc


def _sweep_temp_dirs(git_dir: Path, repairs: list[str]) -> None:
    prefix = git_dir.name + ".tmp-"
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(git_dir.parent):
            if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                repairs.append(f"removed an unfinished checkpoint repository {entry.path}")


def _sweep_locks(git_dir: Path, repairs: list[str]) -> None:
    candidates: list[Path] = [p for p in git_dir.glob("*.lock") if p.is_file()]
    refs = git_dir / "refs"
    if refs.is_dir():
        candidates.extend(p for p in refs.rglob("*.lock") if p.is_file())
    pack_dir = git_dir / "objects" / "pack"
    if pack_dir.is_dir():
        candidates.extend(p for p in pack_dir.glob("tmp_*") if p.is_file())
    for path in candidates:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            repairs.append(f"removed a stale lock or temporary file {path}")
    for path in sweep_orphan_packs(pack_dir):
        repairs.append(f"removed an unfinished pack {path}")


def _structural_problem(git_dir: Path, repairs: list[str]) -> str | None:
    """Repairs what can be repaired without losing anything; names what cannot."""
    objects = git_dir / "objects"
    if not objects.is_dir():
        return "its objects folder is missing"
    (objects / "pack").mkdir(exist_ok=True)
    (objects / "info").mkdir(exist_ok=True)
    for sub in ("refs", "refs/heads", "refs/tags"):
        path = git_dir / sub
        if not path.is_dir():
            if path.exists():
                return f"{path} is not a folder"
            path.mkdir()
            repairs.append(f"recreated the missing folder {path}")
    config = git_dir / "config"
    try:
        pygit2.Config(str(config)).get_bool("core.bare")
        ok = config.is_file()
    except (pygit2.GitError, KeyError, ValueError, OSError):
        ok = False
    if not ok:
        repairs.append(f"rewrote the unreadable repository config {config}")
    # Always the pinned settings: an edited config could change what checkpoints hold.
    _write_text(config, _CONFIG)
    head = git_dir / "HEAD"
    try:
        text = head.read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    if not (_HEAD_SYMBOLIC.match(text) or _HEAD_DETACHED.match(text)):
        _write_text(head, f"ref: {MAIN_REF}\n")
        repairs.append(f"rewrote the torn HEAD of {git_dir} to point at {MAIN_BRANCH}")
    return None


_LOOSE_HEADER = re.compile(rb"^(commit|tree|blob|tag) (\d+)\x00")


def _set_aside_damaged_objects(git_dir: Path, repairs: list[str]) -> None:
    """Moves every damaged object file to a folder beside the repository,
    before libgit2 reads any: loose objects that are not a whole zlib stream of
    their declared size, and packs (with their index) whose SHA-1 trailers do
    not match their bytes.

    libgit2 1.9 loops for ever on a loose object whose zlib stream is cut
    short, and fails deep inside later reads on a damaged pack. Set aside, the
    objects are simply missing, which the opening checks and the execution's
    load-time checks report with a way forward. Loose objects are few (the
    checkpoints are written as packs); hashing the packs reads each once.
    """
    damaged: list[tuple[str, list[Path]]] = []
    """(what, its files): a loose object is set aside as ``<fan><name>``."""
    objects = git_dir / "objects"
    for fan in sorted(objects.glob("[0-9a-f][0-9a-f]")):
        damaged += [
            (f"object {fan.name}{path.name}", [path])
            for path in sorted(fan.iterdir())
            if not _whole_loose_object(path)
        ]
    for pack in sorted((objects / "pack").glob("*.pack")):
        index = pack.with_suffix(".idx")
        if not _whole_pack(pack, index):
            damaged.append((f"pack {pack.name}", [pack, index, pack.with_suffix(".rev")]))
    if not damaged:
        return
    aside = git_dir.with_name(f"{git_dir.name}-damaged-objects-{_stamp()}")
    aside.mkdir(parents=True, exist_ok=True)
    for what, paths in damaged:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.replace(
                    path, aside / (path.parent.name + path.name if what[0] == "o" else path.name)
                )
        repairs.append(f"set the damaged {what} aside in {aside}")


_HASH_CHUNK = 1 << 20


def _sha1_trailer_ok(path: Path) -> bytes | None:
    """The file's SHA-1 trailer when it matches the bytes before it, else None."""
    try:
        size = path.stat().st_size
        if size < 20:
            return None
        digest = hashlib.sha1(usedforsecurity=False)
        with open(path, "rb") as fh:
            left = size - 20
            while left:
                chunk = fh.read(min(_HASH_CHUNK, left))
                if not chunk:
                    return None
                digest.update(chunk)
                left -= len(chunk)
            trailer = fh.read(20)
    except OSError:
        return None
    return trailer if digest.digest() == trailer else None


def _whole_pack(pack: Path, index: Path) -> bool:
    """A pack whose bytes match its trailer, with an intact index naming it."""
    trailer = _sha1_trailer_ok(pack)
    if trailer is None or _sha1_trailer_ok(index) is None:
        return False
    try:
        with open(pack, "rb") as fh:
            magic = fh.read(4)
        with open(index, "rb") as fh:
            fh.seek(-40, os.SEEK_END)
            named = fh.read(20)
    except OSError:
        return False
    return magic == b"PACK" and named == trailer


def _whole_loose_object(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return True  # unreadable is libgit2's to report; it does not loop on it
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(data)
    except zlib.error:
        return False
    header = _LOOSE_HEADER.match(body)
    return inflater.eof and header is not None and len(body) - header.end() == int(header.group(2))


def _open_healthy(git_dir: Path, repairs: list[str], *, repair: bool = True) -> OpenedStorage:
    if repair:
        _write_text(git_dir / "info" / "exclude", _EXCLUDE)
        _write_text(git_dir / "info" / "attributes", _ATTRIBUTES)
    try:
        repo = pygit2.Repository(str(git_dir), RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError as exc:
        raise _UnhealthyError(f"libgit2 cannot open it ({exc})") from exc
    try:
        main = repo.references.get(MAIN_REF)
        if main is None:
            raise _UnhealthyError(f"its {MAIN_BRANCH} branch is missing")
        try:
            initial = _root_commit(repo, repo[main.target])
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise _UnhealthyError(f"its {MAIN_BRANCH} branch does not resolve ({exc})") from exc
        try:
            head = repo.head.peel(pygit2.Commit)
            repo[head.tree_id]
        except (KeyError, ValueError, pygit2.GitError):
            if not repair:
                raise _UnhealthyError("its HEAD does not resolve") from None
            repo.set_head(main.target)
            repairs.append(f"HEAD of {git_dir} did not resolve; reset it to {MAIN_BRANCH}")
        if repair and consolidate_packs(repo):
            repo.free()
            repo = pygit2.Repository(str(git_dir), RepositoryOpenFlag.NO_SEARCH)
    except _UnhealthyError:
        repo.free()
        raise
    return OpenedStorage(repo=repo, initial_sha=str(initial.id), repairs=repairs)


def _root_commit(repo: pygit2.Repository, obj: pygit2.Object) -> pygit2.Commit:
    commit = obj.peel(pygit2.Commit)
    repo[commit.tree_id]
    while commit.parents:
        commit = commit.parents[0]
    return commit


def _quarantine_and_rebuild(git_dir: Path, problem: str, repairs: list[str]) -> None:
    quarantine = git_dir.with_name(f"{git_dir.name}-quarantine-{_stamp()}")
    try:
        os.rename(git_dir, quarantine)
    except OSError as exc:
        raise CheckpointStorageError(
            f"checkpoint storage could not be read: {git_dir} is damaged ({problem}) and could "
            f"not be moved aside ({exc.strerror or exc}). Move it away by hand and start again."
        ) from exc
    repairs.append(
        f"checkpoint repository {git_dir} was damaged ({problem}); moved it to {quarantine} "
        "and built a fresh one. Checkpoints recorded before this point are no longer available."
    )
    _create(git_dir)


def _create(git_dir: Path) -> None:
    tmp = git_dir.with_name(f"{git_dir.name}.tmp-{os.getpid()}-{time.time_ns()}")
    try:
        repo = pygit2.init_repository(str(tmp), bare=True, initial_head=MAIN_BRANCH)
        private_folder(tmp)  # libgit2 made it with the umask's mode
        try:
            _write_text(tmp / "config", _CONFIG)
            _write_text(tmp / "info" / "exclude", _EXCLUDE)
            _write_text(tmp / "info" / "attributes", _ATTRIBUTES)
            with contextlib.suppress(FileNotFoundError):
                (tmp / "description").unlink()
            sig = pygit2.Signature(AUTHOR_NAME, AUTHOR_EMAIL, int(time.time()), 0)
            empty = repo.TreeBuilder().write()
            repo.create_commit(MAIN_REF, sig, sig, INITIAL_MESSAGE, empty, [])
        finally:
            repo.free()
        os.rename(tmp, git_dir)
    except FileExistsError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointStorageError(
            f"checkpoint storage {git_dir} appeared while it was being created: "
            "is another Weft process using this execution?"
        ) from exc
    except (OSError, pygit2.GitError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointStorageError(
            f"checkpoint storage could not be created at {git_dir}: {exc}. "
            "Check that the execution folder is writable and the disk is not full."
        ) from exc


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.read_text("utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    tmp = path.with_name(path.name + ".weft-tmp")
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)
