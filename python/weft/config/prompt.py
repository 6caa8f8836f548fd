"""Prompt assembly: the text a codon sends to its agent, built from the hank.

A codon's **user prompt** is its ``promptFile`` (one file, or several joined
with a blank line) or its ``promptText``. A prompt file may open with YAML
front-matter between two ``---`` lines; it is removed from the prompt, and the
first file's front-matter becomes the codon's ``promptMetadata``.

The **system-prompt append** (added to the agent's own system prompt) is the
hank's global system prompt (``globalSystemPromptFile``/``Text``) followed by
the codon's ``appendSystemPromptFile``/``Text``, joined with a blank line.

Every piece of text then goes through the same two steps:

* HTML comments (``<!-- ... -->``, with the newline that ends them) are removed,
  so authors can annotate prompts without the agent reading the notes;
* template variables ``<%NAME%>`` are replaced (see :func:`template_variables`).
  An unknown name is an error naming the file, line and variable: it is almost
  always a typo that would otherwise reach the agent verbatim. Write
  ``<%%NAME%>`` to send a literal ``<%NAME%>``. Anything else between ``<%``
  and ``%>`` (an EJS/ERB tag such as ``<%= user.name %>``) is left alone.

Comments are removed before variables are replaced, so a commented-out typo is
not an error. Files are read relative to the hank directory, with the same
reference checks as the loader. Reading is blocking file I/O: async callers
run :func:`assemble_prompt` in a thread.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from weft.config.hints import closest
from weft.config.problems import ConfigProblem
from weft.config.refs import check_ref
from weft.config.schema import Codon, Hank, Loop
from weft.errors import ConfigError

if TYPE_CHECKING:
    import yaml

__all__ = [
    "DATA_DIR_NAME",
    "AssembledPrompt",
    "PromptMetadata",
    "TextSource",
    "assemble_prompt",
    "prompt_reads_files",
    "render_text",
    "split_front_matter",
    "template_variables",
]

DATA_DIR_NAME = "read_only_data_source"
"""The folder under the agent root where the input data is mounted read-only."""

HANK_FILE = "hank.json"


def _join(parts: Sequence[str]) -> str:
    """Pieces joined by one blank line (their trailing blank space would widen it)."""
    return "\n\n".join(part.rstrip() for part in parts)


# One scan does both jobs, so a variable inside a comment is never looked at
# and error line numbers refer to the text as the author wrote it.
_TOKENS = re.compile(r"<!--.*?-->(?:\r?\n)?|<%(%?)([A-Za-z_][A-Za-z0-9_]*)%>", re.DOTALL)


def template_variables(agent_root: str | os.PathLike[str]) -> dict[str, str]:
    """The template variables of a codon whose agent works in ``agent_root``.

    ``AGENT_ROOT`` is the canonical name; ``PROJECT_DIR`` and ``EXECUTION_DIR``
    are aliases kept for hanks written for Hankweave. ``DATA_DIR`` is the
    read-only data folder inside the agent root.
    """
    root = os.fspath(agent_root)
    return {
        "AGENT_ROOT": root,
        "PROJECT_DIR": root,
        "EXECUTION_DIR": root,
        "DATA_DIR": os.path.join(root, DATA_DIR_NAME),
    }


class PromptMetadata(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, kw_only=True):
    """A prompt file's front-matter: labels for people and tools, never configuration."""

    name: str | None = None
    description: str | None = None
    tags: list[str] | None = None
    version: str | None = None
    author: str | None = None


_METADATA_FIELDS = tuple(PromptMetadata.__struct_fields__)


@dataclass(frozen=True, slots=True)
class AssembledPrompt:
    """Everything a codon's agent is told, ready to send.

    ``text`` is the user prompt. ``prompt_metadata`` is the first prompt
    file's front-matter (None without one). ``system_prompt_append`` is None
    when neither the hank nor the codon adds to the system prompt.
    ``exhaust_prompt`` is the codon's ``exhaustWithPrompt`` after the same
    processing, or None. ``sources`` lists the files read, relative to the
    hank directory, in order.
    """

    text: str
    prompt_metadata: PromptMetadata | None
    system_prompt_append: str | None
    exhaust_prompt: str | None
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TextSource:
    """Where a piece of prompt text comes from, so that errors can point at it.

    For a file, ``file`` is its path relative to the hank directory and
    ``first_line`` the line where the text starts. For text written inline in
    the hank (``promptText``, ...), ``file`` is the hank file, ``path`` the
    field's JSON path and ``inline`` is true; ``item``/``where`` name the codon.
    """

    file: str
    path: str = "$"
    first_line: int = 1
    inline: bool = False
    item: str | None = None
    where: str | None = None

    def error(self, message: str, *, code: str, hint: str | None, line: int = 0) -> ConfigError:
        """A ConfigError at ``line`` lines below the start of this text."""
        if self.where is not None and self.item is None:
            message = f"{message} ({self.where})"
        if self.inline:
            if line:
                message = f"{message}, on line {line + 1} of the text"
            problem = ConfigProblem(
                file=self.file,
                path=self.path,
                message=message,
                code=code,
                hint=hint,
                item=self.item,
                where=self.where if self.item is not None else None,
            )
        else:
            problem = ConfigProblem(
                file=self.file,
                path=self.path,
                message=message,
                code=code,
                hint=hint,
                line=self.first_line + line,
            )
        return ConfigError([problem])


