"""Weft: a fast, crash-safe runtime for long-running AI-agent pipelines.

The compiled core is :mod:`weft.core`; the exception tree is :mod:`weft.errors`.
"""

from weft._core import __version__

__all__ = ["__version__"]
