"""Did-you-mean hints for unknown keys and values.

Known mistakes come first (the reference runtime's typo map, hankweave
§3.14: ``trackedFiles`` for ``checkpointedFiles``, ``prompt`` for
``promptFile``/``promptText``, ...); then a case-insensitive match; then the
closest names by edit distance.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["CODON_TYPOS", "closest", "did_you_mean", "quote_list"]

CODON_TYPOS: dict[str, str] = {
    "systemPromptFile": "appendSystemPromptFile",
    "systemPromptText": "appendSystemPromptText",
    "systemPrompt": "appendSystemPromptFile or appendSystemPromptText",
    "prompt": "promptFile or promptText",
    "prompts": "promptFile",
    "promptFiles": "promptFile",
    "trackedFiles": "checkpointedFiles",
    "tracking": "checkpointedFiles",
    "tracked": "checkpointedFiles",
    "watchedFiles": "checkpointedFiles",
    "fileTracking": "checkpointedFiles",
    "rig": "rigSetup",
    "setup": "rigSetup",
    "preSetup": "rigSetup",
    "archiveRigs": "archiveOnSuccess",
    "rigTeardown": "archiveOnSuccess",
    "teardown": "archiveOnSuccess",
    "archive": "archiveOnSuccess",
    "cleanup": "archiveOnSuccess",
    "archiveRig": "archiveOnSuccess",
    "archiving": "archiveOnSuccess",
    "archives": "archiveOnSuccess",
    "environment": "env",
    "envVars": "env",
    "outputs": "outputFiles",
    "output": "outputFiles",
    "continuation": "continuationMode",
    "mode": "continuationMode",
    "costLimit": "budget.maxDollars",
    "maxBudget": "budget.maxDollars",
    "maxCost": "budget.maxDollars",
    "maxDollars": "budget.maxDollars",
    "maxDuration": "budget.maxTimeSeconds",
    "maxDurationSeconds": "budget.maxTimeSeconds",
    "maxTimeSeconds": "budget.maxTimeSeconds",
    "timeLimit": "budget.maxTimeSeconds",
    "maxTokens": "budget.maxOutputTokens",
    "maxOutputTokens": "budget.maxOutputTokens",
    "tokenLimit": "budget.maxOutputTokens",
}
"""Codon keys people write by mistake, and what they meant."""


def quote_list(names: Iterable[str]) -> str:
    """``"a", "b" or "c"``."""
    quoted = [f'"{n}"' for n in names]
    if len(quoted) <= 1:
        return "".join(quoted)
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def closest(word: str, candidates: Iterable[str]) -> list[str]:
    """The candidates ``word`` was most likely meant to be (best first)."""
    pool = list(candidates)
    folded = word.casefold().replace("_", "").replace("-", "")
    exact = [c for c in pool if c.casefold().replace("_", "").replace("-", "") == folded]
    if exact:
        return exact[:1]
    matches = difflib.get_close_matches(word, pool, n=2, cutoff=0.7)
    if matches:
        return matches
    # A truncated or mangled long name ("contine" for "continue-previous")
    # scores low on similarity but shares a clear prefix.
    stem = word.casefold()
    need = max(4, len(stem) // 2 + 1)
    by_prefix = [c for c in pool if _common_prefix(stem, c.casefold()) >= need]
    return by_prefix if len(by_prefix) == 1 else []


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def did_you_mean(
    word: str, candidates: Iterable[str], typos: dict[str, str] | None = None
) -> str | None:
    """``did you mean "x"?`` for a misspelt ``word``, or ``None``."""
    if typos is not None and word in typos:
        # One entry may name alternatives ("promptFile or promptText"): each quoted.
        return f"did you mean {quote_list(typos[word].split(' or '))}?"
    matches = closest(word, candidates)
    if matches:
        return f"did you mean {quote_list(matches)}?"
    return None
