"""SIGKILL torture of ``weft run``: killed at random moments, resumed, and
in the end exactly what an uninterrupted run makes.

One execution of a hank with a rig setup (a copy and a command appending to
the copy and to an uncovered file), shell tools that append to covered and
uncovered files (the first codon's tool leaves a process in the background
that appends to a covered file 3 s later, unless it is ended),
a ``continue-previous`` codon and a loop is killed with SIGKILL
:data:`KILLS` times, the first kills aimed at the first codon, some right
after the start (a resume killed while it recovers). After every kill:

* the journal opens (integrity check) and its seqs are gapless;
* ``state.json`` is the fold of the journal up to the seq it records;
* ``weft status --json`` (every few kills) shows the runs and codons of that fold;
* once a later run has started, no process of a dead run is alive (``/proc``).

At the end the execution completes, each planned codon is on the execution
thread exactly once, completed, in plan order, and the covered files of the
work tree and the last checkpoint's tree equal those of an uninterrupted run.
The random seed is in every failure message.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.oracle import OracleCore
from tests.runtime.hanks import (
    checkpoint_tree,
    codon,
    loop,
    pid_running,
    read_state,
    subprocess_environment,
    weft_run_argv,
    write_hank,
)

from weft import core
from weft.store import Journal

SEED = 20260314
KILLS = 25
AIMED_AT_FIRST_CODON = 8
"""The first kills land while the first codon runs (after its CodonStarted)."""
TIMEOUT = 60.0
UNCOVERED = ("scratch.txt", "rig-uncovered.txt")
"""Files no pattern covers: every attempt's appends stay (not promised equal)."""


def append(path: str, text: str) -> str:
    return f"@@fake:append path={path} content={json.dumps(text)}@@\n"


def bash(command: str) -> str:
    return f"@@fake:bash@@ {command} @@end@@\n"


def torture_hank(directory: Path) -> Path:
    files = ["**/*.md", "site/**"]
    return write_hank(
        directory,
        codon(
            "setup",
            append("log.md", "line c01\n")
            + bash(
                "echo tool c01 >> log.md; echo x >> scratch.txt; "
                # In the agent's group: killed when the agent exits, so an
                # uninterrupted run never writes "late"; a dead run's survives
                # unless the next start ends it.
                "(sleep 3; echo late >> log.md) >/dev/null 2>&1 &"
            )
            + bash("sleep 0.3"),
            files=files,
            rigSetup=[
                {"type": "copy", "copy": {"from": "site-src", "to": "site"}},
                {
                    "type": "command",
                    "command": {"run": "echo rig >> site/rig.log; echo rig >> rig-uncovered.txt"},
                },
            ],
        ),
        codon(
            "cont",
            append("log.md", "line c02\n") + bash("echo y >> scratch.txt"),
            mode="continue-previous",
            files=files,
        ),
        loop(
            "lp",
            codon(
                "it",
                append("notes.md", "iteration\n")
                + bash("sleep 0.1; echo it >> site/iter.log; echo z >> scratch.txt"),
                files=files,
            ),
            limit=2,
        ),
        codon("final", append("final.md", "done\n"), files=files),
        files={"site-src/index.html": "<h1>site</h1>\n"},
    )


PLANNED = ["setup", "cont", "it#0", "it#1", "final"]


