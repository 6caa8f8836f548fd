"""Moving an execution is quick (issue 37): export and import of a 1,000-codon execution.

The execution is made with the scale benchmark's in-process replay agent.
``weft.portable.export.export_execution`` and ``weft.portable.restore.import_archive``
are timed beside ``tar czf`` of the same folder (the baseline: what a user
would do by hand), in the same rounds. Asserted: each under 2 s.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from benches import test_bench_scale as scale
from weft.portable.export import export_execution
from weft.portable.restore import import_archive

CODONS = 1000
TARGET_SECONDS = 2.0
ROUNDS = 3


@pytest.mark.benchmark(group="portable")
@pytest.mark.timeout(900)
def test_export_and_import_of_a_1000_codon_execution(
    benchmark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scale, "CODONS", CODONS)
    _, db = scale._run(tmp_path)
    source = db.parent.parent
    exports, imports, tars = [], [], []
    for n in range(ROUNDS):
        started = time.perf_counter()
        subprocess.run(
            ["tar", "czf", str(tmp_path / f"plain-{n}.tgz"), "-C", str(source.parent), source.name],
            check=True,
        )
        tars.append(time.perf_counter() - started)
        started = time.perf_counter()
        archive = export_execution(source, tmp_path / f"x-{n}.weftx")
        exports.append(time.perf_counter() - started)
        started = time.perf_counter()
        import_archive(archive.path, tmp_path / f"imported-{n}")
        imports.append(time.perf_counter() - started)
    export_s, import_s, tar_s = (statistics.median(v) for v in (exports, imports, tars))
    benchmark.extra_info.update(export_s=export_s, import_s=import_s, tar_czf_s=tar_s)
    print(
        f"\n{CODONS} codons: export {export_s * 1000:.0f} ms, import {import_s * 1000:.0f} ms "
        f"(median of {ROUNDS}); tar czf {tar_s * 1000:.0f} ms; archive "
        f"{archive.bytes / 1e6:.1f} MB"
    )
    benchmark.pedantic(lambda: None, rounds=1)
    assert export_s < TARGET_SECONDS, f"export took {export_s:.2f} s"
    assert import_s < TARGET_SECONDS, f"import took {import_s:.2f} s"
