//! The common lines of Claude Code's stream-json output (reference
//! agent-cli-protocols §1.3), decoded for the fast path of
//! `weft.agents.claude_parser`.
//!
//! Nearly every line of a session is an `assistant`, `user` or
//! `stream_event` line, and most of their bytes are tool results, often
//! twice (`message.content` and `tool_use_result`), full of escapes. A
//! [`Decoder`] copies a batch of lines once into a buffer and parses each
//! with simd-json (SIMD structural scan, strings unescaped in place), then
//! reads only the fields the parser's events need, borrowing every string
//! from that buffer.
//!
//! **The fast path must agree with the Python path line for line.** That
//! parser decodes with msgspec into the Structs of `claude_wire.py`; a line
//! this module is not sure to read the same way is [`Line::Slow`], and the
//! caller hands it to the Python path, which decides as it always did. So
//! every doubt is settled towards `Slow`:
//!
//! - any parse error (bad JSON, invalid UTF-8 anywhere, a lone surrogate,
//!   a number out of 64-bit range, nesting deeper than [`MAX_DEPTH`]),
//!   whether or not msgspec would have accepted the line;
//! - a field of another type than the Struct declares (an integer written
//!   as `1.0`, an object where a list is expected, ...);
//! - a type other than the three (`system` and `result` lines decide the
//!   session and the verdict; they are rare, so they stay in Python), and a
//!   `type` key given twice;
//! - an assistant line of the synthetic model (an API error the verdict
//!   reads), a tool call whose input holds a float, and a tool result whose
//!   content is neither a string, nor null, nor a list of strings and
//!   `{"type", "text"}` parts (the Python path formats the rest).
//!
//! The other way round matters more: this module must refuse whatever
//! msgspec refuses. simd-json is as strict as msgspec about JSON itself
//! (control characters, escapes, numbers, trailing bytes) and stricter
//! about UTF-8; every field the Structs declare is type-checked even when
//! the event does not need it; a repeated key keeps its last value and keys
//! are compared unescaped, as msgspec does.

use std::borrow::Cow;

use simd_json::{Buffers, Node, StaticNode, Tape, INPUT_PADDING};

use crate::stream::usage::{Snapshot, SYNTHETIC_MODEL};

/// Lines nested deeper are slow (msgspec's own limit is the interpreter's
/// recursion limit, well above this).
pub const MAX_DEPTH: usize = 128;

/// One stdout line, as the fast path sees it.
#[derive(Debug, PartialEq)]
pub enum Line<'a> {
    /// Blank, or not a JSON object (`[SandboxDebug] ...`): no events, and
    /// nothing counted.
    Skip,
    /// The Python path must read this line (see the module docs).
    Slow,
    /// An `assistant` line.
    Assistant(Assistant<'a>),
    /// A `user` line.
    User(User<'a>),
    /// A `stream_event` line (a partial message).
    Stream(Stream<'a>),
}

/// The parts of an `assistant` line that make events.
#[derive(Debug, PartialEq)]
pub struct Assistant<'a> {
    /// `message.id`.
    pub message_id: Option<&'a str>,
    /// `message.model` (never the synthetic model: such lines are slow).
    pub model: Option<&'a str>,
    /// Whether `parent_tool_use_id` is set.
    pub subagent: bool,
    /// The content blocks that make events, in order.
    pub blocks: Vec<AssistantBlock<'a>>,
    /// `message.usage`.
    pub usage: Option<Snapshot>,
}

/// A content block of an assistant message that makes an event.
#[derive(Debug, PartialEq)]
pub enum AssistantBlock<'a> {
    /// A `text` block (an empty text too).
    Text(&'a str),
    /// A `thinking` block with some text.
    Thinking(&'a str),
    /// A `tool_use` block.
    ToolUse {
        /// `id`, or `""`.
        id: &'a str,
        /// `name`, or `""`.
        name: &'a str,
        /// `input` (`Json::Null` when missing).
        input: Json<'a>,
    },
}

/// A JSON value without floats (a tool call's input).
#[derive(Debug, PartialEq)]
pub enum Json<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A negative integer.
    Int(i64),
    /// A non-negative integer.
    UInt(u64),
    /// A string.
    Str(&'a str),
    /// An array.
    Array(Vec<Json<'a>>),
    /// An object's pairs in order, repeated keys included.
    Object(Vec<(&'a str, Json<'a>)>),
}

/// The tool results of a `user` line.
#[derive(Debug, PartialEq)]
pub struct User<'a> {
    /// Whether `parent_tool_use_id` is set.
    pub subagent: bool,
    /// Its `tool_result` blocks, in order.
    pub results: Vec<ToolResult<'a>>,
}

/// One `tool_result` block.
#[derive(Debug, PartialEq)]
pub struct ToolResult<'a> {
    /// `tool_use_id`, or `""`.
    pub tool_use_id: &'a str,
    /// The content as text: the string itself, the parts joined by
    /// newlines (`[type]` for a part that is not text), `""` for null.
    pub content: Cow<'a, str>,
    /// `is_error` is `true`.
    pub is_error: bool,
}

/// What a `stream_event` line does.
#[derive(Debug, PartialEq)]
pub enum Stream<'a> {
    /// A `content_block_delta` with some `text_delta` text.
    TextDelta {
        /// The text.
        text: &'a str,
        /// Whether `parent_tool_use_id` is set.
        subagent: bool,
    },
    /// A `message_start` with a `message`: its id names the deltas after it.
    MessageStart {
        /// `event.message.id`.
        id: Option<&'a str>,
    },
    /// Anything else: no event.
    Other,
}

