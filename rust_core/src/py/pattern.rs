//! `Pattern`: a regular expression matched in time linear in the text, for
//! the `matches` conditions of sentinel triggers and the globs of
//! `checkpointedFiles` and the rig's ignore rules (`weft.linear_glob`).
//!
//! The text a sentinel matches is written by the agent (a file's content, a
//! command, a tool's output), so it is hostile input. A backtracking engine
//! (Python's `re`, JavaScript's `RegExp`) takes exponential time on patterns
//! such as `^(a+)+$` with the right text, and the run hangs. The `regex`
//! crate compiles to finite automata: every search is linear in the text for
//! any pattern, and it refuses what automata cannot do (backreferences,
//! look-around). The compiled program and the lazy DFA's cache are bounded
//! ([`SIZE_LIMIT`], [`DFA_SIZE_LIMIT`]), so a pattern cannot exhaust memory
//! either: `a{1000}{1000}` is refused, not built.
//!
//! The source is Rust `regex` syntax: `weft.sentinels.jsregex` translates
//! the JavaScript syntax of configs into it (and refuses what cannot be
//! translated) before it reaches this class.
//!
//! The regex is a `bytes` one: the text is matched as its UTF-8 bytes (a
//! `str` with lone surrogates, which agent output decoded with
//! `surrogateescape` may hold, as `surrogatepass` bytes), and an ASCII word
//! boundary `(?-u:\B)`, JavaScript's `\B`, is allowed, which a `str` regex
//! refuses.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use regex::bytes::{Regex, RegexBuilder};

/// Adds `Pattern` to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Pattern>()?;
    Ok(())
}

/// Largest compiled program of one pattern, in bytes (the crate's default is
/// 10 MiB): hundreds of sentinels' patterns fit in memory, and typical ones
/// take a few KiB. A repeated Unicode class grows fast: `.{500}` fits,
/// `.{1000}` does not.
const SIZE_LIMIT: usize = 1 << 20;

/// Largest lazy-DFA cache of one pattern, in bytes: past it the cache is
/// cleared and, if that happens too often, the search goes on in a slower
/// engine, still linear.
const DFA_SIZE_LIMIT: usize = 1 << 20;

/// Texts up to this size are matched without detaching from the interpreter:
/// giving it up and taking it back costs more than a short search when
/// another thread (the journal's writer) takes it meanwhile. Searches cost
/// well under 1 ns a byte for common patterns, and about 3 us a byte for the
/// worst ones (`.*a.{100}c`, whose DFA the text keeps rebuilding), so a
/// search up to this size holds the interpreter for at most about 10 ms.
const DETACH_BYTES: usize = 4 * 1024;

/// A compiled pattern (Rust `regex` syntax), matched in linear time.
#[pyclass(frozen, module = "weft._core")]
pub struct Pattern {
    regex: Regex,
}

#[pymethods]
impl Pattern {
    /// Compiles `source`; raises `ValueError` with the engine's message when
    /// it is not valid or too large.
    #[new]
    fn new(source: &str) -> PyResult<Self> {
        RegexBuilder::new(source)
            .size_limit(SIZE_LIMIT)
            .dfa_size_limit(DFA_SIZE_LIMIT)
            .build()
            .map(|regex| Self { regex })
            .map_err(|e| PyValueError::new_err(message(&e)))
    }

    /// The pattern's source.
    #[getter]
    fn source(&self) -> &str {
        self.regex.as_str()
    }

    /// Whether the pattern matches somewhere in `text`.
    fn search(&self, py: Python<'_>, text: &Bound<'_, PyString>) -> PyResult<bool> {
        if let Ok(s) = text.to_str() {
            return Ok(self.find(py, s.as_bytes()));
        }
        // Lone surrogates: match the bytes Python would write with them.
        let raw = text.call_method1("encode", ("utf-8", "surrogatepass"))?;
        let bytes: &[u8] = raw.extract()?;
        Ok(self.find(py, bytes))
    }

    fn __repr__(&self) -> String {
        format!("Pattern({:?})", self.regex.as_str())
    }
}

impl Pattern {
    fn find(&self, py: Python<'_>, text: &[u8]) -> bool {
        if text.len() <= DETACH_BYTES {
            self.regex.is_match(text)
        } else {
            py.detach(|| self.regex.is_match(text))
        }
    }
}

/// The engine's message on one line: its syntax errors draw the pattern
/// with a caret under the fault on several lines, which a config problem
/// cannot show.
fn message(err: &regex::Error) -> String {
    if let regex::Error::CompiledTooBig(limit) = err {
        return format!(
            "the compiled pattern is larger than {} KiB (a large repetition count, \
             or a repeated Unicode class)",
            limit / 1024
        );
    }
    let text = err.to_string();
    text.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map_or_else(|| text.trim().to_owned(), str::to_owned)
}
