//! Agent CLI output decoded in the core: the hot path of the stream
//! parsers, whose every line would otherwise cost a Python decode and a
//! Python dispatch.
//!
//! - [`claude`]: the common lines of Claude Code's stream-json output,
//!   decoded without building what the events do not need;
//! - [`usage`]: Claude's per-message usage merge and its live cost estimate.
//!
//! Pure like the rest of the crate: bytes in, values out. The Python parser
//! (`weft.agents.claude_parser`) keeps the rare lines, the session id and
//! the verdict, and hands the core batches of lines.

pub mod claude;
pub mod usage;
