"""Every surface tells the same story (issue 32, Build 5): a differential test.

Each scenario makes a real execution with real ``weft`` processes on the fake
agent (completed; a codon failure under ``abort``, ``ignore`` and ``retry``; a
retry that recovers; a budget stop and its continuation; a stop by you (SIGINT,
SIGTERM); a crash
and its resume; a rollback and its continuation; an unpriced model; manual
mode stopped between codons, watched by ``weft attach --json``). At each
moment worth looking at, every surface is read:

* ``weft run``'s exit code and its end summary, as JSON (``--json``: the last
  line, ``run.summary``) and as text (a twin execution of the same scenario run
  with ``--headless``, read beside its own ``weft status --json``);
* ``weft status --json`` and ``weft status``;
* ``weft ls --json`` and ``weft ls``;
* ``weft thread --json`` and ``weft thread``;
* ``weft ui``'s list entry (:func:`weft.web.listing.read_execution`);
* in manual mode, ``weft attach --json`` (its exit code and summary).

Each surface's facts (the outcome's word, the exit code, each codon's state,
the codon that failed or stays to do, the cost or that it is unpriced, what the
next run starts with) are normalised and compared with what the scenario must
produce, so a wrong answer every surface agrees on fails too. Where surfaces
legitimately differ (the summary is the current run, ``status`` every run), the
matching part is compared; each place says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import (
    codon,
    pid_running,
    read_state,
    scenario,
    subprocess_environment,
    wait_for,
    write_file,
    write_hank,
)

from weft.client import connect
from weft.money import known_cost
from weft.server import read_token
from weft.store import ExecutionStore
from weft.store.lock import read_lock
from weft.web.listing import read_execution

TIMEOUT = 90.0
UNPRICED = "fake/openai/gpt-5.2"
"""A model the fake agent runs and Weft's pricing table does not know."""

MONEY = re.compile(r"unpriced|≥ \$\d+\.\d+|\$\d+\.\d+")
"""The money words of every text surface (:mod:`weft.money`)."""

TITLES = {
    "Run completed": "completed",
    "Run failed": "failed",
    "Run stopped by its budget": "budget-stopped",
    "Run stopped": "stopped",
}
"""The summary's heading -> the outcome's word (:mod:`weft.outcome`)."""


# --------------------------------------------------------------------------- what must be seen


@dataclass(frozen=True)
class Expect:
    """What every surface must say at one moment of a scenario."""

    outcome: str
    """The newest run's word (:data:`weft.outcome.WORD`), as ``weft status`` lists it."""
    codons: Mapping[str, str]
    """Every planned codon -> its state in the newest run: ``completed``, ``failed``,
    ``stopped`` (cut short by a stop, to do again), ``skipped``, ``running``, ``not run``,
    or ``done earlier`` (completed by an earlier run of the execution)."""
    state: str
    """``weft ls``'s (and ``weft ui``'s) state of the execution."""
    runs: tuple[str, ...]
    """Every run's word in ``weft status``, oldest first."""
    next: str | None
    """The codon the next ``weft run`` starts with (None: nothing to do, or failed)."""
    exit: int | None = None
    """``weft run``'s exit code; None when this moment has no summary (after a
    SIGKILL or a ``weft rollback``)."""
    ending_codon: str | None = None
    """The codon that failed, or that a stop left to do."""
    priced: bool = True
    """False: the model has no price, every cost is null / ``unpriced``."""
    thread_word: str | None = None
    """``weft thread``'s word for the newest run it shows, when not ``outcome``
    (the thread shows the runs with codons: a rollback's record run has none)."""
    thread_codons: Mapping[str, str] | None = None
    """The codons of that run, when not ``codons``."""
    snapshot_behind: bool = False
    """``weft ls`` and ``weft ui`` read ``state.json`` only, which a SIGKILLed run left
    behind its journal (``weft status`` reads both): their cost is the snapshot's."""
    failures: Mapping[str, tuple[int, int, str]] = field(default_factory=dict)
    """The summary's failures: codon -> (failed attempts, attempts, its status)."""


@dataclass
class Run:
    """One ``weft run`` process that ended."""

    code: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict[str, Any]:
        """``--json``: the last line's ``run.summary`` data."""
        last = json.loads(self.stdout.strip().splitlines()[-1])
        assert last["type"] == "run.summary", self.stdout[-2000:]
        data: dict[str, Any] = last["data"]
        return data


