//! The state model, its sixteen transitions, the reducer that applies them,
//! the cost arithmetic, and load-time integrity checks.

pub mod model;
pub mod money;
pub mod reducer;
pub mod transition;
pub mod validate;
