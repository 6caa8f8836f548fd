"""``weft batch retry WS/STEP --reopen``: a step of an abandoned workstream runs
again in a new attempt of the workstream, audited as a real move with its number;
a plain retry there is refused (exit 1, stderr) and names the option."""

from __future__ import annotations

from pathlib import Path

from tests.batch.support import Driver, write_batch
from tests.batch.test_cli import states, weft
from tests.runtime.hanks import subprocess_environment

from weft.batch.scheduler import Scheduler
from weft.batch.store import BatchStore


def test_retry_reopen_starts_a_new_attempt_of_an_abandoned_workstream(tmp_path: Path) -> None:
    doc = {
        "workstreams": [
            {
                "id": "w",
                "steps": [
                    {"id": "a", "command": ["sh", "-c", "test -e ok"]},
                    {"id": "b", "command": ["true"], "depends_on": ["a"]},
                ],
            }
        ]
    }
    path = write_batch(tmp_path, doc)
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    first = weft(env, "run", str(path), "--headless")
    assert first.returncode == 1, first.stdout + first.stderr
    assert states(state_dir)["w"] == "S_ABANDONED"

    refused = weft(env, "retry", str(path), "w/a")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert "S_ABANDONED (terminal)" in refused.stderr
    assert "weft batch retry FILE w/a --reopen" in refused.stderr

    (tmp_path / "ok").touch()  # what made the step fail is fixed
    reopened = weft(env, "retry", str(path), "w/a", "--reopen")
    assert reopened.returncode == 0, reopened.stderr
    assert "reopened (S_ABANDONED -> S_RUNNING, attempt 2" in reopened.stdout
    with BatchStore.open(state_dir, writer=False) as store:
        rows = [t for t in store.transitions() if t["from"] == "S_ABANDONED"]
    assert len(rows) == 1
    assert rows[0]["step_id"] is None
    assert rows[0]["to"] == "S_RUNNING"
    assert rows[0]["metadata"]["attempt"] == 2
    assert rows[0]["metadata"]["reopened"] is True

    done = weft(env, "run", str(path), "--headless")
    assert done.returncode == 0, done.stdout + done.stderr
    got = states(state_dir)
    assert got["w"] == "S_SUCCESS"
    assert got["w/a"] == ("S_SUCCESS", 2)
    assert got["w/b"] == ("S_SUCCESS", 1)
    status = weft(env, "status", str(path))
    assert status.returncode == 0, status.stdout + status.stderr
    assert "reopened by the user for step a: attempt 2" in status.stdout


def test_each_reopening_numbers_its_attempt_and_withdraws_an_abandon_request(
    tmp_path: Path,
) -> None:
    doc = {"workstreams": [{"id": "w", "max_retries": 1, "steps": [{"id": "a", "command": ["x"]}]}]}
    d = Driver.open(tmp_path, doc)
    d.run({"w/a": [1, 1]})
    assert d.states()["w"] == "S_ABANDONED"
    for attempt in (2, 3):
        # A scheduler made again from the store, as each command's process makes one.
        d.scheduler = Scheduler(d.store.load())
        assert d.store.load().workstreams[0].attempt == attempt - 1
        changes, line = d.scheduler.retry_step("w/a", reopen=True)
        assert f"attempt {attempt}" in line
        d.commit(changes)
        row = d.store.load().workstreams[0]
        assert (row.state, row.attempt, row.retry_count) == ("S_RUNNING", attempt, 0)
        d.run({"w/a": [1, 1]})  # the new attempt has its workstream retry again
        assert d.states()["w"] == "S_ABANDONED"
    # Abandoned by request while its step ran: the request is withdrawn on reopening.
    d.scheduler = Scheduler(d.store.load())
    d.commit(d.scheduler.retry_step("w/a", reopen=True)[0])
    d.now += 120_000  # six failures in a row opened tool x's breaker: past its cool-down
    assert d.tick() == ["w/a"]
    d.commit(d.scheduler.request_abandon("w")[0])
    d.tick()
    d.finish("w/a", 1)
    assert d.states()["w"] == "S_ABANDONED"
    assert d.store.load().workstreams[0].abandon_requested
    d.scheduler = Scheduler(d.store.load())
    changes, line = d.scheduler.retry_step("w/a", reopen=True)
    assert "attempt 5" in line
    d.commit(changes)
    assert not d.store.load().workstreams[0].abandon_requested, "the old request is withdrawn"
    d.run()
    assert d.states()["w"] == "S_SUCCESS"


def test_reopen_is_refused_for_a_step_not_failed_and_plain_retry_works_unchanged(
    tmp_path: Path,
) -> None:
    doc = {"workstreams": [{"id": "w", "steps": [{"id": "a", "command": ["x"]}]}]}
    d = Driver.open(tmp_path, doc)
    changes, line = d.scheduler.retry_step("w/a", reopen=True)
    assert changes == []
    assert "only a step in S_FAILED is retried" in line
