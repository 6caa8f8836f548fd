"""Sentinels: LLM observers that watch a codon's events and write about them.

The pieces, each with one job (a sans-I/O core, thin I/O around it):

* :mod:`~weft.sentinels.conditions`: trigger conditions compiled into
  predicates, with JavaScript's comparison rules;
* :mod:`~weft.sentinels.jsregex`: ``matches`` patterns in JavaScript's syntax,
  translated for the linear-time engine (``weft._core.Pattern``) or refused;
* :mod:`~weft.sentinels.triggers`: the trigger engine, without I/O or clock:
  event and sequence triggers, the strategies (immediate, debounce, count,
  timeWindow), the bounded event buffer and trigger queue;
* :mod:`~weft.sentinels.template` (with :mod:`~weft.sentinels.jsvalues`):
  Eta prompt templates run by a safe interpreter of the JavaScript subset
  sentinel prompts use (the module says why not an embedded JS engine);
* :mod:`~weft.sentinels.providers`: ``provider/model`` ids to the official
  ``anthropic`` and ``openai`` SDKs (Google through its OpenAI-compatible
  endpoint) and the scripted ``fake`` provider; usage priced from
  :mod:`weft.agents.pricing`;
* :mod:`~weft.sentinels.outputs`: structured-output schemas (JSON Schema,
  never Zod code), the log and last-value files, inside their folders;
* :mod:`~weft.sentinels.events`: the ``sentinel.*`` event types (typed
  stream events of :mod:`weft.events.stream`, journaled like any other);
* :mod:`~weft.sentinels.config`: a sentinel config file on its own, and a
  codon's entries resolved against the configs the hank loader checked;
* :mod:`~weft.sentinels.checks`: what ``weft validate`` adds: trigger event
  types and condition paths against the event schemas, and whether each
  sentinel would load (provider, key);
* :mod:`~weft.sentinels.manager`: one codon's sentinels: load, feed, process
  serially per sentinel, drain, unload, failure thresholds, SentinelState;
* :mod:`~weft.sentinels.host`: ``weft run``'s side: a manager per codon, fed
  from the StateManager's committed events, its states turned into
  ``SentinelStatesUpdated``, its events journaled.

Design notes. The engine is fed committed events only (durable before
visible), in journal order, and never sentinel or connection events. Every
time it needs is passed in, so its tests drive time by hand; the manager owns
the one timer. Model calls are the slow part: each sentinel has a worker that
takes its triggers one at a time, while the engine keeps routing (the queue
of 100 triggers per sentinel drops the oldest when a model cannot keep up).
``docs/sentinels.md`` is the user's guide.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weft.sentinels.config import attach, load_sentinel_config
    from weft.sentinels.manager import AttachedSentinel, CodonInfo, LoadFailure, SentinelManager
    from weft.sentinels.providers import ProviderRegistry
    from weft.sentinels.template import TemplateError, compile_template
    from weft.sentinels.triggers import SentinelSpec, Trigger, TriggerEngine

_HOMES = {
    "attach": "config",
    "load_sentinel_config": "config",
    "AttachedSentinel": "manager",
    "CodonInfo": "manager",
    "LoadFailure": "manager",
    "SentinelManager": "manager",
    "ProviderRegistry": "providers",
    "TemplateError": "template",
    "compile_template": "template",
    "SentinelSpec": "triggers",
    "Trigger": "triggers",
    "TriggerEngine": "triggers",
}
"""Where each name lives: loaded on first use, so that importing
:mod:`weft.sentinels.host` (which every ``weft run`` does) does not load the
managers, templates and providers (about 50 ms) for a hank without sentinels."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'weft.sentinels' has no attribute {name!r}")
    return getattr(importlib.import_module(f"weft.sentinels.{home}"), name)


__all__ = [
    "AttachedSentinel",
    "CodonInfo",
    "LoadFailure",
    "ProviderRegistry",
    "SentinelManager",
    "SentinelSpec",
    "TemplateError",
    "Trigger",
    "TriggerEngine",
    "attach",
    "compile_template",
    "load_sentinel_config",
]
