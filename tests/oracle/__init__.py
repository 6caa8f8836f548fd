"""A small pure-Python reference model ("oracle") of Weft's compiled core.

It mirrors the Rust semantics (codon state machine, reducer, cost rules,
strict wire decoding) in the most direct way possible, so differential tests
and benchmarks can check ``weft._core`` against it.
"""

from .codon import validate_transition
from .model import OracleCore, OracleOutcome
from .wire import MalformedError, Money

__all__ = ["MalformedError", "Money", "OracleCore", "OracleOutcome", "validate_transition"]
