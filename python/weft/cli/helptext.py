"""The end of every ``weft COMMAND --help``: examples, then the exit codes.

One table for all commands, applied by :func:`add_epilogs` once the parser is
built, so each command's module only declares its arguments. A command added
without an entry here still gets the exit codes.

Both tables are keyed by the command's full path after ``weft`` (``"run"``,
``"batch run"``): a sub-command never borrows the entry of a top-level command
that happens to share its name (``weft batch run`` is not ``weft run``).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["COMMAND_EXIT_CODES", "EXAMPLES", "EXIT_CODES", "add_epilogs", "epilog"]

_PIPE_CLOSED = """\
  141  the reader of the output went away (weft ls | head): the command stopped
       writing, quietly; a run goes on to its end and keeps its own code"""

EXIT_CODES = f"""\
exit codes:
  0    success
  1    the run failed, or the store cannot be used
  2    usage or configuration error (nothing was run)
  130  interrupted by Ctrl-C (SIGINT); what was saved stays saved: run again to continue
{_PIPE_CLOSED}
  143  stopped by SIGTERM; likewise"""

_RUN_EXIT_CODES = f"""\
exit codes:
  0    completed: every codon done (a codon whose onFailure is ignore may have failed:
       the summary says which); also when there was nothing to do
  1    failed: a codon failed for good (the summary says which and why), or the run could
       not go on (the store cannot be used, the disk is full)
  2    usage or configuration error (nothing was run)
  3    stopped by the budget ceiling (--max-cost, --max-tokens, --max-time, runtime
       settings, overrides.budget) with work left: the cut codon stays to do; raise the
       ceiling and run the same command to continue exactly there
  130  stopped by you (Ctrl-C, q, server.shutdown); what was saved stays saved: run the same
       command to continue
{_PIPE_CLOSED}
  143  stopped by SIGTERM; likewise"""

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "weft": (
        ("weft init demo", "a starter hank in demo/, on the fake agent"),
        ("weft run demo", "run it"),
        ("weft ls", "list the executions, newest first"),
        ("weft status demo", "the latest execution of that hank"),
    ),
    "run": (
        ("weft run", "run ./hank.json (resumes its execution if it has one)"),
        ("weft run hank.json data/", "run a hank on a data folder"),
        ("weft run -m fake/sonnet --headless", "every codon on the fake agent, CI output"),
        ("weft run --execution DIR", "continue an execution with its own hank"),
        ("weft run --new", "start over in a new execution"),
    ),
    "status": (
        ("weft status", "the latest execution of ./hank.json"),
        ("weft status path/to/hank.json", "the latest execution of that hank"),
        ("weft status 1795601048577 --json", "an execution by id (or prefix), as JSON"),
    ),
    "thread": (
        ("weft thread", "the history of the latest execution of ./hank.json"),
        ("weft thread DIR --json", "an execution's thread as JSON"),
    ),
    "checkpoints": (
        ("weft checkpoints", "checkpoints of the latest execution of ./hank.json"),
        ("weft checkpoints DIR --json", "as JSON"),
    ),
    "rollback": (
        ("weft rollback --last-success", "back to the newest confirmed success"),
        ("weft rollback --codon plan", "back to the end of codon plan"),
        ("weft rollback DIR --checkpoint 1a2b3c", "back to a checkpoint of DIR"),
    ),
    "fork": (
        ("weft fork --from build", "run build and what follows again in a copy of the latest"),
        ("weft fork DIR --from review -m fake/opus", "the same from review, on another model"),
        ("weft fork DIR --from plan --hank edited.json --no-run", "an edited hank, run later"),
    ),
    "diff": (
        ("weft diff A B", "two executions (two forks of one) codon by codon"),
        ("weft diff A B --files", "with the patch of the files their codons left differently"),
        ("weft diff A B --json", "the same facts as one JSON document"),
    ),
    "export": (
        ("weft export", "the latest execution of ./hank.json as ./<id>.weftx"),
        ("weft export DIR -o run.weftx", "an execution into run.weftx"),
    ),
    "import": (
        ("weft import run.weftx", "restore it under the managed root"),
        ("weft import run.weftx --to DIR", "restore it in DIR"),
    ),
    "replay": (
        ("weft replay", "the latest execution of ./hank.json, at its recorded pace"),
        ("weft replay DIR --speed 10 --headless", "ten times faster, as plain lines"),
        ("weft replay DIR --speed 0 --json", "every event at once, as JSON lines"),
    ),
    "store": (("weft store rebuild", "rebuild state.json from the journal"),),
    "validate": (
        ("weft validate", "check ./hank.json"),
        ("weft validate path/to/hank.json --json", "the structure or the problems as JSON"),
        ("weft validate -m fake/sonnet", "check as if every codon ran on the fake agent"),
    ),
    "pack": (
        ("weft pack -o demo.hank", "./hank.json and every file it references, in demo.hank"),
        ("weft pack path/to/hank.json -o x.hank", "another hank (then: weft run x.hank data/)"),
    ),
    "schema": (("weft schema -o hank.schema.json", "the JSON Schema for editors"),),
    "init": (("weft init my-hank", "a starter hank in my-hank/"),),
    "agents": (
        ("weft agents", "installed agent CLIs and routing rules"),
        ("weft agents sonnet fake/gpt-5", "where these model ids run"),
    ),
    "attach": (
        ("weft attach", "watch the running execution of ./hank.json"),
        ("weft attach DIR --readonly", "watch without steering"),
    ),
    "ls": (
        ("weft ls", "every execution, newest first"),
        ("weft ls --hank ./hank.json", "only the executions of this hank"),
        ("weft ls --state failed --json", "failed ones, as JSON"),
    ),
    "logs": (
        ("weft logs", "what the agents of ./hank.json's latest execution said"),
        ("weft logs DIR --tools --thinking", "with tool calls and thinking"),
    ),
    "export-trace": (
        ("weft export-trace DIR", "send every run's trace to OTEL_EXPORTER_OTLP_ENDPOINT"),
        ("weft export-trace --endpoint http://localhost:4318", "./hank.json's latest execution"),
    ),
    "show": (
        ("weft show plan", "codon plan of ./hank.json's latest execution"),
        ("weft show build DIR --json", "as JSON lines"),
    ),
    "completion": (
        (
            "weft completion bash > ~/.local/share/bash-completion/completions/weft",
            "bash",
        ),
        ('weft completion zsh > "${fpath[1]}/_weft"', "zsh (then restart the shell)"),
        ("weft completion fish > ~/.config/fish/completions/weft.fish", "fish"),
    ),
    "clean": (
        ("weft clean --dry-run", "what would be removed"),
        ("weft clean", "remove completed executions"),
        ("weft clean --state failed --older-than 7d", "failed ones unused for a week"),
    ),
    "batch": (
        ("weft batch run sweep.toml", "run (or resume) a batch file's workstreams"),
        ("weft batch status sweep.toml", "states, costs, breakers and the audit trail"),
        ("weft batch schema > batch.schema.json", "the batch file's JSON Schema"),
    ),
    "batch run": (
        ("weft batch run sweep.toml", "run it, live view on a terminal"),
        ("weft batch run sweep.toml --headless --junit out.xml", "CI: lines and JUnit XML"),
        ("weft batch run sweep.toml --workers 4 --json", "4 steps at once, JSON lines"),
        ("weft batch run sweep.toml --engine ray --address HOST:6379", "on a Ray cluster"),
    ),
    "batch resume": (
        ("weft batch resume sweep.toml", "continue after the coordinator stopped or died"),
        ("weft batch resume sweep.toml --state-dir DIR", "a batch kept in DIR"),
    ),
    "batch status": (
        ("weft batch status sweep.toml", "states, costs, breakers, the audit trail"),
        ("weft batch status sweep.toml --json", "the same as JSON"),
    ),
    "batch abandon": (("weft batch abandon sweep.toml flaky", "stop workstream flaky"),),
    "batch retry": (
        ("weft batch retry sweep.toml flaky/fetch", "start failed step fetch over"),
        ("weft batch retry sweep.toml flaky/fetch --reopen", "the same in an abandoned workstream"),
    ),
    "batch drain": (("weft batch drain sweep.toml", "running steps finish, nothing new starts"),),
    "batch skip": (("weft batch skip sweep.toml flaky/fetch", "let fetch's dependents run"),),
    "batch reset-breaker": (
        ("weft batch reset-breaker sweep.toml upstream", "close tool upstream's breaker"),
    ),
    "batch rebuild": (
        ("weft batch rebuild sweep.toml", "a damaged store made again from the step folders"),
    ),
    "batch schema": (("weft batch schema > batch.schema.json", "the batch file's JSON Schema"),),
    "batch validate": (("weft batch validate sweep.toml", "every problem, nothing run"),),
}
"""Each command's examples, keyed by its path after ``weft``: the command line,
and what it does."""

_BATCH_RUN_EXIT_CODES = """\
exit codes:
  0    every workstream succeeded
  1    a workstream failed or was abandoned, or another coordinator runs this batch
  2    usage error, a bad batch file or an unusable batch store (nothing was run)
  3    drained (the first Ctrl-C, or weft batch drain FILE): the running steps finished,
       nothing new started; weft batch run FILE goes on
  130  Ctrl-C again while draining; running steps stay S_RUNNING: weft batch resume FILE
  143  stopped by SIGTERM; likewise"""

_BATCH_COMMAND_EXIT_CODES = """\
exit codes:
  0    applied, or sent to the running coordinator (its answer is printed)
  1    refused: the target is in no state for it (why, on stderr)
  2    usage error, a name the batch does not have, no batch store there (run the
       batch first), or a damaged one"""

COMMAND_EXIT_CODES: dict[str, str] = {
    "run": _RUN_EXIT_CODES,
    "batch run": _BATCH_RUN_EXIT_CODES,
    "batch resume": _BATCH_RUN_EXIT_CODES,
    "batch status": """\
