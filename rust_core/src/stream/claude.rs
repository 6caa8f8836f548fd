//! The common lines of Claude Code's stream-json output (reference
//! agent-cli-protocols §1.3), decoded for the fast path of
//! `weft.agents.claude_parser`.
//!
//! Nearly every line of a session is an `assistant`, `user` or
//! `stream_event` line, and most of their bytes are tool results, often
//! twice (`message.content` and `tool_use_result`). [`decode_line`] reads
//! only the fields the parser's events need, borrowing strings from the
//! line where they have no escapes, and skips the rest without building
//! anything.
//!
//! **The fast path must agree with the Python path line for line.** That
//! parser decodes with msgspec into the Structs of `claude_wire.py`; a line
//! this module is not sure to read the same way is [`Line::Slow`], and the
//! caller hands it to the Python path, which decides as it always did. So
//! every doubt is settled towards `Slow`:
//!
//! - any decode error (bad JSON, a field of the wrong type, a number out of
//!   64-bit range, invalid UTF-8 in a field that is read, an object key
//!   with escapes, nesting past `serde_json`'s limit), whether or not msgspec
//!   would have accepted the line;
//! - a type other than the three (`system` and `result` lines decide the
//!   session and the verdict; they are rare, so they stay in Python);
//! - a `\uD800`-`\uDFFF` escape anywhere: msgspec refuses a lone surrogate
//!   even in a field it skips, `serde_json` only in a string it reads;
//! - an assistant line of the synthetic model (an API error the verdict
//!   reads), and a tool result whose content is neither a string, nor
//!   null, nor a list of strings and `{"type", "text"}` parts (the Python
//!   path formats the rest).
//!
//! The other way round matters more: this module must refuse whatever
//! msgspec refuses. Objects are read from JSON objects only (serde's
//! derived structs would also take arrays), every field the Structs declare
//! is type-checked even when the event does not need it, and a repeated key
//! keeps its last value, as msgspec does.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::stream::usage::{Snapshot, SYNTHETIC_MODEL};

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
    pub message_id: Option<Cow<'a, str>>,
    /// `message.model` (never the synthetic model: such lines are slow).
    pub model: Option<Cow<'a, str>>,
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
    Text(Cow<'a, str>),
    /// A `thinking` block with some text.
    Thinking(Cow<'a, str>),
    /// A `tool_use` block. `input` is its raw JSON (`None`: missing or null),
    /// decoded by the caller as the Python path decodes it.
    ToolUse {
        /// `id`, or `""`.
        id: Cow<'a, str>,
        /// `name`, or `""`.
        name: Cow<'a, str>,
        /// The raw JSON text of `input`.
        input: Option<&'a str>,
    },
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
    pub tool_use_id: Cow<'a, str>,
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
        text: Cow<'a, str>,
        /// Whether `parent_tool_use_id` is set.
        subagent: bool,
    },
    /// A `message_start` with a `message`: its id names the deltas after it.
    MessageStart {
        /// `event.message.id`.
        id: Option<Cow<'a, str>>,
    },
    /// Anything else: no event.
    Other,
}

/// Decodes one line (without its `\n`; a trailing `\r` may remain).
pub fn decode_line(line: &[u8]) -> Line<'_> {
    let line = if line.first() == Some(&b'{') {
        line
    } else {
        // Python's `bytes.strip()`, which the Python path applies here.
        let trimmed = line.trim_ascii();
        if trimmed.first() != Some(&b'{') {
            return Line::Skip;
        }
        trimmed
    };
    if has_surrogate_escape(line) {
        return Line::Slow;
    }
    match serde_json::from_slice::<WireLine<'_>>(line) {
        Ok(wire) => wire.classify(),
        Err(_) => Line::Slow,
    }
}

