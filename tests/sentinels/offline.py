"""Sentinel tests never reach a model API: no provider key is in their environment."""

from __future__ import annotations

import pytest

MODEL_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
"""The providers' API key variables (each also read with the prefixes below)."""

KEY_PREFIXES = ("", "WEFT_SENTINEL_", "HANKWEAVE_SENTINEL_")


def without_model_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Removes every provider key variable, under each prefix Weft reads."""
    for name in MODEL_KEYS:
        for prefix in KEY_PREFIXES:
            monkeypatch.delenv(prefix + name, raising=False)