@functools.cache
def _string_scalar_loader() -> type[yaml.SafeLoader]:
    """PyYAML's safe loader, with every plain scalar read as a string.

    Front-matter fields are all text. With the default resolvers
    ``version: 1.10`` would become the float 1.1; Hankweave reads it as the
    string "1.10", and so do we.

    Built on first use: importing PyYAML costs about 25 ms, and only prompt
    files with front-matter need it (not ``weft run`` of a hank without any,
    nor ``weft status``).
    """
    import yaml

    class _StringScalarLoader(yaml.SafeLoader):
        pass

    _StringScalarLoader.yaml_implicit_resolvers = {}
    return _StringScalarLoader


def split_front_matter(text: str, *, file: str) -> tuple[PromptMetadata | None, str, int]:
    """Separates a prompt file's YAML front-matter from its body.

    Returns ``(metadata, body, first_line)``: metadata is None when the file
    has no front-matter, and ``first_line`` is the line of the file where the
    body starts. Front-matter opens with a first line ``---`` and closes at the
    next ``---`` line; without a closing line the whole file is body, as in
    Hankweave. When front-matter is removed, the body is trimmed of the blank
    space around it.

    Raises ConfigError, naming ``file`` and the line, for YAML that does not
    parse, front-matter that is not a mapping, or a field that is unknown or
    not text.
    """
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        return None, text, 1
    close = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if close is None:
        return None, text, 1
    # The YAML starts on line 2 of the file, after the opening '---'.
    metadata = _parse_metadata("".join(lines[1:close]), TextSource(file, first_line=2))
    rest = "".join(lines[close + 1 :])
    body = rest.lstrip()
    first_line = close + 2 + rest.count("\n", 0, len(rest) - len(body))
    return metadata, body.rstrip(), first_line


def _parse_metadata(yaml_text: str, source: TextSource) -> PromptMetadata:
    import yaml  # deferred: see _string_scalar_loader

    fields = ", ".join(_METADATA_FIELDS)
    try:
        data: Any = yaml.load(yaml_text, Loader=_string_scalar_loader())
    except yaml.YAMLError as exc:
        raise source.error(
            f"the YAML front-matter does not parse: {getattr(exc, 'problem', None) or exc}",
            code="bad_front_matter",
            hint="fix the YAML between the two '---' lines, or remove them",
            line=_yaml_error_line(exc, yaml_text),
        ) from None
    if data is None:
        return PromptMetadata()
    if not isinstance(data, dict):
        raise source.error(
            f"the front-matter must be a mapping, not a {type(data).__name__}",
            code="bad_front_matter",
            hint=f"write 'key: value' lines; the keys are {fields}",
        )
    unknown = [str(key) for key in data if key not in _METADATA_FIELDS]
    if unknown:
        raise source.error(
            f"unknown front-matter field(s): {', '.join(unknown)}",
            code="bad_front_matter",
            hint=(
                f"front-matter only labels a prompt, with {fields}; "
                "settings of the codon belong in the hank file"
            ),
            line=_key_line(yaml_text, unknown[0]),
        )
    try:
        return msgspec.convert(data, PromptMetadata)
    except msgspec.ValidationError as exc:
        field = str(exc).partition("$.")[2].split("[")[0].rstrip("`")
        raise source.error(
            f"front-matter field {field!r}: {exc}",
            code="bad_front_matter",
            hint="name, description, version and author are text; tags is a list of text",
            line=_key_line(yaml_text, field),
        ) from None


def _yaml_error_line(exc: yaml.YAMLError, yaml_text: str) -> int:
    """The line (0-based, in ``yaml_text``) to blame for a YAML error."""
    last = max(yaml_text.count("\n") - 1, 0)
    problem = getattr(exc, "problem_mark", None)
    if problem is not None and problem.line <= last:
        return int(problem.line)
    # The parser hit the end of the text: the construct it was reading (an
    # unclosed bracket or quote) started at the context mark.
    context = getattr(exc, "context_mark", None)
    if context is not None:
        return min(int(context.line), last)
    return last