/// Decodes lines in order up to and including the first slow one: the lines
/// after it must wait until the Python path has read it, since it may
/// change what they mean (a usage snapshot, a stream's message id).
pub fn decode_until_slow<'a>(lines: &[&'a [u8]]) -> Vec<Line<'a>> {
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        let decoded = decode_line(line);
        let slow = decoded == Line::Slow;
        out.push(decoded);
        if slow {
            break;
        }
    }
    out
}

/// Whether `line` may hold a `\uD800`-`\uDFFF` escape. An escaped backslash
/// followed by `ud8..` text also answers yes, which only costs a slow line.
fn has_surrogate_escape(line: &[u8]) -> bool {
    memchr::memmem::find_iter(line, b"\\u").any(|at| {
        matches!(line.get(at + 2), Some(b'd' | b'D'))
            && matches!(
                line.get(at + 3),
                Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
            )
    })
}

// -- the wire: every field the Python Structs declare, typed as they are --------------------

/// A JSON object read field by field; `field` reads the value of a key it
/// knows and says whether it did (an unknown key's value is skipped).
trait Object<'de>: Default {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error>;
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Object<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut out = T::default();
        // Keys with escapes fail here (a borrowed &str is required): slow.
        while let Some(key) = map.next_key::<&'de str>()? {
            if !out.field(key, &mut map)? {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// `Deserialize` from a JSON object only (never from an array, unlike a
/// derived struct, which msgspec would refuse).
macro_rules! from_object {
    ($name:ident<'a>) => {
        impl<'de> Deserialize<'de> for $name<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_map(ObjectVisitor(PhantomData))
            }
        }
    };
    ($name:ident) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_map(ObjectVisitor(PhantomData))
            }
        }
    };
}

/// A JSON string, borrowed from the line when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

fn opt_str<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
    Ok(map.next_value::<Option<Str<'de>>>()?.map(|s| s.0))
}

fn string<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Cow<'de, str>, A::Error> {
    Ok(map.next_value::<Str<'de>>()?.0)
}

/// A line: the fields of `Assistant`, `User` and `StreamEvent` together, so
/// one pass reads any of them (a field of another kind is checked too: a
/// wrong one only makes the line slow).
#[derive(Default)]
struct WireLine<'a> {
    kind: Option<Cow<'a, str>>,
    /// msgspec refuses a second `type` key that differs from the first.
    types: u32,
    message: WireMessage<'a>,
    event: Sse<'a>,
    parent_tool_use_id: Option<Cow<'a, str>>,
}
from_object!(WireLine<'a>);

impl<'de> Object<'de> for WireLine<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "type" => {
                self.kind = opt_str(map)?;
                self.types += 1;
            }
            "message" => self.message = map.next_value()?,
            "event" => self.event = map.next_value()?,
            "parent_tool_use_id" => self.parent_tool_use_id = opt_str(map)?,
            // Read by the Python path of synthetic lines only, but typed.
            "error" => _ = opt_str(map)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct WireMessage<'a> {
    id: Option<Cow<'a, str>>,
    model: Option<Cow<'a, str>>,
    content: Content<'a>,
    usage: Option<Usage>,
}
from_object!(WireMessage<'a>);

impl<'de> Object<'de> for WireMessage<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "id" => self.id = opt_str(map)?,
            "model" => self.model = opt_str(map)?,
            "content" => self.content = map.next_value()?,
            "usage" => self.usage = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// `message.content`: a string or a list of blocks (`str | list[Block]`).
#[derive(Default)]
enum Content<'a> {
    #[default]
    Text,
    Blocks(Vec<Block<'a>>),
}

impl<'de> Deserialize<'de> for Content<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of blocks")
            }
            // The text of a string content makes no event on the fast path
            // (a replayed prompt; a synthetic message's text is slow).
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Content::Text)
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
                let mut blocks = Vec::new();
                while let Some(block) = seq.next_element()? {
                    blocks.push(block);
                }
                Ok(Content::Blocks(blocks))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default)]
