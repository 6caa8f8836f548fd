"""The ``matches`` operator's patterns: JavaScript syntax, matched in linear time.

Configs are written for the reference runtime, which runs ``new RegExp(value)``
(no flags) on the event's text. That text is written by the agent, so it is
hostile: a backtracking engine (JavaScript's or Python's ``re``) takes
exponential time on ``^(a+)+$`` against ``"a" * 40 + "!"``, and the run hangs
holding the interpreter. Weft matches with :class:`weft._core.Pattern` (the
Rust ``regex`` crate: finite automata, every search linear in the text, the
compiled size bounded), and this module translates the JavaScript syntax into
the crate's, with JavaScript's meaning where the two differ:

* ``\\d`` ``\\w`` ``\\b`` are ASCII (``[0-9]``, ``[A-Za-z0-9_]``), as in
  JavaScript, not Unicode; ``\\s`` is JavaScript's whitespace set;
* ``.`` matches anything but the line terminators ``\\n \\r \\u2028 \\u2029``;
* ``$`` is the end of the text only (Python's also matches before a final
  newline); ``^`` its start;
* ``\\xHH``, ``\\uHHHH`` (a surrogate pair is one character), ``\\cX``,
  ``\\0``, and the legacy forms of the web's Annex B: an escaped letter with
  no meaning is the letter, a ``{`` or ``]`` that starts nothing is literal,
  ``[\\d-z]`` holds ``-``; ``[]`` matches nothing and ``[^]`` anything;
* named groups ``(?<name>...)`` and ``(?:...)`` groups;
* case-insensitive matching: ``(?i:...)`` groups (JavaScript's modifiers)
  and, a Weft extension since a condition has no flags field, ``(?i)`` at
  the start of the pattern.

What finite automata cannot do is refused with :class:`PatternError`, which
says why and how to write it instead: backreferences (``\\1``, ``\\k<name>``),
look-ahead and look-behind, the other inline flags, and a pattern whose compiled form
is larger than the bound. ``weft validate`` reports the refusal with the
sentinel and the condition (:mod:`weft.config.rules.sentinels`).

:func:`compile_js_pattern` is the one entry: translation, then the compiled
pattern.
"""

from __future__ import annotations

from typing import Final

from weft._core import Pattern
from weft.errors import WeftError

__all__ = ["PatternError", "compile_js_pattern", "translate"]

_WHY: Final = "Weft matches agent output in linear time, which rules out backtracking features"


class PatternError(WeftError):
    """A ``matches`` pattern Weft cannot match: ``reason`` says why,
    ``hint`` how to write it instead."""

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


_DIGIT: Final = r"0-9"
_WORD: Final = r"0-9A-Za-z_"
_SPACE: Final = (
    r"\x{9}-\x{D}\x{20}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}"
    r"\x{202F}\x{205F}\x{3000}\x{FEFF}"
)
"""JavaScript's ``\\s``: its WhiteSpace and LineTerminator characters."""

_CLASS_ESCAPES: Final = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CONTROL: Final = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}
_DOT: Final = r"[^\n\r\x{2028}\x{2029}]"
_META: Final = frozenset(r"\.+*?()|[]{}^$#&-~")
"""Characters the Rust syntax gives a meaning (some only in classes or with
the ``x`` flag): written escaped."""
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_DASH: Final = None
"""An unescaped ``-`` among a class's atoms."""

_NO_BACKREF: Final = (
    "write the repeated text out, or split the check into two conditions: "
    "a backreference needs a backtracking engine"
)
_NO_LOOKAROUND: Final = (
    "match the surrounding text itself (a(?=b) -> ab), or split the check into "
    "conditions (a notEquals or a second matches)"
)


def _char(code: int) -> str:
    return rf"\x{{{code:X}}}"


def _literal(c: str) -> str:
    return "\\" + c if c in _META else c


