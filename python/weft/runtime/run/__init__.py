"""The run: one ``weft run`` from its start to its journaled outcome.

* :mod:`~weft.runtime.run.machine`: the run machine, a pure decider over
  steering commands, codon ends, signals, budget crossings and refusals; it
  holds the run's control state and returns effect values;
* :mod:`~weft.runtime.run.runtime`: :class:`~weft.runtime.run.runtime.Runtime`,
  startup and shutdown in seed 001's order, signals, the refusal watch;
* :mod:`~weft.runtime.run.loop`: the machine's driver: codons under their
  failure policy (:mod:`~weft.runtime.run.policy`), rewinds, the run's end;
* :mod:`~weft.runtime.run.steering`: the server's commands, checked by the machine;
* :mod:`~weft.runtime.run.state`: what the parts share (options, cursor, outcome)
  and how the machine's effects are carried out;
* :mod:`~weft.runtime.run.recovery`, :mod:`~weft.runtime.run.rollback`,
  :mod:`~weft.runtime.run.replan`, :mod:`~weft.runtime.run.survivors`: the start
  of a run after a crash, a stop or a changed hank (seed 003), and rollbacks.
"""
