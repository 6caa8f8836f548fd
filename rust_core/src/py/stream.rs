//! The fast path of `weft.agents.claude_parser` for Python:
//! `ClaudeLineParser`.
//!
//! It takes a batch of stdout lines and appends their events (the msgspec
//! Structs of `weft.agents.events`, built here) to a list, so the common
//! lines cost no Python decode, dispatch or merge. A batch is decoded
//! detached from the interpreter when it is large enough for that to pay
//! ([`DETACH_BYTES`]), then its events are built in order with the session
//! state (usage maxima, the stream's message id) held here.
//!
//! The first line the core does not take (see `stream::claude`) ends the
//! call: `feed` returns its index, the Python parser reads that one line and
//! calls again after it. The Python path updates the state through
//! `usage` and `sse_message_id`, so there is one state, in order.
//!
//! Prices come from the Python pricing table through the `price_row`
//! callback, asked once per model: this module applies the formula, never
//! the table's matching rules.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::{intern, IntoPyObjectExt, PyTraverseError, PyVisit};

use crate::stream::claude::{AssistantBlock, Decoder, Json, Line, Stream};
use crate::stream::usage::{Ledger, PriceRow, Prices, Snapshot, Tokens, UsageDelta};

/// A batch at least this large is decoded detached from the interpreter.
/// Below it, giving the interpreter up and taking it back again may cost
/// more than the decode (a thread that holds it can keep it for the whole
/// switch interval).
const DETACH_BYTES: usize = 64 * 1024;

/// Lines decoded at once are at most about this large, which bounds the
/// strings held between the decode and the events.
const WINDOW_BYTES: usize = 4 * 1024 * 1024;

/// Adds `ClaudeLineParser` to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ClaudeLineParser>()
}

/// The event classes, built with positional arguments in their field order
/// (checked once, when the first parser is made).
struct Classes {
    assistant_text: Py<PyAny>,
    thinking: Py<PyAny>,
    tool_use: Py<PyAny>,
    tool_result: Py<PyAny>,
    usage_delta: Py<PyAny>,
    tokens: Py<PyAny>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        let events = py.import("weft.agents.events")?;
        let class = |name: &str, fields: &[&str]| -> PyResult<Py<PyAny>> {
            let cls = events.getattr(name)?;
            let actual: Vec<String> = cls.getattr("__struct_fields__")?.extract()?;
            if actual != fields {
                return Err(PyTypeError::new_err(format!(
                    "weft.agents.events.{name} has the fields {actual:?}; \
                     the core builds it with {fields:?}"
                )));
            }
            Ok(cls.unbind())
        };
        Ok(Classes {
            assistant_text: class(
                "AssistantText",
                &["text", "message_id", "partial", "subagent"],
            )?,
            thinking: class("Thinking", &["text", "message_id", "subagent"])?,
            tool_use: class(
                "ToolUse",
                &["tool_use_id", "name", "input", "message_id", "subagent"],
            )?,
            tool_result: class(
                "ToolResult",
                &["tool_use_id", "content", "is_error", "subagent"],
            )?,
            usage_delta: class("UsageDelta", &["model", "tokens", "cost_usd", "message_id"])?,
            tokens: class(
                "Tokens",
                &[
                    "input",
                    "output",
                    "cache_creation",
                    "cache_read",
                    "cache_creation_1h",
                ],
            )?,
        })
    })
}

/// The per-session state of Claude Code's stream-json fast path; one per
/// `ClaudeParser`. See the module docs.
#[pyclass(module = "weft._core")]
pub struct ClaudeLineParser {
    ledger: Ledger,
    /// `price_row(model)`: the model's row as numbers, or `None`. Usually a
    /// method of the `ClaudeParser` that owns this object: a reference cycle,
    /// which `__traverse__`/`__clear__` let the garbage collector break (one
    /// leaked session per codon otherwise).
    price_row: Option<Py<PyAny>>,
    /// The id of the partial message being streamed.
    sse_message_id: Option<Py<PyString>>,
    decoder: Decoder,
    /// The lines of a batch, copied for the decoder (kept for its capacity).
    scratch: Vec<u8>,
}