class _Translator:
    """One pass over the JavaScript source, emitting the Rust syntax."""

    def __init__(self, source: str) -> None:
        self.src = source
        self.i = 0
        self.out: list[str] = []

    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.src[j] if j < len(self.src) else ""

    def run(self) -> str:
        src = self.src
        while self.i < len(src):
            c = src[self.i]
            self.i += 1
            if c == "\\":
                self.out.append(self.escape())
            elif c == "[":
                self.out.append(self.char_class())
            elif c == "(":
                self.out.append(self.group())
            elif c == ".":
                self.out.append(_DOT)
            elif c in "^$|)*+?":
                self.out.append(c)
            elif c == "{":
                self.out.append(self.brace())
            else:
                self.out.append(_literal(c))
        return "".join(self.out)

    def brace(self) -> str:
        """A ``{n}``, ``{n,}`` or ``{n,m}`` quantifier; any other ``{`` is
        literal (Annex B)."""
        j = self.i
        src = self.src
        while j < len(src) and src[j].isdigit() and src[j].isascii():
            j += 1
        if j == self.i:
            return r"\{"
        if j < len(src) and src[j] == ",":
            j += 1
            while j < len(src) and src[j].isdigit() and src[j].isascii():
                j += 1
        if j < len(src) and src[j] == "}":
            text = src[self.i - 1 : j + 1]
            self.i = j + 1
            return text
        return r"\{"

    def group(self) -> str:
        if self.peek() != "?":
            return "("
        nxt, after = self.peek(1), self.peek(2)
        if nxt == ":":
            self.i += 2
            return "(?:"
        if nxt in "=!":
            raise PatternError(f'look-ahead "(?{nxt}" is not supported: {_WHY}', _NO_LOOKAROUND)
        if nxt == "<" and after in "=!" and after:
            raise PatternError(f'look-behind "(?<{after}" is not supported: {_WHY}', _NO_LOOKAROUND)
        if nxt == "<":
            end = self.src.find(">", self.i + 2)
            name = self.src[self.i + 2 : end] if end >= 0 else ""
            if not name or not (name.replace("_", "a").replace("$", "a").isalnum()):
                raise PatternError(
                    "invalid named group: write (?<name>...) with a name of letters, "
                    "digits, _ or $",
                    "close the name with >",
                )
            self.i = end + 1
            # The name cannot matter: a condition only asks whether there is a match.
            return "("
        if nxt == "i" and (after == ":" or (after == ")" and self.i == 1)):
            # Case-insensitive: a group (JavaScript's modifiers), or the whole
            # pattern, a Weft extension (a condition has no flags field).
            self.i += 3
            return f"(?i{after}"
        raise PatternError(
            f'"(?{nxt}" is not supported (of the inline flags, only (?i) at the start '
            "and (?i:...) groups are)",
            "use (?:...) for a group that captures nothing; for the multiline and dotAll "
            r"flags, match the line ends: [^\n]* for one line, [\s\S] for any character",
        )

    def escape(self) -> str:
        """The escape after a backslash, outside a class."""
        c = self.peek()
        if not c:
            raise PatternError("the pattern ends with a lone \\", r"write \\ for a backslash")
        self.i += 1
        if c in _CLASS_ESCAPES:
            return f"[{_CLASS_ESCAPES[c]}]"
        if c in "DWS":
            return f"[^{_CLASS_ESCAPES[c.lower()]}]"
        if c == "b":
            return r"(?-u:\b)"
        if c == "B":
            # The automaton's ASCII \B matches between the bytes of one UTF-8
            # character (inside "\xa0"), where JavaScript's never does.
            raise PatternError(
                '"\\B" (not at a word boundary) is not supported: Weft matches agent '
                "output in linear time, byte by byte",
                "match the characters around it instead (\\w\\w, or \\b where a boundary is meant)",
            )
        if c.isdigit() and c.isascii() and c != "0":
            raise PatternError(
                f'backreference "\\{c}" is not supported: {_WHY}',
                _NO_BACKREF,
            )
        if c == "k" and self.peek() == "<":
            raise PatternError(
                f'backreference "\\k<...>" is not supported: {_WHY}',
                _NO_BACKREF,
            )
        code = self.code_escape(c, in_class=False)
        return _char(code) if code is not None else _literal(c)

    def code_escape(self, c: str, *, in_class: bool) -> int | None:
        """The character an escape ``\\c`` (already consumed) stands for;
        ``None`` for an identity escape (``c`` itself)."""
        if c in _CONTROL:
            return _CONTROL[c]
        if c == "0":
            if self.peek().isdigit():
                raise PatternError(
                    "octal escapes are not supported", r"write the character as \xHH"
                )
            return 0
        if c == "c":
            letter = self.peek()
            if letter.isascii() and letter.isalpha():
                self.i += 1
                return ord(letter) % 32
            raise PatternError(r"\c must be followed by a letter (a control character)", r"\cJ")
        if c == "x" and self.peek() in _HEX and self.peek(1) in _HEX and self.peek(1):
            code = int(self.src[self.i : self.i + 2], 16)
            self.i += 2
            return code
        unit = self._hex4(self.i) if c == "u" else None
        if unit is not None:
            code = unit
            self.i += 4
            if 0xD800 <= code <= 0xDBFF and not in_class and self.src[self.i : self.i + 2] == "\\u":
                low = self._hex4(self.i + 2)
                if low is not None and 0xDC00 <= low <= 0xDFFF:
                    self.i += 6
                    return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            if 0xD800 <= code <= 0xDFFF:
                raise PatternError(
                    f"the lone surrogate \\u{code:04X} is not supported",
                    "write the whole character (or its pair of \\u escapes outside [...])",
                )
            return code
        if c == "b" and in_class:
            return 0x08
        if c.isascii() and c.isdigit():
            raise PatternError(f'"\\{c}" in a class is not supported', r"write \xHH")
        return None

    def _hex4(self, at: int) -> int | None:
        text = self.src[at : at + 4]
        if len(text) == 4 and all(h in _HEX for h in text):
            return int(text, 16)
        return None

    def char_class(self) -> str:
        """A ``[...]`` class: each character written as ``\\x{..}`` so no Rust
        class syntax (nested classes, ``&&``, ``--``, ``~~``) can arise."""
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        items: list[str] = []
        # Each atom: a character code, a class escape's text (which never
        # ends a range), or _DASH (an unescaped "-", a range's operator
        # between two characters, else the character).
        atoms: list[int | str | None] = []
        while True:
            c = self.peek()
            if not c:
                raise PatternError("a [ has no closing ]", r"close the class, or write \[")
            self.i += 1
            if c == "]":
                break
            atoms.append(self.class_atom(c))
        codes = [ord("-") if a is _DASH else a for a in atoms]
        k = 0
        while k < len(atoms):
            first = codes[k]
            if k + 2 < len(atoms) and atoms[k + 1] is _DASH:
                last = codes[k + 2]
                if isinstance(first, int) and isinstance(last, int):
                    if last < first:
                        raise PatternError(
                            f"the range {chr(first)}-{chr(last)} is out of order",
                            "write the lower end first",
                        )
                    items.append(f"{_char(first)}-{_char(last)}")
                    k += 3
                    continue
            items.append(first if isinstance(first, str) else _char(first))
            k += 1
        if not items:
            # JavaScript: [] matches nothing, [^] any character.
            return r"[\x{0}-\x{10FFFF}]" if negated else r"[a&&b]"
        return f"[{'^' if negated else ''}{''.join(items)}]"

    def class_atom(self, c: str) -> int | str | None:
        if c == "-":
            return _DASH
        if c != "\\":
            return ord(c)
        e = self.peek()
        if not e:
            raise PatternError("the pattern ends with a lone \\", r"write \\ for a backslash")
        self.i += 1
        if e in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[e]
        if e in "DWS":
            return f"[^{_CLASS_ESCAPES[e.lower()]}]"
        code = self.code_escape(e, in_class=True)
        return ord(e) if code is None else code


def translate(source: str) -> str:
    """The Rust ``regex`` syntax of the JavaScript pattern ``source``;
    raises :class:`PatternError` for what it cannot match."""
    return _Translator(source).run()


def compile_js_pattern(source: str) -> Pattern:
    """``source`` (JavaScript syntax) compiled for linear-time matching;
    raises :class:`PatternError` when it is refused."""
    translated = translate(source)
    try:
        return Pattern(translated)
    except ValueError as e:
        if str(e).startswith("the compiled pattern is larger"):
            raise PatternError(
                f"{e}: Weft bounds the memory of each pattern",
                "use a smaller repetition count, or split the check into several conditions",
            ) from None
        raise PatternError(
            f"not a valid regular expression: {e}",
            "fix the pattern (JavaScript syntax, see docs/sentinels.md, Conditions)",
        ) from None
