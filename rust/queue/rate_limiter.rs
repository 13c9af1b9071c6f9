//! Per-queue token buckets for dequeue rate limits. Pure Rust; the clock is the caller's `now`.
//!
//! Invariants of a [`TokenBucket`]:
//! - `rate >= 0` and finite; `capacity = max(rate, 1) * burst_seconds`, so even a slow queue can
//!   hand out one job at a time;
//! - `tokens <= capacity` always; `tokens` may be negative (debt), because a granted request is
//!   charged in full even when it asked for more than the bucket holds;
//! - a request for `n` is granted when `tokens >= min(n, capacity)` and `rate > 0`. Large batches
//!   at low rates are therefore possible, and the debt they leave keeps the long-run rate;
//! - a fresh bucket starts full; changing the rate first accrues at the old rate up to `now`, then
//!   clamps the tokens to the new capacity.
//!
//! Time never runs backwards for a bucket: a `now` earlier than the last one accrues nothing.

use std::collections::HashMap;
use std::time::Instant;

use crate::error::RateLimitError;

fn check_rate(rate: f64) -> Result<f64, RateLimitError> {
    if rate.is_finite() && rate >= 0.0 {
        Ok(rate)
    } else {
        Err(RateLimitError::Rate(rate))
    }
}

fn check_burst(burst_seconds: f64) -> Result<f64, RateLimitError> {
    if burst_seconds.is_finite() && burst_seconds > 0.0 {
        Ok(burst_seconds)
    } else {
        Err(RateLimitError::BurstSeconds(burst_seconds))
    }
}