#[pymethods]
impl ClaudeLineParser {
    /// `price_row(model)` returns `None` for an unpriced model, else
    /// `(prices, tiers)`: `prices` is the five pico-dollar prices per token
    /// (input, 5-minute write, 1-hour write, read, output) and `tiers` a
    /// sequence of `(above_prompt_tokens, prices)`, ascending.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.price_row)?;
        visit.call(&self.sse_message_id)?;
        Ok(())
    }

    fn __clear__(&mut self) {
        self.price_row = None;
        self.sse_message_id = None;
    }

    #[new]
    fn new(py: Python<'_>, price_row: Py<PyAny>) -> PyResult<Self> {
        classes(py)?;
        Ok(ClaudeLineParser {
            ledger: Ledger::new(),
            price_row: Some(price_row),
            sse_message_id: None,
            decoder: Decoder::new(),
            scratch: Vec::new(),
        })
    }

    /// Parses `lines[start:]` in order, appending their events to `events`,
    /// and returns the index of the first line the core does not take (the
    /// caller parses it, then calls again from the next), or `len(lines)`.
    fn feed(
        &mut self,
        py: Python<'_>,
        lines: &Bound<'_, PyList>,
        start: usize,
        events: &Bound<'_, PyList>,
    ) -> PyResult<usize> {
        let classes = classes(py)?;
        let end = lines.len();
        let mut next = start;
        while next < end {
            let mut batch: Vec<Bound<'_, PyBytes>> = Vec::new();
            let mut size = 0;
            while next + batch.len() < end && (batch.is_empty() || size < WINDOW_BYTES) {
                let line = lines.get_item(next + batch.len())?.cast_into::<PyBytes>()?;
                size += line.as_bytes().len();
                batch.push(line);
            }
            let slices: Vec<&[u8]> = batch.iter().map(PyBytesMethods::as_bytes).collect();
            let mut scratch = std::mem::take(&mut self.scratch);
            let lines_decoder = &mut self.decoder;
            let parsed = if size >= DETACH_BYTES {
                py.detach(|| lines_decoder.decode_until_slow(&slices, &mut scratch))
            } else {
                lines_decoder.decode_until_slow(&slices, &mut scratch)
            };
            let mut stopped = false;
            for line in parsed {
                if !self.build(py, classes, line, events)? {
                    stopped = true;
                    break;
                }
                next += 1;
            }
            self.scratch = scratch;
            if stopped {
                return Ok(next);
            }
        }
        Ok(end)
    }

    /// Records message `message_id`'s usage snapshot, read by the Python
    /// path, and returns its `UsageDelta`, or `None` when it added nothing.
    /// `split` is `cache_creation`'s (5-minute, 1-hour) tokens, if any.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per field of the wire's usage, as the Python path has them"
    )]
    #[pyo3(signature = (message_id, model, input, output, cache_creation, cache_read, split))]
    fn usage(
        &mut self,
        py: Python<'_>,
        message_id: &str,
        model: Option<&str>,
        input: i64,
        output: i64,
        cache_creation: i64,
        cache_read: i64,
        split: Option<(i64, i64)>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let snapshot = Snapshot {
            input,
            output,
            cache_creation,
            cache_read,
            split,
        };
        let price_row = self.price_row.as_ref();
        let delta = self
            .ledger
            .record(message_id, model, snapshot, |m| lookup(py, price_row, m))?;
        let Some(delta) = delta else {
            return Ok(None);
        };
        let classes = classes(py)?;
        let model = model.map(|m| PyString::new(py, m));
        let id = PyString::new(py, message_id);
        Ok(Some(
            usage_delta(py, classes, delta, model, &id.into_any())?.unbind(),
        ))
    }

    /// The id of the partial message being streamed (`message_start`).
    #[getter]
    fn get_sse_message_id(&self, py: Python<'_>) -> Option<Py<PyString>> {
        self.sse_message_id.as_ref().map(|id| id.clone_ref(py))
    }

    #[setter]
    fn set_sse_message_id(&mut self, value: Option<Py<PyString>>) {
        self.sse_message_id = value;
    }

    /// The model of the latest message with usage (never the synthetic one).
    #[getter]
    fn priced_model(&self) -> Option<&str> {
        self.ledger.priced_model.as_deref()
    }

    /// The tokens of every usage delta, summed: `(input, output,
    /// cache_creation, cache_read, cache_creation_1h)`.
    #[getter]
    fn spent<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let t = &self.ledger.spent;
        let values = [
            t.input,
            t.output,
            t.cache_creation,
            t.cache_read,
            t.cache_creation_1h,
        ];
        PyTuple::new(
            py,
            values
                .iter()
                .map(|v| int(py, *v))
                .collect::<PyResult<Vec<_>>>()?,
        )
    }

    /// The live estimate in nano-dollars; `None` once a message was unpriced.
    #[getter]
    fn estimate_nanos(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.ledger
            .estimate_nanos
            .map(|n| int(py, n).map(Bound::unbind))
            .transpose()
    }
}