def _key_line(yaml_text: str, key: str) -> int:
    """The line (0-based, in ``yaml_text``) of a top-level key; 0 if not found."""
    pattern = re.compile(rf"^['\"]?{re.escape(key)}['\"]?\s*:")
    for number, line in enumerate(yaml_text.splitlines()):
        if pattern.match(line):
            return number
    return 0


def render_text(text: str, variables: Mapping[str, str], source: TextSource) -> str:
    """Removes HTML comments from ``text`` and replaces its template variables.

    Raises ConfigError, pointing at ``source``, for a ``<%NAME%>`` whose NAME
    is not one of ``variables``.
    """

    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        if name is None:
            return ""
        if match.group(1):
            return f"<%{name}%>"
        value = variables.get(name)
        if value is None:
            known = sorted(variables)
            guess = closest(name.upper(), known)
            hint = f"did you mean <%{guess[0]}%>? " if guess else ""
            listed = ", ".join(f"<%{k}%>" for k in known) or "none"
            raise source.error(
                f"unknown template variable <%{name}%>",
                code="unknown_variable",
                hint=(
                    f"{hint}the variables are {listed}; "
                    f"to send the text as it is, write <%%{name}%>"
                ),
                line=text.count("\n", 0, match.start()),
            )
        return value

    return _TOKENS.sub(replace, text)


def _places(hank: Hank) -> dict[str, tuple[str, str]]:
    """Each codon id's JSON path in the hank (``hank[1].codons[0]``) and label prefix."""
    places: dict[str, tuple[str, str]] = {}
    for i, item in enumerate(hank.hank):
        if isinstance(item, Loop):
            for j, inner in enumerate(item.codons):
                places.setdefault(inner.id, (f"hank[{i}].codons[{j}]", f'loop "{item.id}" > '))
        else:
            places.setdefault(item.id, (f"hank[{i}]", ""))
    return places


_last_places: tuple[Hank, dict[str, tuple[str, str]]] | None = None
"""The places of the last hank looked in: a run or a check assembles every codon
of one hank, and searching the hank for each codon made 1,000 codons cost 1M steps."""


def _locate(hank: Hank | None, codon_id: str) -> tuple[str | None, str]:
    """The codon's JSON path in the hank (``hank[1].codons[0]``) and its label."""
    global _last_places
    label = f'codon "{codon_id}"'
    if hank is None:
        return None, label
    cached = _last_places
    if cached is None or cached[0] is not hank:
        cached = _last_places = (hank, _places(hank))
    found = cached[1].get(codon_id)
    if found is None:
        return None, label
    return found[0], found[1] + label