/// Decodes batches of lines, keeping simd-json's buffers from one batch to
/// the next.
pub struct Decoder {
    buffers: Buffers,
    tape: Tape<'static>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            buffers: Buffers::with_max_depth(64 * 1024, MAX_DEPTH),
            tape: Tape::null(),
        }
    }
}

impl Decoder {
    /// A new decoder.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decodes `lines` (without their `\n`; a trailing `\r` may remain) in
    /// order, up to and including the first slow one: the lines after it
    /// must wait until the Python path has read it, since it may change what
    /// they mean (a usage snapshot, a stream's message id). The lines are
    /// copied into `scratch`, where their strings are unescaped and
    /// borrowed from.
    pub fn decode_until_slow<'a>(
        &mut self,
        lines: &[&[u8]],
        scratch: &'a mut Vec<u8>,
    ) -> Vec<Line<'a>> {
        // Each line gets a copy followed by simd-json's padding, so the
        // pieces are disjoint and each line's strings can live on while the
        // next is parsed.
        let objects: Vec<Option<&[u8]>> = lines.iter().map(|line| object(line)).collect();
        scratch.clear();
        for line in objects.iter().flatten() {
            scratch.extend_from_slice(line);
            scratch.resize(scratch.len() + INPUT_PADDING, b' ');
        }
        let mut rest: &'a mut [u8] = scratch.as_mut_slice();
        let mut tape: Tape<'a> = std::mem::replace(&mut self.tape, Tape::null()).reset();
        let mut out = Vec::with_capacity(lines.len());
        for line in objects {
            let Some(line) = line else {
                out.push(Line::Skip);
                continue;
            };
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(line.len() + INPUT_PADDING);
            rest = tail;
            let decoded = match simd_json::fill_tape_padded(
                piece,
                line.len(),
                &mut self.buffers,
                &mut tape,
            ) {
                Ok(()) => classify(&tape.0).unwrap_or(Line::Slow),
                Err(_) => Line::Slow,
            };
            let slow = decoded == Line::Slow;
            out.push(decoded);
            if slow {
                break;
            }
        }
        self.tape = tape.reset();
        out
    }
}

/// The line to parse, or `None` when it is skipped: as the Python path,
/// a line that does not start with `{` is stripped (`bytes.strip()`) and
/// skipped unless it then does.
fn object(line: &[u8]) -> Option<&[u8]> {
    if line.first() == Some(&b'{') {
        return Some(line);
    }
    let trimmed = line.trim_ascii();
    (trimmed.first() == Some(&b'{')).then_some(trimmed)
}

// -- reading the tape ---------------------------------------------------------------------------

/// A field of the wrong type, or a shape this module leaves to Python.
struct Odd;

type Read<T> = Result<T, Odd>;

