"""Usage windows in a batch: which providers each step needs, and which are closed.

A provider whose usage window is closed (:mod:`weft.windows`) refuses every
session until it opens; a step launched then would only learn it again. So the
coordinator launches no step that needs a closed provider and wakes when the
window opens. The pieces:

* :func:`step_providers`: the providers a step's launch calls: those of its
  hank's codons (each codon's model, or the step's ``model`` override, routed
  to its harness: ``claude`` -> ``anthropic``, ...), and its ``tool`` read as a
  harness or provider name (``tool = "claude"`` or ``"anthropic"`` on a command
  step that calls the API itself);
* :class:`WindowWatch`: the closed windows at a time, from the user's
  :class:`~weft.windows.WindowRegistry`, read again only when its file changed
  (one ``stat`` per coordinator turn).

The scheduler stays pure: it gets the providers once and the closed windows
with the time at every tick (:meth:`weft.batch.scheduler.Scheduler.tick`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from weft.windows.registry import WindowRegistry

__all__ = ["PROVIDERS_META", "WindowWatch", "step_providers", "steps_providers"]

PROVIDERS_META = "step_providers"
"""The store's ``meta`` key holding each step's providers (JSON), written by the
coordinator so ``weft batch status`` need not load the hanks again."""


def _provider(name: str) -> str:
    from weft.runtime.codon.breakers import provider_of

    return provider_of(name)


def step_providers(
    plan: Mapping[str, Any], cache: dict[tuple[str, str | None], frozenset[str]] | None = None
) -> frozenset[str]:
    """The providers a launch of the step ``plan`` (its stored plan) calls.

    A hank that no longer loads counts for its tool only: the launch itself
    will report the hank's problem, which a window would only delay."""
    found = {_provider(str(plan.get("tool", "")))}
    hank = plan.get("hank")
    if hank is not None:
        model = plan.get("model")
        key = (str(hank), model if isinstance(model, str) else None)
        if cache is None or key not in cache:
            codons = _hank_providers(*key)
            if cache is None:
                return frozenset(found | codons)
            cache[key] = codons
        found |= cache[key]
    return frozenset(found)


def _hank_providers(hank: str, model: str | None) -> frozenset[str]:
    from weft.agents.harness import route
    from weft.config.loader import load_hank
    from weft.errors import ConfigError

    try:
        loaded = load_hank(hank, model=model, check_environment=False)
    except (ConfigError, OSError):
        return frozenset()
    out: set[str] = set()
    for codon, _loop in loaded.codons():
        try:
            out.add(_provider(route(codon.model).harness))
        except (ValueError, TypeError):
            continue
    return frozenset(out)


def steps_providers(plans: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, list[str]]:
    """:func:`step_providers` of every ``(key, plan)``, each hank loaded once."""
    cache: dict[tuple[str, str | None], frozenset[str]] = {}
    return {key: sorted(step_providers(plan, cache)) for key, plan in plans}


@dataclass
class WindowWatch:
    """The closed windows of :attr:`registry`, its file read again only when it changed."""

    registry: WindowRegistry = field(default_factory=WindowRegistry.default)
    _seen: tuple[int, int, int] | None = field(default=None, repr=False)
    _resets: dict[str, int] = field(default_factory=dict, repr=False)
    reads: int = 0
    """How many times the file was read (the test of "cheaply")."""

    def closed(self, now_ms: int) -> dict[str, int]:
        """Each provider closed at ``now_ms``, with when it opens (epoch ms)."""
        try:
            st = os.stat(self.registry.path)
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            seen = None
        if seen is None:
            self._resets = {}
        elif seen != self._seen:
            self.reads += 1
            # Every entry, closed or not at this time: expired ones are dropped below.
            self._resets = {w.provider: w.resets_at_ms for w in self.registry.all_closed(0)}
        self._seen = seen
        return {p: at for p, at in self._resets.items() if at > now_ms}