def _refs(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


@dataclass(slots=True)
class ReadFiles:
    """What one pass over the prompts of one hank has read (see :func:`assemble_prompt`)."""

    texts: dict[str, str] = field(default_factory=dict)
    """Each file read and checked so far, by ref."""
    root: Path | None = None
    """The hank's folder, resolved."""


@dataclass(slots=True)
class _Reader:
    """Reads and renders the pieces of one codon's prompts."""

    hank_dir: str | os.PathLike[str]
    variables: Mapping[str, str]
    codon_path: str | None
    codon_label: str
    sources: list[str]
    read_before: ReadFiles | None = None
    _root: Path | None = None

    @property
    def root(self) -> Path:
        """The hank's folder, resolved on first use: an inline prompt reads no file."""
        if self._root is None:
            shared = self.read_before
            if shared is None:
                self._root = Path(self.hank_dir).resolve()
            else:
                if shared.root is None:
                    shared.root = Path(self.hank_dir).resolve()
                self._root = shared.root
        return self._root

    def field(self, name: str, index: int | None = None) -> TextSource:
        """Where a field of the codon (or, for ``global...``, of the hank root) is."""
        is_global = name.startswith("global")
        base = "" if is_global or self.codon_path is None else f"{self.codon_path}."
        return TextSource(
            HANK_FILE,
            path=base + name + (f"[{index}]" if index is not None else ""),
            inline=True,
            item=None if is_global else self.codon_path,
            where=None if is_global else self.codon_label,
        )

    def read(self, ref: str, field: TextSource) -> str:
        """The text of the file ``ref`` names (checked like the loader checks refs)."""
        known = None if self.read_before is None else self.read_before.texts
        if known is not None and ref in known:
            self.sources.append(ref)
            return known[ref]
        problem = check_ref(ref, self.root, self.root, "file")
        if problem is not None:
            raise field.error(problem.message, code="bad_ref", hint=problem.hint)
        self.sources.append(ref)
        path = self.root / ref
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise field.error(
                f"cannot read {path}: {exc.strerror}", code="bad_ref", hint="check permissions"
            ) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TextSource(ref).error(
                "the file is not UTF-8 text",
                code="bad_encoding",
                hint="save the file as UTF-8",
                line=data.count(b"\n", 0, exc.start),
            ) from None
        if known is not None:
            known[ref] = text
        return text

    def files(self, value: str | Sequence[str] | None, name: str) -> str | None:
        """The rendered files of a ``...File`` field, joined; None when there are none."""
        refs = _refs(value)
        if not refs:
            return None
        listed = not isinstance(value, str)
        texts = [
            render_text(
                self.read(ref, self.field(name, i if listed else None)),
                self.variables,
                TextSource(ref),
            )
            for i, ref in enumerate(refs)
        ]
        return _join(texts)

    def text(self, text: str, name: str) -> str:
        """A rendered ``...Text`` field."""
        return render_text(text, self.variables, self.field(name))

    def part(self, files: str | Sequence[str] | None, text: str | None, prefix: str) -> str | None:
        """One system-prompt contributor: its text wins over its files (as in Hankweave)."""
        if text is not None:
            return self.text(text, f"{prefix}Text")
        return self.files(files, f"{prefix}File")


def prompt_reads_files(codon: Codon, hank: Hank | None = None) -> bool:
    """Whether :func:`assemble_prompt` reads files for ``codon`` (else it is
    cheap enough to call on the event loop)."""
    return bool(
        (codon.prompt_text is None and codon.prompt_file)
        or codon.append_system_prompt_file
        or (hank is not None and hank.global_system_prompt_file)
    )


def assemble_prompt(
    codon: Codon,
    hank_dir: str | os.PathLike[str],
    variables: Mapping[str, str],
    *,
    hank: Hank | None = None,
    read_before: ReadFiles | None = None,
) -> AssembledPrompt:
    """Builds what ``codon`` sends to its agent.

    ``hank_dir`` is the directory of the hank file (refs are relative to it);
    ``variables`` are the template variables, usually
    :func:`template_variables` of the codon's agent root; ``hank`` is the hank
    the codon belongs to: its global system prompt comes first in the
    system-prompt append, and errors name the codon's place in it.
    ``read_before``, kept by the caller for one pass over one hank, holds
    what was read so far: a check of every codon reads and checks each
    shared prompt file once.

    Raises ConfigError, naming the file (or the hank field) and the line, for a
    missing or unsafe file reference, a file that is not UTF-8, bad
    front-matter, an unknown template variable, or a prompt that is empty once
    front-matter and comments are removed.
    """
    path, where = _locate(hank, codon.id)
    reader = _Reader(hank_dir, variables, path, where, [], read_before)
    label = f'codon "{codon.id}"'

    metadata: PromptMetadata | None = None
    refs = _refs(codon.prompt_file)
    if codon.prompt_text is not None:
        text = reader.text(codon.prompt_text, "promptText")
        empty = reader.field("promptText")
    elif refs:
        bodies = []
        for index, ref in enumerate(refs):
            listed = not isinstance(codon.prompt_file, str)
            raw = reader.read(ref, reader.field("promptFile", index if listed else None))
            found, body, first_line = split_front_matter(raw, file=ref)
            if index == 0:
                metadata = found
            bodies.append(render_text(body, variables, TextSource(ref, first_line=first_line)))
        text = _join(bodies)
        empty = reader.field("promptFile")
    else:
        raise reader.field("promptFile").error(
            f"{label} has no prompt",
            code="missing_prompt",
            hint="give it a promptFile or a promptText",
        )
    if not text.strip():
        raise empty.error(
            f"the prompt of {label} is empty once front-matter and HTML comments are removed",
            code="empty_prompt",
            hint="write the task for the agent into it",
        )

    parts = []
    if hank is not None:
        parts.append(
            reader.part(
                hank.global_system_prompt_file, hank.global_system_prompt_text, "globalSystemPrompt"
            )
        )
    parts.append(
        reader.part(
            codon.append_system_prompt_file, codon.append_system_prompt_text, "appendSystemPrompt"
        )
    )
    present = [part for part in parts if part]
    exhaust = codon.exhaust_with_prompt
    return AssembledPrompt(
        text=text,
        prompt_metadata=metadata,
        system_prompt_append=_join(present) if present else None,
        exhaust_prompt=None if exhaust is None else reader.text(exhaust, "exhaustWithPrompt"),
        sources=tuple(reader.sources),
    )