exit codes:
  0    the batch's states are consistent (whatever they are)
  1    inconsistent states found (Recovery 4; printed)
  2    usage error, no batch store there (run the batch first), or a damaged one
       (what was found is printed, and weft batch rebuild FILE)""",
    "batch abandon": _BATCH_COMMAND_EXIT_CODES,
    "batch retry": _BATCH_COMMAND_EXIT_CODES,
    "batch skip": _BATCH_COMMAND_EXIT_CODES,
    "batch reset-breaker": _BATCH_COMMAND_EXIT_CODES,
    "batch drain": """\
exit codes:
  0    the running coordinator drains (its answer is printed); it then exits 3
  1    refused: no coordinator runs this batch, or it is already draining (on stderr)
  2    usage error, no batch store there (run the batch first), or a damaged one""",
    "batch rebuild": """\
exit codes:
  0    rebuilt (what was kept and what runs again is printed), or the store is sound
  1    a coordinator runs this batch
  2    usage error, a bad batch file, no batch there, or a step folder that is no step of it""",
    "batch schema": """\
exit codes:
  0    printed
  2    usage error""",
    "batch validate": """\
exit codes:
  0    valid
  2    usage error, or a bad batch file (every problem printed)""",
}
"""Exit codes of the commands whose codes are not :data:`EXIT_CODES`, keyed like
:data:`EXAMPLES`."""


def epilog(command: str) -> str:
    """The examples (when there are some) and the exit codes of ``command``
    (its path after ``weft``: ``"run"``, ``"batch run"``)."""
    codes = COMMAND_EXIT_CODES.get(command, EXIT_CODES)
    examples = EXAMPLES.get(command, ())
    if not examples:
        return codes
    width = max(len(line) for line, _ in examples)
    lines = [f"  {line.ljust(width)}  {what}" for line, what in examples]
    return "examples:\n" + "\n".join(lines) + "\n\n" + codes


def add_epilogs(commands: argparse._SubParsersAction[Any], path: str = "") -> None:
    """Ends the help of every command (and sub-command) with its examples and
    exit codes, looked up by the command's full path (``path`` is its parent's)."""
    for name, parser in commands.choices.items():
        if parser.epilog and "exit codes:" in parser.epilog:
            continue  # an alias seen twice, or a command that wrote its own
        full = f"{path} {name}".strip()
        parser.epilog = epilog(full)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        for action in parser._actions:  # argparse has no public accessor
            if isinstance(action, argparse._SubParsersAction):
                add_epilogs(action, full)
