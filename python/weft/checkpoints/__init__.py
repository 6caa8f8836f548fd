"""Checkpoints: a pygit2 shadow repository whose work tree is the agent's workspace.

See ``docs/checkpoints.md`` for the layout, the glob dialect, the snapshot and
restore semantics, crash safety and performance.
"""

from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.errors import (
    AmbiguousCheckpointError,
    CheckpointConflictError,
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointPatternError,
    CheckpointStorageError,
)
from weft.checkpoints.messages import CHECKPOINT_TYPES, Checkpoint
from weft.checkpoints.patterns import PatternSet, is_excluded
from weft.checkpoints.repo import (
    CheckpointRepo,
    RecoverySnapshot,
    RestoreResult,
    run_branch,
)
from weft.checkpoints.storage import (
    GIT_DIR_NAME,
    MAIN_BRANCH,
    checkpoint_git_dir,
    git_environment,
)

__all__ = [
    "CHECKPOINT_TYPES",
    "GIT_DIR_NAME",
    "MAIN_BRANCH",
    "AmbiguousCheckpointError",
    "AsyncCheckpointRepo",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointPatternError",
    "CheckpointRepo",
    "CheckpointStorageError",
    "PatternSet",
    "RecoverySnapshot",
    "RestoreResult",
    "checkpoint_git_dir",
    "git_environment",
    "is_excluded",
    "run_branch",
]
