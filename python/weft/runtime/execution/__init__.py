"""Execution directories: where a run lives and how ``weft run`` picks it.

* :mod:`~weft.runtime.execution.prepare`: resolving, creating or resuming an
  execution (the resume choice, a changed hank, the run-shaping settings kept
  with it), :class:`~weft.runtime.execution.prepare.PreparedExecution`;
* :mod:`~weft.runtime.execution.layout`: the folders of one execution;
* :mod:`~weft.runtime.execution.meta`: its metadata file (hank, data, settings);
* :mod:`~weft.runtime.execution.basedir`: the managed root of executions;
* :mod:`~weft.runtime.execution.datalink` and
  :mod:`~weft.runtime.execution.datahash`: the data slot and its fingerprint;
* :mod:`~weft.runtime.execution.errors`: what goes wrong setting one up.
"""