struct Block<'a> {
    kind: Cow<'a, str>,
    text: Option<Cow<'a, str>>,
    thinking: Option<Cow<'a, str>>,
    id: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
    input: Option<&'a RawValue>,
    tool_use_id: Option<Cow<'a, str>>,
    content: ResultContent<'a>,
    is_error: Option<bool>,
}
from_object!(Block<'a>);

impl<'de> Object<'de> for Block<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "type" => self.kind = string(map)?,
            "text" => self.text = opt_str(map)?,
            "thinking" => self.thinking = opt_str(map)?,
            "id" => self.id = opt_str(map)?,
            "name" => self.name = opt_str(map)?,
            "input" => self.input = map.next_value()?,
            "tool_use_id" => self.tool_use_id = opt_str(map)?,
            "content" => self.content = map.next_value()?,
            "is_error" => self.is_error = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A block's `content` (any JSON), as the text of a tool result.
#[derive(Default)]
enum ResultContent<'a> {
    /// Missing or null: `""`.
    #[default]
    Empty,
    /// A string or a list of simple parts, joined.
    Text(Cow<'a, str>),
    /// Anything else: formatted by the Python path.
    Other,
}

impl<'de> Deserialize<'de> for ResultContent<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ResultContent<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(ResultContent::Empty)
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(ResultContent::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ResultContent::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(ResultContent::Text(Cow::Owned(v)))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
                let mut joined = String::new();
                let mut simple = true;
                let mut first = true;
                while let Some(part) = seq.next_element::<Part<'de>>()? {
                    match part {
                        Part::Text(text) if simple => {
                            if !first {
                                joined.push('\n');
                            }
                            joined.push_str(&text);
                            first = false;
                        }
                        Part::Typed(kind) if simple => {
                            if !first {
                                joined.push('\n');
                            }
                            joined.push('[');
                            joined.push_str(&kind);
                            joined.push(']');
                            first = false;
                        }
                        _ => simple = false,
                    }
                }
                Ok(if simple {
                    ResultContent::Text(Cow::Owned(joined))
                } else {
                    ResultContent::Other
                })
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
                skip_map(map)?;
                Ok(ResultContent::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ResultContent::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ResultContent::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ResultContent::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ResultContent::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// One part of a list content, as `result_text` renders it: a string as
/// itself, `{"type": "text", "text": s}` as `s` (missing text: `""`), any
/// other `{"type": t}` as `[t]` (missing type: `[block]`); anything else
/// (a non-string text or type, a number, null, a list) is `Other`.
enum Part<'a> {
    Text(Cow<'a, str>),
    Typed(Cow<'a, str>),
    Other,
}

impl<'de> Deserialize<'de> for Part<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Part<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Part::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Part::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Part::Text(Cow::Owned(v)))
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                // Missing: None; Some(None): present but not a string.
                let mut kind: Option<Option<Cow<'de, str>>> = None;
                let mut text: Option<Option<Cow<'de, str>>> = None;
                while let Some(key) = map.next_key::<&'de str>()? {
                    match key {
                        "type" => kind = Some(map.next_value::<MaybeStr<'de>>()?.0),
                        "text" => text = Some(map.next_value::<MaybeStr<'de>>()?.0),
                        _ => _ = map.next_value::<IgnoredAny>()?,
                    }
                }
                Ok(match (kind, text) {
                    (Some(Some(k)), None) if k == "text" => Part::Text(Cow::Borrowed("")),
                    (Some(Some(k)), Some(Some(t))) if k == "text" => Part::Text(t),
                    (Some(Some(k)), Some(None)) if k == "text" => Part::Other,
                    (Some(Some(k)), _) => Part::Typed(k),
                    (None, _) => Part::Typed(Cow::Borrowed("block")),
                    (Some(None), _) => Part::Other,
                })
            }
            fn visit_seq<S: SeqAccess<'de>>(self, seq: S) -> Result<Self::Value, S::Error> {
                skip_seq(seq)?;
                Ok(Part::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Part::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Part::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Part::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Part::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Part::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// Any JSON value: `Some` if it is a string.
struct MaybeStr<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for MaybeStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(Cow::Owned(v))))
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
                skip_map(map)?;
                Ok(MaybeStr(None))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, seq: S) -> Result<Self::Value, S::Error> {
                skip_seq(seq)?;
                Ok(MaybeStr(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(MaybeStr(None))
            }
        }
        d.deserialize_any(V)
    }
}

