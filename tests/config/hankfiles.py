"""Building hank files for tests: valid pieces to start from, and a writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DROP = object()
"""Pass as a field value to leave the field out."""


def codon(ident: str = "a", **fields: Any) -> dict[str, Any]:
    """A valid fresh codon; keyword arguments replace or (with DROP) remove fields."""
    out: dict[str, Any] = {
        "id": ident,
        "name": f"Codon {ident}",
        "model": "fake/sonnet",
        "continuationMode": "fresh",
        "promptText": f"do {ident}",
        "checkpointedFiles": ["notes/**"],
    }
    for key, value in fields.items():
        if value is DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def loop(ident: str = "l", *codons: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A valid loop of three iterations around ``codons``."""
    out: dict[str, Any] = {
        "type": "loop",
        "id": ident,
        "name": f"Loop {ident}",
        "terminateOn": {"type": "iterationLimit", "limit": 3},
        "codons": list(codons),
    }
    for key, value in fields.items():
        if value is DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def hank(*items: dict[str, Any], **root: Any) -> dict[str, Any]:
    """A hank document of ``items`` (default: one codon)."""
    return {"hank": list(items) if items else [codon()], **root}


def write_hank(directory: Path, doc: Any, files: dict[str, str | bytes] | None = None) -> Path:
    """Writes ``doc`` (a document, or raw text/bytes) as directory/hank.json, plus
    ``files`` (relative path -> content); returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    if isinstance(doc, bytes):
        (directory / "hank.json").write_bytes(doc)
    elif isinstance(doc, str):
        (directory / "hank.json").write_text(doc)
    else:
        (directory / "hank.json").write_text(json.dumps(doc, indent=2))
    return directory
