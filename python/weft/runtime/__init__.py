"""The runtime: executions, rig setup, the codon runner and the supervisor of ``weft run``."""