fn skip_map<'de, M: MapAccess<'de>>(mut map: M) -> Result<(), M::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

fn skip_seq<'de, S: SeqAccess<'de>>(mut seq: S) -> Result<(), S::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

#[derive(Default)]
struct Usage {
    input_tokens: i64,
    output_tokens: i64,
    cache_creation_input_tokens: i64,
    cache_read_input_tokens: i64,
    cache_creation: Option<CacheCreation>,
}
from_object!(Usage);

impl<'de> Object<'de> for Usage {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "input_tokens" => self.input_tokens = map.next_value()?,
            "output_tokens" => self.output_tokens = map.next_value()?,
            "cache_creation_input_tokens" => self.cache_creation_input_tokens = map.next_value()?,
            "cache_read_input_tokens" => self.cache_read_input_tokens = map.next_value()?,
            "cache_creation" => self.cache_creation = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl Usage {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            input: self.input_tokens,
            output: self.output_tokens,
            cache_creation: self.cache_creation_input_tokens,
            cache_read: self.cache_read_input_tokens,
            split: self
                .cache_creation
                .as_ref()
                .map(|c| (c.five_minutes, c.one_hour)),
        }
    }
}

#[derive(Default)]
struct CacheCreation {
    five_minutes: i64,
    one_hour: i64,
}
from_object!(CacheCreation);

impl<'de> Object<'de> for CacheCreation {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "ephemeral_5m_input_tokens" => self.five_minutes = map.next_value()?,
            "ephemeral_1h_input_tokens" => self.one_hour = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A stream event's `event`.
#[derive(Default)]
struct Sse<'a> {
    kind: Cow<'a, str>,
    delta: Option<Delta<'a>>,
    message: Option<SseMessage<'a>>,
}
from_object!(Sse<'a>);

impl<'de> Object<'de> for Sse<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "type" => self.kind = string(map)?,
            "delta" => self.delta = map.next_value()?,
            "message" => self.message = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct Delta<'a> {
    kind: Cow<'a, str>,
    text: Option<Cow<'a, str>>,
}
from_object!(Delta<'a>);

impl<'de> Object<'de> for Delta<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "type" => self.kind = string(map)?,
            "text" => self.text = opt_str(map)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct SseMessage<'a> {
    id: Option<Cow<'a, str>>,
}
from_object!(SseMessage<'a>);

impl<'de> Object<'de> for SseMessage<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &'de str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "id" => self.id = opt_str(map)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

// -- from the wire to what makes events -------------------------------------------------------

impl<'a> WireLine<'a> {
    fn classify(self) -> Line<'a> {
        let subagent = self.parent_tool_use_id.is_some();
        if self.types != 1 {
            return Line::Slow;
        }
        match self.kind.as_deref() {
            Some("assistant") => self.message.assistant(subagent),
            Some("user") => self.message.user(subagent),
            Some("stream_event") => Line::Stream(self.event.stream(subagent)),
            _ => Line::Slow,
        }
    }
}

