"""The layout of an execution directory: the names of its parts, and where each one is.

An *execution* is a directory holding one hank's work on one data set,
across any number of runs::

    <execution>/
      agentRoot/                   the agent's working directory (workspace)
        read_only_data_source      the data: a symlink (or a copy); a file input
                                   lives under it as <basename>
      rigArchive/                  paths archived by archiveOnSuccess
      .weft/                       Weft's own state
        execution-meta.json        which hank and data this execution belongs to
        runs/ logs/ checkpoints/   (state.json, weft.db, runtime.lock: weft.store)

:class:`ExecutionLayout` computes the paths; nothing is touched until
:meth:`ExecutionLayout.create_dirs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from weft.checkpoints.storage import checkpoint_git_dir
from weft.filemodes import private_folder

__all__ = [
    "DATA_LINK",
    "HANK_FILE",
    "META_FILE",
    "RIG_ARCHIVE",
    "WEFT_DIR",
    "WORKSPACE",
    "ExecutionLayout",
]

HANK_FILE = "hank.json"
WEFT_DIR = ".weft"
WORKSPACE = "agentRoot"
DATA_LINK = "read_only_data_source"
RIG_ARCHIVE = "rigArchive"
META_FILE = "execution-meta.json"


@dataclass(frozen=True, slots=True)
class ExecutionLayout:
    """The paths of one execution directory (nothing is touched by building it)."""

    root: Path

    @property
    def execution_id(self) -> str:
        """The directory's name, which identifies the execution."""
        return self.root.name

    @property
    def workspace(self) -> Path:
        """``agentRoot/``: the agent's working directory."""
        return self.root / WORKSPACE

    @property
    def data_link(self) -> Path:
        """``agentRoot/read_only_data_source``: the linked (or copied) data."""
        return self.workspace / DATA_LINK

    @property
    def rig_archive(self) -> Path:
        """``rigArchive/``: paths moved away by ``archiveOnSuccess``."""
        return self.root / RIG_ARCHIVE

    @property
    def weft_dir(self) -> Path:
        """``.weft/``: Weft's state for this execution."""
        return self.root / WEFT_DIR

    @property
    def runs(self) -> Path:
        """``.weft/runs/``: per-run agent transcripts."""
        return self.weft_dir / "runs"

    @property
    def logs(self) -> Path:
        """``.weft/logs/``: server and session logs."""
        return self.weft_dir / "logs"

    @property
    def checkpoints(self) -> Path:
        """``.weft/checkpoints/.weftcheckpoints``: the shadow git repository."""
        return checkpoint_git_dir(self.weft_dir)

    @property
    def meta_path(self) -> Path:
        """``.weft/execution-meta.json``."""
        return self.weft_dir / META_FILE

    def create_dirs(self) -> None:
        """Creates every directory of the layout that is missing (the checkpoint
        repository makes its own folder, atomically, when it is first opened)."""
        # Weft's own folders are private (weft.filemodes); the work tree and its
        # archive are the user's project, made with the usual modes. The root is
        # made private by whoever creates it (an existing folder the user named stays as it is).
        for path in (self.weft_dir, self.runs, self.logs):
            private_folder(path)
        for path in (self.workspace, self.rig_archive):
            path.mkdir(parents=True, exist_ok=True)
