"""The run machine's rules as tables: every input in every phase, both modes.

Each row: (autostart, phase the machine is put in, input) -> (phase after, the
effects it returns, by class; ``Refused`` for a refused command, ``error`` for
an input the driver never gives in that phase). Then the endings: how a run
ends for each way it can go (:func:`test_the_ending_follows_the_precedence`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from weft.outcome import Ending
from weft.runtime.run.machine import (
    PHASES,
    End,
    Interrupt,
    Refused,
    RunMachine,
    Wait,
)

BUDGET: dict[str, object] = {
    "scope": "run",
    "kind": "dollars",
    "limit": 1.0,
    "used": 1.5,
    "source": "--max-cost",
}


def at(phase: str, *, autostart: bool) -> RunMachine | None:
    """A machine brought to ``phase`` by the inputs the driver gives (None: the
    mode never is in that phase)."""
    m = RunMachine(autostart=autostart)
    if phase == "starting":
        return m
    if autostart:
        if phase in ("waiting", "claimed", "rolling-back"):
            return None
        m.began("a")
        if phase == "running":
            m.codon_started("a")
        elif phase == "stopping":
            m.codon_started("a")
            m.stop()
        elif phase == "done":
            m.codon_started("a")
            m.codon_ended("a", moved_on=True, next_codon=None)
        return m
    m.began("a")
    if phase == "claimed":
        m.claim("codon.next")
    elif phase == "running":
        m.claim("codon.next")
        m.codon_started("a")
    elif phase == "rolling-back":
        m.claim("rollback.toCodon", rollback=True)
        m.rewinding()
    elif phase == "stopping":
        m.stop()
    elif phase == "done":
        m.stop()
        m.finish()
    return m


INPUTS: dict[str, Callable[[RunMachine], Any]] = {
    "began": lambda m: m.began("a"),
    "claim": lambda m: m.claim("codon.next"),
    "claim_rollback": lambda m: m.claim("rollback.toCodon", rollback=True),
    "release": lambda m: m.release(),
    "rewinding": lambda m: m.rewinding(),
    "rewound": lambda m: m.rewound("b", run_next=True),
    "codon_started": lambda m: m.codon_started("a"),
    "moved_on": lambda m: m.codon_ended("a", moved_on=True, next_codon="b"),
    "moved_on_last": lambda m: m.codon_ended("a", moved_on=True, next_codon=None),
    "failed": lambda m: m.codon_ended("a", moved_on=False, reason="x"),
    "stop": lambda m: m.stop(signal=2),
    "force": lambda m: m.stop(force=True),
    "budget": lambda m: m.budget_stop("over", BUDGET),
    "fatal": lambda m: m.fatal("boom"),
}


def said(result: Any) -> str:
    """An input's answer in the table's words."""
    if result is None:
        return "None"
    if isinstance(result, Refused):
        return "Refused"
    names = []
    for e in result:
        name = type(e).__name__
        if isinstance(e, Interrupt):
            name += f"({e.why})"
        elif isinstance(e, Wait):
            name += f"({e.reason})"
        elif isinstance(e, End):
            name += f"({e.ending.kind})"
        names.append(name)
    return "[" + ",".join(names) + "]"


TABLE: dict[tuple[bool, str, str], tuple[str, str]] = {
    (True, "starting", "began"): ("running", "[RunCodon]"),
    (True, "starting", "claim"): ("starting", "Refused"),
    (True, "starting", "claim_rollback"): ("starting", "Refused"),
    (True, "starting", "release"): ("starting", "None"),
    (True, "starting", "rewinding"): ("starting", "error"),
    (True, "starting", "rewound"): ("starting", "error"),
    (True, "starting", "codon_started"): ("starting", "error"),
    (True, "starting", "moved_on"): ("starting", "error"),
    (True, "starting", "moved_on_last"): ("starting", "error"),
    (True, "starting", "failed"): ("starting", "error"),
    (True, "starting", "stop"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (True, "starting", "force"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (True, "starting", "budget"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (True, "starting", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (True, "running", "began"): ("running", "error"),
    (True, "running", "claim"): ("running", "Refused"),
    (True, "running", "claim_rollback"): ("running", "Refused"),
    (True, "running", "release"): ("running", "None"),
    (True, "running", "rewinding"): ("running", "error"),
    (True, "running", "rewound"): ("running", "error"),
    (True, "running", "codon_started"): ("running", "None"),
    (True, "running", "moved_on"): ("running", "[RunCodon]"),
    (True, "running", "moved_on_last"): ("done", "[End(completed)]"),
    (True, "running", "failed"): ("done", "[End(failed)]"),
    (True, "running", "stop"): (
        "stopping",
        "[ShuttingDown,CancelSleep,WakeLoop,Interrupt(shutdown)]",
    ),
    (True, "running", "force"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (True, "running", "budget"): (
        "stopping",
        "[ShuttingDown,CancelSleep,WakeLoop,Interrupt(budget)]",
    ),
    (True, "running", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (True, "stopping", "began"): ("done", "[End(stopped)]"),
    (True, "stopping", "claim"): ("stopping", "Refused"),
    (True, "stopping", "claim_rollback"): ("stopping", "Refused"),
    (True, "stopping", "release"): ("stopping", "None"),
    (True, "stopping", "rewinding"): ("stopping", "error"),
    (True, "stopping", "rewound"): ("done", "[End(stopped)]"),
    (True, "stopping", "codon_started"): ("stopping", "error"),
    (True, "stopping", "moved_on"): ("done", "[End(stopped)]"),
    (True, "stopping", "moved_on_last"): ("done", "[End(completed)]"),
    (True, "stopping", "failed"): ("done", "[End(stopped)]"),
    (True, "stopping", "stop"): ("stopping", "[Say,CancelSleep,WakeLoop,Kill]"),
    (True, "stopping", "force"): ("stopping", "[Say,CancelSleep,WakeLoop,Kill]"),
    (True, "stopping", "budget"): ("stopping", "[]"),
    (True, "stopping", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (True, "done", "began"): ("done", "error"),
    (True, "done", "claim"): ("done", "Refused"),
    (True, "done", "claim_rollback"): ("done", "Refused"),
    (True, "done", "release"): ("done", "None"),
    (True, "done", "rewinding"): ("done", "error"),
    (True, "done", "rewound"): ("done", "error"),
    (True, "done", "codon_started"): ("done", "error"),
    (True, "done", "moved_on"): ("done", "error"),
    (True, "done", "moved_on_last"): ("done", "error"),
    (True, "done", "failed"): ("done", "error"),
    (True, "done", "stop"): ("done", "[]"),
    (True, "done", "force"): ("done", "[]"),
    (True, "done", "budget"): ("done", "[]"),
    (True, "done", "fatal"): ("done", "[]"),
    (False, "starting", "began"): ("waiting", "[Wait(startup)]"),
    (False, "starting", "claim"): ("starting", "Refused"),
    (False, "starting", "claim_rollback"): ("starting", "Refused"),
    (False, "starting", "release"): ("starting", "None"),
    (False, "starting", "rewinding"): ("starting", "error"),
    (False, "starting", "rewound"): ("starting", "error"),
    (False, "starting", "codon_started"): ("starting", "error"),
    (False, "starting", "moved_on"): ("starting", "error"),
    (False, "starting", "moved_on_last"): ("starting", "error"),
    (False, "starting", "failed"): ("starting", "error"),
    (False, "starting", "stop"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "starting", "force"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "starting", "budget"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "starting", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (False, "waiting", "began"): ("waiting", "error"),
    (False, "waiting", "claim"): ("claimed", "None"),
    (False, "waiting", "claim_rollback"): ("claimed", "None"),
    (False, "waiting", "release"): ("waiting", "None"),
    (False, "waiting", "rewinding"): ("waiting", "error"),
    (False, "waiting", "rewound"): ("waiting", "error"),
    (False, "waiting", "codon_started"): ("waiting", "error"),
    (False, "waiting", "moved_on"): ("waiting", "error"),
    (False, "waiting", "moved_on_last"): ("waiting", "error"),
    (False, "waiting", "failed"): ("waiting", "error"),
    (False, "waiting", "stop"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "waiting", "force"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "waiting", "budget"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "waiting", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (False, "claimed", "began"): ("claimed", "error"),
    (False, "claimed", "claim"): ("claimed", "Refused"),
    (False, "claimed", "claim_rollback"): ("claimed", "Refused"),
    (False, "claimed", "release"): ("waiting", "None"),
    (False, "claimed", "rewinding"): ("rolling-back", "None"),
    (False, "claimed", "rewound"): ("claimed", "error"),
    (False, "claimed", "codon_started"): ("running", "None"),
    (False, "claimed", "moved_on"): ("claimed", "error"),
    (False, "claimed", "moved_on_last"): ("claimed", "error"),
    (False, "claimed", "failed"): ("claimed", "error"),
    (False, "claimed", "stop"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "claimed", "force"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "claimed", "budget"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "claimed", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (False, "running", "began"): ("running", "error"),
    (False, "running", "claim"): ("running", "Refused"),
    (False, "running", "claim_rollback"): ("running", "Refused"),
    (False, "running", "release"): ("running", "None"),
    (False, "running", "rewinding"): ("running", "error"),
    (False, "running", "rewound"): ("running", "error"),
    (False, "running", "codon_started"): ("running", "None"),
    (False, "running", "moved_on"): ("waiting", "[Wait(codon-completed)]"),
    (False, "running", "moved_on_last"): (
        "waiting",
        "[End(completed),Wait(all-codons-completed)]",
    ),
    (False, "running", "failed"): ("waiting", "[End(failed),Wait(codon-completed)]"),
    (False, "running", "stop"): (
        "stopping",
        "[ShuttingDown,CancelSleep,WakeLoop,Interrupt(shutdown)]",
    ),
    (False, "running", "force"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (False, "running", "budget"): (
        "stopping",
        "[ShuttingDown,CancelSleep,WakeLoop,Interrupt(budget)]",
    ),
    (False, "running", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (False, "rolling-back", "began"): ("rolling-back", "error"),
    (False, "rolling-back", "claim"): ("rolling-back", "Refused"),
    (False, "rolling-back", "claim_rollback"): ("rolling-back", "Refused"),
    (False, "rolling-back", "release"): ("waiting", "None"),
    (False, "rolling-back", "rewinding"): ("rolling-back", "error"),
    (False, "rolling-back", "rewound"): ("claimed", "[RunCodon]"),
    (False, "rolling-back", "codon_started"): ("rolling-back", "error"),
    (False, "rolling-back", "moved_on"): ("rolling-back", "error"),
    (False, "rolling-back", "moved_on_last"): ("rolling-back", "error"),
    (False, "rolling-back", "failed"): ("rolling-back", "error"),
    (False, "rolling-back", "stop"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "rolling-back", "force"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "rolling-back", "budget"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop]"),
    (False, "rolling-back", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (False, "stopping", "began"): ("done", "[End(stopped)]"),
    (False, "stopping", "claim"): ("stopping", "Refused"),
    (False, "stopping", "claim_rollback"): ("stopping", "Refused"),
    (False, "stopping", "release"): ("stopping", "None"),
    (False, "stopping", "rewinding"): ("stopping", "error"),
    (False, "stopping", "rewound"): ("done", "[End(stopped)]"),
    (False, "stopping", "codon_started"): ("stopping", "error"),
    (False, "stopping", "moved_on"): ("done", "[End(stopped)]"),
    (False, "stopping", "moved_on_last"): ("done", "[End(completed)]"),
    (False, "stopping", "failed"): ("done", "[End(stopped)]"),
    (False, "stopping", "stop"): ("stopping", "[Say,CancelSleep,WakeLoop,Kill]"),
    (False, "stopping", "force"): ("stopping", "[Say,CancelSleep,WakeLoop,Kill]"),
    (False, "stopping", "budget"): ("stopping", "[]"),
    (False, "stopping", "fatal"): ("stopping", "[ShuttingDown,CancelSleep,WakeLoop,Kill]"),
    (False, "done", "began"): ("done", "error"),
    (False, "done", "claim"): ("done", "Refused"),
    (False, "done", "claim_rollback"): ("done", "Refused"),
    (False, "done", "release"): ("done", "None"),
    (False, "done", "rewinding"): ("done", "error"),
    (False, "done", "rewound"): ("done", "error"),
    (False, "done", "codon_started"): ("done", "error"),
    (False, "done", "moved_on"): ("done", "error"),
    (False, "done", "moved_on_last"): ("done", "error"),
    (False, "done", "failed"): ("done", "error"),
    (False, "done", "stop"): ("done", "[]"),
    (False, "done", "force"): ("done", "[]"),
    (False, "done", "budget"): ("done", "[]"),
    (False, "done", "fatal"): ("done", "[]"),
}


def _cases() -> list[tuple[bool, str, str]]:
    return [
        (auto, phase, name)
        for auto in (True, False)
        for phase in PHASES
        for name in INPUTS
        if at(phase, autostart=auto) is not None
    ]


def test_the_table_covers_every_input_in_every_phase_of_both_modes() -> None:
    assert sorted(TABLE) == sorted(_cases())


@pytest.mark.parametrize(("autostart", "phase", "name"), _cases())
def test_each_input_in_each_phase(autostart: bool, phase: str, name: str) -> None:
    m = at(phase, autostart=autostart)
    assert m is not None
    try:
        answer = said(INPUTS[name](m))
    except RuntimeError:
        answer = "error"
    assert (m.phase, answer) == TABLE[autostart, phase, name]


def _run(autostart: bool, *steps: Callable[[RunMachine], Any]) -> Ending:
    m = RunMachine(autostart=autostart)
    for step in steps:
        step(m)
    return m.finish()


def started(m: RunMachine) -> None:
    m.began("a")
    if not m.autostart:
        assert m.claim("codon.next") is None
    m.codon_started("a")


def test_the_ending_follows_the_precedence() -> None:
    done = lambda m: m.codon_ended("a", moved_on=True, next_codon=None)  # noqa: E731
    more = lambda m: m.codon_ended("a", moved_on=True, next_codon="b")  # noqa: E731
    failed = lambda m: m.codon_ended("a", moved_on=False, reason="exit 1")  # noqa: E731
    stop = lambda m: m.stop(signal=15)  # noqa: E731
    for auto in (True, False):
        assert _run(auto, started, done) == Ending("completed")
        assert _run(auto, started, failed) == Ending("failed", codon_id="a", reason="exit 1")
        # Stopped while a ran: a stays to do; its failure is the stop's.
        stopped = Ending("stopped", codon_id="a", reason="stopped by SIGTERM")
        assert _run(auto, started, stop, failed) == stopped
        # Stopped while a ran, and a finished anyway: b is what stays.
        assert _run(auto, started, stop, more).codon_id == "b"
        # ... and with a the last codon, nothing was left: completed.
        assert _run(auto, started, stop, done) == Ending("completed")
        # The budget stops it as budget whatever the codon did; a fatal error fails it.
        budget = _run(auto, started, lambda m: m.budget_stop("over", BUDGET), failed)
        assert budget == Ending("budget", codon_id="a", reason="over", budget=BUDGET)
        fatal = _run(auto, started, stop, lambda m: m.fatal("disk full"), failed)
        assert fatal == Ending("failed", reason="disk full")
        forced = _run(auto, started, stop, stop, failed)
        assert forced.forced
        assert forced.kind == "stopped"
    # Manual mode: shut down while parked on a failure is that failure; shut
    # down at the end is completed; shut down with codons left is a stop.
    parked = _run(False, started, failed, stop)
    assert parked == Ending("failed", codon_id="a", reason="exit 1")
    assert _run(False, started, done, stop) == Ending("completed")
    assert _run(False, lambda m: m.began("a"), stop).kind == "stopped"


def test_a_redo_clears_the_failure_it_parked_on() -> None:
    m = RunMachine(autostart=False)
    started(m)
    m.codon_ended("a", moved_on=False, reason="exit 1")
    assert m.failure == ("a", "exit 1")
    assert m.claim("codon.redo") is None
    m.rewinding()
    assert said(m.rewound("a", run_next=True)) == "[RunCodon]"
    assert m.failure is None
    m.codon_started("a")
    m.codon_ended("a", moved_on=True, next_codon=None)
    m.stop()
    assert m.finish() == Ending("completed")


def test_refusals_say_why_and_what_to_do() -> None:
    auto = RunMachine(autostart=True)
    auto.began("a")
    auto.codon_started("a")
    refused = auto.claim("codon.next", running="a")
    assert isinstance(refused, Refused)
    assert "codon a is running" in refused.message
    assert "codon.skip / codon.forceStop" in refused.message
    manual = RunMachine(autostart=False)
    manual.began("a")
    assert manual.claim("rollback.toCodon", rollback=True) is None
    manual.rewinding()
    busy = manual.claim("codon.next")
    assert busy == Refused("codon.next refused: a rollback is in progress", "ROLLBACK_IN_PROGRESS")
    manual.stop()
    assert manual.claim("codon.next") == Refused("codon.next refused: the runtime is shutting down")
