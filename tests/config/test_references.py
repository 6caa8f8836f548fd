"""``LoadedHank.references``: every file and folder the loader resolved and
checked, the list ``weft pack`` bundles (so it can never disagree with what
``weft validate`` accepted)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from weft.config import load_hank

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_references_are_every_checked_file_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "hank"
    shutil.copytree(EXAMPLES / "sentinels", root)
    doc = json.loads((root / "hank.json").read_text())
    doc["hank"][0]["rigSetup"] = [{"type": "copy", "copy": {"from": "seed", "to": "seed"}}]
    doc["globalSystemPromptFile"] = "system.md"
    (root / "hank.json").write_text(json.dumps(doc))
    (root / "seed").mkdir()
    (root / "seed" / "a.md").write_text("a")
    (root / "system.md").write_text("Be brief.")
    (root / "unrelated.md").write_text("not referenced")
    loaded = load_hank(root / "hank.json", check_environment=False)
    real = root.resolve()
    assert [p.relative_to(real).as_posix() for p in loaded.references] == [
        "prompts/migrate.md",
        "seed",
        "sentinels/cost-report.schema.json",
        "sentinels/cost-watch.json",
        "sentinels/file-watch.json",
        "sentinels/narrator.json",
        "sentinels/prompts/narrator-system.md",
        "sentinels/prompts/narrator-user.md",
        "system.md",
    ]


def test_a_hank_referencing_nothing_has_no_references(tmp_path: Path) -> None:
    doc = {
        "hank": [
            {"id": "a", "name": "A", "model": "fake/sonnet", "continuationMode": "fresh",
             "promptText": "Hello."}
        ]
    }  # fmt: skip
    (tmp_path / "hank.json").write_text(json.dumps(doc))
    assert load_hank(tmp_path / "hank.json", check_environment=False).references == ()
