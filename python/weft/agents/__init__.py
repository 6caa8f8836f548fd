"""Agent harnesses: drive Claude Code, Codex and Gemini CLIs as subprocesses.

:mod:`weft.agents.events` holds the normalised events every adapter yields;
:mod:`weft.agents.harness` the protocol an adapter implements and the routing
from a model id to a harness. This package imports nothing heavy, so the
fake agents in :mod:`weft.agents.fake` start fast.
"""
