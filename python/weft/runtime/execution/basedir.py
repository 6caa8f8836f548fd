"""The managed root: where ``weft run`` creates executions by itself.

Its own small module so that commands that only look executions up
(``weft ls``, ``weft status``) find it without loading the execution machinery.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["BASE_DIR_ENV", "DEFAULT_BASE_DIR", "managed_base_dir"]

BASE_DIR_ENV = "WEFT_RUNTIME_EXECUTION_BASE_DIR"
DEFAULT_BASE_DIR = "~/.weft-executions"


def managed_base_dir(base_dir: Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The managed root: ``base_dir``, else ``$WEFT_RUNTIME_EXECUTION_BASE_DIR``,
    else ``~/.weft-executions``."""
    if base_dir is not None:
        return Path(base_dir).expanduser().resolve()
    value = (os.environ if env is None else env).get(BASE_DIR_ENV, "").strip()
    return Path(value or DEFAULT_BASE_DIR).expanduser().resolve()
