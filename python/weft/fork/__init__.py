"""Forks: a new execution whose history up to a codon is another's.

``weft fork SOURCE --from CODON`` (and ``weft run --reuse``) make an execution
that starts where SOURCE stood when CODON began, then runs CODON and what
follows with another hank, model or prompt; SOURCE is never written to. The
pieces:

* :mod:`weft.fork.clone`: the copy. The journal is copied with SQLite's
  backup (a consistent snapshot, also of a live source), the checkpoint
  repository shares the source's objects (git alternates: refs are copied,
  objects are not), the work tree and the agents' session transcripts are
  copied (a transcript's folder is named after the work tree's path, so it is
  renamed for the fork's), and ``execution-meta.json`` records the source
  (``forkedFrom``). Then the fork is rolled back to the start of CODON with the
  rollback every execution has (:mod:`weft.runtime.run.rollback`): the work tree
  is restored to CODON's start checkpoint and the next run continues there.
  The whole fork is made in a temporary folder beside its destination and
  renamed into place, so a crash leaves no fork or a usable one.
* :mod:`weft.fork.reuse`: which codon of an execution a changed hank is the
  first to differ at (its inputs: the resolved codon, prompt file included,
  and its model), the fork point of ``weft run --reuse``.
* :mod:`weft.fork.diff`: two executions (forks of one, or any two) compared
  codon by codon along their threads, their completion checkpoints' files,
  the totals and where they diverge: ``weft diff A B`` (pure; the command in
  :mod:`weft.cli.diff` reads and prints).
* :mod:`weft.fork.forecast`: what a run of a hank will cost and take (each
  codon's median and 90th percentile from the earlier executions of the hank,
  priced from their tokens for a new model), for ``weft run --dry-run`` and the
  ceiling check of :mod:`weft.cli.forecast`.
"""
