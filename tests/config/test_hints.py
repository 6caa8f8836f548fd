"""Did-you-mean hints."""

from __future__ import annotations

import pytest

from weft.config.hints import CODON_TYPOS, closest, did_you_mean, quote_list
from weft.config.schema import Codon

CODON_KEYS = list(Codon.__struct_encode_fields__)


def test_every_typo_points_at_real_codon_fields() -> None:
    for target in CODON_TYPOS.values():
        for name in target.split(" or "):
            head = name.split(".")[0]
            assert head in CODON_KEYS, target


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("trackedFiles", 'did you mean "checkpointedFiles"?'),
        ("prompt", 'did you mean "promptFile" or "promptText"?'),
        ("maxCost", 'did you mean "budget.maxDollars"?'),
        ("promtFile", 'did you mean "promptFile"?'),
        ("ContinuationMode", 'did you mean "continuationMode"?'),
        ("checkpointed_files", 'did you mean "checkpointedFiles"?'),
        ("zzzz", None),
    ],
)
def test_codon_key_hints(word: str, expected: str | None) -> None:
    assert did_you_mean(word, CODON_KEYS, CODON_TYPOS) == expected


def test_a_mangled_long_value_is_found_by_its_prefix() -> None:
    assert closest("contine", ["fresh", "continue-previous"]) == ["continue-previous"]
    assert closest("co", ["fresh", "continue-previous"]) == []


def test_quote_list() -> None:
    assert quote_list([]) == ""
    assert quote_list(["a"]) == '"a"'
    assert quote_list(["a", "b", "c"]) == '"a", "b" or "c"'
