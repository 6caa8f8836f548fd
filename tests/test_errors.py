"""The exception tree: every public exception derives from WeftError, and the
drawing in ``weft.errors``'s docstring is complete and true."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import weft
from weft import errors
from weft.core import validate_transition
from weft.errors import WeftError

# The fake agent CLIs stand in for other vendors' programs: standard library only,
# they import nothing from Weft and report failures as the real CLIs do (stderr and
# an exit code), so none of their exceptions reaches a Weft caller.
OUTSIDE_THE_TREE = ("weft.agents.fake",)


def weft_modules() -> list[str]:
    """Every module of the package, except entry points that run on import."""
    return sorted(
        m.name
        for m in pkgutil.walk_packages(weft.__path__, "weft.")
        if not m.name.endswith("__main__")
    )


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in a weft module, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for name in weft_modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


CLASSES = exception_classes()


def test_the_walk_finds_the_known_classes() -> None:
    """A guard on the walk itself: it reaches nested packages and errors.py."""
    assert "weft.errors.JournalLossError" in CLASSES
    assert "weft.checkpoints.errors.CheckpointNotFoundError" in CLASSES
    assert "weft.client.HandshakeError" in CLASSES
    assert len(CLASSES) >= 40


@pytest.mark.parametrize(
    "qualname",
    sorted(
        q
        for q, cls in CLASSES.items()
        if not cls.__name__.startswith("_") and not q.startswith(OUTSIDE_THE_TREE)
    ),
)
def test_every_public_exception_derives_from_weft_error(qualname: str) -> None:
    cls = CLASSES[qualname]
    assert issubclass(cls, WeftError), (
        f"{qualname} derives from {cls.__mro__[1].__name__}; make it a WeftError "
        "(or a subclass) and add it to the tree in weft/errors.py"
    )


def drawn_tree() -> dict[str, str | None]:
    """The docstring's drawing as {class name: parent name}."""
    doc = errors.__doc__ or ""
    block = doc[doc.index("    WeftError\n") :]
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in block.splitlines():
        if not line.startswith("    "):
            break
        m = re.match(r"^    ((?:[│ ]   )*)(?:[├└]── )?(\w+)", line)
        assert m, f"cannot read the tree line {line!r}"
        depth = len(m.group(1)) // 4 + (1 if "──" in line else 0)
        name = m.group(2)
        del stack[depth:]
        parents[name] = stack[-1] if stack else None
        stack.append(name)
    return parents


def test_the_drawn_tree_is_the_real_tree() -> None:
    """Every public WeftError subclass is drawn under its real parent, and
    nothing else is (a private one never leaves its module)."""
    drawn = drawn_tree()
    real: dict[str, str | None] = {"WeftError": None}
    for cls in CLASSES.values():
        if issubclass(cls, WeftError) and cls is not WeftError and not cls.__name__.startswith("_"):
            assert cls.__name__ not in real, f"two exception classes are named {cls.__name__}"
            real[cls.__name__] = cls.__mro__[1].__name__
    assert drawn == real


def test_the_core_raises_the_classes_of_the_tree() -> None:
    """Errors raised in Rust are the Python classes, not copies of them."""
    with pytest.raises(errors.InvalidTransitionError) as info:
        validate_transition("completed", "running")
    assert isinstance(info.value, WeftError)
    assert str(info.value) == "Invalid transition from completed to running"
