"""``weft store rebuild [execution] [--from-snapshot]``: rebuild state.json from
the journal alone, or (``--from-snapshot``) a lost journal from the newest snapshot."""

from __future__ import annotations

import argparse
from typing import Any

from weft.cli.resolve import EXECUTION_HELP, resolve_execution
from weft.store import ExecutionStore, rebuild, weft_dir_of
from weft.store.restore import restore_from_snapshot
from weft.store.snapshot import write_snapshot


def register(commands: Any) -> None:
    """Adds the ``store`` command group."""
    parser = commands.add_parser("store", help="maintain an execution's store")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    rebuild_parser = actions.add_parser(
        "rebuild",
        help="rebuild state.json from the journal",
        description="Rebuild state.json by replaying the whole journal; the old snapshot "
        "becomes state.json.bak. With --from-snapshot, the other way round: when the journal "
        "lost events, move its files aside and start a new journal from the newest usable "
        "snapshot (the events after that snapshot stay lost). Refused while a Weft process "
        "runs on the execution.",
    )
    rebuild_parser.add_argument(
        "--from-snapshot",
        action="store_true",
        help="restore a lost or damaged journal from state.json (else state.json.bak)",
    )
    rebuild_parser.add_argument("execution", nargs="?", default=None, help=EXECUTION_HELP)
    rebuild_parser.set_defaults(run=run_rebuild)


def run_rebuild(args: argparse.Namespace) -> int:
    """Replays the journal into a fresh state and saves it as state.json."""
    if args.from_snapshot:
        restored = restore_from_snapshot(weft_dir_of(resolve_execution(args.execution)))
        print(restored.message)
        return 0
    store = ExecutionStore.open(resolve_execution(args.execution))
    try:
        core = rebuild(store.journal)
        write_snapshot(store.weft_dir, core.snapshot_json())
        print(
            f"rebuilt {store.weft_dir / 'state.json'} from {store.journal.count()} journal "
            f"events (through seq {store.journal.last_seq()})"
        )
    finally:
        store.journal.close()
        if store.lock is not None:
            store.lock.release()
    return 0
