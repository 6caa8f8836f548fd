//! US dollars as whole nano-dollars.
//!
//! Costs arrive as JSON floats, but the cost cache adds and subtracts them
//! millions of times. Floats would drift: a total kept by deltas would stop
//! matching the sum of the records it came from, and a state rebuilt from
//! state.json would report a different total than the live run did. Integers
//! don't drift, so every total is exact, order-independent and reproducible.
//!
//! A float `x` becomes `round_ties_even(x * 1e9)` and goes back out as
//! `units / 1e9`. Below [`Money::MAX_USD`] that round trip is exact, so a
//! state survives any number of save/load cycles unchanged.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Nano-dollars per dollar.
const SCALE: f64 = 1e9;

/// An exact, non-negative amount of US dollars.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i64);

/// Why a float cannot be a [`Money`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MoneyError {
    /// NaN or infinite.
    NotFinite,
    /// Below zero.
    Negative(f64),
    /// Above [`Money::MAX_USD`].
    TooLarge(f64),
}

impl fmt::Display for MoneyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoneyError::NotFinite => f.write_str("a cost must be a finite number"),
            MoneyError::Negative(v) => write!(f, "a cost cannot be negative (got {v})"),
            MoneyError::TooLarge(v) => write!(
                f,
                "a cost above {} USD is not plausible (got {v})",
                Money::MAX_USD
            ),
        }
    }
}

impl Money {
    /// Zero dollars.
    pub const ZERO: Money = Money(0);
    /// The largest amount one value may carry, in dollars. Well inside the
    /// range where the float round trip is exact (about 4.5 million).
    pub const MAX_USD: f64 = 1_000_000.0;

    /// Converts a dollar amount, refusing NaN, negatives and absurd values.
    pub fn from_usd(usd: f64) -> Result<Money, MoneyError> {
        if !usd.is_finite() {
            return Err(MoneyError::NotFinite);
        }
        if usd < 0.0 {
            return Err(MoneyError::Negative(usd));
        }
        if usd > Money::MAX_USD {
            return Err(MoneyError::TooLarge(usd));
        }
        Ok(Money((usd * SCALE).round_ties_even() as i64))
    }

    /// `self + other`, or `None` when the sum exceeds [`Money::MAX_USD`]: no
    /// single value may grow past what a document can hold.
    pub fn checked_add(self, other: Money) -> Option<Money> {
        let sum = self.0.checked_add(other.0)?;
        (sum as f64 <= Money::MAX_USD * SCALE).then_some(Money(sum))
    }

    /// The amount in dollars.
    pub fn usd(self) -> f64 {
        self.0 as f64 / SCALE
    }

    /// The amount in nano-dollars.
    pub const fn nanos(self) -> i64 {
        self.0
    }

    /// The signed difference `self - other`, in nano-dollars.
    pub const fn delta(self, other: Money) -> i64 {
        self.0 - other.0
    }

    /// Applies a signed nano-dollar delta (used by running totals).
    #[must_use]
    pub const fn offset(self, delta: i64) -> Money {
        Money(self.0.saturating_add(delta))
    }
}

impl Add for Money {
    type Output = Money;
    fn add(self, rhs: Money) -> Money {
        Money(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Money {
    fn add_assign(&mut self, rhs: Money) {
        *self = *self + rhs;
    }
}

impl Sub for Money {
    type Output = i64;
    fn sub(self, rhs: Money) -> i64 {
        self.delta(rhs)
    }
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.usd())
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Money, D::Error> {
        struct MoneyVisitor;
        impl Visitor<'_> for MoneyVisitor {
            type Value = Money;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative cost in US dollars")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Money, E> {
                Money::from_usd(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Money, E> {
                self.visit_f64(v as f64)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Money, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_f64(MoneyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_exactly_and_round_trips_through_json() {
        for usd in [
            0.0,
            0.031_971,
            0.0234,
            1e-9,
            123.456_789_012,
            999_999.999_999_999,
        ] {
            let m = Money::from_usd(usd).unwrap();
            let json = serde_json::to_string(&m).unwrap();
            let back: Money = serde_json::from_str(&json).unwrap();
            assert_eq!(back, m, "{usd} -> {json}");
        }
        assert_eq!(Money::from_usd(0.031_971).unwrap().nanos(), 31_971_000);
    }

    #[test]
    fn sums_do_not_drift() {
        let step = Money::from_usd(0.1).unwrap();
        let mut total = Money::ZERO;
        for _ in 0..10 {
            total += step;
        }
        assert_eq!(total, Money::from_usd(1.0).unwrap());
        // Exact on purpose: integer sums convert back without error.
        #[allow(clippy::float_cmp)]
        {
            assert_eq!(total.usd(), 1.0);
        }
    }

    #[test]
    fn refuses_nan_negative_and_absurd_amounts() {
        assert_eq!(Money::from_usd(f64::NAN), Err(MoneyError::NotFinite));
        assert_eq!(Money::from_usd(f64::INFINITY), Err(MoneyError::NotFinite));
        assert_eq!(Money::from_usd(-0.5), Err(MoneyError::Negative(-0.5)));
        assert!(matches!(Money::from_usd(2e6), Err(MoneyError::TooLarge(_))));
        let err = serde_json::from_str::<Money>("-1").unwrap_err();
        assert!(err.to_string().contains("cannot be negative"), "{err}");
    }

    #[test]
    fn ties_round_to_even_like_python() {
        // 2.5 nano-dollars rounds to 2, 3.5 to 4, as Python's round() does.
        assert_eq!(Money::from_usd(2.5e-9).unwrap().nanos(), 2);
        assert_eq!(Money::from_usd(3.5e-9).unwrap().nanos(), 4);
    }
}