impl<'a> WireMessage<'a> {
    fn assistant(self, subagent: bool) -> Line<'a> {
        if self.model.as_deref() == Some(SYNTHETIC_MODEL) {
            return Line::Slow;
        }
        let mut blocks = Vec::new();
        if let Content::Blocks(content) = self.content {
            for block in content {
                match &*block.kind {
                    "text" => {
                        if let Some(text) = block.text {
                            blocks.push(AssistantBlock::Text(text));
                        }
                    }
                    "tool_use" => blocks.push(AssistantBlock::ToolUse {
                        id: block.id.unwrap_or_default(),
                        name: block.name.unwrap_or_default(),
                        input: block.input.map(RawValue::get),
                    }),
                    "thinking" => {
                        if let Some(text) = block.thinking.filter(|t| !t.is_empty()) {
                            blocks.push(AssistantBlock::Thinking(text));
                        }
                    }
                    _ => {}
                }
            }
        }
        Line::Assistant(Assistant {
            message_id: self.id,
            model: self.model,
            subagent,
            blocks,
            usage: self.usage.as_ref().map(Usage::snapshot),
        })
    }

    fn user(self, subagent: bool) -> Line<'a> {
        let mut results = Vec::new();
        if let Content::Blocks(content) = self.content {
            for block in content {
                if block.kind != "tool_result" {
                    continue;
                }
                let content = match block.content {
                    ResultContent::Empty => Cow::Borrowed(""),
                    ResultContent::Text(text) => text,
                    ResultContent::Other => return Line::Slow,
                };
                results.push(ToolResult {
                    tool_use_id: block.tool_use_id.unwrap_or_default(),
                    content,
                    is_error: block.is_error == Some(true),
                });
            }
        }
        Line::User(User { subagent, results })
    }
}