/// One queue's bucket. See the module docs for its invariants.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst_seconds: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, burst_seconds: f64, now: Instant) -> Result<Self, RateLimitError> {
        let rate = check_rate(rate)?;
        let burst_seconds = check_burst(burst_seconds)?;
        let capacity = rate.max(1.0) * burst_seconds;
        Ok(Self {
            rate,
            burst_seconds,
            capacity,
            tokens: capacity,
            last: now,
        })
    }

    #[must_use]
    pub fn rate(&self) -> f64 {
        self.rate
    }

    #[must_use]
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    /// Tokens after accruing up to `now` (negative means debt).
    pub fn tokens(&mut self, now: Instant) -> f64 {
        self.accrue(now);
        self.tokens
    }

    fn accrue(&mut self, now: Instant) {
        if now > self.last {
            let elapsed = now.duration_since(self.last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
            self.last = now;
        }
    }

    /// Changes the rate, keeping the tokens accrued so far (clamped to the new capacity).
    pub fn set_rate(&mut self, rate: f64, now: Instant) -> Result<(), RateLimitError> {
        let rate = check_rate(rate)?;
        self.accrue(now);
        self.rate = rate;
        self.capacity = rate.max(1.0) * self.burst_seconds;
        self.tokens = self.tokens.min(self.capacity);
        Ok(())
    }

    /// Grants `n` jobs and charges them, or refuses and charges nothing.
    pub fn try_acquire(&mut self, n: u64, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return false;
        }
        self.accrue(now);
        // Exact up to 2^53 jobs; past that a rounding of one job in 2^53 does not matter.
        #[allow(clippy::cast_precision_loss)]
        let n = n as f64;
        if self.tokens >= n.min(self.capacity) {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

/// Buckets by queue name. A queue without a bucket is unlimited.
///
/// Not synchronised itself: the Python binding wraps it in a mutex.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    burst_seconds: f64,
    buckets: HashMap<String, TokenBucket>,
}

impl RateLimiter {
    pub fn new(burst_seconds: f64) -> Result<Self, RateLimitError> {
        Ok(Self {
            burst_seconds: check_burst(burst_seconds)?,
            buckets: HashMap::new(),
        })
    }

    #[must_use]
    pub fn burst_seconds(&self) -> f64 {
        self.burst_seconds
    }

    /// Sets or changes a queue's rate in jobs per second; 0 pauses the queue.
    pub fn set_rate(&mut self, queue: &str, rate: f64, now: Instant) -> Result<(), RateLimitError> {
        if let Some(bucket) = self.buckets.get_mut(queue) {
            bucket.set_rate(rate, now)
        } else {
            let bucket = TokenBucket::new(rate, self.burst_seconds, now)?;
            self.buckets.insert(queue.to_owned(), bucket);
            Ok(())
        }
    }

    /// Makes a queue unlimited again; returns whether it had a rate.
    pub fn remove(&mut self, queue: &str) -> bool {
        self.buckets.remove(queue).is_some()
    }

    /// The configured rates, in no particular order.
    pub fn rates(&self) -> impl Iterator<Item = (&str, f64)> {
        self.buckets
            .iter()
            .map(|(queue, bucket)| (queue.as_str(), bucket.rate()))
    }

    /// Whether `n` jobs of `queue` may be dequeued now; if so they are charged.
    pub fn try_acquire(&mut self, queue: &str, n: u64, now: Instant) -> bool {
        self.buckets
            .get_mut(queue)
            .is_none_or(|bucket| bucket.try_acquire(n, now))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Callers polling every `step` with requests of `n`; returns jobs granted over `duration`.
    fn granted(
        bucket: &mut TokenBucket,
        start: Instant,
        duration: Duration,
        step: Duration,
        n: u64,
    ) -> u64 {
        let mut total = 0;
        let mut t = Duration::ZERO;
        while t <= duration {
            if bucket.try_acquire(n, start + t) {
                total += n;
            }
            t += step;
        }
        total
    }

    #[test]
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    fn long_run_rate_within_five_percent() {
        for rate in [0.1, 1.0, 50.0, 1000.0] {
            for n in [1_u64, 3, 10, 100] {
                // 10 simulated seconds, or longer where 10 s would grant too few jobs to measure
                // to 5% (0.1/s grants one job in 10 s).
                let seconds = (200.0 * n as f64 / rate).max(10.0);
                let duration = Duration::from_secs_f64(seconds);
                let step = duration / 100_000;
                let start = Instant::now();
                let mut bucket = TokenBucket::new(rate, 1.0, start).unwrap();
                let initial = bucket.capacity();
                let total = granted(&mut bucket, start, duration, step, n) as f64;
                // What was handed out beyond the initial burst, plus what remains or is owed.
                let accrued = total - initial + bucket.tokens(start + duration);
                let expected = rate * seconds;
                assert!(
                    (accrued - expected).abs() <= 0.05 * expected,
                    "rate {rate} n {n}: accrued {accrued}, expected {expected}"
                );
                let observed = (total - initial) / seconds;
                assert!(
                    (observed - rate).abs() <= 0.05 * rate,
                    "rate {rate} n {n}: observed {observed}/s"
                );
            }
        }
    }

    #[test]
    fn ten_simulated_seconds_account_for_every_token() {
        // Over exactly 10 s, jobs granted beyond the initial burst plus the balance left (negative
        // when in debt) is what accrued: rate * 10 s. Integer batches make the granted count alone
        // too coarse for 5% at low rates; the long-run test above checks it over longer windows.
        for rate in [0.1, 1.0, 50.0, 1000.0] {
            for n in [1_u64, 7, 10, 100] {
                let start = Instant::now();
                let ten = Duration::from_secs(10);
                let mut bucket = TokenBucket::new(rate, 1.0, start).unwrap();
                let total = granted(&mut bucket, start, ten, Duration::from_micros(100), n);
                #[allow(clippy::cast_precision_loss)]
                let accounted = total as f64 - bucket.capacity() + bucket.tokens(start + ten);
                let expected = rate * 10.0;
                assert!(
                    (accounted - expected).abs() <= 0.05 * expected,
                    "rate {rate} n {n}: {accounted} vs {expected}"
                );
            }
        }
    }

    #[test]
    fn big_batch_at_low_rate_goes_into_debt() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(0.1, 1.0, start).unwrap();
        assert!(bucket.try_acquire(10, start));
        assert!((bucket.tokens(start) + 9.0).abs() < 1e-9);
        // Debt of 9 plus one token to reach min(10, capacity 1): 100 s at 0.1/s.
        assert!(!bucket.try_acquire(10, start + Duration::from_secs(99)));
        assert!(bucket.try_acquire(10, start + Duration::from_secs(100)));
    }

    #[test]
    fn fresh_bucket_is_full_and_capacity_follows_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(5.0, 2.0, start).unwrap();
        assert!((bucket.capacity() - 10.0).abs() < 1e-9);
        assert!(bucket.try_acquire(10, start));
        assert!(!bucket.try_acquire(1, start));
        let mut slow = TokenBucket::new(0.5, 1.0, start).unwrap();
        assert!((slow.capacity() - 1.0).abs() < 1e-9);
        assert!(slow.try_acquire(1, start));
        assert!(!slow.try_acquire(1, start + Duration::from_millis(1999)));
        assert!(slow.try_acquire(1, start + Duration::from_secs(2)));
    }

    #[test]
    fn zero_rate_pauses() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(0.0, 1.0, start).unwrap();
        for s in [0, 1, 1000] {
            assert!(!bucket.try_acquire(1, start + Duration::from_secs(s)));
            assert!(!bucket.try_acquire(0, start + Duration::from_secs(s)));
        }
        // Pausing a running queue keeps its tokens for when it resumes.
        let mut running = TokenBucket::new(10.0, 1.0, start).unwrap();
        running.set_rate(0.0, start).unwrap();
        assert!(!running.try_acquire(1, start + Duration::from_secs(5)));
        running
            .set_rate(10.0, start + Duration::from_secs(5))
            .unwrap();
        assert!((running.tokens(start + Duration::from_secs(5)) - 1.0).abs() < 1e-9);
        assert!(running.try_acquire(1, start + Duration::from_secs(5)));
    }

    #[test]
    fn rate_change_keeps_tokens_clamped() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(100.0, 1.0, start).unwrap();
        assert!(bucket.try_acquire(40, start));
        // Accrues at the old rate up to the change: 60 + 0.1 s * 100 = 70, then clamp to 5.
        bucket
            .set_rate(5.0, start + Duration::from_millis(100))
            .unwrap();
        assert!((bucket.tokens(start + Duration::from_millis(100)) - 5.0).abs() < 1e-9);
        // Raising the rate keeps the tokens and accrues at the new rate from then on.
        bucket
            .set_rate(1000.0, start + Duration::from_millis(100))
            .unwrap();
        assert!((bucket.tokens(start + Duration::from_millis(100)) - 5.0).abs() < 1e-9);
        assert!((bucket.tokens(start + Duration::from_millis(110)) - 15.0).abs() < 1e-6);
    }

    #[test]
    fn clock_going_backwards_accrues_nothing() {
        let earlier = Instant::now();
        let start = earlier + Duration::from_secs(10);
        let mut bucket = TokenBucket::new(1.0, 1.0, start).unwrap();
        assert!(bucket.try_acquire(1, start));
        assert!(!bucket.try_acquire(1, earlier));
        assert!(bucket.try_acquire(1, start + Duration::from_secs(1)));
    }

    #[test]
    fn rejects_bad_settings() {
        let now = Instant::now();
        for rate in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(TokenBucket::new(rate, 1.0, now).is_err());
            assert!(RateLimiter::new(1.0)
                .unwrap()
                .set_rate("q", rate, now)
                .is_err());
        }
        for burst in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                RateLimiter::new(burst),
                Err(RateLimitError::BurstSeconds(_))
            ));
        }
    }

    #[test]
    fn limiter_unlimited_set_remove_rates() {
        let now = Instant::now();
        let mut limiter = RateLimiter::new(1.0).unwrap();
        assert!(limiter.try_acquire("free", u64::MAX, now));
        limiter.set_rate("a", 2.0, now).unwrap();
        limiter.set_rate("b", 0.0, now).unwrap();
        let mut rates: Vec<_> = limiter.rates().collect();
        rates.sort_by(|x, y| x.0.cmp(y.0));
        assert_eq!(rates, [("a", 2.0), ("b", 0.0)]);
        assert!(limiter.try_acquire("a", 2, now));
        assert!(!limiter.try_acquire("a", 1, now));
        assert!(!limiter.try_acquire("b", 1, now));
        assert!(limiter.remove("a"));
        assert!(!limiter.remove("a"));
        assert!(limiter.try_acquire("a", 1000, now));
        // Re-setting an existing queue changes its bucket instead of refilling it.
        limiter.set_rate("b", 1.0, now).unwrap();
        assert!(limiter.try_acquire("b", 1, now));
        limiter.set_rate("b", 1.0, now).unwrap();
        assert!(!limiter.try_acquire("b", 1, now));
    }
}
