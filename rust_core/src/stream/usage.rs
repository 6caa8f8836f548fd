//! The live usage estimate of one Claude session (reference
//! agent-cli-protocols §1.5), the per-request half of
//! `weft.agents.claude_parser`.
//!
//! Claude Code repeats an API message's usage snapshot on every assistant
//! line of that message (one per content block), and a later snapshot of
//! the same message may grow. So usage is max-merged per message id and
//! only the growth is reported, priced per request (a prompt over a tier's
//! threshold is priced at the tier's rates). The [`Ledger`] keeps the
//! maxima of the latest [`USAGE_WINDOW`] messages, the tokens of every
//! reported delta summed, and the running estimate in nano-dollars.
//!
//! Prices come from Weft's Python pricing table: the caller looks a model's
//! row up once and passes its numbers in (pico-dollars per token); this
//! module only applies the formula and the rounding, which must match
//! `weft.agents.pricing` to the nano-dollar (the parsers are compared event
//! for event). Integers are `i128` so no sum or product of 64-bit token
//! counts and prices can overflow, as none does with Python's ints.

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// Messages whose usage maxima are kept for de-duplication. A message's
/// snapshots arrive together, so an older one is never needed again; the
/// Python parser keeps the same window, and a message evicted from it and
/// seen again counts again in both.
pub const USAGE_WINDOW: usize = 1024;

/// Price rows kept by model id (as the Python parser does); past this many
/// models every lookup asks the caller again.
pub const ROW_CACHE: usize = 64;

const PICO_PER_NANO: i128 = 1000;

/// One usage snapshot as the wire gives it: compared whole, so a repeated
/// snapshot is settled without a merge. `split` is `cache_creation`'s
/// (`ephemeral_5m_input_tokens`, `ephemeral_1h_input_tokens`), `None` when
/// the line has no split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `input_tokens`.
    pub input: i64,
    /// `output_tokens`.
    pub output: i64,
    /// `cache_creation_input_tokens`.
    pub cache_creation: i64,
    /// `cache_read_input_tokens`.
    pub cache_read: i64,
    /// The cache-write lifetime split, if reported.
    pub split: Option<(i64, i64)>,
}

impl Snapshot {
    fn tokens(&self) -> Tokens {
        Tokens {
            input: self.input.into(),
            output: self.output.into(),
            cache_creation: self.cache_creation.into(),
            cache_read: self.cache_read.into(),
            cache_creation_1h: self.split.map_or(0, |(_, one_hour)| one_hour.into()),
        }
    }
}

/// Token counts (the fields of `weft.agents.events.Tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Input tokens.
    pub input: i128,
    /// Output tokens.
    pub output: i128,
    /// All cache writes, whatever their lifetime.
    pub cache_creation: i128,
    /// Cache reads.
    pub cache_read: i128,
    /// The part of `cache_creation` written with a one-hour lifetime.
    pub cache_creation_1h: i128,
}

impl Tokens {
    fn max(&self, other: &Tokens) -> Tokens {
        Tokens {
            input: self.input.max(other.input),
            output: self.output.max(other.output),
            cache_creation: self.cache_creation.max(other.cache_creation),
            cache_read: self.cache_read.max(other.cache_read),
            cache_creation_1h: self.cache_creation_1h.max(other.cache_creation_1h),
        }
    }

    fn minus(&self, other: &Tokens) -> Tokens {
        Tokens {
            input: self.input - other.input,
            output: self.output - other.output,
            cache_creation: self.cache_creation - other.cache_creation,
            cache_read: self.cache_read - other.cache_read,
            cache_creation_1h: self.cache_creation_1h - other.cache_creation_1h,
        }
    }

    fn add(&mut self, other: &Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.cache_creation += other.cache_creation;
        self.cache_read += other.cache_read;
        self.cache_creation_1h += other.cache_creation_1h;
    }
}