impl<'a> Sse<'a> {
    fn stream(self, subagent: bool) -> Stream<'a> {
        match &*self.kind {
            "content_block_delta" => match self.delta {
                Some(Delta {
                    kind,
                    text: Some(text),
                }) if kind == "text_delta" && !text.is_empty() => {
                    Stream::TextDelta { text, subagent }
                }
                _ => Stream::Other,
            },
            "message_start" => match self.message {
                Some(message) => Stream::MessageStart { id: message.id },
                None => Stream::Other,
            },
            _ => Stream::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_results(line: &str) -> Vec<(String, String, bool)> {
        match decode_line(line.as_bytes()) {
            Line::User(u) => u
                .results
                .into_iter()
                .map(|r| {
                    (
                        r.tool_use_id.into_owned(),
                        r.content.into_owned(),
                        r.is_error,
                    )
                })
                .collect(),
            other => panic!("not a user line: {other:?}"),
        }
    }

    #[test]
    fn blank_and_text_lines_are_skipped_and_whitespace_stripped() {
        assert_eq!(decode_line(b""), Line::Skip);
        assert_eq!(decode_line(b"[SandboxDebug] x"), Line::Skip);
        assert_eq!(decode_line(b"  \x0b"), Line::Skip);
        let padded = br#"  {"type":"stream_event","event":{"type":"ping"}}  "#;
        assert_eq!(decode_line(padded), Line::Stream(Stream::Other));
    }

    #[test]
    fn an_assistant_line_gives_its_blocks_and_usage() {
        let line = r#"{"type":"assistant","message":{"id":"msg_1","model":"m","content":[
            {"type":"thinking","thinking":"","signature":"x"},
            {"type":"thinking","thinking":"plan"},
            {"type":"text","text":"caf\u00e9 \"q\""},
            {"type":"text"},
            {"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/a"}},
            {"type":"tool_use","input":null},
            {"type":"image","text":"ignored"}],
            "usage":{"input_tokens":3,"output_tokens":2,"cache_creation":{"ephemeral_1h_input_tokens":4},"service_tier":"x"}},
            "parent_tool_use_id":"toolu_p","session_id":"s","tool_use_result":{"x":[1,2.5,null]}}"#;
        let Line::Assistant(a) = decode_line(line.as_bytes()) else {
            panic!()
        };
        assert_eq!(a.message_id.as_deref(), Some("msg_1"));
        assert!(a.subagent);
        assert_eq!(a.blocks.len(), 4);
        assert_eq!(a.blocks[0], AssistantBlock::Thinking("plan".into()));
        assert_eq!(a.blocks[1], AssistantBlock::Text("café \"q\"".into()));
        let AssistantBlock::ToolUse { id, name, input } = &a.blocks[2] else {
            panic!()
        };
        assert_eq!(
            (&**id, &**name, *input),
            ("t1", "Read", Some(r#"{"file_path":"/a"}"#))
        );
        assert_eq!(
            a.blocks[3],
            AssistantBlock::ToolUse {
                id: "".into(),
                name: "".into(),
                input: None
            }
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
        assert_eq!(
            user_results(line),
            vec![
                ("a".into(), "one\nstring".into(), true),
                (String::new(), "x\nraw\n[image]\n[block]\n".into(), false),
                (String::new(), String::new(), false),
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
            assert_eq!(decode_line(line.as_bytes()), Line::Slow, "{content}");
        }
    }

    #[test]
    fn stream_events_give_text_deltas_and_message_starts() {
        let delta = r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}}"#;
        assert_eq!(
            decode_line(delta.as_bytes()),
            Line::Stream(Stream::TextDelta {
                text: "hi".into(),
                subagent: false
            })
        );
        let empty = r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":""}}}"#;
        assert_eq!(decode_line(empty.as_bytes()), Line::Stream(Stream::Other));
        let start = r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"m1","usage":{}}}}"#;
        assert_eq!(
            decode_line(start.as_bytes()),
            Line::Stream(Stream::MessageStart {
                id: Some("m1".into())
            })
        );
        let bare = r#"{"type":"stream_event","event":{"type":"message_start","message":null}}"#;
        assert_eq!(decode_line(bare.as_bytes()), Line::Stream(Stream::Other));
    }

    #[test]
    fn whatever_msgspec_might_read_differently_is_slow() {
        for line in [
            r#"{"type":"system","subtype":"init","session_id":"s"}"#,
            r#"{"type":"result","subtype":"success"}"#,
            r#"{"type":"brand_new"}"#,
            r#"{"message":{}}"#,
            r#"{"type":5}"#,
            r#"{"type":"assistant","message":{"model":"<synthetic>","content":"API Error"}}"#,
            r#"{"type":"assistant","message":null}"#,
            r#"{"type":"assistant","message":["id","model"]}"#,
            r#"{"type":"assistant","message":{"content":null}}"#,
            r#"{"type":"assistant","message":{"content":[5]}}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":1.0}}}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":9223372036854775808}}}"#,
            r#"{"type":"assistant","message":{"usage":{"cache_creation":{"ephemeral_5m_input_tokens":"1"}}}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","is_error":"no"}]}}"#,
            r#"{"type":"assistant","error":5}"#,
            r#"{"typ\u0065":"user"}"#,
            r#"{"type":"user","x":"\ud800"}"#,
            r#"{"type":"user","x":"\uDE00"}"#,
            r#"{"type":"user","x":"\x"}"#,
            "{\"type\":\"user\",\"x\":\"\x01\"}",
            r#"{"type":"user"} x"#,
            r#"{"type":"user""#,
        ] {
            assert_eq!(decode_line(line.as_bytes()), Line::Slow, "{line}");
        }
        assert_eq!(
            decode_line(b"{\"type\":\"user\",\"message\":{\"content\":\"caf\xe9\"}}"),
            Line::Slow
        );
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_as_msgspec_does() {
        assert_eq!(decode_line(br#"{"type":"user","type":"user"}"#), Line::Slow);
        let line = r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}}"#;
        assert_eq!(
            decode_line(line.as_bytes()),
            Line::Stream(Stream::TextDelta {
                text: "b".into(),
                subagent: false
            })
        );
    }

    #[test]
    fn decoding_stops_after_the_first_slow_line() {
        let lines: Vec<&[u8]> = vec![b"", br#"{"type":"system"}"#, br#"{"type":"user"}"#];
        assert_eq!(decode_until_slow(&lines), vec![Line::Skip, Line::Slow]);
    }
}