/// The nodes of one value: its first node and, for a container, the nodes
/// inside it.
fn span(nodes: &[Node<'_>]) -> usize {
    match nodes.first() {
        Some(Node::Object { count, .. } | Node::Array { count, .. }) => count + 1,
        _ => 1,
    }
}

/// The pairs of an object value, in order. `Err` if it is not an object.
fn pairs<'t, 'a>(value: &'t [Node<'a>]) -> Read<Pairs<'t, 'a>> {
    match value.first() {
        Some(Node::Object { len, .. }) => Ok(Pairs {
            rest: &value[1..],
            left: *len,
        }),
        _ => Err(Odd),
    }
}

struct Pairs<'t, 'a> {
    rest: &'t [Node<'a>],
    left: usize,
}

impl<'t, 'a> Iterator for Pairs<'t, 'a> {
    type Item = (&'a str, &'t [Node<'a>]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let Some((Node::String(key), after)) = self.rest.split_first() else {
            return None;
        };
        let (value, rest) = after.split_at(span(after));
        self.rest = rest;
        Some((*key, value))
    }
}

/// The elements of an array value, in order. `Err` if it is not an array.
fn elements<'t, 'a>(value: &'t [Node<'a>]) -> Read<Elements<'t, 'a>> {
    match value.first() {
        Some(Node::Array { len, .. }) => Ok(Elements {
            rest: &value[1..],
            left: *len,
        }),
        _ => Err(Odd),
    }
}

struct Elements<'t, 'a> {
    rest: &'t [Node<'a>],
    left: usize,
}

impl<'t, 'a> Iterator for Elements<'t, 'a> {
    type Item = &'t [Node<'a>];

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (value, rest) = self.rest.split_at(span(self.rest));
        self.rest = rest;
        Some(value)
    }
}

/// `str`.
fn string<'a>(value: &[Node<'a>]) -> Read<&'a str> {
    match value.first() {
        Some(Node::String(s)) => Ok(s),
        _ => Err(Odd),
    }
}

/// `str | None`.
fn opt_string<'a>(value: &[Node<'a>]) -> Read<Option<&'a str>> {
    match value.first() {
        Some(Node::String(s)) => Ok(Some(s)),
        Some(Node::Static(StaticNode::Null)) => Ok(None),
        _ => Err(Odd),
    }
}

/// `int`, within 64 bits.
fn int(value: &[Node<'_>]) -> Read<i64> {
    match value.first() {
        Some(Node::Static(StaticNode::I64(n))) => Ok(*n),
        Some(Node::Static(StaticNode::U64(n))) => i64::try_from(*n).map_err(|_| Odd),
        _ => Err(Odd),
    }
}

/// `bool | None`.
fn opt_bool(value: &[Node<'_>]) -> Read<Option<bool>> {
    match value.first() {
        Some(Node::Static(StaticNode::Bool(b))) => Ok(Some(*b)),
        Some(Node::Static(StaticNode::Null)) => Ok(None),
        _ => Err(Odd),
    }
}

fn is_null(value: &[Node<'_>]) -> bool {
    matches!(value.first(), Some(Node::Static(StaticNode::Null)))
}

/// Any JSON value but a float (whose rounding is msgspec's to decide).
fn json<'a>(value: &[Node<'a>]) -> Read<Json<'a>> {
    Ok(match value.first() {
        Some(Node::String(s)) => Json::Str(s),
        Some(Node::Static(StaticNode::Null)) => Json::Null,
        Some(Node::Static(StaticNode::Bool(b))) => Json::Bool(*b),
        Some(Node::Static(StaticNode::I64(n))) => Json::Int(*n),
        Some(Node::Static(StaticNode::U64(n))) => Json::UInt(*n),
        Some(Node::Array { .. }) => Json::Array(elements(value)?.map(json).collect::<Read<_>>()?),
        Some(Node::Object { .. }) => Json::Object(
            pairs(value)?
                .map(|(k, v)| Ok((k, json(v)?)))
                .collect::<Read<_>>()?,
        ),
        _ => return Err(Odd),
    })
}

// -- from the tape to what makes events -----------------------------------------------------

