"""Fake agent CLIs: ``fake-claude``, ``fake-codex`` and ``fake-gemini``.

No model is reachable from the machines Weft is tested on, so these programs
stand in for Claude Code (``claude -p --output-format stream-json``), Codex
(``codex exec --json``) and Gemini CLI (``gemini -p ... --output-format
stream-json``). They take the real command lines, speak the real wire formats
(reference agent-cli-protocols.md §1-§3), keep real transcripts so sessions
can be resumed, and play scripted failure scenarios (§7) chosen by a prompt
directive or an environment variable. Directives in the prompt also make them
change files in their working directory, so checkpoints and sentinels see
real work. ``docs/fake-agents.md`` is the user guide.

The package is standard library only and imports nothing else from Weft, so a
fake starts in a few tens of milliseconds.

Modules: :mod:`.common` (settings, ids, clock, errors), :mod:`.output` (the
step runner: line writing, delays, signals), :mod:`.argv` (CLI-style argument
parsing with variadic flags), :mod:`.directives` (the prompt directive
language and the file operations), :mod:`.script` (script mode),
:mod:`.pricing` (the Claude price table), :mod:`.scenarios` (the transport
scenarios shared by all flavours), the flavours :mod:`.claude` (with
:mod:`.claude_tools`, :mod:`.claude_session` and :mod:`.claude_stream`),
:mod:`.codex` and :mod:`.gemini`, and :mod:`.cli` (entry points).
"""
