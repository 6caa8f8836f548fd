"""Loading a hank file: read, parse, check everything, build the Structs.

One pass finds every problem: a JSON syntax error (with line and column),
then the structural walk (:mod:`weft.config.walk`) and the rules
(:mod:`weft.config.rules`) over the whole document. Only a document with no
errors is converted to :class:`~weft.config.schema.Hank`.

Before checking, the loader applies what the reference runtime applies to
the raw JSON: ``--model`` replaces every codon's model, and
``overrides.model`` fills in codons that name none. It also accepts two
spellings found in the reference's documentation and normalises them (with
a warning, since the reference runtime itself only reads the canonical
form): a flat rig copy ``{"type": "copy", "from", "to"}`` and a single
``outputFiles`` object instead of a list.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import orjson

from weft.config.preflight import preflight
from weft.config.problems import ConfigProblem, JsonPath
from weft.config.rules import RuleContext, check_rules
from weft.config.schema import Codon, Hank, Loop, SentinelConfig
from weft.config.walk import Sink, check_value
from weft.errors import ConfigError

__all__ = [
    "HANK_FILE_NAMES",
    "HankReport",
    "LoadedHank",
    "find_hank_file",
    "load_hank",
    "validate_hank",
]

HANK_FILE_NAMES = ("hank.json",)
"""What a hank directory's file is called."""


@dataclass(frozen=True)
class LoadedHank:
    """A valid hank file, ready to plan and run."""

    hank: Hank
    path: Path
    """The hank file (absolute)."""
    directory: Path
    """Its directory (absolute, symlinks resolved): references resolve here."""
    warnings: list[ConfigProblem]
    sha256: str
    """Digest of the file's bytes, to notice a changed hank on resume."""
    sentinel_configs: dict[Path, SentinelConfig] = field(default_factory=dict)
    """Sentinel config files referenced by codons, loaded and checked, by absolute
    path (a broken one whose codon does not require it is absent, with a warning)."""
    references: tuple[Path, ...] = ()
    """Every file and folder the hank and its sentinel configs reference (prompt files,
    sentinel configs and their prompts and schemas, rig copy sources), absolute, each
    checked safe by :class:`weft.config.refs.RefChecker`, sorted: what ``weft pack`` bundles."""

    def resolve(self, ref: str) -> Path:
        """The absolute path of a reference from the hank file (already checked safe)."""
        return self.directory / ref

    def codons(self) -> list[tuple[Codon, Loop | None]]:
        """Every codon in file order, with the loop it belongs to."""
        out: list[tuple[Codon, Loop | None]] = []
        for item in self.hank.hank:
            if isinstance(item, Loop):
                out.extend((c, item) for c in item.codons)
            else:
                out.append((item, None))
        return out


@dataclass
class HankReport:
    """Everything :func:`validate_hank` found: problems and, when valid, the hank."""

    file: str
    """The hank file as shown to the user."""
    path: Path | None
    problems: list[ConfigProblem]
    loaded: LoadedHank | None = None
    built: LoadedHank | None = None
    """The hank as built once its structure passed, even when a later check
    (:func:`weft.config.preflight.preflight`) found errors: the checks that do not
    depend on those (sentinels loading, agent CLIs) still run on it."""
    document: Any = None
    """The parsed JSON (``None`` when it could not be parsed)."""

    @property
    def valid(self) -> bool:
        """No errors (warnings allowed)."""
        return self.loaded is not None

    @property
    def errors(self) -> list[ConfigProblem]:
        """The problems that make the hank invalid."""
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[ConfigProblem]:
        """The problems that do not."""
        return [p for p in self.problems if not p.is_error]


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def find_hank_file(path: str | os.PathLike[str]) -> Path:
    """The hank file named by ``path``: the file itself, or ``hank.json`` in a directory."""
    p = Path(path)
    if p.is_dir():
        for name in HANK_FILE_NAMES:
            if (p / name).is_file():
                return p / name
        return p / HANK_FILE_NAMES[0]
    return p


def validate_hank(
    path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    model: str | None = None,
    check_environment: bool = True,
) -> HankReport:
    """Runs every check on the hank at ``path`` (a file or a directory holding
    ``hank.json``) and reports; it raises nothing for problems in the hank.

    ``env`` is the environment the run will have (default ``os.environ``);
    ``model`` is the ``--model`` override; ``check_environment=False`` skips
    the requirements' environment variables and tools (for checking a hank
    on a machine other than the one that runs it).
    """
    file = find_hank_file(path)
    display = _display(file)
    report = HankReport(file=display, path=file, problems=[])
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        where = f"no hank file at {display}"
        hint = (
            f"create one with `weft init {_display(file.parent)}`"
            if Path(path).is_dir()
            else ("check the path")
        )
        report.problems.append(
            ConfigProblem(file=display, path="$", message=where, code="no_file", hint=hint)
        )
        return report
    except OSError as e:
        report.problems.append(
            ConfigProblem(
                file=display,
                path="$",
                message=f"cannot read the hank file: {e.strerror}",
                code="unreadable",
            )
        )
        return report
    return _validate_bytes(
        data,
        file.resolve(),
        display,
        report,
        env=os.environ if env is None else env,
        model=model,
        check_environment=check_environment,
    )