@dataclass
class Moment:
    """A moment to look at: what must be seen, and the run that led to it, if any."""

    expect: Expect
    run: Run | None = None
    attach: Run | None = None
    """``weft attach --json``'s process, when one watched the run to its end."""


# --------------------------------------------------------------------------- the lab


@dataclass
class Lab:
    """One scenario's place: its hank folder, its managed root, and how ``weft run``
    prints (``json`` or ``text``)."""

    root: Path
    mode: str
    env: dict[str, str] = field(init=False)
    orphans: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = subprocess_environment(self.root)

    @property
    def managed(self) -> Path:
        return Path(self.env["WEFT_RUNTIME_EXECUTION_BASE_DIR"])

    @property
    def execution(self) -> Path:
        """The scenario's one managed execution."""
        found: list[Path] = wait_for(
            lambda: [p.parent.parent for p in self.managed.glob("*/.weft/weft.db")],
            timeout=TIMEOUT,
            what="the execution",
        )
        (only,) = found
        return only

    def hank(self, *items: dict[str, Any], files: Mapping[str, str] | None = None) -> Path:
        return write_hank(self.root / "hank", *items, files=files)

    def argv(self, *args: str | Path) -> list[str]:
        return [sys.executable, "-m", "weft", *map(str, args)]

    def weft(self, *args: str | Path, env: Mapping[str, str] | None = None) -> Run:
        done = subprocess.run(
            self.argv(*args),
            env={**self.env, **(env or {})},
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert "Traceback" not in done.stdout + done.stderr, done.stderr
        return Run(done.returncode, done.stdout, done.stderr)

    def run(self, hank: Path, *extra: str, env: Mapping[str, str] | None = None) -> Run:
        """``weft run HANK`` to its end, in the lab's output mode."""
        return self.weft("run", hank, self.output, *extra, env=env)

    @property
    def output(self) -> str:
        return "--json" if self.mode == "json" else "--headless"

    def start(
        self, hank: Path, *extra: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """``weft run HANK`` in the background (its output to files in the lab)."""
        return subprocess.Popen(
            self.argv("run", hank, self.output, *extra),
            env={**self.env, **(env or {})},
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=(self.root / "run.out").open("w"),
            stderr=(self.root / "run.err").open("w"),
            text=True,
        )

    def ended(self, proc: subprocess.Popen[str]) -> Run:
        try:
            code = proc.wait(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out, err = (self.root / "run.out").read_text(), (self.root / "run.err").read_text()
        assert "Traceback" not in out + err, err
        return Run(code, out, err)

    def running(self, codon_id: str, marker: str) -> dict[str, Any]:
        """Waits until ``codon_id`` runs and its agent wrote ``marker``; its record."""

        def check() -> dict[str, Any] | None:
            found = list(self.managed.glob(f"*/agentRoot/{marker}"))
            if not found:
                return None
            records = {c["codonId"]: c for c in read_state(self.execution)["runs"][0]["codons"]}
            record = records.get(codon_id)
            return record if record is not None and record["status"] == "running" else None

        record: dict[str, Any] = wait_for(check, timeout=TIMEOUT, what=f"{codon_id} running")
        return record


# --------------------------------------------------------------------------- reading the surfaces


def codon_state(record: Mapping[str, Any]) -> str:
    """A codon record's state as the fold says it: a failure a stop caused is
    ``stopped``, to do again (:attr:`weft.progress.CodonProgress.stopped`):
    ``weft status --json`` says ``stopped``; the text surfaces say the word."""
    status = str(record["status"])
    return "stopped" if record.get("stopped") else status


def money_word(text: str) -> str:
    """The first money word of a text (``$0.0123``, ``≥ $0.0123``, ``unpriced``)."""
    found = MONEY.search(text)
    assert found is not None, text
    return found.group(0)


def json_money(dollars: float | None, unpriced: int) -> str:
    """How the text surfaces must word a JSON figure."""
    return known_cost(dollars, unpriced)


def _states_of(
    records: Sequence[Mapping[str, Any]], older: Sequence[Mapping[str, Any]], planned: list[str]
) -> dict[str, str]:
    """Planned codon -> its state in a run, from the run's records (the latest
    attempt counts) and the older runs' (``done earlier``)."""
    latest = {str(r["codonId"]): codon_state(r) for r in records}
    done_before = {
        str(c["codonId"]) for run in older for c in run["codons"] if c["status"] == "completed"
    }
    return {c: latest.get(c, "done earlier" if c in done_before else "not run") for c in planned}


def facts_of_status(doc: Mapping[str, Any], planned: list[str]) -> dict[str, Any]:
    runs = doc["runs"]  # newest first
    newest = runs[0]
    ending = newest["ending"] or {}
    return {
        "outcome": newest["status"],
        "runs": tuple(r["status"] for r in reversed(runs)),
        "codons": _states_of(newest["codons"], runs[1:], planned),
        "ending_codon": ending.get("codonId"),
        "run_cost": newest["cost"],
        "total_cost": doc["totalCost"],
        "unpriced": doc["unpricedCodons"] > 0,
    }


STATUS_RUN = re.compile(
    r"^run (?P<id>\S+)  (?P<word>.+?)  started \S+  (?P<cost>.+?)(  \(current\))?$"
)


def facts_of_status_text(text: str, planned: list[str], ending_words: set[str]) -> dict[str, Any]:
    lines = text.splitlines()
    total = next(line for line in lines if line.startswith("  total cost: "))
    runs: list[dict[str, Any]] = []
    for line in lines:
        found = STATUS_RUN.match(line)
        if found:
            runs.append(
                {"word": found["word"], "cost": found["cost"], "codons": [], "ending": None}
            )
            continue
        if not runs or not line.startswith("  ") or line.startswith("   "):
            continue
        first, _, rest = line[2:].partition(" ")
        if first.endswith(":") and first[:-1] in ending_words:
            who = rest.split(": ", 1)[0]
            runs[-1]["ending"] = who if who in planned else None
        elif first and not first.endswith(":"):
            runs[-1]["codons"].append({"codonId": first, "status": rest.split()[0]})
    newest = runs[0]
    return {
        "outcome": newest["word"],
        "runs": tuple(r["word"] for r in reversed(runs)),
        # The text says a stopped codon's state in words already (no failureReason to read).
        "codons": _states_of(newest["codons"], [_completed(r) for r in runs[1:]], planned),
        "ending_codon": newest["ending"],
        "run_cost": money_word(newest["cost"]),
        "total_cost": money_word(total.split(": ", 1)[1]),
    }


def _completed(run: Mapping[str, Any]) -> dict[str, Any]:
    return {"codons": run["codons"]}


def facts_of_thread_text(text: str, planned: list[str]) -> dict[str, Any]:
    lines = text.splitlines()
    head = lines[0]
    found = re.search(r"next codon: ([^;\s]+)", head)
    assert found is not None, head
    runs: list[dict[str, Any]] = []
    for line in lines[1:]:
        if line.startswith("run "):
            runs.append({"word": line.split("  ")[1], "codons": []})
        elif runs and line.startswith("  ") and len(line) > 4:
            mark, rest = line[2], line[4:].split()
            runs[-1]["codons"].append({"codonId": rest[0], "status": rest[1], "mark": mark})
    newest = runs[0]
    on_thread = [c for c in newest["codons"] if c["mark"] != "~"]
    return {
        "thread_word": newest["word"],
        "codons": _states_of(on_thread, runs[1:], planned),
        "next": None if found.group(1) == "-" else found.group(1),
    }


def facts_of_summary(data: Mapping[str, Any]) -> dict[str, Any]:
    ending = data["ending"] or {}
    return {
        "outcome": ending.get("word"),
        "exit": data["exitCode"],
        "counts": {k: v for k, v in data["codons"].items() if k != "total"},
        "ending_codon": ending.get("codonId"),
        "run_cost": data["totalCost"],
        "unpriced": data["unpricedCodons"] > 0,
        "failures": {
            f["codonId"]: (f["failedAttempts"], f["attempts"], f["status"])
            for f in data["failures"]
        },
    }


SUMMARY_TITLE = re.compile(r"(?P<heading>Run [a-z ]+?) \(exit (?P<exit>\d+)\)")
COUNTED = re.compile(r"(\d+) (completed|failed|skipped|stopped|not run)")


def facts_of_summary_text(text: str) -> dict[str, Any]:
    """The text summary: its title and its labelled rows (``  label  text``)."""
    lines = text.splitlines()
    at = max(i for i, line in enumerate(lines) if SUMMARY_TITLE.search(line))
    title = SUMMARY_TITLE.search(lines[at])
    assert title is not None
    rows: dict[str, list[str]] = {}
    for line in lines[at + 1 :]:
        if not line.startswith("  "):
            break
        label, _, said = line.strip().partition(" ")
        rows.setdefault(label, []).append(said.strip())
    (counted,) = rows["codons"]
    counts = {"completed": 0, "failed": 0, "stopped": 0, "skipped": 0, "notRun": 0}
    for n, what in COUNTED.findall(counted):
        counts["notRun" if what == "not run" else what] = int(n)
    earlier = re.search(r"(\d+) done in earlier runs", counted)
    counts["doneEarlier"] = int(earlier.group(1)) if earlier else 0
    (left,) = rows.get("left", [None])
    failed = {re.split(r"[ :]", said, maxsplit=1)[0] for said in rows.get("failed", [])}
    heading = title["heading"]
    return {
        "outcome": TITLES[heading],
        "exit": int(title["exit"]),
        "counts": counts,
        "left": None if left is None else left.split()[0],
        "failed": failed,
        "run_cost": money_word(rows["cost"][0]),
    }


def collect(lab: Lab, execution: Path) -> dict[str, str]:
    """Every read-only surface's output, the commands run side by side."""
    commands = {
        "status --json": ("status", execution, "--json"),
        "status": ("status", execution),
        "ls --json": ("ls", "--json"),
        "ls": ("ls",),
        "thread --json": ("thread", execution, "--json"),
        "thread": ("thread", execution),
    }
    env = {**lab.env, "NO_COLOR": "1", "COLUMNS": "300"}
    procs = {
        name: subprocess.Popen(
            lab.argv(*args),
            env=env,
            cwd=lab.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in commands.items()
    }
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, f"weft {name}: {stderr}"
        assert "Traceback" not in stderr, stderr
        out[name] = stdout
    return out


# --------------------------------------------------------------------------- comparing


class Differences:
    """Every fact a surface gets wrong, said at once (surface, fact, seen, wanted)."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def check(self, surface: str, fact: str, seen: Any, wanted: Any) -> None:
        if seen != wanted:
            self.found.append(f"{surface}: {fact} is {seen!r}, not {wanted!r}")

    def assert_none(self, label: str) -> None:
        assert not self.found, f"{label}: the surfaces disagree:\n  " + "\n  ".join(self.found)


def expected_counts(expect: Expect) -> dict[str, int]:
    """The summary's codon counts for what the newest run must have done."""
    states = list(expect.codons.values())
    return {
        "completed": states.count("completed"),
        "failed": states.count("failed"),
        "stopped": states.count("stopped"),
        "skipped": states.count("skipped"),
        # Not started in this run (a codon running when the summary was written counts too).
        "notRun": states.count("not run") + states.count("running"),
        "doneEarlier": states.count("done earlier"),
    }


def check_moment(lab: Lab, moment: Moment, label: str) -> None:
    """Reads every surface of the lab's execution and compares it with ``moment``."""
    expect = moment.expect
    execution = lab.execution
    planned = list(expect.codons)
    out = collect(lab, execution)
    d = Differences()

    # weft status --json: every run (oldest first), the newest run's codons and ending.
    status = json.loads(out["status --json"])
    st = facts_of_status(status, planned)
    for fact in ("outcome", "runs", "codons", "ending_codon"):
        d.check("status --json", fact, st[fact], getattr(expect, fact))
    d.check("status --json", "unpriced", st["unpriced"], not expect.priced)
    if expect.priced:
        d.check("status --json", "total cost is known", isinstance(st["total_cost"], float), True)
    else:
        d.check("status --json", "total cost", st["total_cost"], None)
        d.check("status --json", "newest run's cost", st["run_cost"], None)
    unpriced = status["unpricedCodons"]

    # weft status (text): the same facts in words, the same money.
    words = {"completed", "failed", "stopped", "budget-stopped", "crashed"}
    text = facts_of_status_text(out["status"], planned, words)
    for fact in ("outcome", "runs", "codons", "ending_codon"):
        d.check("status", fact, text[fact], getattr(expect, fact))
    d.check("status", "total cost", text["total_cost"], json_money(st["total_cost"], unpriced))
    run_unpriced = status["runs"][0]["unpricedCodons"]
    d.check(
        "status", "newest run's cost", text["run_cost"], json_money(st["run_cost"], run_unpriced)
    )

    # weft ls --json / weft ls / weft ui: the execution's state and what it cost in all
    # (the seed's cost of every record, as status's total).
    (entry,) = [e for e in json.loads(out["ls --json"]) if e["path"] == str(execution)]
    d.check("ls --json", "state", entry["state"], expect.state)
    # ls and ui read state.json; after a SIGKILL it trails the journal status reads.
    listed_cost = st["total_cost"] if not expect.snapshot_behind else entry["cost"]
    d.check("ls --json", "cost", entry["cost"], listed_cost)
    d.check("ls --json", "unpricedCodons", entry["unpricedCodons"], unpriced)
    (row,) = [line for line in out["ls"].splitlines() if line.startswith(execution.name)]
    cells = re.split(r"\s{2,}", row)
    d.check("ls", "state", cells[3], expect.state)
    d.check("ls", "cost", money_word(cells[5]), json_money(listed_cost, unpriced))
    listed = read_execution(execution)
    assert listed is not None
    ui = listed.to_json(time.time())
    d.check("ui", "state", ui["state"], expect.state)
    d.check("ui", "cost", ui["cost"], listed_cost)
    d.check("ui", "costText", ui["costText"], json_money(listed_cost, unpriced))
    if expect.snapshot_behind:
        assert isinstance(listed_cost, float)
        assert isinstance(st["total_cost"], float)
        d.check("ls --json", "cost at most status's", listed_cost <= st["total_cost"], True)

    # weft thread: what the next run starts with, and the newest run it shows. The JSON is
    # the core's analyzer (seed 003): ``failed`` when the thread's newest codon failed,
    # which a stop's cut codon did (it is to do again, which the text says).
    thread = json.loads(out["thread --json"])
    newest_record = thread["codons"][0]["codon"] if thread["codons"] else None
    d.check(
        "thread --json",
        "failed",
        thread["failed"],
        newest_record is not None and newest_record["status"] == "failed",
    )
    # Nor does it name a next codon while one is unfinished (a run cut off), which the
    # next run does again: the text names it.
    if not thread["failed"] and not thread["hasRunningCodon"]:
        d.check("thread --json", "nextCodonId", thread["nextCodonId"], expect.next)
    tt = facts_of_thread_text(out["thread"], planned)
    d.check("thread", "next codon", tt["next"], expect.next)
    d.check("thread", "newest run's word", tt["thread_word"], expect.thread_word or expect.outcome)
    d.check("thread", "codons", tt["codons"], expect.thread_codons or expect.codons)

    # weft run: its exit code and its summary (the current run only; its cost is the
    # newest run's in weft status, not every run's).
    if moment.run is not None:
        d.check("weft run", "exit code", moment.run.code, expect.exit)
        if lab.mode == "json":
            check_summary(d, "run --json", moment.run.summary, expect, st)
    if moment.attach is not None:
        # weft attach follows the run to its end: the run's exit code (no signal seen:
        # a stop is 130) and the same summary.
        d.check("attach --json", "exit code", moment.attach.code, expect.exit)
        check_summary(d, "attach --json", moment.attach.summary, expect, st)
    d.assert_none(label)


def check_summary(
    d: Differences, surface: str, data: Mapping[str, Any], expect: Expect, st: Mapping[str, Any]
) -> None:
    summary = facts_of_summary(data)
    d.check(surface, "outcome", summary["outcome"], expect.outcome)
    d.check(surface, "status", data["status"], (data["ending"] or {}).get("kind"))
    d.check(surface, "exit code", summary["exit"], expect.exit)
    d.check(surface, "codon counts", summary["counts"], expected_counts(expect))
    d.check(surface, "ending codon", summary["ending_codon"], expect.ending_codon)
    d.check(surface, "unpriced", summary["unpriced"], not expect.priced)
    d.check(surface, "failures", summary["failures"], dict(expect.failures))
    seen, wanted = summary["run_cost"], st["run_cost"]
    if isinstance(seen, float) and isinstance(wanted, float):
        d.check(surface, "cost (status's newest run)", round(seen, 9), round(wanted, 9))
    else:
        d.check(surface, "cost (status's newest run)", seen, wanted)


def check_text_summary(lab: Lab, moment: Moment, label: str) -> None:
    """The twin's text summary: the same facts in words, its cost as its own
    ``weft status --json`` says the newest run's."""
    expect = moment.expect
    assert moment.run is not None
    d = Differences()
    d.check("weft run --headless", "exit code", moment.run.code, expect.exit)
    summary = facts_of_summary_text(moment.run.stdout)
    d.check("summary text", "outcome", summary["outcome"], expect.outcome)
    d.check("summary text", "exit code", summary["exit"], expect.exit)
    d.check("summary text", "codon counts", summary["counts"], expected_counts(expect))
    stays = expect.ending_codon if expect.outcome in ("stopped", "budget-stopped") else None
    d.check("summary text", "left", summary["left"], stays)
    d.check("summary text", "failed", summary["failed"], set(expect.failures))
    status = json.loads(lab.weft("status", lab.execution, "--json").stdout)
    newest = status["runs"][0]
    d.check("summary text", "outcome (status)", newest["status"], expect.outcome)
    wanted = json_money(newest["cost"], newest["unpricedCodons"])
    d.check("summary text", "cost (status's newest run)", summary["run_cost"], wanted)
    d.assert_none(label)


# --------------------------------------------------------------------------- scenarios


Scenario = Callable[[Lab], Iterator[Moment]]


def completed(lab: Lab) -> Iterator[Moment]:
    hank = lab.hank(codon("a", write_file("a.md", "a")), codon("b", write_file("b.md", "b")))
    yield Moment(
        Expect(
            "completed",
            {"a": "completed", "b": "completed"},
            state="completed",
            runs=("completed",),
            next=None,
            exit=0,
        ),
        lab.run(hank),
    )


def three(b: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    return (codon("a", write_file("a.md", "a")), b, codon("c", write_file("c.md", "c")))


def failed_abort(lab: Lab) -> Iterator[Moment]:
    hank = lab.hank(*three(codon("b", scenario("auth_error"))))
    yield Moment(
        Expect(
            "failed",
            {"a": "completed", "b": "failed", "c": "not run"},
            state="failed",
            runs=("failed",),
            next=None,
            exit=1,
            ending_codon="b",
            failures={"b": (1, 1, "failed")},
        ),
        lab.run(hank),
    )


def failed_ignore(lab: Lab) -> Iterator[Moment]:
    hank = lab.hank(*three(codon("b", scenario("auth_error"), onFailure="ignore")))
    # The run goes on past b: completed (exit 0), b's failure listed.
    yield Moment(
        Expect(
            "completed",
            {"a": "completed", "b": "failed", "c": "completed"},
            state="completed",
            runs=("completed",),
            next=None,
            exit=0,
            failures={"b": (1, 1, "failed")},
        ),
        lab.run(hank),
    )


POLICY_ONLY = {"WEFT_RUNTIME_SESSION_MAX_TOTAL_ERRORS": "1"}
"""The session supervisor gives up at the first failure, so the hank's ``onFailure``
acts on it."""


def failed_retry(lab: Lab) -> Iterator[Moment]:
    retry = {"maxAttempts": 2, "delayMs": 0}
    b = codon("b", scenario("crash_mid_run"), onFailure="retry", retryConfig=retry)
    hank = lab.hank(*three(b))
    # Both attempts fail: b failed for good, listed once (2 of 2 attempts failed).
    yield Moment(
        Expect(
            "failed",
            {"a": "completed", "b": "failed", "c": "not run"},
            state="failed",
            runs=("failed",),
            next=None,
            exit=1,
            ending_codon="b",
            failures={"b": (2, 2, "failed")},
        ),
        lab.run(hank, env=POLICY_ONLY),
    )


def retry_recovers(lab: Lab) -> Iterator[Moment]:
    retry = {"maxAttempts": 3, "delayMs": 1500}
    b = codon("b", prompt_file="prompts/b.md", onFailure="retry", retryConfig=retry)
    first_try = write_file("tried.md", "1") + scenario("crash_mid_run")
    hank = lab.hank(*three(b), files={"prompts/b.md": first_try})
    proc = lab.start(hank, env=POLICY_ONLY)
    # The first attempt wrote tried.md before it crashed; the prompt is read again for
    # the retry (1.5 s later), which then succeeds.
    wait_for(
        lambda: list(lab.managed.glob("*/agentRoot/tried.md")), timeout=TIMEOUT, what="b's try"
    )
    (lab.root / "hank" / "prompts" / "b.md").write_text(write_file("b.md", "b"))
    yield Moment(
        Expect(
            "completed",
            {"a": "completed", "b": "completed", "c": "completed"},
            state="completed",
            runs=("completed",),
            next=None,
            exit=0,
            failures={"b": (1, 2, "completed")},
        ),
        lab.ended(proc),
    )


def budget_stop(lab: Lab) -> Iterator[Moment]:
    hank = lab.hank(codon("a"), codon("b"))
    # Lines paced: a's first message crosses the cap and the stop lands before its result.
    slow = {"FAKE_AGENT_LINE_DELAY_MS": "300"}
    yield Moment(
        Expect(
            "budget-stopped",
            {"a": "stopped", "b": "not run"},
            state="budget-stopped",
            runs=("budget-stopped",),
            next="a",
            exit=3,
            ending_codon="a",
        ),
        lab.run(hank, "--max-cost", "0.001", env=slow),
    )
    # A higher cap goes on exactly there: a again, then b.
    yield Moment(
        Expect(
            "completed",
            {"a": "completed", "b": "completed"},
            state="completed",
            runs=("budget-stopped", "completed"),
            next=None,
            exit=0,
        ),
        lab.run(hank, "--max-cost", "5"),
    )


def stop_hank(lab: Lab) -> Path:
    """a; b writes b.md then hangs (its prompt a file, to let it succeed later); c."""
    b = codon("b", prompt_file="prompts/b.md", files=["b.md"])
    hang = write_file("b.md", "half") + scenario("hang_after_init")
    return lab.hank(*three(b), files={"prompts/b.md": hang})


def user_stop(lab: Lab, how: signal.Signals = signal.SIGINT) -> Iterator[Moment]:
    hank = stop_hank(lab)
    proc = lab.start(hank)
    lab.running("b", "b.md")
    proc.send_signal(how)
    yield Moment(
        Expect(
            "stopped",
            {"a": "completed", "b": "stopped", "c": "not run"},
            state="stopped",
            runs=("stopped",),
            next="b",
            exit=128 + how,
            ending_codon="b",
        ),
        lab.ended(proc),
    )


def sigterm_stop(lab: Lab) -> Iterator[Moment]:
    return user_stop(lab, signal.SIGTERM)


def crash_and_resume(lab: Lab) -> Iterator[Moment]:
    hank = stop_hank(lab)
    proc = lab.start(hank)
    b = lab.running("b", "b.md")
    lab.orphans.append(b["claudePid"])
    proc.kill()
    lab.ended(proc)
    # Nothing marked the crash yet: status says so; ls and ui say crashed; the
    # thread shows the run still running (its codon b too) and nothing next until
    # the next run marks it.
    yield Moment(
        Expect(
            "crashed (not yet marked)",
            {"a": "completed", "b": "running", "c": "not run"},
            state="crashed",
            runs=("crashed (not yet marked)",),
            next="b",
            snapshot_behind=True,
        )
    )
    (lab.root / "hank" / "prompts" / "b.md").write_text(write_file("b.md", "whole"))
    yield Moment(
        Expect(
            "completed",
            {"a": "done earlier", "b": "completed", "c": "completed"},
            state="completed",
            runs=("crashed", "completed"),
            next=None,
            exit=0,
        ),
        lab.run(hank),
    )


def rollback(lab: Lab) -> Iterator[Moment]:
    hank = lab.hank(*three(codon("b", write_file("b.md", "b"))))
    first = lab.run(hank)
    assert first.code == 0, first.stdout + first.stderr
    back = lab.weft("rollback", lab.execution, "--codon", "a")
    assert back.code == 0, back.stdout + back.stderr
    # The rollback records a run that continues after a and ends before it runs
    # anything, as a live rollback ends a run: stopped by you, b (and c) to do. weft
    # status lists it after the first run, whose a, b and c completed (status lists
    # runs, not the thread); ls and ui say rolled-back; the thread's newest run with
    # codons is the first one, b and c superseded, next b.
    yield Moment(
        Expect(
            "stopped",
            {"a": "done earlier", "b": "done earlier", "c": "done earlier"},
            state="rolled-back",
            runs=("completed", "stopped"),
            next="b",
            ending_codon="b",
            thread_word="completed",
            thread_codons={"a": "completed", "b": "not run", "c": "not run"},
        )
    )
    yield Moment(
        Expect(
            "completed",
            {"a": "done earlier", "b": "completed", "c": "completed"},
            state="completed",
            runs=("completed", "stopped", "completed"),
            next=None,
            exit=0,
        ),
        lab.run(hank),
    )


def unpriced(lab: Lab) -> Iterator[Moment]:
    hank = lab.hank(codon("a", model=UNPRICED), codon("b", model=UNPRICED))
    yield Moment(
        Expect(
            "completed",
            {"a": "completed", "b": "completed"},
            state="completed",
            runs=("completed",),
            next=None,
            exit=0,
            priced=False,
        ),
        lab.run(hank),
    )


def manual(lab: Lab) -> Iterator[Moment]:
    """--no-autostart: a started over the WebSocket, then the run is stopped
    (``server.shutdown``) while it waits before b, a ``weft attach --json`` watching."""
    hank = lab.hank(codon("a", write_file("a.md", "a")), codon("b", write_file("b.md", "b")))
    proc = lab.start(hank, "--no-autostart")
    attach: list[subprocess.Popen[str]] = []
    first: list[str] = []
    try:
        asyncio.run(_drive_manual(lab, attach, first))
        run = lab.ended(proc)
        watched = attach[0]
        rest, err = watched.communicate(timeout=TIMEOUT)
        out = "".join(first) + rest
    finally:
        for p in attach:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert "Traceback" not in out + err, err
    yield Moment(
        Expect(
            "stopped",
            {"a": "completed", "b": "not run"},
            state="stopped",
            runs=("stopped",),
            next="b",
            exit=130,
            ending_codon="b",
        ),
        run,
        attach=Run(watched.returncode, out, err),
    )


def last_seq(execution: Path) -> int:
    """The journal's last sequence number."""
    store = ExecutionStore.open(execution, readonly=True)
    try:
        return int(store.journal.last_seq())
    finally:
        store.journal.close()


async def _drive_manual(lab: Lab, attach: list[subprocess.Popen[str]], first: list[str]) -> None:
    execution = await asyncio.to_thread(lambda: lab.execution)
    weft_dir = execution / ".weft"
    lock = await asyncio.to_thread(
        wait_for,
        lambda: (info := read_lock(weft_dir / "runtime.lock")) is not None and info.port and info,
        timeout=TIMEOUT,
        what="the run's server",
    )
    async with (
        asyncio.timeout(TIMEOUT),
        connect(f"ws://127.0.0.1:{lock.port}", token=read_token(weft_dir)) as client,
    ):
        async for event in client.events(replay=True):
            if event.type != "server.idle":
                continue
            if event.data["reason"] == "startup":
                await client.command("codon.next")
                continue
            # Waiting before b: a watcher joins, then the run is stopped.
            watcher = subprocess.Popen(
                lab.argv("attach", execution, "--json"),
                env=lab.env,
                cwd=lab.root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            attach.append(watcher)
            assert watcher.stdout is not None
            # Stopped once the watcher has replayed the journal and follows live: a
            # watcher still replaying when the run ends loses it ("the server ended the
            # stream during a history sync", exit 1), a race of the server's.
            last = await asyncio.to_thread(last_seq, execution)
            while True:
                line = await asyncio.to_thread(watcher.stdout.readline)
                assert line, "weft attach ended before it replayed the journal"
                first.append(line)
                if json.loads(line).get("seq", -1) >= last:
                    break
            await client.command("server.shutdown")
            break


SCENARIOS: dict[str, tuple[Scenario, bool]] = {
    "completed": (completed, True),
    "failed-abort": (failed_abort, True),
    "failed-ignore": (failed_ignore, True),
    "failed-retry": (failed_retry, True),
    "retry-recovers": (retry_recovers, False),
    "budget-stop": (budget_stop, True),
    "user-stop": (user_stop, True),
    "sigterm-stop": (sigterm_stop, False),
    "crash-and-resume": (crash_and_resume, False),
    "rollback": (rollback, False),
    "unpriced": (unpriced, True),
    "manual": (manual, False),
}
"""name -> (the scenario, whether a text twin reads its ``--headless`` summary too; the
runs that end the others as completed or stopped are worded as those twins' are)."""


def play(lab: Lab, scenario_of: Scenario) -> list[Moment]:
    """Runs a scenario, checking every moment as it comes (later ones change the state)."""
    moments = []
    try:
        for i, moment in enumerate(scenario_of(lab)):
            label = f"{lab.mode} moment {i + 1} ({moment.expect.outcome})"
            if lab.mode == "json":
                check_moment(lab, moment, label)
            elif moment.run is not None:
                check_text_summary(lab, moment, label)
            moments.append(moment)
    finally:
        for pid in lab.orphans:
            if pid_running(pid):
                os.kill(pid, signal.SIGKILL)
    return moments


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_surface_reports_the_same_facts(tmp_path: Path, name: str) -> None:
    # The same scenario twice, side by side: weft run --json (every surface read) and
    # weft run --headless (its text summary read).
    scenario_of, twin = SCENARIOS[name]
    labs = [Lab(tmp_path / mode, mode) for mode in ("json", "text")[: 1 + twin]]
    with ThreadPoolExecutor(len(labs)) as pool:
        done = [pool.submit(play, lab, scenario_of) for lab in labs]
        for future in done:
            future.result()