/// A model's prices in pico-dollars (1e-12 USD) per token
/// (`weft.agents.pricing.Prices`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prices {
    /// Input tokens.
    pub input: i64,
    /// Cache writes with a five-minute lifetime (and writes without a split).
    pub cache_write_5m: i64,
    /// Cache writes with a one-hour lifetime.
    pub cache_write_1h: i64,
    /// Cache reads.
    pub cache_read: i64,
    /// Output tokens.
    pub output: i64,
}

impl Prices {
    /// The exact cost of `tokens` in pico-dollars. A one-hour split that does
    /// not fit in the writes is clamped to them, as `Prices.cost_pico` does.
    pub fn cost_pico(&self, tokens: &Tokens) -> i128 {
        let written = tokens.cache_creation;
        let mut one_hour = tokens.cache_creation_1h;
        if one_hour != 0 {
            one_hour = one_hour.max(0).min(written);
        }
        tokens.input * i128::from(self.input)
            + (written - one_hour) * i128::from(self.cache_write_5m)
            + one_hour * i128::from(self.cache_write_1h)
            + tokens.cache_read * i128::from(self.cache_read)
            + tokens.output * i128::from(self.output)
    }
}

/// The row of the price table that prices one model
/// (`weft.agents.pricing.PriceRow`, the numbers only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriceRow {
    /// The base prices.
    pub prices: Prices,
    /// `(above_prompt_tokens, prices)`, ascending by threshold: the prices of
    /// one request whose prompt exceeds the threshold.
    pub tiers: Vec<(i64, Prices)>,
}

impl PriceRow {
    /// The prices of one request of `tokens` (`PriceRow.prices_for` with
    /// `per_request=True`): the highest tier whose threshold the prompt
    /// (input, cache writes and reads) exceeds, else the base prices.
    pub fn prices_for(&self, tokens: &Tokens) -> &Prices {
        let prompt = tokens.input + tokens.cache_creation + tokens.cache_read;
        self.tiers
            .iter()
            .rev()
            .find(|(above, _)| prompt > i128::from(*above))
            .map_or(&self.prices, |(_, prices)| prices)
    }
}

/// Pico-dollars to nano-dollars, half to even (`pricing.round_pico`; the
/// division floors, as Python's `divmod` does for a negative amount).
pub fn round_pico(pico: i128) -> i128 {
    let mut nanos = pico.div_euclid(PICO_PER_NANO);
    let rest = pico.rem_euclid(PICO_PER_NANO);
    let half = PICO_PER_NANO / 2;
    if rest > half || (rest == half && nanos.rem_euclid(2) == 1) {
        nanos += 1;
    }
    nanos
}

/// What a snapshot added to its message: the growth of the maxima and the
/// growth of their cost (`None`: unpriced, now or before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageDelta {
    /// The tokens the message grew by.
    pub tokens: Tokens,
    /// Their cost in nano-dollars.
    pub cost_nanos: Option<i128>,
}

#[derive(Debug)]
struct Entry {
    /// The latest snapshot: the same one again is settled by one comparison.
    last: Snapshot,
    /// The maxima so far.
    max: Tokens,
    /// The maxima's cost in nano-dollars (`None`: unpriced).
    cost: Option<i128>,
}

/// The usage of one session: per-message maxima, the summed deltas and the
/// live estimate. One per parser; see the module docs.
#[derive(Debug)]
pub struct Ledger {
    entries: FxHashMap<Box<str>, Entry>,
    /// Message ids in first-seen order, the oldest evicted first.
    order: VecDeque<Box<str>>,
    rows: FxHashMap<Box<str>, Option<Arc<PriceRow>>>,
    /// The tokens of every reported delta, summed.
    pub spent: Tokens,
    /// The summed cost of every delta in nano-dollars; `None` once any
    /// message was unpriced.
    pub estimate_nanos: Option<i128>,
    /// The model of the latest message that had usage (not the synthetic
    /// one): it prices a result's bare `usage` when the session named none.
    pub priced_model: Option<String>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            entries: FxHashMap::default(),
            order: VecDeque::new(),
            rows: FxHashMap::default(),
            spent: Tokens::default(),
            estimate_nanos: Some(0),
            priced_model: None,
        }
    }
}

