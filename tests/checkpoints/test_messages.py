"""Checkpoint commit messages read back into exactly the record that was written."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from weft.checkpoints.messages import CHECKPOINT_TYPES, format_message, parse_message

text = st.text(min_size=1, max_size=30)


@given(
    st.sampled_from(CHECKPOINT_TYPES),
    text,
    text,
    st.text(max_size=30).filter(lambda s: s == " ".join(s.split())),
    st.one_of(st.none(), st.integers(0, 10**9)),
    st.one_of(st.none(), st.lists(text, max_size=3)),
)
def test_messages_round_trip(
    kind: str,
    codon_id: str,
    run_id: str,
    name: str,
    duration: int | None,
    patterns: list[str] | None,
) -> None:
    message = format_message(
        checkpoint_type=kind,
        codon_id=codon_id,
        run_id=run_id,
        codon_name=name,
        timestamp="2025-01-01T00:00:00.000Z",
        duration_ms=duration,
        patterns=patterns,
    )
    cp = parse_message(message, sha="a" * 40, branch="run-x", parent=None)
    assert cp is not None
    assert (cp.checkpoint_type, cp.codon_id, cp.run_id, cp.codon_name) == (
        kind,
        codon_id,
        run_id,
        name,
    )
    assert cp.duration_ms == duration
    assert cp.patterns == patterns
    assert message.splitlines()[0].startswith(f"{kind}:")


def test_other_commits_are_not_checkpoints() -> None:
    for message in (
        "Initial checkpoint setup\n",
        "recovery: work tree saved [run:-] x\n\nStatus: recovery\n",
        "",
    ):
        assert parse_message(message, sha="a" * 40, branch="run-x", parent=None) is None
