//! The state model, its sixteen transitions, the reducer that applies them
//! (with `record`: what each codon state fills in), the cost arithmetic, and
//! load-time integrity checks.

pub mod model;
pub mod money;
mod record;
pub mod reducer;
pub mod transition;
pub mod validate;