/// The model Claude Code names on the assistant messages it makes up itself
/// (API errors); never priced.
pub const SYNTHETIC_MODEL: &str = "<synthetic>";

impl Ledger {
    /// A new, empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Records message `message_id`'s snapshot and returns what it added,
    /// if anything. `lookup` finds a model's price row (`None`: unpriced);
    /// it is asked at most once per model while fewer than [`ROW_CACHE`]
    /// models have been seen, and its error is returned as is.
    ///
    /// The same steps, in the same order, as the Python parser's
    /// `_first_usage` and `_usage_delta`.
    pub fn record<E>(
        &mut self,
        message_id: &str,
        model: Option<&str>,
        snapshot: Snapshot,
        lookup: impl FnMut(&str) -> Result<Option<PriceRow>, E>,
    ) -> Result<Option<UsageDelta>, E> {
        match self.entries.get(message_id) {
            None => self.first(message_id, model, snapshot, lookup),
            Some(entry) if entry.last == snapshot => Ok(None),
            Some(_) => self.merge(message_id, model, snapshot, lookup),
        }
    }

    /// Messages whose maxima are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No message seen yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A message's first snapshot: all of it is new.
    fn first<E>(
        &mut self,
        message_id: &str,
        model: Option<&str>,
        snapshot: Snapshot,
        lookup: impl FnMut(&str) -> Result<Option<PriceRow>, E>,
    ) -> Result<Option<UsageDelta>, E> {
        if self.entries.len() >= USAGE_WINDOW {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
        if let Some(m) = model {
            if !m.is_empty() && m != SYNTHETIC_MODEL {
                m.clone_into(self.priced_model.get_or_insert_with(String::new));
            }
        }
        let tokens = snapshot.tokens();
        let key: Box<str> = message_id.into();
        if tokens.input + tokens.output + tokens.cache_creation + tokens.cache_read == 0
            && tokens.cache_creation_1h == 0
        {
            // Nothing spent: the maxima stay at zero, not these counts (a broken
            // stream's negative count can sum to zero with a positive one), as
            // when merged into nothing.
            self.insert(key, snapshot, Tokens::default(), Some(0));
            return Ok(None);
        }
        let cost = match model {
            None => None,
            Some(m) => self.cost_nanos(m, &tokens, lookup)?,
        };
        self.insert(key, snapshot, tokens, cost);
        Ok(Some(self.report(tokens, cost)))
    }

    /// A changed snapshot of a known message: max-merged into its maxima.
    fn merge<E>(
        &mut self,
        message_id: &str,
        model: Option<&str>,
        snapshot: Snapshot,
        lookup: impl FnMut(&str) -> Result<Option<PriceRow>, E>,
    ) -> Result<Option<UsageDelta>, E> {
        let (old, old_cost) = {
            let entry = &self.entries[message_id];
            (entry.max, entry.cost)
        };
        let new = old.max(&snapshot.tokens());
        if new == old {
            if let Some(entry) = self.entries.get_mut(message_id) {
                entry.last = snapshot;
            }
            return Ok(None);
        }
        let tokens = new.minus(&old);
        let cost = match model {
            None => None,
            Some(m) => self.cost_nanos(m, &new, lookup)?,
        };
        if let Some(entry) = self.entries.get_mut(message_id) {
            *entry = Entry {
                last: snapshot,
                max: new,
                cost,
            };
        }
        let delta = match (cost, old_cost) {
            (Some(c), Some(o)) => Some(c - o),
            _ => None,
        };
        Ok(Some(self.report(tokens, delta)))
    }

    /// Counts a request's growth (its tokens, and its cost in the running
    /// estimate, which an unpriced request makes unknown) and reports it.
    fn report(&mut self, tokens: Tokens, cost_nanos: Option<i128>) -> UsageDelta {
        match (cost_nanos, self.estimate_nanos.as_mut()) {
            (None, _) => self.estimate_nanos = None,
            (Some(c), Some(total)) => *total += c,
            (Some(_), None) => {}
        }
        self.spent.add(&tokens);
        UsageDelta { tokens, cost_nanos }
    }

    fn insert(&mut self, key: Box<str>, last: Snapshot, max: Tokens, cost: Option<i128>) {
        self.order.push_back(key.clone());
        self.entries.insert(key, Entry { last, max, cost });
    }

    /// `tokens` of one request on `model`, in nano-dollars (`None`: unpriced).
    fn cost_nanos<E>(
        &mut self,
        model: &str,
        tokens: &Tokens,
        mut lookup: impl FnMut(&str) -> Result<Option<PriceRow>, E>,
    ) -> Result<Option<i128>, E> {
        let row = if let Some(row) = self.rows.get(model) {
            row.clone()
        } else {
            let row = lookup(model)?.map(Arc::new);
            if self.rows.len() < ROW_CACHE {
                self.rows.insert(model.into(), row.clone());
            }
            row
        };
        Ok(row.map(|row| {
            let prices = if row.tiers.is_empty() {
                &row.prices
            } else {
                row.prices_for(tokens)
            };
            round_pico(prices.cost_pico(tokens))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// Sonnet 4.5's row: $3 in, $3.75 / $6 writes, $0.30 reads, $15 out per
    /// million tokens; double input (and more) past 200k prompt tokens.
    fn sonnet() -> PriceRow {
        PriceRow {
            prices: Prices {
                input: 3_000_000,
                cache_write_5m: 3_750_000,
                cache_write_1h: 6_000_000,
                cache_read: 300_000,
                output: 15_000_000,
            },
            tiers: vec![(
                200_000,
                Prices {
                    input: 6_000_000,
                    cache_write_5m: 7_500_000,
                    cache_write_1h: 12_000_000,
                    cache_read: 600_000,
                    output: 22_500_000,
                },
            )],
        }
    }

    #[allow(
        clippy::unnecessary_wraps,
        reason = "the shape of a lookup, which may fail in general"
    )]
    fn priced(model: &str) -> Result<Option<PriceRow>, Infallible> {
        Ok((model == "sonnet").then(sonnet))
    }

    fn snap(input: i64, output: i64, write: i64, read: i64) -> Snapshot {
        Snapshot {
            input,
            output,
            cache_creation: write,
            cache_read: read,
            split: None,
        }
    }

    fn record(
        ledger: &mut Ledger,
        id: &str,
        model: Option<&str>,
        s: Snapshot,
    ) -> Option<UsageDelta> {
        ledger.record(id, model, s, priced).unwrap()
    }

    #[test]
    fn rounding_is_half_to_even_and_floors_negatives() {
        assert_eq!(round_pico(1_500), 2);
        assert_eq!(round_pico(2_500), 2);
        assert_eq!(round_pico(2_501), 3);
        assert_eq!(round_pico(-1), 0);
        assert_eq!(round_pico(-500), 0);
        assert_eq!(round_pico(-1_500), -2);
        assert_eq!(round_pico(-1_501), -2);
    }

    #[test]
    fn a_repeated_snapshot_reports_nothing_and_growth_is_priced_alone() {
        let mut ledger = Ledger::new();
        let first = record(&mut ledger, "m1", Some("sonnet"), snap(3, 2, 2048, 9000)).unwrap();
        // 3 x 3 + 2048 x 3.75 + 9000 x 0.3 + 2 x 15 micro-dollars.
        assert_eq!(
            first.cost_nanos,
            Some(9_000 + 7_680_000 + 2_700_000 + 30_000)
        );
        assert_eq!(
            record(&mut ledger, "m1", Some("sonnet"), snap(3, 2, 2048, 9000)),
            None
        );
        let growth = record(&mut ledger, "m1", Some("sonnet"), snap(3, 40, 2048, 9000)).unwrap();
        assert_eq!(
            growth.tokens,
            Tokens {
                output: 38,
                ..Tokens::default()
            }
        );
        assert_eq!(growth.cost_nanos, Some(38 * 15_000));
        // A smaller snapshot changes nothing but is remembered as the latest.
        assert_eq!(
            record(&mut ledger, "m1", Some("sonnet"), snap(1, 1, 1, 1)),
            None
        );
        assert_eq!(ledger.spent.output, 40);
        assert_eq!(ledger.estimate_nanos, Some(10_419_000 + 570_000));
        assert_eq!(ledger.priced_model.as_deref(), Some("sonnet"));
    }

    #[test]
    fn a_long_prompt_takes_the_tier_and_an_unpriced_model_ends_the_estimate() {
        let mut ledger = Ledger::new();
        let long = record(&mut ledger, "m1", Some("sonnet"), snap(0, 0, 0, 200_001)).unwrap();
        assert_eq!(long.cost_nanos, Some(round_pico(200_001 * 600_000)));
        let unknown = record(&mut ledger, "m2", Some("mystery"), snap(1, 0, 0, 0)).unwrap();
        assert_eq!(unknown.cost_nanos, None);
        assert_eq!(ledger.estimate_nanos, None);
        let unnamed = record(&mut ledger, "m3", None, snap(1, 0, 0, 0)).unwrap();
        assert_eq!(unnamed.cost_nanos, None);
        assert_eq!(ledger.priced_model.as_deref(), Some("mystery"));
    }

    #[test]
    fn an_empty_first_snapshot_is_kept_at_zero_cost() {
        let mut ledger = Ledger::new();
        assert_eq!(record(&mut ledger, "m1", None, snap(0, 0, 0, 0)), None);
        // Priced later with a model: the old cost was zero, so the delta is priced.
        let grown = record(&mut ledger, "m1", Some("sonnet"), snap(1, 0, 0, 0)).unwrap();
        assert_eq!(grown.cost_nanos, Some(3_000));
        assert_eq!(ledger.estimate_nanos, Some(3_000));
    }

    #[test]
    fn the_one_hour_split_is_clamped_to_the_writes() {
        let prices = sonnet().prices;
        let tokens = Tokens {
            cache_creation: 10,
            cache_creation_1h: 25,
            ..Tokens::default()
        };
        assert_eq!(prices.cost_pico(&tokens), 10 * 6_000_000);
        let negative = Tokens {
            cache_creation: 10,
            cache_creation_1h: -4,
            ..Tokens::default()
        };
        assert_eq!(prices.cost_pico(&negative), 10 * 3_750_000);
    }

    #[test]
    fn the_window_evicts_the_oldest_message_and_a_returning_one_counts_again() {
        let mut ledger = Ledger::new();
        for i in 0..=USAGE_WINDOW {
            assert!(record(&mut ledger, &format!("m{i}"), None, snap(1, 0, 0, 0)).is_some());
        }
        assert_eq!(ledger.len(), USAGE_WINDOW);
        assert!(record(&mut ledger, "m0", None, snap(1, 0, 0, 0)).is_some());
        assert!(record(&mut ledger, "m2", None, snap(1, 0, 0, 0)).is_none());
        assert_eq!(ledger.spent.input, USAGE_WINDOW as i128 + 2);
    }

    #[test]
    fn rows_are_looked_up_once_per_model() {
        let mut ledger = Ledger::new();
        let mut asked = 0;
        for i in 0..3 {
            ledger
                .record(&format!("m{i}"), Some("sonnet"), snap(1, 0, 0, 0), |m| {
                    asked += 1;
                    priced(m)
                })
                .unwrap();
        }
        assert_eq!(asked, 1);
        let failed: Result<_, &str> =
            ledger.record("m9", Some("other"), snap(1, 0, 0, 0), |_| Err("no table"));
        assert_eq!(failed, Err("no table"));
    }
}
