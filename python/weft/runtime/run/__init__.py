"""The run: how one ``weft run`` is controlled.

* :mod:`~weft.runtime.run.machine`: the run machine, a pure decider over
  steering commands, codon ends, signals, budget crossings and refusals; it
  holds the run's control state and returns effect values. The runtime's
  run loop, steering commands and signal handler are its thin driver.
"""
