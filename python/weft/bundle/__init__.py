"""``.hank`` bundles: one file holding a hank and everything it references, with a
lock of content hashes, that ``weft run`` and ``weft validate`` use as they are
(``weft pack``; the guide is ``docs/bundles.md``).

The pieces, each with one job:

* :mod:`~weft.bundle.lock`: pure: member names that may be extracted, the
  ``hank.lock`` document (encode, decode, bundle hash), quotas, the
  comparison of an archive with its lock, and where a symbolic link member
  resolves inside the member table;
* :mod:`~weft.bundle.pack`: what goes in (the references the hank loader
  resolved and checked, folders walked as a rig copy walks them) and the
  deterministic archive (sorted PAX tar, fixed metadata, gzip with no
  timestamp);
* :mod:`~weft.bundle.unpack`: reading a bundle as a stream, checking every
  member against the lock and extracting it to a private cache folder named by
  the bundle hash, never outside it;
* :mod:`~weft.bundle.errors`: :class:`BundleError` (the CLI exits 2).

:func:`hank_argument` is the one call the commands make: a path naming a bundle
becomes its verified, extracted hank file. Only the light modules are imported
here (the CLI imports :class:`BundleError` at start-up); the others load when
a bundle is packed or opened.
"""

from __future__ import annotations

from pathlib import Path

from weft.bundle.errors import BundleError

__all__ = ["BundleError", "hank_argument"]


def hank_argument(arg: str | Path, base: Path | None = None) -> Path | None:
    """The extracted hank file of the bundle ``arg`` names (relative to ``base``),
    verified against its lock; ``None`` when ``arg`` names no bundle (not a
    bundle suffix, or a folder). Raises :class:`BundleError`."""
    from weft.bundle.unpack import is_bundle_name, open_bundle

    text = str(arg)
    path = (base or Path.cwd()) / arg
    if not is_bundle_name(text) or path.is_dir():
        return None
    return open_bundle(path, shown=text).hank_file