def _validate_bytes(
    data: bytes,
    file: Path,
    display: str,
    report: HankReport,
    *,
    env: Mapping[str, str],
    model: str | None,
    check_environment: bool,
) -> HankReport:
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        doc = orjson.loads(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
    except orjson.JSONDecodeError as e:
        report.problems.append(
            ConfigProblem(
                file=display,
                path="$",
                message=f"invalid JSON: {e.msg}",
                code="bad_json",
                line=e.lineno,
                column=e.colno,
                hint="fix the syntax at this line and column (a trailing comma, a missing quote?)",
            )
        )
        return report
    report.document = doc
    sink = Sink(display, doc, hank_document=True)
    _normalise(doc, sink, model)
    check_value(doc, Hank, (), sink)
    root = file.parent
    display_dir = os.path.dirname(display)
    ctx = RuleContext(
        sink=sink,
        root=root,
        display_dir=display_dir,
        env=env,
        check_environment=check_environment,
    )
    check_rules(doc, ctx)
    report.problems = [*report.problems, *sink.in_order()]
    if sink.error_count:
        return report
    try:
        hank = msgspec.convert(_tag_codons(doc), Hank)
    except msgspec.ValidationError as e:  # a disagreement between the walk and msgspec
        report.problems.append(
            ConfigProblem(
                file=display,
                path="$",
                message=f"internal error building the hank: {e}",
                code="internal",
                hint="please report this: the checks passed a document msgspec refused",
            )
        )
        return report
    loaded = LoadedHank(
        hank=hank,
        path=file,
        directory=root,
        warnings=[p for p in report.problems if not p.is_error],
        sha256=sha256,
        sentinel_configs=ctx.sentinel_configs,
        references=tuple(t.path for t in ctx.refs.targets()),
    )
    # What the run would otherwise find only when a codon starts (weft.config.preflight).
    late = preflight(loaded, file=display)
    report.problems = [*report.problems, *late]
    report.built = loaded
    if not any(p.is_error for p in late):
        report.loaded = loaded
    return report


def load_hank(
    path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    model: str | None = None,
    check_environment: bool = True,
) -> LoadedHank:
    """Loads and checks the hank at ``path`` (a file or a directory).

    Raises :class:`weft.errors.ConfigError` listing every problem (errors and
    warnings) when it has any error. See :func:`validate_hank` for the options.
    """
    report = validate_hank(path, env=env, model=model, check_environment=check_environment)
    if report.loaded is None:
        raise ConfigError(report.problems)
    return report.loaded


def _codon_dicts(doc: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    items = doc.get("hank") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return out
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "loop":
            codons = item.get("codons")
            if isinstance(codons, list):
                out.extend(c for c in codons if isinstance(c, dict))
        else:
            out.append(item)
    return out


def _normalise(doc: Any, sink: Sink, model: str | None) -> None:
    """Applies --model, overrides.model and the accepted alternative spellings."""
    if not isinstance(doc, dict):
        return
    overrides = doc.get("overrides")
    default_model = overrides.get("model") if isinstance(overrides, dict) else None
    items = doc.get("hank")
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        paths: list[tuple[JsonPath, Any]]
        if item.get("type") == "loop":
            codons = item.get("codons")
            codon_list = codons if isinstance(codons, list) else []
            paths = [(("hank", i, "codons", j), c) for j, c in enumerate(codon_list)]
        else:
            paths = [(("hank", i), item)]
        for path, codon in paths:
            if not isinstance(codon, dict):
                continue
            if model is not None:
                codon["model"] = model
            elif "model" not in codon and isinstance(default_model, str) and default_model:
                codon["model"] = default_model
            _normalise_codon(codon, path, sink)


def _normalise_codon(codon: dict[str, Any], path: JsonPath, sink: Sink) -> None:
    rig = codon.get("rigSetup")
    if isinstance(rig, list):
        for k, op in enumerate(rig):
            if (
                isinstance(op, dict)
                and op.get("type") == "copy"
                and "copy" not in op
                and ("from" in op or "to" in op)
            ):
                spec = {key: op.pop(key) for key in ("from", "to") if key in op}
                op["copy"] = spec
                sink.warn(
                    (*path, "rigSetup", k),
                    "flat_copy",
                    'flat copy operation {"type": "copy", "from", "to"} accepted',
                    hint='write it as {"type": "copy", "copy": {"from": ..., "to": ...}}, the '
                    "form the reference runtime reads",
                )
    outputs = codon.get("outputFiles")
    if isinstance(outputs, dict):
        codon["outputFiles"] = [outputs]
        sink.warn(
            (*path, "outputFiles"),
            "output_files_object",
            "a single outputFiles object accepted",
            hint="write it as a list of copy steps: [{...}], the form the reference runtime reads",
        )


def _tag_codons(doc: dict[str, Any]) -> dict[str, Any]:
    """Makes each codon's default ``type`` explicit (msgspec's unions need the tag)."""
    for item in doc["hank"]:
        item.setdefault("type", "codon")
        if item["type"] == "loop":
            for codon in item["codons"]:
                codon.setdefault("type", "codon")
    return doc
