//! The ordered transition queue.
//!
//! `submit` hands out a sequence number at once (fire and forget); `take`
//! removes the oldest pending submissions in submission order, and
//! [`process`] applies a taken batch one at a time, in that order. A
//! rejected transition is reported in its place and the batch goes on.
//! Stream events (what the agent did, sentinel output) share the queue as
//! [`Submission::Event`] so that they take their place in the one journal
//! order; they pass through without touching the state.
//!
//! The queue owns no thread and no waiters: the binding layer keeps the
//! queue and the state under separate locks (submitters never wait for a
//! batch being applied) and maps sequence numbers to whatever its callers
//! wait on. Persistence plugs in between `process` and telling listeners,
//! which is why processing returns outcomes instead of calling anyone.

use std::collections::VecDeque;

use crate::machine::codon::CodonStatus;
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

    /// Moves the numbering forward so the next submission gets `next`, as
    /// when a journal already holds the numbers before it. Only while nothing
    /// waits and only forward; `false` otherwise.
    pub fn skip_to(&mut self, next: u64) -> bool {
        if !self.pending.is_empty() || next < self.next_seq {
            return false;
        }
        self.next_seq = next;
        true
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

/// One queued item: a state transition, or a stream event that only needs
/// its place in the order.
#[derive(Debug, PartialEq, Eq)]
pub enum Submission<B> {
    /// Encoded transition bytes, to validate and apply.
    Transition(B),
    /// An encoded stream event, passed through untouched.
    Event(B),
}

/// What a transition was about (owned, for the audit trail).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct About {
    /// The run it named.
    pub run: Option<String>,
    /// The codon it named.
    pub codon: Option<String>,
    /// For a codon move: from and to.
    pub moves: Option<(CodonStatus, CodonStatus)>,
}

/// The outcome of one processed submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Processed {
    /// Its sequence number.
    pub seq: u64,
    /// Whether it was a transition (else a stream event).
    pub transition: bool,
    /// A transition's type name; `None` for events and undecodable bytes.
    pub kind: Option<&'static str>,
    /// What it did, or why it was refused (events are always `Ok`).
    pub result: Result<Applied, Rejection>,
    /// What a decoded transition was about.
    pub about: About,
}

/// Decodes and applies one transition outside any numbering (the state's
/// journal position is left as it was).
pub fn apply_bytes(
    state: &mut State,
    bytes: &[u8],
) -> (Option<&'static str>, Result<Applied, Rejection>) {
    let position = state.journal_seq;
    let p = apply_one(state, 0, bytes);
    state.journal_seq = position;
    (p.kind, p.result)
}

/// Decodes and applies one transition numbered `seq`, and records `seq` as
/// the last one the state reflects.
pub fn apply_one(state: &mut State, seq: u64, bytes: &[u8]) -> Processed {
    let (kind, about, result) = match transition::decode(bytes) {
        Ok(t) => {
            let kind = t.kind();
            let s = t.subject();
            let about = About {
                run: s.run.map(str::to_owned),
                codon: s.codon.map(str::to_owned),
                moves: s.moves,
            };
            (Some(kind), about, reducer::apply(state, t))
        }
        Err(e) => (
            None,
            About::default(),
            Err(Rejection::Malformed(e.to_string())),
        ),
    };
    state.journal_seq = Some(seq);
    Processed {
        seq,
        transition: true,
        kind,
        result,
        about,
    }
}

/// Applies a taken batch in order.
pub fn process<B: AsRef<[u8]>>(
    state: &mut State,
    batch: &[(u64, Submission<B>)],
) -> Vec<Processed> {
    batch
        .iter()
        .map(|(seq, item)| match item {
            Submission::Transition(bytes) => apply_one(state, *seq, bytes.as_ref()),
            Submission::Event(_) => {
                state.journal_seq = Some(*seq);
                Processed {
                    seq: *seq,
                    transition: false,
                    kind: None,
                    result: Ok(Applied::default()),
                    about: About::default(),
                }
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
    fn skip_to_only_moves_forward_and_only_when_idle() {
        let mut q = Queue::new(5);
        assert!(!q.skip_to(3));
        assert!(q.skip_to(9));
        assert_eq!(q.submit("x"), 9);
        assert!(!q.skip_to(20));
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
        let t = |b: &'static [u8]| Submission::Transition(b);
        let batch: Vec<(u64, Submission<&[u8]>)> = vec![
            (
                1,
                t(br#"{"type":"InitialCheckpointSet","data":{"sha":""}}"#),
            ),
            (2, t(b"not json")),
            (
                3,
                t(br#"{"type":"InitialCheckpointSet","data":{"sha":"abc"}}"#),
            ),
            (4, Submission::Event(br#"{"type":"assistant.action"}"#)),
        ];
        let out = process(&mut state, &batch);
        assert_eq!(out.len(), 4);
        assert!(!out[3].transition);
        assert!(out[3].result.is_ok());
        assert_eq!(state.journal_seq, Some(4));
        assert_eq!(out[0].result.as_ref().unwrap_err().code(), "invalid_value");
        assert_eq!(out[1].kind, None);
        assert_eq!(out[1].result.as_ref().unwrap_err().code(), "malformed");
        assert!(out[2].result.is_ok());
        assert_eq!(state.initial_checkpoint.as_deref(), Some("abc"));
    }
}
