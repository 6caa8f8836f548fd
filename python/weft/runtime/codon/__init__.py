"""One codon's attempt, by phase.

* :mod:`~weft.runtime.codon.runner`: :class:`~weft.runtime.codon.runner.CodonRunner`,
  an attempt from ``preparing`` to a terminal state, and its interrupts; by
  phase: :mod:`~weft.runtime.codon.prepare` (rig setup, prompt, spawn),
  :mod:`~weft.runtime.codon.session` (the agent's session under the supervisor,
  extensions), :mod:`~weft.runtime.codon.finish` (every way it ends), on
  :mod:`~weft.runtime.codon.base` (settings and plumbing they share);
* :mod:`~weft.runtime.codon.attempt`: the request, the attempt's state, its result;
* :mod:`~weft.runtime.codon.sessions`: the session supervisor (seed 002) driving
  an agent process; :mod:`~weft.runtime.codon.breakers`: the providers' circuit breakers;
* :mod:`~weft.runtime.codon.agent_events`: the agent's events turned into the
  codon's transitions and stream events; :mod:`~weft.runtime.codon.file_updates`:
  the files it wrote;
* :mod:`~weft.runtime.codon.outputs` and :mod:`~weft.runtime.codon.archive`: its
  output files and archives once it succeeded.
"""