impl ClaudeLineParser {
    /// Appends one decoded line's events; `false`: the line is slow and
    /// nothing was changed.
    fn build(
        &mut self,
        py: Python<'_>,
        classes: &Classes,
        line: Line<'_>,
        events: &Bound<'_, PyList>,
    ) -> PyResult<bool> {
        match line {
            Line::Skip | Line::Stream(Stream::Other) => {}
            Line::Slow => return Ok(false),
            Line::Assistant(a) => {
                let id = a.message_id.map(|s| PyString::new(py, s));
                let id_obj = id
                    .as_ref()
                    .map_or_else(|| py.None().into_bound(py), |s| s.clone().into_any());
                let sub = PyBool::new(py, a.subagent);
                let mut built: Vec<Bound<'_, PyAny>> = Vec::with_capacity(a.blocks.len() + 1);
                for block in &a.blocks {
                    built.push(match block {
                        AssistantBlock::Text(text) => classes.assistant_text.bind(py).call1((
                            PyString::new(py, text),
                            &id_obj,
                            false,
                            &sub,
                        ))?,
                        AssistantBlock::Thinking(text) => classes.thinking.bind(py).call1((
                            PyString::new(py, text),
                            &id_obj,
                            &sub,
                        ))?,
                        AssistantBlock::ToolUse { id, name, input } => {
                            classes.tool_use.bind(py).call1((
                                PyString::new(py, id),
                                PyString::new(py, name),
                                tool_input(py, input)?,
                                &id_obj,
                                &sub,
                            ))?
                        }
                    });
                }
                if let (Some(snapshot), Some(message_id)) = (a.usage, a.message_id) {
                    let price_row = self.price_row.as_ref();
                    let model = a.model;
                    let delta = self
                        .ledger
                        .record(message_id, model, snapshot, |m| lookup(py, price_row, m))?;
                    if let Some(delta) = delta {
                        let model = model.map(|m| PyString::new(py, m));
                        built.push(usage_delta(py, classes, delta, model, &id_obj)?);
                    }
                }
                for event in built {
                    events.append(event)?;
                }
            }
            Line::User(u) => {
                let sub = PyBool::new(py, u.subagent);
                for result in &u.results {
                    events.append(classes.tool_result.bind(py).call1((
                        PyString::new(py, result.tool_use_id),
                        PyString::new(py, &result.content),
                        result.is_error,
                        &sub,
                    ))?)?;
                }
            }
            Line::Stream(Stream::TextDelta { text, subagent }) => {
                events.append(classes.assistant_text.bind(py).call1((
                    PyString::new(py, text),
                    &self.sse_message_id,
                    true,
                    subagent,
                ))?)?;
            }
            Line::Stream(Stream::MessageStart { id }) => {
                self.sse_message_id = id.map(|id| PyString::new(py, id).unbind());
            }
        }
        Ok(true)
    }
}

