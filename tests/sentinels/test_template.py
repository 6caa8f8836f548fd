"""Eta templates with the JS subset of Hankweave's sentinel prompts."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weft.sentinels.template import STEP_LIMIT, TemplateError, compile_template


def render(source: str, it: dict[str, Any] | None = None) -> str:
    return compile_template(source, "prompt.md").render(it or {})


EVENTS = [
    {
        "type": "tool.result",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "data": {"toolName": "Bash", "result": "y" * 150, "isError": True},
    },
    {"type": "token.usage", "data": {"cost": 0.125, "inputTokens": 10}},
]
IT = {
    "events": EVENTS,
    "codon": {"id": "c1", "name": "Build", "description": "builds", "startTime": "t0"},
    "world": {"currentTime": "2026-01-01T00:00:05.000Z"},
}


def test_json_stringify_matches_javascripts_layout() -> None:
    out = render("<%= JSON.stringify(it.events, null, 2) %>", IT)
    assert out == json.dumps(EVENTS, indent=2)
    assert render("<%= JSON.stringify({a: [1, 2.0, 'x'], b: undefined}) %>") == '{"a":[1,2,"x"]}'
    assert render("<%= JSON.stringify([]) %>|<%= JSON.stringify({}, null, 2) %>") == "[]|{}"


def test_optional_chains_and_defaults() -> None:
    assert render("<%= it.events[0]?.data?.cost || 0 %>", {"events": []}) == "0"
    assert render("<%= it.events[1]?.data?.cost || 0 %>", IT) == "0.125"
    assert render("<%= it.missing?.a.b.c ?? 'none' %>", IT) == "none"
    with pytest.raises(
        TemplateError,
        match=r"prompt.md: line 1: cannot read properties of undefined \(reading 'b'\)",
    ):
        render("<%= it.missing.b %>", IT)


def test_loops_and_substring_in_the_reference_shape() -> None:
    source = (
        "Codon <%= it.codon.name %> at <%= it.world.currentTime %>\n"
        "<% for (const event of it.events) { -%>\n"
        "- <%= event.type %>: <%= JSON.stringify(event.data).substring(0, 20) %>\n\n"
        "<% } %>"
        "done"
    )
    assert (
        render(source, IT)
        == (
            "Codon Build at 2026-01-01T00:00:05.000Z"  # Eta eats the newline after each tag
            "- tool.result: " + '{"toolName":"Bash","' + "\n"
            "- token.usage: " + '{"cost":0.125,"input' + "\n"
            "done"
        )
    )


def test_whitespace_control() -> None:
    assert render("a\n<%_ _%>\n  b") == "ab"
    assert render("a\n<%- -%>\nb") == "ab"
    assert render("a\n<% %>\nb") == "a\nb"


def test_expressions() -> None:
    cases = {
        "<%= 1 + 2 * 3 %>": "7",
        "<%= '1' + 2 %>": "12",
        "<%= 7 / 2 %>|<%= 7 % 4 %>|<%= 1 / 0 %>": "3.5|3|Infinity",
        "<%= 0.1 + 0.2 %>": "0.30000000000000004",
        "<%= (2.5).toFixed(2) %>": "2.50",
        "<%= [1, 2, 3].map(x => x * 2).filter((x) => x > 2).join('-') %>": "4-6",
        "<%= [3, 1].reduce((a, b) => a + b, 10) %>": "14",
        "<%= `n=${1 + 1}, s=${'x'.toUpperCase()}` %>": "n=2, s=X",
        "<%= 1 === 1.0 %>|<%= 1 == '1' %>|<%= null == undefined %>|<%= 1 === '1' %>": (
            "true|true|true|false"
        ),
        "<%= typeof nothing %>|<%= typeof 'a' %>|<%= typeof [] %>": "undefined|string|object",
        "<%= Object.keys({a: 1, b: 2}).length %>": "2",
        "<%= Math.max(1, 5, 3) %>|<%= Math.round(2.5) %>|<%= Math.floor(-1.5) %>": "5|3|-2",
        "<%= 'abcdef'.slice(-3) %>|<%= 'abc'.substring(2, 0) %>": "def|ab",
        "<% let t = 0; for (let i = 0; i < 5; i++) { if (i === 3) break; t += i } %><%= t %>": "3",
        (
            "<% const xs = [1,2,3]; let s = '' %>"
            "<% for (const x of xs) { if (x === 2) { continue } else { s += x } } %><%= s %>"
        ): "13",
        "<%= true ? 'y' : 'n' %>|<%= !'' %>|<%= [] ? 1 : 2 %>": "y|true|1",
        "<%= parseInt('42px') + parseFloat('1.5') %>": "43.5",
        "<%= String(null) + Number('3') %>": "null3",
        "<%= ((x) => { const y = x + 1; return y * 2 })(1) %>": "4",
    }
    for source, want in cases.items():
        assert render(source) == want, source


def test_function_expressions_work_wherever_arrows_do() -> None:
    cases = {
        "<%= [1, 2, 3].map(function (x) { return x * 2 }).join('-') %>": "2-4-6",
        "<%= [1, 2, 3].filter(function (x, i) { return i > 0 }).length %>": "2",
        "<%= [3, 1].reduce(function (a, b) { return a + b; }, 10) %>": "14",
        "<%= (function () { })() %>|<%= typeof function () {} %>": "|function",
        "<%= (function (a, b) { return b })(1) %>": "",
        # A named function expression sees itself; a declaration is hoisted in its block.
        "<%= (function f(n) { return n < 2 ? 1 : n * f(n - 1) })(5) %>": "120",
        "<%= twice(4) %><% function twice(x) { return x * 2 } %>": "8",
        "<% const k = 3; const add = function (x) { return x + k } %><%= add(1) %>": "4",
    }
    for source, want in cases.items():
        assert render(source) == want, source


def test_hankweaves_function_callback_spans_tags() -> None:
    """Hankweave's extension-activity-tracker: a ``function`` callback whose body
    is template text (commit c46c448 of its tests/config/sentinel-triggers/)."""
    source = (
        "Actions (<%- it.events.length %> total):\n"
        "<% it.events.forEach(function(event, i) { %>\n"
        "<%= i+1 %>. <%= event.data.content ? event.data.content.substring(0, 5) : '(none)' %>\n"
        "<% }); %>\nEnd"
    )
    it = {"events": [{"data": {"content": "abcdefgh"}}, {"data": {}}]}
    # As in Eta, `<%-` prints nothing and every tag eats the newline after it.
    assert render(source, it) == "Actions ( total):\n1. abcde2. (none)End"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("<%= new Date() %>", "line 1: 'new' is not supported"),
        ("a\n\n<%= it.x( %>", "line 3: unexpected '%>'"),
        ("<%= require('fs') %>", "'require' is not supported"),
        ("<% for (const e of it.events) { %>", "expected '}'"),
        ("<%= 'abc %>", "a string is never closed"),
        ("<%= it.codon %", "never closed with %>"),
        ("<%= this.constructor %>", "'this' is not supported"),
        ("<% function (x) { return x } %>", "a function statement needs a name"),
        ("<%= [1].map(function (x) x) %>", "expected '{'"),
    ],
)
def test_bad_templates_say_where(source: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        render(source, IT)


def test_no_python_attribute_is_reachable() -> None:
    assert render("<%= it.codon.__class__ %>|<%= 'x'.__len__ %>|<%= [].__class__ %>", IT) == "||"
    assert render("<%= it.events.constructor %>|<%= it.codon.constructor %>", IT) == "|"


def test_a_loop_that_never_ends_is_stopped() -> None:
    start = time.monotonic()
    with pytest.raises(TemplateError, match=f"more than {STEP_LIMIT:,} steps"):
        render("<% for (;;) { } %>")
    assert time.monotonic() - start < 30


def test_ten_thousand_events_render_quickly() -> None:
    events = [{"type": "tool.result", "data": {"i": i, "text": "z" * 50}} for i in range(10_000)]
    template = compile_template(
        "<% for (const e of it.events) { %><%= e.data.text.substring(0, 10) %>,<% } %>"
    )
    start = time.monotonic()
    out = template.render({"events": events})
    assert out.count(",") == 10_000
    assert time.monotonic() - start < 5


@settings(max_examples=200)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_stringify_round_trips_any_json(value: Any) -> None:
    assert (
        json.loads(render("<%= JSON.stringify(it.v, null, 2) %>", {"v": value}) or "null") == value
    )