/// A line: the fields of `Assistant`, `User` and `StreamEvent` together, so
/// one pass reads any of them (a field of another kind is checked too: a
/// wrong one only makes the line slow).
fn classify<'a>(nodes: &[Node<'a>]) -> Read<Line<'a>> {
    let mut kind = None;
    let mut types = 0;
    let mut message = None;
    let mut event = None;
    let mut parent = None;
    for (key, value) in pairs(nodes)? {
        match key {
            "type" => {
                kind = opt_string(value)?;
                types += 1;
            }
            "message" => {
                pairs(value)?;
                message = Some(value);
            }
            "event" => {
                pairs(value)?;
                event = Some(value);
            }
            "parent_tool_use_id" => parent = opt_string(value)?,
            // Read by the Python path of synthetic lines only, but typed.
            "error" => _ = opt_string(value)?,
            _ => {}
        }
    }
    // msgspec refuses a second `type` that differs from the first.
    if types != 1 {
        return Err(Odd);
    }
    let subagent = parent.is_some();
    // Every declared field is checked, whichever kind the line is.
    let message = message.map(Message::read).transpose()?.unwrap_or_default();
    let event = event.map(Sse::read).transpose()?.unwrap_or_default();
    Ok(match kind {
        Some("assistant") => message.assistant(subagent)?,
        Some("user") => message.user(subagent)?,
        Some("stream_event") => Line::Stream(event.stream(subagent)),
        _ => Line::Slow,
    })
}

#[derive(Default)]
struct Message<'t, 'a> {
    id: Option<&'a str>,
    model: Option<&'a str>,
    /// The blocks of a list content (`None`: a string content).
    blocks: Option<Vec<Block<'t, 'a>>>,
    usage: Option<Snapshot>,
}

impl<'t, 'a> Message<'t, 'a> {
    fn read(value: &'t [Node<'a>]) -> Read<Self> {
        let mut m = Message::default();
        for (key, value) in pairs(value)? {
            match key {
                "id" => m.id = opt_string(value)?,
                "model" => m.model = opt_string(value)?,
                "content" => {
                    m.blocks = match value.first() {
                        // `str | list[Block]`: a string content makes no event on
                        // the fast path (a replayed prompt; a synthetic
                        // message's text is slow).
                        Some(Node::String(_)) => None,
                        _ => Some(elements(value)?.map(Block::read).collect::<Read<_>>()?),
                    }
                }
                "usage" => {
                    m.usage = if is_null(value) {
                        None
                    } else {
                        Some(usage(value)?)
                    }
                }
                _ => {}
            }
        }
        Ok(m)
    }

    fn assistant(self, subagent: bool) -> Read<Line<'a>> {
        if self.model == Some(SYNTHETIC_MODEL) {
            return Ok(Line::Slow);
        }
        let mut blocks = Vec::new();
        for block in self.blocks.into_iter().flatten() {
            match block.kind {
                "text" => {
                    if let Some(text) = block.text {
                        blocks.push(AssistantBlock::Text(text));
                    }
                }
                "tool_use" => blocks.push(AssistantBlock::ToolUse {
                    id: block.id.unwrap_or_default(),
                    name: block.name.unwrap_or_default(),
                    input: block.input.map_or(Ok(Json::Null), json)?,
                }),
                "thinking" => {
                    if let Some(text) = block.thinking.filter(|t| !t.is_empty()) {
                        blocks.push(AssistantBlock::Thinking(text));
                    }
                }
                _ => {}
            }
        }
        Ok(Line::Assistant(Assistant {
            message_id: self.id,
            model: self.model,
            subagent,
            blocks,
            usage: self.usage,
        }))
    }

    fn user(self, subagent: bool) -> Read<Line<'a>> {
        let mut results = Vec::new();
        for block in self.blocks.into_iter().flatten() {
            if block.kind != "tool_result" {
                continue;
            }
            results.push(ToolResult {
                tool_use_id: block.tool_use_id.unwrap_or_default(),
                content: block.content.map_or(Ok(Cow::Borrowed("")), result_text)?,
                is_error: block.is_error == Some(true),
            });
        }
        Ok(Line::User(User { subagent, results }))
    }
}

