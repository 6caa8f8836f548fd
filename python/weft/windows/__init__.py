"""Usage windows: a subscription's provider refuses sessions until a time it names.

Claude Code on a subscription reports the account's usage window on every
turn (``rate_limit_event``: ``allowed``, ``allowed_warning``, ``rejected``,
with ``resetsAt``). A rejected window is not an error to retry every few
seconds, nor a permanent failure: nothing will succeed before ``resetsAt``,
and everything may after it. The pieces:

* :mod:`weft.windows.park`: the pure decision. Given a closed window, the
  clock and the settings (``usageWindow.marginMs``, ``usageWindow.maxWaitMs``),
  park until the reset plus the margin, or refuse to wait that long.
* :mod:`weft.windows.registry`: the closed windows every Weft process of the
  user sees (one small JSON file, 0600, replaced atomically under a lock), so
  the next codon, another ``weft run`` and ``weft batch`` hold back instead of
  spending a session to learn the window is still closed.

The codon runner parks a codon on a rejected window (``codon.parked``, the
session machine's ``Parked`` state, no error counted) and resumes the same
session when it opens; ``weft batch`` launches no step for a provider whose
window is closed.
"""
