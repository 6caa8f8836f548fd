//! The ordered transition queue.
//!
//! `submit` hands out a sequence number at once (fire and forget); `take`
//! removes the oldest pending transitions in submission order, and
//! [`process`] applies a taken batch one at a time, in that order. A
//! rejected transition is reported in its place and the batch goes on.
//!
//! The queue owns no thread and no waiters: the binding layer keeps the
//! queue and the state under separate locks (submitters never wait for a
//! batch being applied) and maps sequence numbers to whatever its callers
//! wait on. Persistence plugs in between `process` and telling listeners,
//! which is why processing returns outcomes instead of calling anyone.

use std::collections::VecDeque;

use crate::state::model::State;
use crate::state::reducer::{self, Applied, Rejection};
use crate::state::transition;

/// Pending transitions, each with its sequence number.
#[derive(Debug)]
pub struct Queue<B> {
    next_seq: u64,
    pending: VecDeque<(u64, B)>,
}

impl<B> Queue<B> {
    /// An empty queue whose first transition gets `first_seq`.
    pub fn new(first_seq: u64) -> Self {
        Queue {
            next_seq: first_seq,
            pending: VecDeque::new(),
        }
    }

    /// Enqueues one transition and returns its sequence number.
    pub fn submit(&mut self, item: B) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.push_back((seq, item));
        seq
    }

    /// Removes up to `max` of the oldest pending transitions.
    pub fn take(&mut self, max: usize) -> Vec<(u64, B)> {
        let n = max.min(self.pending.len());
        self.pending.drain(..n).collect()
    }

    /// Hands out `count` sequence numbers for transitions applied directly,
    /// bypassing the queue; only allowed while nothing is pending, so the
    /// order stays the submission order.
    pub fn reserve(&mut self, count: u64) -> Option<u64> {
        if !self.pending.is_empty() {
            return None;
        }
        let first = self.next_seq;
        self.next_seq += count;
        Some(first)
    }

    /// Number of transitions waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The sequence number the next submission will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

/// The outcome of one processed transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Processed {
    /// Its sequence number.
    pub seq: u64,
    /// Its type name; `None` when the bytes did not decode.
    pub kind: Option<&'static str>,
    /// What it did, or why it was refused.
    pub result: Result<Applied, Rejection>,
}

/// Decodes and applies one transition.
pub fn apply_bytes(
    state: &mut State,
    bytes: &[u8],
) -> (Option<&'static str>, Result<Applied, Rejection>) {
    match transition::decode(bytes) {
        Ok(t) => {
            let kind = t.kind();
            (Some(kind), reducer::apply(state, t))
        }
        Err(e) => (None, Err(Rejection::Malformed(e.to_string()))),
    }
}

/// Applies a taken batch in order.
pub fn process<B: AsRef<[u8]>>(state: &mut State, batch: &[(u64, B)]) -> Vec<Processed> {
    batch
        .iter()
        .map(|(seq, bytes)| {
            let (kind, result) = apply_bytes(state, bytes.as_ref());
            Processed {
                seq: *seq,
                kind,
                result,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_follow_submission_and_take_preserves_order() {
        let mut q = Queue::new(7);
        assert_eq!(q.submit("a"), 7);
        assert_eq!(q.submit("b"), 8);
        assert_eq!(q.submit("c"), 9);
        assert_eq!(q.take(2), vec![(7, "a"), (8, "b")]);
        assert_eq!(q.submit("d"), 10);
        assert_eq!(q.take(10), vec![(9, "c"), (10, "d")]);
        assert!(q.is_empty());
    }

    #[test]
    fn reserve_is_refused_while_transitions_wait() {
        let mut q = Queue::new(1);
        q.submit("x");
        assert_eq!(q.reserve(5), None);
        q.take(1);
        assert_eq!(q.reserve(5), Some(2));
        assert_eq!(q.next_seq(), 7);
    }

    #[test]
    fn a_rejection_does_not_stop_the_batch() {
        let mut state = State::default();
        let batch: Vec<(u64, &[u8])> = vec![
            (1, br#"{"type":"InitialCheckpointSet","data":{"sha":""}}"#),
            (2, b"not json"),
            (
                3,
                br#"{"type":"InitialCheckpointSet","data":{"sha":"abc"}}"#,
            ),
        ];
        let out = process(&mut state, &batch);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].result.as_ref().unwrap_err().code(), "invalid_value");
        assert_eq!(out[1].kind, None);
        assert_eq!(out[1].result.as_ref().unwrap_err().code(), "malformed");
        assert!(out[2].result.is_ok());
        assert_eq!(state.initial_checkpoint.as_deref(), Some("abc"));
    }
}
