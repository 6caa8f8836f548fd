"""``fake-claude --input-format stream-json``: many turns in one process (§1.8).

Stdin carries NDJSON user messages; each one is a turn that ends with its
own ``result`` line, and the process exits at EOF. ``system/init`` comes once,
before the first turn. The result of each turn reports the session's
running totals (cost, usage and turns so far). ``control_request`` lines
(the SDK's control protocol) get a success ``control_response``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

from weft.agents.fake import directives as dirs
from weft.agents.fake.claude import open_run
from weft.agents.fake.claude_options import ClaudeOptions, resolve_model
from weft.agents.fake.common import (
    Clock,
    JsonObj,
    Settings,
    make_rng,
    write_record,
)
from weft.agents.fake.output import Emit, Exit, Runner, Stderr, Step
from weft.agents.fake.scenarios import Context, choose_scenario


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def run_stream_input(opts: ClaudeOptions, settings: Settings, argv: list[str]) -> int:
    """Serve turns from stdin until EOF."""
    rng = make_rng(settings, "claude", argv, "")
    clock = Clock(virtual=settings.seed is not None)
    runner = Runner(settings, clock, rng)
    runner.install_signals(sigint_graceful=True)
    ctx = Context(
        flavour="claude",
        settings=settings,
        argv=argv,
        rng=rng,
        clock=clock,
        runner=runner,
        cwd=os.getcwd(),
        prompt="",
        directives=dirs.parse(""),
        scenario="success",
        params={},
    )
    session, run = open_run(ctx, opts, resolve_model(opts.model_arg, settings))
    received: list[str] = []
    write_record(settings, "claude", argv, "", {"prompt": None})

    def turns() -> Iterator[Step]:
        if session.missing:
            yield from run.resume_missing()
            return
        while True:
            raw = runner.interruptible_call(sys.stdin.buffer.readline)
            if not raw:
                return
            text = raw.decode("utf-8", "replace")
            received.append(text)
            write_record(settings, "claude", argv, "".join(received), {"prompt": None})
            line = text.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except json.JSONDecodeError as exc:
                yield Stderr(f"Error parsing streaming input line: {line[:200]}: {exc.msg}\n")
                yield Exit(1)
                return
            if not isinstance(message, dict):
                continue
            kind = message.get("type")
            if kind == "control_request":
                yield Emit(_control_response(message))
                continue
            if kind != "user":
                continue
            body = message.get("message")
            prompt = _content_text(body.get("content") if isinstance(body, dict) else None)
            if opts.replay:
                echo: JsonObj = {
                    "type": "user",
                    "message": {"role": "user", "content": prompt},
                    "session_id": run.session_id,
                    "parent_tool_use_id": None,
                    "uuid": run.ids.uuid4(),
                }
                yield Emit(echo)
            ctx.prompt = prompt
            ctx.directives = dirs.parse(prompt)
            ctx.scenario, ctx.params = choose_scenario(ctx.directives, settings)
            run.params = ctx.params
            run.background_done = False  # one background call per prompt (before 2.1.330)
            run.toolbox.outcomes.clear()
            if ctx.scenario == "multi_turn_stdin":
                ctx.scenario = "success"
            yield from run.steps()

    return runner.run(turns(), run.abort)


def _control_response(request: JsonObj) -> JsonObj:
    inner = request.get("request")
    subtype = inner.get("subtype") if isinstance(inner, dict) else None
    response: JsonObj = {}
    if subtype == "initialize":
        response = {"commands": [], "output_style": "default", "available_output_styles": []}
    return {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "request_id": request.get("request_id"),
            "response": response,
        },
    }
