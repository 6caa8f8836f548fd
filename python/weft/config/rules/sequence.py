"""Rules across codons: unique ids and names, and what ``continue-previous``
needs from the session it continues (in loops too).
"""

from __future__ import annotations

from typing import Any

from weft.config.problems import JsonPath, format_path
from weft.config.rules.context import Slot, get_dict, get_list, get_str
from weft.config.walk import Sink

__all__ = ["check_continuations", "check_ids"]


def check_ids(doc: dict[str, Any], sink: Sink) -> None:
    """Ids unique across the hank, loops included (an error); names too (a warning)."""
    ids: dict[str, JsonPath] = {}
    names: dict[str, JsonPath] = {}

    def note(obj: Any, path: JsonPath) -> None:
        if not isinstance(obj, dict):
            return
        ident, name = get_str(obj, "id"), get_str(obj, "name")
        if ident:
            # The id's own rule (weft.config.ids) is checked by the walk.
            if ident in ids:
                sink.add(
                    (*path, "id"),
                    "duplicate_id",
                    f'duplicate id "{ident}" (also at {format_path(ids[ident])})',
                    hint="ids must be unique across the hank, loops included",
                )
            else:
                ids[ident] = path
        if name:
            if name in names:
                sink.warn(
                    (*path, "name"),
                    "duplicate_name",
                    f'name "{name}" is also used at {format_path(names[name])}',
                )
            else:
                names[name] = path

    for i, item in enumerate(get_list(doc, "hank")):
        note(item, ("hank", i))
        if isinstance(item, dict) and item.get("type") == "loop":
            for j, codon in enumerate(get_list(item, "codons")):
                note(codon, ("hank", i, "codons", j))


def _iterates_more_than_once(loop: dict[str, Any]) -> bool:
    terminate = get_dict(loop, "terminateOn")
    if terminate is None:
        return True
    limit = terminate.get("limit")
    return not (terminate.get("type") == "iterationLimit" and limit == 1)


def check_continuations(slots: list[Slot], sink: Sink) -> None:
    """Each ``continue-previous`` codon: a session to continue, and one it can continue."""
    for n, slot in enumerate(slots):
        if slot.codon.get("continuationMode") != "continue-previous":
            continue
        before = slots[n - 1] if n > 0 else None
        previous = _previous_sessions(slot, before, slots, sink)
        if _follows_context_loop(slot, before, sink):
            continue
        for prev, which in previous:
            _check_continued(slot, prev, which, sink)


def _previous_sessions(
    slot: Slot, before: Slot | None, slots: list[Slot], sink: Sink
) -> list[tuple[Slot, str]]:
    """The codons whose session ``slot`` may continue, each with how to name it; none
    before the first codon (an error)."""
    path = slot.path
    previous: list[tuple[Slot, str]] = []
    if slot.loop is not None and slot.index_in_loop == 0:
        # Iteration 0 continues the codon before the loop; later iterations
        # continue the loop's own last codon.
        if before is not None and before.loop is not slot.loop:
            previous.append((before, "the codon before the loop"))
        if _iterates_more_than_once(slot.loop):
            loop_codons = [s for s in slots if s.loop is slot.loop]
            previous.append((loop_codons[-1], "the loop's last codon (in the next iteration)"))
        if before is None or before.loop is slot.loop:
            sink.add(
                (*path, "continuationMode"),
                "no_previous",
                "continue-previous in the first codon: the first iteration has no session "
                "to continue",
                hint='use "fresh" for the first codon',
            )
    elif before is not None:
        previous.append((before, "the previous codon"))
    else:
        sink.add(
            (*path, "continuationMode"),
            "no_previous",
            "continue-previous in the first codon: there is no session to continue",
            hint='use "fresh" for the first codon',
        )
    return previous


def _follows_context_loop(slot: Slot, before: Slot | None, sink: Sink) -> bool:
    """A codon right after a contextExceeded loop cannot continue its full session (an error)."""
    if slot.loop is None and before is not None and before.loop is not None:
        terminate = get_dict(before.loop, "terminateOn")
        if terminate is not None and terminate.get("type") == "contextExceeded":
            sink.add(
                (*slot.path, "continuationMode"),
                "continue_after_context_loop",
                "this codon follows a contextExceeded loop, whose session ended with a "
                "full context",
                hint='use "fresh"',
            )
            return True
    return False


def _check_continued(slot: Slot, prev: Slot, which: str, sink: Sink) -> None:
    """What continuing ``prev``'s session needs: the same model, room left in its context,
    a session that exists, checkpoints to roll back to."""
    path = slot.path
    model = get_str(slot.codon, "model")
    prev_model = get_str(prev.codon, "model")
    prev_id = get_str(prev.codon, "id") or "?"
    if model and prev_model and model != prev_model:
        sink.add(
            (*path, "model"),
            "model_mismatch",
            f'continue-previous resumes the session of {which} "{prev_id}", which uses '
            f'"{prev_model}", not "{model}"',
            hint=f'use model "{prev_model}" here, or "continuationMode": "fresh"',
        )
    if "exhaustWithPrompt" in prev.codon:
        sink.add(
            (*path, "continuationMode"),
            "continue_after_exhaust",
            f'{which} "{prev_id}" runs until its context is exhausted '
            "(exhaustWithPrompt), so there is no room to continue its session",
            hint='use "fresh"',
        )
    if prev.codon.get("onFailure") == "ignore":
        sink.warn(
            (*path, "continuationMode"),
            "continue_after_ignore",
            f'{which} "{prev_id}" may fail and be ignored, leaving no session to continue',
        )
    if not prev.codon.get("checkpointedFiles"):
        sink.warn(
            (*path, "continuationMode"),
            "previous_without_checkpoints",
            f'{which} "{prev_id}" has no checkpointedFiles, so a rollback cannot '
            "restore the files this session relies on",
        )