def start(hank: Path, execution: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        weft_run_argv(hank, execution),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def db_count(execution: Path, sql: str, *args: str) -> int:
    """One count from the journal, read-only, or 0 while it does not exist yet."""
    path = execution / ".weft" / "weft.db"
    if not path.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            (n,) = conn.execute(sql, args).fetchone()
            return int(n)
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def first_codon_started(execution: Path, runs_before: int) -> bool:
    """A run newer than the ``runs_before`` known has started the first codon."""
    runs = db_count(execution, "SELECT count(*) FROM events WHERE type = 'RunStarted'")
    if runs <= runs_before:
        return False
    return (
        db_count(
            execution,
            "SELECT count(*) FROM events WHERE type = 'CodonStarted' AND codon_id = 'setup' "
            "AND run_id = (SELECT run_id FROM events WHERE type = 'RunStarted' "
            "ORDER BY seq DESC LIMIT 1)",
        )
        > 0
    )


def first_codon_completed(execution: Path) -> bool:
    """The first codon completed in some run (no run starts it again)."""
    return (
        db_count(
            execution,
            "SELECT count(*) FROM events WHERE type = 'CodonTransitioned' AND codon_id = 'setup' "
            "AND json_extract(payload, '$.data.to') = 'completed'",
        )
        > 0
    )


def journal_rows(execution: Path) -> list[tuple[int, str, str, str]]:
    """(seq, kind, type, payload) of every row; checks integrity and gaplessness."""
    journal = Journal.open(execution / ".weft" / "weft.db", readonly=True)
    try:
        rows = [(e.seq, e.kind, e.type, e.payload) for page in journal.pages() for e in page]
        assert journal.count() == journal.last_seq() == len(rows), "the journal has a gap"
    finally:
        journal.close()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    return rows


def check_fold(execution: Path, rows: list[tuple[int, str, str, str]], where: str) -> None:
    """state.json is the fold of the journal up to the seq it records."""
    doc = json.loads((execution / ".weft" / "state.json").read_text())
    seq = doc["journalSeq"]
    assert seq <= len(rows), f"{where}: state.json is ahead of the journal"
    oracle = OracleCore()
    for row_seq, kind, _type, payload in rows:
        if row_seq > seq:
            break
        if kind == "transition":
            assert oracle.apply(payload.encode()).ok, f"{where}: seq {row_seq} refused by the fold"
    fold = oracle.state_dict()
    assert {k: doc.get(k) for k in fold} == fold, f"{where}: state.json is not the fold"


def check_status(execution: Path, env: dict[str, str], cwd: Path, where: str) -> None:
    """``weft status --json`` shows the runs and codons the journal folds to."""
    status = subprocess.run(
        [sys.executable, "-m", "weft", "status", "--json", str(execution)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert status.returncode == 0, f"{where}: {status.stdout}{status.stderr}"
    assert "Traceback" not in status.stderr
    shown = json.loads(status.stdout)
    state = read_state(execution)
    assert [
        (r["runId"], [(c["codonId"], c["status"]) for c in r["codons"]]) for r in shown["runs"]
    ] == [
        (r["runId"], [(c["codonId"], c["status"]) for c in r["codons"]]) for r in state["runs"]
    ], where


def open_groups(rows: list[tuple[int, str, str, str]]) -> dict[int, int]:
    """pid -> start ticks of every journaled process group not yet ended."""
    groups: dict[int, int] = {}
    for _, _, kind, payload in rows:
        data = json.loads(payload)["data"]
        if kind == "process.started":
            groups[data["pid"]] = data.get("startTicks", -1)
        elif kind == "process.ended":
            groups.pop(data["pid"], None)
    return groups


def live_members(groups: dict[int, int]) -> set[tuple[int, int]]:
    """(pid, start ticks) of every live process in one of ``groups`` that
    started no earlier than its group's leader."""
    out: set[tuple[int, int]] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        pgid, ticks, state = int(fields[2]), int(fields[19]), fields[0]
        if pgid in groups and state not in (b"Z", b"X") and ticks >= groups[pgid]:
            out.add((int(name), ticks))
    return out


def still_alive(members: set[tuple[int, int]]) -> set[int]:
    alive = set()
    for pid, ticks in members:
        if not pid_running(pid):
            continue
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        if int(raw[raw.rindex(b")") + 2 :].split()[19]) == ticks:
            alive.add(pid)
    return alive


def covered(execution: Path) -> dict[str, str]:
    root = execution / "agentRoot"
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("read_only_data_source") or rel in UNCOVERED or not path.is_file():
            continue
        out[rel] = path.read_text()
    return out


def thread_of(execution: Path) -> list[tuple[str, str, str | None]]:
    """(codon id, status, completion checkpoint) of the execution thread, oldest first."""
    state = read_state(execution)
    shas = {
        r[k]
        for run in state["runs"]
        for r in run["codons"]
        for k in ("completionCheckpoint", "rigSetupCheckpoint")
        if r.get(k)
    }
    thread = core.analyze_execution_thread(json.dumps(state), shas)
    return [
        (tc.codon_id, tc.status, tc.codon.get("completionCheckpoint"))
        for tc in reversed(list(thread.codons))
    ]


def run_to_end(hank: Path, execution: Path, env: dict[str, str], cwd: Path) -> str:
    child = start(hank, execution, env, cwd)
    out, _ = child.communicate(timeout=TIMEOUT)
    assert child.returncode == 0, out
    assert "Traceback" not in out, out
    return out


def test_sigkill_at_random_moments_ends_like_an_uninterrupted_run(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    env = subprocess_environment(tmp_path)
    hank = torture_hank(tmp_path / "hank")

    baseline = tmp_path / "baseline"
    started = time.monotonic()
    run_to_end(hank, baseline, env, tmp_path)
    full_run = time.monotonic() - started

    execution = tmp_path / "tortured"
    suspects: set[tuple[int, int]] = set()
    """Processes of dead runs, until a later run has started (and ended them)."""
    in_first = 0
    """Kills that found the first codon running."""
    for k in range(KILLS):
        where = f"kill {k + 1} of {KILLS} (seed {SEED})"
        runs_before = db_count(execution, "SELECT count(*) FROM events WHERE type = 'RunStarted'")
        child = start(hank, execution, env, tmp_path)
        if k < AIMED_AT_FIRST_CODON and not first_codon_completed(execution):
            deadline = time.monotonic() + TIMEOUT
            while not first_codon_started(execution, runs_before) and child.poll() is None:
                assert time.monotonic() < deadline, f"{where}: the first codon never started"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.35))
        elif k % 4 == 0:
            time.sleep(rng.uniform(0.05, 0.6))  # a resume killed while it recovers
        else:
            time.sleep(rng.uniform(0.3, full_run))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=TIMEOUT)
        assert "Traceback" not in out, f"{where}: {out}"
        if not (execution / ".weft" / "weft.db").exists():
            continue
        in_first += any(
            r["codonId"] == "setup" and r["status"] != "completed"
            for r in read_state(execution)["runs"][0]["codons"]
        )
        rows = journal_rows(execution)
        check_fold(execution, rows, where)
        if k % 8 == 7:
            check_status(execution, env, tmp_path, where)
        if db_count(execution, "SELECT count(*) FROM events WHERE type = 'RunStarted'") > (
            runs_before
        ):
            # This run got past recovery: whatever the dead runs left is gone.
            left = still_alive(suspects)
            assert not left, f"{where}: processes of a dead run survived recovery: {left}"
            suspects.clear()
        suspects |= live_members(open_groups(rows))
    assert in_first >= 3, f"only {in_first} kills found the first codon running"

    out = run_to_end(hank, execution, env, tmp_path)
    assert not still_alive(suspects), f"processes of a dead run outlived the last recovery: {out}"
    check_fold(execution, journal_rows(execution), "the end")
    check_status(execution, env, tmp_path, "the end")

    expected = thread_of(baseline)
    got = thread_of(execution)
    assert [(c, s) for c, s, _ in expected] == [(c, "completed") for c in PLANNED]
    assert [(c, s) for c, s, _ in got] == [(c, "completed") for c in PLANNED], f"seed {SEED}"
    assert covered(execution) == covered(baseline), f"seed {SEED}"
    last_expected, last_got = expected[-1][2], got[-1][2]
    assert last_expected is not None
    assert last_got is not None
    assert checkpoint_tree(execution, last_got) == checkpoint_tree(baseline, last_expected)
    # The uncovered files do keep the killed attempts' appends; Weft promises nothing there.
    assert (execution / "agentRoot" / "scratch.txt").exists()

    notes = [
        json.loads(payload)["data"]["message"]
        for _, _, kind, payload in journal_rows(execution)
        if kind == "info"
    ]
    restarts = sum(n.startswith("Starting over") for n in notes)
    ended = sum(n.startswith("Ended ") for n in notes)
    print(
        f"seed {SEED}: {KILLS} kills, {in_first} in the first codon, {restarts} clean restarts, "
        f"{ended} groups of dead runs ended"
    )
    assert restarts >= 1, "no kill led to a restart: the first codon was never hit"
