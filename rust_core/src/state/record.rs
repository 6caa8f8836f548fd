//! What a codon record holds in each state: moving a record into a state
//! fills in what that state promises (the guards in
//! [`crate::machine::codon`] have already checked the metadata), and a
//! terminal state settles its cost.
//!
//! These changes cannot fail: the reducer calls them only after every check
//! passed (see [`crate::state::reducer`]).

use crate::machine::codon::{CodonStatus, TransitionMetadata};
use crate::state::model::{CodonExecution, TokenUsage};
use crate::state::money::Money;

/// Moves a record into `to`, filling in what that state promises.
pub(crate) fn enter(
    rec: &mut CodonExecution,
    to: CodonStatus,
    meta: Option<Box<TransitionMetadata>>,
    at: String,
) {
    let m = meta.map(|m| *m).unwrap_or_default();
    if let Some(n) = m.extension_count {
        rec.extension_count = Some(n);
    }
    if m.budget_exceeded.is_some() {
        rec.budget_exceeded = m.budget_exceeded;
    }
    if m.context_exceeded.is_some() {
        rec.context_exceeded = m.context_exceeded;
    }
    let sha = m.checkpoint_sha.filter(|s| !s.is_empty());
    match to {
        CodonStatus::Preparing | CodonStatus::CompletingSentinels => {}
        CodonStatus::Starting => {
            if sha.is_some() {
                rec.rig_setup_checkpoint = sha;
            }
        }
        CodonStatus::Initializing => {
            rec.claude_pid = m.claude_pid;
            rec.claude_log_path = m.claude_log_path;
            if m.previous_session_id.is_some() {
                rec.previous_session_id = m.previous_session_id;
            }
        }
        CodonStatus::Running => {
            rec.claude_session_id = m.claude_session_id;
            rec.current_cost.get_or_insert(Money::ZERO);
            rec.current_tokens.get_or_insert_with(TokenUsage::default);
            rec.assistant_message_count.get_or_insert(0);
            rec.extension_count.get_or_insert(0);
        }
        CodonStatus::Completed => {
            rec.exit_code = Some(0);
            rec.completion_checkpoint = sha;
            rec.result_message_received = Some(m.result_message_received.unwrap_or(false));
        }
        CodonStatus::Failed => {
            rec.exit_code = m.exit_code;
            rec.failure_reason = m.failure_reason;
            rec.failed_during = m.failed_during.as_deref().and_then(CodonStatus::parse);
            if sha.is_some() {
                rec.error_checkpoint = sha;
            }
        }
        CodonStatus::Skipped => {
            rec.skipped_during = m.skipped_during.as_deref().and_then(CodonStatus::parse);
            if sha.is_some() {
                rec.skip_checkpoint = sha;
            }
        }
    }
    if to.is_terminal() {
        settle(rec, to, at);
    } else {
        rec.status = to;
    }
}

/// Closes a record in a terminal state: the live cost becomes final (or
/// partial), and its sentinels are sealed by renaming `loaded` to
/// `executed`.
pub(crate) fn settle(rec: &mut CodonExecution, to: CodonStatus, at: String) {
    let cost = rec.current_cost.take().unwrap_or_default();
    let tokens = rec.current_tokens.take().unwrap_or_default();
    if to == CodonStatus::Completed {
        rec.final_cost = Some(cost);
        rec.final_tokens = Some(tokens);
    } else {
        rec.final_cost = None;
        rec.final_tokens = None;
        rec.partial_cost = Some(cost);
        rec.partial_tokens = Some(tokens);
    }
    if let Some(s) = rec.sentinels.as_mut() {
        if let Some(loaded) = s.loaded.take() {
            s.executed = Some(loaded);
        }
    }
    rec.end_time = Some(at);
    rec.status = to;
}