#[derive(Default)]
struct Block<'t, 'a> {
    kind: &'a str,
    text: Option<&'a str>,
    thinking: Option<&'a str>,
    id: Option<&'a str>,
    name: Option<&'a str>,
    /// `input` and `content` are `Any`: read when an event needs them.
    input: Option<&'t [Node<'a>]>,
    tool_use_id: Option<&'a str>,
    content: Option<&'t [Node<'a>]>,
    is_error: Option<bool>,
}

impl<'t, 'a> Block<'t, 'a> {
    fn read(value: &'t [Node<'a>]) -> Read<Self> {
        let mut b = Block::default();
        for (key, value) in pairs(value)? {
            match key {
                "type" => b.kind = string(value)?,
                "text" => b.text = opt_string(value)?,
                "thinking" => b.thinking = opt_string(value)?,
                "id" => b.id = opt_string(value)?,
                "name" => b.name = opt_string(value)?,
                "input" => b.input = Some(value),
                "tool_use_id" => b.tool_use_id = opt_string(value)?,
                "content" => b.content = Some(value),
                "is_error" => b.is_error = opt_bool(value)?,
                _ => {}
            }
        }
        Ok(b)
    }
}

/// A tool result's `content` (any JSON) as `result_text` renders it: a
/// string as itself, null as `""`, a list of parts joined by newlines (a
/// string part as itself, `{"type": "text", "text": s}` as `s`, missing
/// text `""`; any other `{"type": t}` as `[t]`, missing type `[block]`).
/// Anything else is `Err` (the Python path formats it).
fn result_text<'a>(value: &[Node<'a>]) -> Read<Cow<'a, str>> {
    match value.first() {
        Some(Node::String(s)) => return Ok(Cow::Borrowed(s)),
        Some(Node::Static(StaticNode::Null)) => return Ok(Cow::Borrowed("")),
        _ => {}
    }
    let mut joined = String::new();
    for (i, part) in elements(value)?.enumerate() {
        if i > 0 {
            joined.push('\n');
        }
        if let Some(Node::String(s)) = part.first() {
            joined.push_str(s);
            continue;
        }
        // Missing: None; present: its value (a repeated key keeps the last).
        let mut kind = None;
        let mut text = None;
        for (key, value) in pairs(part)? {
            match key {
                "type" => kind = Some(value),
                "text" => text = Some(value),
                _ => {}
            }
        }
        match kind.map(string).transpose()? {
            Some("text") => joined.push_str(text.map_or(Ok(""), string)?),
            Some(other) => {
                joined.push('[');
                joined.push_str(other);
                joined.push(']');
            }
            None => joined.push_str("[block]"),
        }
    }
    Ok(Cow::Owned(joined))
}

/// `Usage`: four `int`s and `cache_creation: CacheCreation | None`.
fn usage(value: &[Node<'_>]) -> Read<Snapshot> {
    let mut s = Snapshot::default();
    for (key, value) in pairs(value)? {
        match key {
            "input_tokens" => s.input = int(value)?,
            "output_tokens" => s.output = int(value)?,
            "cache_creation_input_tokens" => s.cache_creation = int(value)?,
            "cache_read_input_tokens" => s.cache_read = int(value)?,
            "cache_creation" => {
                s.split = if is_null(value) {
                    None
                } else {
                    let (mut five_minutes, mut one_hour) = (0, 0);
                    for (key, value) in pairs(value)? {
                        match key {
                            "ephemeral_5m_input_tokens" => five_minutes = int(value)?,
                            "ephemeral_1h_input_tokens" => one_hour = int(value)?,
                            _ => {}
                        }
                    }
                    Some((five_minutes, one_hour))
                };
            }
            _ => {}
        }
    }
    Ok(s)
}

/// A stream event's `event`.
#[derive(Default)]
struct Sse<'a> {
    kind: &'a str,
    /// `delta`: (`type`, `text`).
    delta: Option<(&'a str, Option<&'a str>)>,
    /// `message`: its id, when the event has a message.
    message: Option<SseMessage<'a>>,
}

/// A stream event's `message` (`SseMessage`).
struct SseMessage<'a> {
    id: Option<&'a str>,
}

