"""Rig setup: a codon's ``rigSetup`` before its agent starts.

* :mod:`~weft.runtime.rig.setup`: the operations in order, their results and
  checkpoint, skipping and failing;
* :mod:`~weft.runtime.rig.copy`: ``copy`` operations (with
  :mod:`~weft.runtime.rig.ignore`'s rules);
* :mod:`~weft.runtime.rig.command`: ``command`` operations as supervised
  processes, their output (:mod:`~weft.runtime.rig.output`);
* :mod:`~weft.runtime.rig.results`: what each operation did, for events and records.
"""