/// A tool call's `input` as the Python path's `as_dict` makes it: the dict
/// itself, `{}` for null, `{"input": value}` for anything else.
fn tool_input<'py>(py: Python<'py>, input: &Json<'_>) -> PyResult<Bound<'py, PyAny>> {
    match input {
        Json::Object(_) => json_value(py, input),
        Json::Null => Ok(PyDict::new(py).into_any()),
        other => {
            let dict = PyDict::new(py);
            dict.set_item(intern!(py, "input"), json_value(py, other)?)?;
            Ok(dict.into_any())
        }
    }
}

/// A JSON value as msgspec decodes it into `Any` (a repeated key keeps its
/// first place and its last value, as in a dict built key by key).
fn json_value<'py>(py: Python<'py>, value: &Json<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Json::Null => py.None().into_bound(py),
        Json::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Json::Int(n) => n.into_bound_py_any(py)?,
        Json::UInt(n) => n.into_bound_py_any(py)?,
        Json::Str(s) => PyString::new(py, s).into_any(),
        Json::Array(items) => PyList::new(
            py,
            items
                .iter()
                .map(|item| json_value(py, item))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        Json::Object(pairs) => {
            let dict = PyDict::new(py);
            for (key, item) in pairs {
                dict.set_item(PyString::new(py, key), json_value(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

fn usage_delta<'py>(
    py: Python<'py>,
    classes: &Classes,
    delta: UsageDelta,
    model: Option<Bound<'py, PyString>>,
    message_id: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let t: &Tokens = &delta.tokens;
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "input"), int(py, t.input)?)?;
    kwargs.set_item(intern!(py, "output"), int(py, t.output)?)?;
    kwargs.set_item(intern!(py, "cache_creation"), int(py, t.cache_creation)?)?;
    kwargs.set_item(intern!(py, "cache_read"), int(py, t.cache_read)?)?;
    kwargs.set_item(
        intern!(py, "cache_creation_1h"),
        int(py, t.cache_creation_1h)?,
    )?;
    // Tokens is keyword-only.
    let tokens = classes.tokens.bind(py).call((), Some(&kwargs))?;
    // As Python's `nanos / 1e9`: the int rounded to the nearest float, then divided.
    let cost = delta.cost_nanos.map(|n| n as f64 / 1e9);
    classes
        .usage_delta
        .bind(py)
        .call1((model, tokens, cost, message_id))
}

/// A Python int (the fast conversion when it fits 64 bits).
fn int(py: Python<'_>, value: i128) -> PyResult<Bound<'_, PyAny>> {
    match i64::try_from(value) {
        Ok(small) => small.into_bound_py_any(py),
        Err(_) => value.into_bound_py_any(py),
    }
}

/// Asks the Python pricing table for `model`'s row.
fn lookup(
    py: Python<'_>,
    price_row: Option<&Py<PyAny>>,
    model: &str,
) -> PyResult<Option<PriceRow>> {
    type Five = (i64, i64, i64, i64, i64);
    let Some(price_row) = price_row else {
        return Ok(None); // cleared by the garbage collector: the parser is going away
    };
    let row = price_row.call1(py, (model,))?;
    if row.is_none(py) {
        return Ok(None);
    }
    let (prices, tiers): (Five, Vec<(i64, Five)>) = row.extract(py)?;
    let prices_of = |(input, cache_write_5m, cache_write_1h, cache_read, output): Five| Prices {
        input,
        cache_write_5m,
        cache_write_1h,
        cache_read,
        output,
    };
    Ok(Some(PriceRow {
        prices: prices_of(prices),
        tiers: tiers
            .into_iter()
            .map(|(above, p)| (above, prices_of(p)))
            .collect(),
    }))
}