impl<'a> Sse<'a> {
    fn read(value: &[Node<'a>]) -> Read<Self> {
        let mut e = Sse::default();
        for (key, value) in pairs(value)? {
            match key {
                "type" => e.kind = string(value)?,
                "delta" => {
                    e.delta = if is_null(value) {
                        None
                    } else {
                        let (mut kind, mut text) = ("", None);
                        for (key, value) in pairs(value)? {
                            match key {
                                "type" => kind = string(value)?,
                                "text" => text = opt_string(value)?,
                                _ => {}
                            }
                        }
                        Some((kind, text))
                    };
                }
                "message" => {
                    e.message = if is_null(value) {
                        None
                    } else {
                        let mut id = None;
                        for (key, value) in pairs(value)? {
                            if key == "id" {
                                id = opt_string(value)?;
                            }
                        }
                        Some(SseMessage { id })
                    };
                }
                _ => {}
            }
        }
        Ok(e)
    }

    fn stream(self, subagent: bool) -> Stream<'a> {
        match (self.kind, self.delta, self.message) {
            ("content_block_delta", Some(("text_delta", Some(text))), _) if !text.is_empty() => {
                Stream::TextDelta { text, subagent }
            }
            ("message_start", _, Some(SseMessage { id })) => Stream::MessageStart { id },
            _ => Stream::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(line: &[u8]) -> String {
        let mut scratch = Vec::new();
        let parsed = Decoder::new().decode_until_slow(&[line], &mut scratch);
        format!("{:?}", parsed[0])
    }

    fn slow(line: &[u8]) -> bool {
        decode(line) == "Slow"
    }

    #[test]
    fn blank_and_text_lines_are_skipped_and_whitespace_stripped() {
        assert_eq!(decode(b""), "Skip");
        assert_eq!(decode(b"[SandboxDebug] x"), "Skip");
        assert_eq!(decode(b"  \x0b"), "Skip");
        let padded = br#"  {"type":"stream_event","event":{"type":"ping"}}  "#;
        assert_eq!(decode(padded), "Stream(Other)");
    }

    #[test]
    fn an_assistant_line_gives_its_blocks_and_usage() {
        let line = r#"{"type":"assistant","message":{"id":"msg_1","model":"m","content":[
            {"type":"thinking","thinking":"","signature":"x"},
            {"type":"thinking","thinking":"plan"},
            {"type":"text","text":"caf\u00e9 \"q\""},
            {"type":"text"},
            {"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/a","n":[1,-2,true,null]}},
            {"type":"tool_use","input":null},
            {"type":"image","text":"ignored"}],
            "usage":{"input_tokens":3,"output_tokens":2,"cache_creation":{"ephemeral_1h_input_tokens":4},"service_tier":"x"}},
            "parent_tool_use_id":"toolu_p","session_id":"s","tool_use_result":{"x":[1,2.5,null]}}"#;
        let mut scratch = Vec::new();
        let lines = Decoder::new().decode_until_slow(&[line.as_bytes()], &mut scratch);
        let [Line::Assistant(a)] = &lines[..] else {
            panic!("{lines:?}")
        };
        assert_eq!(a.message_id, Some("msg_1"));
        assert!(a.subagent);
        assert_eq!(
            a.blocks,
            vec![
                AssistantBlock::Thinking("plan"),
                AssistantBlock::Text("café \"q\""),
                AssistantBlock::ToolUse {
                    id: "t1",
                    name: "Read",
                    input: Json::Object(vec![
                        ("file_path", Json::Str("/a")),
                        (
                            "n",
                            Json::Array(vec![
                                Json::UInt(1),
                                Json::Int(-2),
                                Json::Bool(true),
                                Json::Null
                            ])
                        ),
                    ]),
                },
                AssistantBlock::ToolUse {
                    id: "",
                    name: "",
                    input: Json::Null
                },
            ]
        );
        let usage = a.usage.unwrap();
        assert_eq!(
            (usage.input, usage.output, usage.split),
            (3, 2, Some((0, 4)))
        );
    }

    #[test]
    fn tool_results_of_simple_shapes_are_read_and_odd_ones_are_slow() {
        let line = r#"{"type":"user","message":{"content":[
            {"type":"tool_result","tool_use_id":"a","content":"one\nstring","is_error":true},
            {"type":"tool_result","content":[{"type":"text","text":"x"},"raw",{"type":"image"},{"text":"no type"},{"type":"text"}]},
            {"type":"tool_result","content":null,"is_error":null},
            {"type":"text","text":"not a result"}]}}"#;
        let mut scratch = Vec::new();
        let lines = Decoder::new().decode_until_slow(&[line.as_bytes()], &mut scratch);
        let [Line::User(u)] = &lines[..] else {
            panic!("{lines:?}")
        };
        let got: Vec<(&str, &str, bool)> = u
            .results
            .iter()
            .map(|r| (r.tool_use_id, &*r.content, r.is_error))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", "one\nstring", true),
                ("", "x\nraw\n[image]\n[block]\n", false),
                ("", "", false),
            ]
        );
        for content in [
            r#"{"a":1}"#,
            "5",
            "true",
            "[1]",
            r#"[{"type":"text","text":5}]"#,
            r#"[{"type":7}]"#,
            "[null]",
        ] {
            let line = format!(
                r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","content":{content}}}]}}}}"#
            );
            assert!(slow(line.as_bytes()), "{content}");
        }
    }

    #[test]
    fn stream_events_give_text_deltas_and_message_starts() {
        let delta = br#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}}"#;
        assert_eq!(
            decode(delta),
            r#"Stream(TextDelta { text: "hi", subagent: false })"#
        );
        let empty = br#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":""}}}"#;
        assert_eq!(decode(empty), "Stream(Other)");
        let start = br#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"m1","usage":{}}}}"#;
        assert_eq!(decode(start), r#"Stream(MessageStart { id: Some("m1") })"#);
        let bare = br#"{"type":"stream_event","event":{"type":"message_start","message":null}}"#;
        assert_eq!(decode(bare), "Stream(Other)");
    }

    #[test]
    fn whatever_msgspec_might_read_differently_is_slow() {
        for line in [
            r#"{"type":"system","subtype":"init","session_id":"s"}"#,
            r#"{"type":"result","subtype":"success"}"#,
            r#"{"type":"brand_new"}"#,
            r#"{"message":{}}"#,
            r#"{"type":5}"#,
            r#"{"type":"user","type":"user"}"#,
            r#"{"type":"assistant","message":{"model":"<synthetic>","content":"API Error"}}"#,
            r#"{"type":"assistant","message":null}"#,
            r#"{"type":"assistant","message":["id","model"]}"#,
            r#"{"type":"assistant","message":{"content":null}}"#,
            r#"{"type":"assistant","message":{"content":[5]}}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":1.0}}}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":9223372036854775808}}}"#,
            r#"{"type":"assistant","message":{"usage":{"cache_creation":{"ephemeral_5m_input_tokens":"1"}}}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","is_error":"no"}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","input":{"t":0.5}}]}}"#,
            r#"{"type":"assistant","error":5}"#,
            r#"{"type":"stream_event","event":[]}"#,
            r#"{"type":"user","x":"\ud800"}"#,
            r#"{"type":"user","x":"\uDE00"}"#,
            r#"{"type":"user","x":"\x"}"#,
            r#"{"type":"user","x":1e400}"#,
            "{\"type\":\"user\",\"x\":\"\x01\"}",
            r#"{"type":"user"} x"#,
            r#"{"type":"user""#,
        ] {
            assert!(slow(line.as_bytes()), "{line}");
        }
        assert!(slow(b"{\"type\":\"user\",\"x\":\"caf\xe9\"}"));
        let deep = format!(
            r#"{{"type":"user","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(slow(deep.as_bytes()));
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_keys_are_unescaped_as_msgspec_does() {
        let line = br#"{"typ\u0065":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}}"#;
        assert_eq!(
            decode(line),
            r#"Stream(TextDelta { text: "b", subagent: false })"#
        );
    }

    #[test]
    fn decoding_stops_after_the_first_slow_line() {
        let lines: Vec<&[u8]> = vec![
            b"",
            br#"{"type":"stream_event","event":{}}"#,
            br#"{"type":"system"}"#,
            br#"{"type":"user"}"#,
        ];
        let mut scratch = Vec::new();
        let decoded = Decoder::new().decode_until_slow(&lines, &mut scratch);
        assert_eq!(
            decoded,
            vec![Line::Skip, Line::Stream(Stream::Other), Line::Slow]
        );
    }
}
