"""The live view draws one row per workstream with its progress and cost."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from tests.batch.support import Driver, command_step

from weft.batch.coordinator import Coordinator
from weft.batch.engine import LocalEngine
from weft.cli.batch_view import LiveBatchView


def test_the_view_shows_states_progress_and_waiting_steps(tmp_path: Path) -> None:
    doc = {
        "workstreams": [
            {"id": "first", "steps": [command_step("a"), command_step("b", "a")]},
            {"id": "second", "steps": [command_step("a")]},
        ]
    }
    driver = Driver.open(tmp_path, doc, workers=1)
    driver.tick()
    driver.finish("first/a", 0)
    driver.tick()
    coordinator = Coordinator(driver.store, LocalEngine(), workers=1)
    coordinator.waiting = {"second/a": "waiting for a free worker"}
    console = Console(record=True, width=120, force_terminal=False)
    console.print(LiveBatchView(coordinator, console=console).render())
    text = console.export_text()
    first = next(line for line in text.splitlines() if line.startswith("first"))
    assert "S_RUNNING" in first
    assert "1/2" in first
    assert "second/a: waiting for a free worker" in text
    assert "cost so far $0.0000" in text
