"""Eta-style prompt templates, evaluated by a safe interpreter of a JS subset.

Hankweave's sentinel prompts are Eta templates: text with ``<%= expr %>``
(output), ``<%~ expr %>`` (output), ``<% code %>`` (statements) and
whitespace control (``<%-`` / ``-%>`` trim a newline, ``<%_`` / ``_%>`` all
whitespace; as in Eta, every tag also eats one newline after it). The code is
JavaScript. This module parses the template and its code once
(:func:`compile_template`) into Python closures and runs them on a context
(``it.events``, ``it.codon``, ``it.world``).

The subset is what prompt templates use: literals (numbers, strings, template
literals, arrays, objects), ``it`` paths with ``.``, ``?.``, ``[]``, calls,
arrow functions (expression or block bodies), ``function`` expressions and
declarations (``function (event, i) { ... return x; }``, named or not, declarations
hoisted to the top of their block; no ``this`` or ``arguments``), the operators (``+ - * / %``,
comparisons, ``=== !== == !=``, ``&& || ??``, ``! typeof``, ``?:``), ``const``
/ ``let`` / ``var``, assignment and ``+=``, ``++``, ``if``/``else``,
``for (const x of xs)``, ``for (let i = 0; i < n; i++)``, ``break``,
``continue``, and the globals ``JSON.stringify``/``parse``, ``Math.*``,
``Object.keys``/``values``/``entries``, ``String``, ``Number``, ``Boolean``,
``Array.isArray``, ``parseInt``, ``parseFloat``, ``isNaN``, with the string,
array and number methods of :mod:`weft.sentinels.jsvalues`. Anything else
(``new``, classes, ``require``, ``this``) is a :class:`TemplateError` that
names the line.

Why an interpreter here rather than a JavaScript engine from PyPI: the
engines (QuickJS, V8 through mini-racer) are native wheels of 1-40 MB whose
sandbox is only as good as the bindings, and each call crosses into the engine
with the whole event list re-encoded; the subset prompts use is small, and
an interpreter that only knows JSON values and a fixed table of methods has
no way to reach a file, a socket or Python's objects. Every evaluation has a
step budget (:data:`STEP_LIMIT`) and an output budget (:data:`OUTPUT_LIMIT`),
so ``for (;;) {}`` is an error, not a hang.

Output of ``<%= %>`` is not HTML-escaped (Eta's ``autoEscape`` is off): a
prompt is not a web page, and escaping would turn every quote of
``JSON.stringify`` into ``&quot;``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from weft.sentinels.jsvalues import (
    UNDEFINED,
    JsFunction,
    TemplateError,
    get_member,
    js_equal,
    js_loose_equal,
    js_number,
    js_string,
    json_stringify,
    truthy,
    type_of,
)

__all__ = ["OUTPUT_LIMIT", "STEP_LIMIT", "Template", "TemplateError", "compile_template"]

STEP_LIMIT: Final = 2_000_000
"""Expressions and loop turns one rendering may evaluate: far above what a
prompt over 10,000 events needs, low enough that a runaway loop fails in
about a second."""
OUTPUT_LIMIT: Final = 20_000_000
"""Characters one rendering may produce (a prompt beyond this is a mistake)."""

# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str
    """``num``, ``str``, ``tpl``, ``name``, ``op``, ``text``, ``out``,
    ``end`` (a tag's close) or ``eof``."""
    value: Any
    line: int


_PUNCT = sorted(
    [
        "===",
        "!==",
        "...",
        "?.",
        "??",
        "=>",
        "==",
        "!=",
        "<=",
        ">=",
        "&&",
        "||",
        "++",
        "--",
        "+=",
        "-=",
        "*=",
        "/=",
        "{",
        "}",
        "(",
        ")",
        "[",
        "]",
        ";",
        ",",
        ".",
        "<",
        ">",
        "+",
        "-",
        "*",
        "/",
        "%",
        "!",
        "?",
        ":",
        "=",
    ],
    key=len,
    reverse=True,
)
_NUMBER = re.compile(r"(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


def _trim_after(text: str, mode: str) -> str:
    if mode == "_":
        return text.lstrip()
    return re.sub(r"^(?:\r\n|\n|\r)", "", text)


def _trim_before(text: str, mode: str) -> str:
    if mode == "_":
        return text.rstrip()
    if mode == "-":
        return re.sub(r"(?:\r\n|\n|\r)$", "", text)
    return text


class _Lexer:
    """Splits a template into text and code tokens."""

    def __init__(self, source: str, name: str) -> None:
        self.src = source
        self.name = name
        self.toks: list[Tok] = []

    def line_at(self, pos: int) -> int:
        return self.src.count("\n", 0, pos) + 1

    def error(self, pos: int, message: str) -> TemplateError:
        return TemplateError(f"{self.name}, line {self.line_at(pos)}: {message}")

    def run(self) -> list[Tok]:
        src, pos, trim_next = self.src, 0, ""
        while pos < len(src):
            start = src.find("<%", pos)
            text = src[pos:] if start < 0 else src[pos:start]
            text = _trim_after(text, trim_next) if trim_next else text
            if start < 0:
                if text:
                    self.toks.append(Tok("text", text, self.line_at(pos)))
                break
            after = start + 2
            left = src[after] if after < len(src) and src[after] in "-_" else ""
            after += len(left)
            kind = "code"
            if after < len(src) and src[after] in "=~":
                kind = "out"
                after += 1
            text = _trim_before(text, left)
            if text:
                self.toks.append(Tok("text", text, self.line_at(pos)))
            close = self._code(after)
            right = src[close - 1] if src[close - 1] in "-_" else ""
            if kind == "out":
                self.toks.insert(self._code_start, Tok("out", None, self.line_at(start)))
            self.toks.append(Tok("end", kind, self.line_at(close)))
            pos = close + 2
            trim_next = right or "-"  # Eta's autoTrim: [false, "nl"]
        self.toks.append(Tok("eof", None, self.line_at(len(src))))
        return self.toks

    _code_start = 0

    def _code(self, pos: int) -> int:
        """Tokenizes code from ``pos`` to its ``%>``; returns the position of ``%>``."""
        src = self.src
        self._code_start = len(self.toks)
        while True:
            while pos < len(src) and src[pos].isspace():
                pos += 1
            if pos >= len(src):
                raise self.error(pos, "a tag opened with <% is never closed with %>")
            if src.startswith("%>", pos):
                return pos
            if src[pos] in "-_" and src.startswith("%>", pos + 1):
                return pos + 1
            if src.startswith("//", pos):
                end = src.find("\n", pos)
                close = src.find("%>", pos)
                if close >= 0 and (end < 0 or close < end):
                    return close if src[close - 1] not in "-_" else close - 1
                pos = len(src) if end < 0 else end
                continue
            if src.startswith("/*", pos):
                end = src.find("*/", pos + 2)
                if end < 0:
                    raise self.error(pos, "a /* comment is never closed")
                pos = end + 2
                continue
            pos = self._token(pos)

    def _token(self, pos: int) -> int:
        src, line = self.src, self.line_at(pos)
        ch = src[pos]
        if ch.isdigit() or (ch == "." and pos + 1 < len(src) and src[pos + 1].isdigit()):
            m = _NUMBER.match(src, pos)
            assert m is not None
            text = m.group()
            value: float | int = int(text, 16) if text[:2].lower() == "0x" else float(text)
            if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
                value = int(value)
            self.toks.append(Tok("num", value, line))
            return m.end()
        if ch in "'\"":
            value_s, end = self._string(pos, ch)
            self.toks.append(Tok("str", value_s, line))
            return end
        if ch == "`":
            parts, end = self._template_literal(pos)
            self.toks.append(Tok("tpl", parts, line))
            return end
        m = _NAME.match(src, pos)
        if m:
            self.toks.append(Tok("name", m.group(), line))
            return m.end()
        for p in _PUNCT:
            if src.startswith(p, pos):
                if p == "?." and pos + 2 < len(src) and src[pos + 2].isdigit():
                    continue  # `a ?.5 : b` is a conditional
                self.toks.append(Tok("op", p, line))
                return pos + len(p)
        raise self.error(pos, f"unexpected character {ch!r} in template code")

    def _escape(self, pos: int) -> tuple[str, int]:
        ch = self.src[pos]
        if ch == "u" and self.src[pos + 1 : pos + 5].isalnum():
            return chr(int(self.src[pos + 1 : pos + 5], 16)), pos + 5
        if ch == "\n":
            return "", pos + 1
        return _ESCAPES.get(ch, ch), pos + 1

    def _string(self, pos: int, quote: str) -> tuple[str, int]:
        out: list[str] = []
        i = pos + 1
        while i < len(self.src):
            ch = self.src[i]
            if ch == quote:
                return "".join(out), i + 1
            if ch == "\\" and i + 1 < len(self.src):
                text, i = self._escape(i + 1)
                out.append(text)
                continue
            if ch == "\n":
                break
            out.append(ch)
            i += 1
        raise self.error(pos, "a string is never closed")

    def _template_literal(self, pos: int) -> tuple[list[Any], int]:
        """A template literal: its parts are strings and token lists."""
        parts: list[Any] = []
        buf: list[str] = []
        i = pos + 1
        src = self.src
        while i < len(src):
            ch = src[i]
            if ch == "`":
                parts.append("".join(buf))
                return parts, i + 1
            if ch == "\\" and i + 1 < len(src):
                text, i = self._escape(i + 1)
                buf.append(text)
                continue
            if src.startswith("${", i):
                parts.append("".join(buf))
                buf = []
                saved = self.toks
                self.toks = []
                j = i + 2
                depth = 0
                while True:
                    while j < len(src) and src[j].isspace():
                        j += 1
                    if j >= len(src):
                        raise self.error(i, "a ${ in a template literal is never closed")
                    if src[j] == "}" and depth == 0:
                        break
                    if src[j] == "{":
                        depth += 1
                    elif src[j] == "}":
                        depth -= 1
                    j = self._token(j)
                inner, self.toks = self.toks, saved
                inner.append(Tok("eof", None, self.line_at(j)))
                parts.append(inner)
                i = j + 1
                continue
            buf.append(ch)
            i += 1
        raise self.error(pos, "a template literal is never closed")


# --------------------------------------------------------------------------- evaluation


class _Scope:
    __slots__ = ("parent", "vars")

    def __init__(self, parent: _Scope | None) -> None:
        self.vars: dict[str, Any] = {}
        self.parent = parent

    def find(self, name: str) -> _Scope | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.vars:
                return scope
            scope = scope.parent
        return None


class _Run:
    """The state of one rendering: output, budget."""

    __slots__ = ("out", "size", "steps")

    def __init__(self) -> None:
        self.out: list[str] = []
        self.steps = 0
        self.size = 0


class _Break(Exception):  # noqa: N818 -- control flow of the interpreter, not an error
    pass


class _Continue(Exception):  # noqa: N818 -- control flow of the interpreter, not an error
    pass


class _Return(Exception):  # noqa: N818 -- control flow of the interpreter, not an error
    def __init__(self, value: Any) -> None:
        self.value = value


Expr = Callable[[_Scope, _Run], Any]
Stmt = Callable[[_Scope, _Run], None]


def _step(run: _Run, line: int) -> None:
    run.steps += 1
    if run.steps > STEP_LIMIT:
        raise TemplateError(
            f"line {line}: the template ran more than {STEP_LIMIT:,} steps "
            "(a loop that never ends?)"
        )


_BINARY: Final[dict[str, int]] = {
    "??": 1,
    "||": 2,
    "&&": 3,
    "==": 4,
    "!=": 4,
    "===": 4,
    "!==": 4,
    "<": 5,
    ">": 5,
    "<=": 5,
    ">=": 5,
    "+": 6,
    "-": 6,
    "*": 7,
    "/": 7,
    "%": 7,
}


def _add(a: Any, b: Any) -> Any:
    if (
        isinstance(a, str)
        or isinstance(b, str)
        or isinstance(a, list | dict)
        or isinstance(b, list | dict)
    ):
        return js_string(a) + js_string(b)
    return js_number(a) + js_number(b)


def _divide(a: Any, b: Any) -> Any:
    x, y = js_number(a), js_number(b)
    if y == 0:
        if x == 0 or math.isnan(x):
            return math.nan
        return math.inf if (x > 0) == (math.copysign(1, y) > 0) else -math.inf
    return x / y


def _modulo(a: Any, b: Any) -> Any:
    x, y = js_number(a), js_number(b)
    if y == 0 or math.isinf(x) or math.isnan(x) or math.isnan(y):
        return math.nan
    return math.fmod(x, y) if isinstance(x, float) or isinstance(y, float) else int(math.fmod(x, y))


def _compare(op: str, a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        x: Any = a
        y: Any = b
    else:
        x, y = js_number(a), js_number(b)
        if math.isnan(x) or math.isnan(y):
            return False
    if op == "<":
        return bool(x < y)
    if op == ">":
        return bool(x > y)
    if op == "<=":
        return bool(x <= y)
    return bool(x >= y)


_OPS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "==": js_loose_equal,
    "!=": lambda a, b: not js_loose_equal(a, b),
    "===": js_equal,
    "!==": lambda a, b: not js_equal(a, b),
    "+": _add,
    "-": lambda a, b: js_number(a) - js_number(b),
    "*": lambda a, b: js_number(a) * js_number(b),
    "/": _divide,
    "%": _modulo,
}


class _Parser:
    """Recursive descent over the tokens, building closures."""

    def __init__(self, toks: list[Tok], name: str) -> None:
        self.toks = toks
        self.i = 0
        self.name = name

    # -- helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def error(self, message: str, tok: Tok | None = None) -> TemplateError:
        t = tok or self.tok
        return TemplateError(f"{self.name}, line {t.line}: {message}")

    def at(self, kind: str, value: Any = None) -> bool:
        t = self.tok
        return t.kind == kind and (value is None or t.value == value)

    def accept(self, kind: str, value: Any = None) -> Tok | None:
        if self.at(kind, value):
            t = self.tok
            self.i += 1
            return t
        return None

    def expect(self, kind: str, value: Any = None) -> Tok:
        t = self.accept(kind, value)
        if t is None:
            want = value if value is not None else kind
            got = self.tok.value if self.tok.value is not None else self.tok.kind
            if self.tok.kind == "end":
                got = "%>"
            raise self.error(f"expected {want!r}, found {got!r}")
        return t

    def skip_ends(self) -> None:
        while self.accept("end", "code"):
            pass

    # -- statements
    def program(self) -> list[Stmt]:
        body = self.statements(top=True)
        if not self.at("eof"):
            raise self.error(f"unexpected {self.tok.value!r}")
        return body

    def statements(self, top: bool = False) -> list[Stmt]:
        hoisted: list[Stmt] = []
        out: list[Stmt] = []
        while True:
            self.skip_ends()
            if self.at("eof") or self.at("op", "}"):
                if self.at("op", "}") and top:
                    raise self.error("a } closes a block that was never opened")
                return hoisted + out
            if self.at("name", "function"):
                # As in JavaScript, a declared function can be called above its
                # declaration in the same block.
                hoisted.append(self.statement())
            else:
                out.append(self.statement())

    def block_or_statement(self) -> list[Stmt]:
        self.skip_ends()
        if self.accept("op", "{"):
            body = self.statements()
            self.expect("op", "}")
            return body
        return [self.statement()]

    def statement(self) -> Stmt:
        t = self.tok
        if t.kind == "text":
            self.i += 1
            text: str = t.value

            def emit_text(scope: _Scope, run: _Run) -> None:
                run.out.append(text)
                run.size += len(text)
                if run.size > OUTPUT_LIMIT:
                    raise TemplateError(f"the prompt is longer than {OUTPUT_LIMIT:,} characters")

            return emit_text
        if t.kind == "out":
            self.i += 1
            expr = self.expression()
            self.accept("op", ";")
            self.expect("end", "out")
            line = t.line

            def emit(scope: _Scope, run: _Run) -> None:
                value = expr(scope, run)
                text = "" if value is UNDEFINED or value is None else js_string(value)
                run.out.append(text)
                run.size += len(text)
                if run.size > OUTPUT_LIMIT:
                    raise TemplateError(
                        f"line {line}: the prompt is longer than {OUTPUT_LIMIT:,} characters"
                    )

            return emit
        if t.kind == "op" and t.value == ";":
            self.i += 1
            return lambda scope, run: None
        if t.kind == "op" and t.value == "{":
            self.i += 1
            body = self.statements()
            self.expect("op", "}")
            return _block(body)
        if t.kind == "name":
            handler = {
                "const": self.declaration,
                "let": self.declaration,
                "var": self.declaration,
                "if": self.if_statement,
                "for": self.for_statement,
                "break": self.jump,
                "continue": self.jump,
                "return": self.return_statement,
                "function": self.function_declaration,
            }.get(t.value)
            if handler is not None:
                return handler()
            if t.value in (
                "new",
                "class",
                "while",
                "do",
                "import",
                "this",
                "async",
                "await",
                "try",
                "throw",
                "switch",
                "with",
                "delete",
                "yield",
            ):
                raise self.error(f"{t.value!r} is not supported in sentinel templates")
        expr = self.expression()
        self.accept("op", ";")
        return lambda scope, run: (expr(scope, run), None)[1]

    def declaration(self) -> Stmt:
        self.i += 1
        decls: list[tuple[str, Expr | None]] = []
        while True:
            name = self.expect("name").value
            init = self.assignment() if self.accept("op", "=") else None
            decls.append((name, init))
            if not self.accept("op", ","):
                break
        self.accept("op", ";")

        def declare(scope: _Scope, run: _Run) -> None:
            for var, init in decls:
                scope.vars[var] = UNDEFINED if init is None else init(scope, run)

        return declare

    def if_statement(self) -> Stmt:
        self.i += 1
        self.expect("op", "(")
        cond = self.expression()
        self.expect("op", ")")
        then = self.block_or_statement()
        otherwise: list[Stmt] = []
        save = self.i
        self.skip_ends()
        if self.accept("name", "else"):
            otherwise = self.block_or_statement()
        else:
            self.i = save
        then_block, else_block = _block(then), _block(otherwise)

        def run_if(scope: _Scope, run: _Run) -> None:
            if truthy(cond(scope, run)):
                then_block(scope, run)
            else:
                else_block(scope, run)

        return run_if

    def for_statement(self) -> Stmt:
        line = self.tok.line
        self.i += 1
        self.expect("op", "(")
        ahead = self.toks[self.i + 2] if self.i + 2 < len(self.toks) else self.tok
        if (
            self.tok.kind == "name"
            and self.tok.value in ("const", "let", "var")
            and ahead.kind == "name"
            and ahead.value in ("of", "in")
        ):
            self.i += 1
            var = self.expect("name").value
            kind = self.expect("name").value
            source = self.expression()
            self.expect("op", ")")
            body = _block(self.block_or_statement())
            return _for_of(var, kind, source, body, line)
        init: Stmt = self.statement() if not self.at("op", ";") else (lambda s, r: None)
        if self.toks[self.i - 1].value != ";":
            self.expect("op", ";")
        cond = None if self.at("op", ";") else self.expression()
        self.expect("op", ";")
        update = None if self.at("op", ")") else self.expression()
        self.expect("op", ")")
        body = _block(self.block_or_statement())

        def run_for(scope: _Scope, run: _Run) -> None:
            inner = _Scope(scope)
            init(inner, run)
            while cond is None or truthy(cond(inner, run)):
                _step(run, line)
                try:
                    body(inner, run)
                except _Break:
                    break
                except _Continue:
                    pass
                if update is not None:
                    update(inner, run)

        return run_for

    def jump(self) -> Stmt:
        word = self.tok.value
        self.i += 1
        self.accept("op", ";")
        signal = _Break if word == "break" else _Continue

        def jump(scope: _Scope, run: _Run) -> None:
            raise signal

        return jump

    def return_statement(self) -> Stmt:
        self.i += 1
        value = None if self.at("op", ";") or self.at("op", "}") else self.expression()
        self.accept("op", ";")

        def ret(scope: _Scope, run: _Run) -> None:
            raise _Return(UNDEFINED if value is None else value(scope, run))

        return ret

    def function_declaration(self) -> Stmt:
        """``function name(a, b) { ... }``: binds ``name`` in the enclosing block."""
        t = self.tok
        if self.toks[self.i + 1].kind != "name":
            raise self.error("a function statement needs a name (function name(...) {...})", t)
        name = self.toks[self.i + 1].value
        make = self.function_expression()
        self.accept("op", ";")

        def declare(scope: _Scope, run: _Run) -> None:
            scope.vars[name] = make(scope, run)

        return declare

    def function_expression(self) -> Expr:
        """``function [name](a, b) { ... }``, at the ``function`` keyword.

        Like an arrow function, without ``this`` or ``arguments`` (neither
        exists in templates); a name, when given, is bound inside the body so
        the function can call itself."""
        self.expect("name", "function")
        name = self.accept("name")
        self_name = None if name is None else name.value
        params = self.parameters()
        self.expect("op", "{")
        body = _block(self.statements())
        self.expect("op", "}")
        return _function(self_name or "(function)", params, None, body, self_name)

    def parameters(self) -> list[str]:
        """``(a, b)``: a function's parameter names."""
        params: list[str] = []
        self.expect("op", "(")
        while not self.accept("op", ")"):
            params.append(self.expect("name").value)
            if not self.at("op", ")"):
                self.expect("op", ",")
        return params

    # -- expressions
    def expression(self) -> Expr:
        return self.assignment()

    def assignment(self) -> Expr:
        if self.is_arrow():
            return self.arrow()
        start_at = self.i
        left = self.conditional()
        if self.at("op") and self.tok.value in ("=", "+=", "-=", "*=", "/="):
            op = self.tok.value
            target = self.toks[start_at : self.i]
            self.i += 1
            value = self.assignment()
            member = getattr(left, "member_of", None)
            if member is not None:
                return _assign_member(member[0], member[1], op, value, target[0].line)
            return self.assign_to(target, op, value)
        return left

    def assign_to(self, target: list[Tok], op: str, value: Expr) -> Expr:
        """``name op= value`` (only variables are assigned)."""
        start = target[0]
        if len(target) == 1 and target[0].kind == "name":
            name = target[0].value
            fn = _OPS.get(op[0]) if op != "=" else None

            def set_var(scope: _Scope, run: _Run) -> Any:
                v = value(scope, run)
                home = scope.find(name)
                if home is None:
                    raise TemplateError(f"line {start.line}: {name} is not declared")
                if fn is not None:
                    v = fn(home.vars[name], v)
                home.vars[name] = v
                return v

            return set_var
        raise self.error("only variables can be assigned in sentinel templates", start)

    def is_arrow(self) -> bool:
        t = self.tok
        if t.kind == "name":
            nxt = self.toks[self.i + 1]
            return nxt.kind == "op" and nxt.value == "=>"
        if t.kind == "op" and t.value == "(":
            depth, j = 0, self.i
            while j < len(self.toks):
                tj = self.toks[j]
                if tj.kind == "op" and tj.value in "([{":
                    depth += 1
                elif tj.kind == "op" and tj.value in ")]}":
                    depth -= 1
                    if depth == 0:
                        nxt = self.toks[j + 1]
                        return nxt.kind == "op" and nxt.value == "=>"
                elif tj.kind in ("eof", "end"):
                    return False
                j += 1
        return False

    def arrow(self) -> Expr:
        params = self.parameters() if self.at("op", "(") else [self.expect("name").value]
        self.expect("op", "=>")
        if self.accept("op", "{"):
            body_block = _block(self.statements())
            self.expect("op", "}")
            return _function("(arrow)", params, None, body_block, None)
        return _function("(arrow)", params, self.assignment(), None, None)

    def conditional(self) -> Expr:
        cond = self.binary(0)
        if self.accept("op", "?"):
            yes = self.assignment()
            self.expect("op", ":")
            no = self.assignment()
            return lambda s, r: yes(s, r) if truthy(cond(s, r)) else no(s, r)
        return cond

    def binary(self, min_prec: int) -> Expr:
        left = self.unary()
        while self.at("op") and self.tok.value in _BINARY and _BINARY[self.tok.value] > min_prec:
            op = self.tok.value
            self.i += 1
            right = self.binary(_BINARY[op])
            left = _binary(op, left, right)
        return left

    def unary(self) -> Expr:
        t = self.tok
        if t.kind == "op" and t.value in ("!", "-", "+"):
            self.i += 1
            operand = self.unary()
            if t.value == "!":
                return lambda s, r: not truthy(operand(s, r))
            if t.value == "-":
                return lambda s, r: -js_number(operand(s, r))
            return lambda s, r: js_number(operand(s, r))
        if t.kind == "op" and t.value in ("++", "--"):
            self.i += 1
            name_tok = self.expect("name")
            return _increment(name_tok, 1 if t.value == "++" else -1, prefix=True)
        if t.kind == "name" and t.value == "typeof":
            self.i += 1
            operand = self.unary()

            def typeof(s: _Scope, r: _Run) -> Any:
                try:
                    return type_of(operand(s, r))
                except _Undeclared:
                    return "undefined"

            return typeof
        return self.postfix()

    def postfix(self) -> Expr:
        t = self.tok
        expr = self.call_chain()
        if (
            t.kind == "name"
            and self.at("op")
            and self.tok.value in ("++", "--")
            and self.toks[self.i - 1] is t
        ):
            step = 1 if self.tok.value == "++" else -1
            self.i += 1
            return _increment(t, step, prefix=False)
        return expr

    def call_chain(self) -> Expr:
        expr = self.primary()
        optional = False
        while True:
            t = self.tok
            if t.kind == "op" and t.value == ".":
                self.i += 1
                expr = _member(expr, _const(self.expect("name").value), optional=False, line=t.line)
            elif t.kind == "op" and t.value == "?.":
                self.i += 1
                optional = True
                if self.accept("op", "("):
                    expr = _call_expr(expr, self.arguments(), optional=True, line=t.line)
                elif self.accept("op", "["):
                    key = self.expression()
                    self.expect("op", "]")
                    expr = _member(expr, key, optional=True, line=t.line)
                else:
                    expr = _member(
                        expr, _const(self.expect("name").value), optional=True, line=t.line
                    )
            elif t.kind == "op" and t.value == "[":
                self.i += 1
                key = self.expression()
                self.expect("op", "]")
                expr = _member(expr, key, optional=False, line=t.line)
            elif t.kind == "op" and t.value == "(":
                self.i += 1
                expr = _call_expr(expr, self.arguments(), optional=False, line=t.line)
            else:
                return _chain_root(expr) if optional else expr

    def arguments(self) -> list[Expr]:
        args: list[Expr] = []
        while not self.accept("op", ")"):
            args.append(self.assignment())
            if not self.at("op", ")"):
                self.expect("op", ",")
        return args

    def primary(self) -> Expr:
        t = self.tok
        self.i += 1
        if t.kind in ("num", "str"):
            return _const(t.value)
        if t.kind == "tpl":
            return self.template_literal(t)
        if t.kind == "name":
            return self.name_expr(t)
        if t.kind == "op" and t.value == "(":
            inner = self.expression()
            self.expect("op", ")")
            return inner
        if t.kind == "op" and t.value == "[":
            items: list[Expr] = []
            while not self.accept("op", "]"):
                items.append(self.assignment())
                if not self.at("op", "]"):
                    self.expect("op", ",")
            return lambda s, r: [item(s, r) for item in items]
        if t.kind == "op" and t.value == "{":
            return self.object_literal()
        shown = "%>" if t.kind == "end" else ("end of template" if t.kind == "eof" else t.value)
        raise self.error(f"unexpected {shown!r} in an expression", t)

    def name_expr(self, t: Tok) -> Expr:
        word = t.value
        if word in ("true", "false"):
            return _const(word == "true")
        if word == "null":
            return _const(None)
        if word == "undefined":
            return _const(UNDEFINED)
        if word == "function":
            self.i -= 1
            return self.function_expression()
        if word in ("new", "this", "class", "await", "import", "require", "eval"):
            raise self.error(f"{word!r} is not supported in sentinel templates", t)
        line = t.line

        def variable(scope: _Scope, run: _Run) -> Any:
            home = scope.find(word)
            if home is None:
                raise _Undeclared(f"line {line}: {word} is not defined")
            return home.vars[word]

        return variable

    def object_literal(self) -> Expr:
        fields: list[tuple[str, Expr]] = []
        while not self.accept("op", "}"):
            key_tok = self.tok
            self.i += 1
            if key_tok.kind not in ("name", "str", "num"):
                raise self.error("expected a property name", key_tok)
            key = js_string(key_tok.value)
            if self.accept("op", ":"):
                fields.append((key, self.assignment()))
            elif key_tok.kind == "name":
                fields.append((key, self.name_expr(key_tok)))
            else:
                raise self.error("expected ':'")
            if not self.at("op", "}"):
                self.expect("op", ",")
        return lambda s, r: {k: v(s, r) for k, v in fields}

    def template_literal(self, t: Tok) -> Expr:
        parts: list[str | Expr] = []
        for part in t.value:
            if isinstance(part, str):
                parts.append(part)
            else:
                sub = _Parser(part, self.name)
                expr = sub.expression()
                if not sub.at("eof"):
                    raise sub.error(f"unexpected {sub.tok.value!r} in ${{...}}")
                parts.append(expr)

        def render(s: _Scope, r: _Run) -> str:
            return "".join(p if isinstance(p, str) else js_string(p(s, r)) for p in parts)

        return render


class _Undeclared(TemplateError):  # noqa: N818 -- a TemplateError already
    """A name that no scope declares (``typeof`` turns it into "undefined")."""


def _const(value: Any) -> Expr:
    return lambda s, r: value


def _block(body: list[Stmt]) -> Stmt:
    def run_block(scope: _Scope, run: _Run) -> None:
        inner = _Scope(scope)
        for stmt in body:
            stmt(inner, run)

    return run_block


def _function(
    name: str, params: list[str], body_expr: Expr | None, body_block: Stmt | None, own: str | None
) -> Expr:
    """Makes a function value (an arrow or a ``function``) closing over its scope.

    ``body_expr`` is an arrow's expression body; otherwise ``body_block`` runs
    and ``return`` gives the value. ``own`` is a named function expression's
    name, visible in its body."""

    def make(scope: _Scope, run: _Run) -> Any:
        home = scope
        if own is not None:
            home = _Scope(scope)

        def call(args: list[Any]) -> Any:
            inner = _Scope(home)
            for k, p in enumerate(params):
                inner.vars[p] = args[k] if k < len(args) else UNDEFINED
            _step(run, 0)
            if body_expr is not None:
                return body_expr(inner, run)
            assert body_block is not None
            try:
                body_block(inner, run)
            except _Return as r:
                return r.value
            return UNDEFINED

        fn = JsFunction(name, call)
        if own is not None:
            home.vars[own] = fn
        return fn

    return make


def _for_of(var: str, kind: str, source: Expr, body: Stmt, line: int) -> Stmt:
    def run_for_of(scope: _Scope, run: _Run) -> None:
        items = source(scope, run)
        if kind == "in":
            seq: Any = (
                list(items)
                if isinstance(items, dict)
                else [str(i) for i in range(len(items))]
                if isinstance(items, list | str)
                else []
            )
        elif isinstance(items, list | str):
            seq = items
        elif isinstance(items, dict):
            raise TemplateError(f"line {line}: an object is not iterable (use Object.entries(...))")
        else:
            raise TemplateError(f"line {line}: {js_string(items)} is not iterable")
        for item in list(seq):
            _step(run, line)
            inner = _Scope(scope)
            inner.vars[var] = item
            try:
                body(inner, run)
            except _Break:
                break
            except _Continue:
                continue

    return run_for_of


def _binary(op: str, left: Expr, right: Expr) -> Expr:
    if op == "&&":
        return lambda s, r: right(s, r) if truthy(v := left(s, r)) else v
    if op == "||":
        return lambda s, r: v if truthy(v := left(s, r)) else right(s, r)
    if op == "??":
        return lambda s, r: right(s, r) if (v := left(s, r)) is None or v is UNDEFINED else v
    if op in ("<", ">", "<=", ">="):
        return lambda s, r: _compare(op, left(s, r), right(s, r))
    fn = _OPS[op]
    return lambda s, r: fn(left(s, r), right(s, r))


class _Optional(Exception):  # noqa: N818 -- control flow of the interpreter, not an error
    """An optional chain met null or undefined: the whole chain is undefined."""


def _member(obj: Expr, key: Expr, *, optional: bool, line: int) -> Expr:
    def member(s: _Scope, r: _Run) -> Any:
        _step(r, line)
        target = obj(s, r)
        if optional and (target is None or target is UNDEFINED):
            raise _Optional
        try:
            return get_member(target, key(s, r))
        except TemplateError as e:
            raise TemplateError(f"line {line}: {e}") from None

    member.member_of = (obj, key)  # type: ignore[attr-defined]  # for `obj[key] = value`
    return member


MAX_ARRAY_GROWTH: Final = 1_000_000
"""The highest index a template may assign in an array (``xs[i] = v``)."""


def _assign_member(obj: Expr, key: Expr, op: str, value: Expr, line: int) -> Expr:
    """``obj[key] op= value`` on an object or an array the template made or was given."""
    fn = _OPS.get(op[0]) if op != "=" else None

    def assign(s: _Scope, r: _Run) -> Any:
        target, name = obj(s, r), key(s, r)
        v = value(s, r)
        if fn is not None:
            v = fn(get_member(target, name), v)
        if isinstance(target, dict):
            target[js_string(name)] = v
        elif isinstance(target, list) and type(name) is int and 0 <= name < MAX_ARRAY_GROWTH:
            target.extend([UNDEFINED] * (name + 1 - len(target)))
            target[name] = v
        else:
            raise TemplateError(
                f"line {line}: cannot set property {js_string(name)!r} of {js_string(target)}"
            )
        return v

    return assign


def _call_expr(fn: Expr, args: list[Expr], *, optional: bool, line: int) -> Expr:
    def call(s: _Scope, r: _Run) -> Any:
        _step(r, line)
        target = fn(s, r)
        if optional and (target is None or target is UNDEFINED):
            raise _Optional
        if not isinstance(target, JsFunction):
            raise TemplateError(f"line {line}: {js_string(target)} is not a function")
        values = [a(s, r) for a in args]
        try:
            return target.call(values)
        except (TemplateError, _Optional, _Return, _Break, _Continue):
            raise
        except RecursionError:
            raise TemplateError(f"line {line}: the template nests too deeply") from None
        except (ValueError, TypeError, OverflowError, KeyError, IndexError) as e:
            raise TemplateError(f"line {line}: {target.name} failed: {e}") from None

    return call


def _chain_root(expr: Expr) -> Expr:
    """Short-circuits ``a?.b.c`` to undefined when ``a`` is nullish."""

    def root(s: _Scope, r: _Run) -> Any:
        try:
            return expr(s, r)
        except _Optional:
            return UNDEFINED

    return root


def _increment(name_tok: Tok, step: int, *, prefix: bool) -> Expr:
    name = name_tok.value

    def inc(scope: _Scope, run: _Run) -> Any:
        home = scope.find(name)
        if home is None:
            raise TemplateError(f"line {name_tok.line}: {name} is not declared")
        old = js_number(home.vars[name])
        home.vars[name] = old + step
        return old + step if prefix else old

    return inc


# --------------------------------------------------------------------------- globals


def _fn(name: str, call: Callable[[list[Any]], Any]) -> JsFunction:
    return JsFunction(name, call)


def _a(args: list[Any], i: int) -> Any:
    return args[i] if i < len(args) else UNDEFINED


def _parse_int(args: list[Any]) -> Any:
    m = re.match(r"\s*([+-]?\d+)", js_string(_a(args, 0)))
    return int(m.group(1)) if m else math.nan


def _parse_float(args: list[Any]) -> Any:
    m = re.match(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)", js_string(_a(args, 0)))
    if not m:
        return math.nan
    v = float(m.group(1))
    return int(v) if v.is_integer() and abs(v) < 2**53 else v


def _json_parse(args: list[Any]) -> Any:
    try:
        return json.loads(js_string(_a(args, 0)))
    except json.JSONDecodeError as e:
        raise TemplateError(f"JSON.parse: {e}") from None


def _round(x: Any) -> Any:
    n = js_number(x)
    return n if math.isnan(n) or math.isinf(n) else math.floor(n + 0.5)


def _minmax(pick: Callable[..., Any], empty: float) -> Callable[[list[Any]], Any]:
    def run(args: list[Any]) -> Any:
        nums = [js_number(a) for a in args]
        if any(math.isnan(n) for n in nums):
            return math.nan
        return pick(nums) if nums else empty

    return run


GLOBALS: Final[Mapping[str, Any]] = {
    "JSON": {
        "stringify": _fn("stringify", lambda a: json_stringify(_a(a, 0), _a(a, 2))),
        "parse": _fn("parse", _json_parse),
    },
    "Math": {
        "max": _fn("max", _minmax(max, -math.inf)),
        "min": _fn("min", _minmax(min, math.inf)),
        "round": _fn("round", lambda a: _round(_a(a, 0))),
        "floor": _fn(
            "floor", lambda a: math.floor(n) if math.isfinite(n := js_number(_a(a, 0))) else n
        ),
        "ceil": _fn(
            "ceil", lambda a: math.ceil(n) if math.isfinite(n := js_number(_a(a, 0))) else n
        ),
        "abs": _fn("abs", lambda a: abs(js_number(_a(a, 0)))),
        "PI": math.pi,
    },
    "Object": {
        "keys": _fn("keys", lambda a: list(v) if isinstance(v := _a(a, 0), dict) else []),
        "values": _fn(
            "values", lambda a: list(v.values()) if isinstance(v := _a(a, 0), dict) else []
        ),
        "entries": _fn(
            "entries",
            lambda a: [[k, x] for k, x in v.items()] if isinstance(v := _a(a, 0), dict) else [],
        ),
    },
    "Array": {"isArray": _fn("isArray", lambda a: isinstance(_a(a, 0), list))},
    "String": _fn("String", lambda a: js_string(_a(a, 0)) if a else ""),
    "Number": _fn("Number", lambda a: js_number(_a(a, 0)) if a else 0),
    "Boolean": _fn("Boolean", lambda a: truthy(_a(a, 0))),
    "parseInt": _fn("parseInt", _parse_int),
    "parseFloat": _fn("parseFloat", _parse_float),
    "isNaN": _fn("isNaN", lambda a: math.isnan(js_number(_a(a, 0)))),
    "NaN": math.nan,
    "Infinity": math.inf,
}


# --------------------------------------------------------------------------- templates


class Template:
    """A parsed template; :meth:`render` runs it on a context."""

    def __init__(self, body: list[Stmt], name: str) -> None:
        self._body = body
        self.name = name

    def render(self, it: Mapping[str, Any]) -> str:
        """The text for ``it`` (``it.events``, ``it.codon``, ``it.world``).

        Raises :class:`TemplateError` naming the template and line when the
        code fails (a property of undefined, a call of a non-function, the
        step or output budget)."""
        root = _Scope(None)
        root.vars.update(GLOBALS)
        root.vars["it"] = it
        run = _Run()
        try:
            for stmt in self._body:
                stmt(root, run)
        except TemplateError as e:
            raise TemplateError(f"{self.name}: {e}") from None
        except (_Break, _Continue):
            raise TemplateError(f"{self.name}: break or continue outside a loop") from None
        except _Return:
            raise TemplateError(f"{self.name}: return outside a function") from None
        except RecursionError:
            raise TemplateError(f"{self.name}: the template nests too deeply") from None
        return "".join(run.out)


def compile_template(source: str, name: str = "template") -> Template:
    """Parses ``source`` (named ``name`` in errors) once, for many renderings."""
    try:
        toks = _Lexer(source, name).run()
        return Template(_Parser(toks, name).program(), name)
    except RecursionError:
        raise TemplateError(f"{name}: the template nests too deeply") from None
