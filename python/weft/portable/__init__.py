"""Portable executions: one file that carries an execution to another machine.

``weft export EXECUTION -o run.weftx`` and ``weft import run.weftx`` move an
execution whole: its journal, state, checkpoints, logs, work tree and the
agents' session transcripts, and the hank it runs, so that ``weft status``,
``thread``, ``checkpoints``, ``logs``, ``diff`` and the dashboard read it there
and ``weft run --execution`` continues it. The pieces:

* :mod:`weft.portable.members`: what an archive may hold (pure): the names of
  its members, each checked before anything is written, so no member can
  reach outside the folder it is imported into;
* :mod:`weft.portable.export`: the archive: a gzip'd tar with a manifest
  (``weft-archive.json``: the format, the Weft version, the execution and each
  member's sha256), the journal by SQLite's backup (consistent even while a run
  writes it) and the checkpoint repository self-contained (a fork's objects
  read through git alternates are included);
* :mod:`weft.portable.restore`: the import: every member checked against the
  manifest, extracted with the standard library's ``data`` filter into a
  hidden folder beside the destination and renamed into place, the execution's
  metadata pointed at the imported hank, the transcripts filed for the new
  work tree.
"""
