"""The workspace's data slot: ``agentRoot/read_only_data_source``, linked or copied.

:func:`link_data` links (or copies, read-only) the data into the slot;
:func:`park_data` clears the slot without deleting data (a copy is moved
under ``.weft/``); :func:`link_intact` says whether a link still points at
the data.
"""

from __future__ import annotations

import os
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from weft.filemodes import private_folder
from weft.runtime.execution.layout import ExecutionLayout

__all__ = ["backup_stamp", "link_data", "link_intact", "park_data"]


def backup_stamp() -> str:
    """The time, for the names of folders set aside (``.weft.backup-<stamp>``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H-%M-%S")


def _link_target(layout: ExecutionLayout, data: Path) -> Path:
    return layout.data_link / data.name if data.is_file() else layout.data_link


def link_intact(layout: ExecutionLayout, data: Path) -> bool:
    """Whether the data slot is still a symlink to ``data``."""
    link = _link_target(layout, data)
    try:
        return link.is_symlink() and Path(os.readlink(link)) == data
    except OSError:
        return False


def park_data(layout: ExecutionLayout) -> None:
    """Clears the data slot without deleting data: a link is removed, a copy is moved
    to ``.weft/replaced-data-<time>/``."""
    slot = layout.data_link
    if slot.is_symlink():
        slot.unlink()
        return
    if not slot.exists():
        return
    if slot.is_dir():
        children = list(slot.iterdir())
        if len(children) == 1 and children[0].is_symlink():  # a linked file input
            children[0].unlink()
            slot.rmdir()
            return
    private_folder(layout.weft_dir)
    parked = layout.weft_dir / f"replaced-data-{backup_stamp()}"
    n = 1
    while parked.exists():
        parked = layout.weft_dir / f"replaced-data-{backup_stamp()}-{n}"
        n += 1
    os.rename(slot, parked)


def link_data(
    layout: ExecutionLayout, data: Path | None, *, copy: bool, warnings: list[str]
) -> Literal["symlink", "copy", "none"]:
    """Links (or copies) ``data`` to ``agentRoot/read_only_data_source``.

    A folder becomes the slot itself; a file goes under it as ``<basename>``.
    A symlink is read-only by convention only (the agent is told so); a copy
    has its files' write permission removed. Symlinks that cannot be made
    (a filesystem without them) fall back to a copy.
    """
    if data is None:
        return "none"
    slot = layout.data_link
    if data.is_file():
        slot.mkdir(parents=True, exist_ok=True)
    target = _link_target(layout, data)
    if not copy:
        try:
            os.symlink(data, target, target_is_directory=data.is_dir())
        except OSError as e:
            warnings.append(
                f"could not symlink the data ({e.strerror}); it was copied to {slot} instead"
            )
        else:
            return "symlink"
    if data.is_dir():
        shutil.copytree(data, target, symlinks=True)
    else:
        shutil.copy2(data, target)
    _make_read_only(target)
    return "copy"


def _make_read_only(path: Path) -> None:
    write_bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    targets = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for p in targets:
        if not p.is_symlink():
            p.chmod(stat.S_IMODE(p.stat().st_mode) & ~write_bits)
