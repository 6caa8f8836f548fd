"""The runtime of ``weft run``: four rooms, one job each.

* :mod:`~weft.runtime.execution`: execution directories (folders, metadata, the
  data slot, which execution a run uses and whether it may resume);
* :mod:`~weft.runtime.rig`: rig setup (copies, commands, ignore rules);
* :mod:`~weft.runtime.run`: the run (its machine and driver, steering,
  recovery and rollback);
* :mod:`~weft.runtime.codon`: one codon's attempt by phase (prepare, the agent's
  session under the supervisor, finish).
"""
