"""Weft: a fast, crash-safe runtime for long-running AI-agent pipelines.

The compiled core is :mod:`weft.core`; the exception tree is :mod:`weft.errors`.
Importing :mod:`weft` itself loads nothing, so light entry points (the fake
agents) start fast; ``weft.__version__`` loads the core on first use.
"""

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from weft._core import __version__

        return __version__
    raise AttributeError(f"module 'weft' has no attribute {name!r}")
