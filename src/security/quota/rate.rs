//! Rates measured as Kafka's quota sensors measure them: `quota_window_num` samples of
//! `quota_window_size_seconds` each (11 x 1 s by default), the rate being the samples' total
//! over the time they cover, never less than `num - 1` whole windows (so a client's first
//! second is not judged as a whole rate), and the throttle time the one that brings the rate
//! back to the quota: (rate - quota) / quota x that time (KIP-219).
//!
//! Shared across shards. A client's connections may land on different shards, and Kafka's
//! quota is per broker, so every connection under one quota must add to one rate. Each
//! sample is one `AtomicU64` packing the window's number with its total, updated by
//! compare-and-swap: lock-free, exact, and a cache line that only the shards serving that
//! same client touch (a one-connection client's rate never leaves its shard's cache). The
//! alternatives were worse: a per-shard share of the quota starves a client with one
//! connection (it would get 1/shards of its quota), and a periodic exchange of per-shard
//! rates lets a client spread over N shards overshoot by up to N x quota for every exchange
//! interval. The map from quota to rate (`RateRegistry`) has a lock, taken only when a
//! connection (re)resolves its quotas: on its first request, a new client id or principal,
//! or a quota change; never per request.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::SensorKey;
use crate::limits::QUOTA_SENSORS_PRUNE_AT;

/// Low bits of a sample: its total (saturating; 2^40 bytes or microseconds per window is far
/// beyond any one client's traffic).
const VALUE_BITS: u32 = 40;
const VALUE_MAX: u64 = (1 << VALUE_BITS) - 1;
/// High bits: the window's number, modulo 2^24 (a sample is only read for the last `num`
/// windows, so the wrap, every 2^24 windows, is never confused with a live sample).
const WINDOW_MASK: u64 = (1 << (64 - VALUE_BITS)) - 1;

fn pack(window: u64, value: u64) -> u64 {
    ((window & WINDOW_MASK) << VALUE_BITS) | value.min(VALUE_MAX)
}

fn window_of(sample: u64) -> u64 {
    sample >> VALUE_BITS
}

fn value_of(sample: u64) -> u64 {
    sample & VALUE_MAX
}

/// What a rate was measured over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    /// Units per second.
    pub rate: f64,
    /// The time the rate covers (Kafka's `Rate.windowSize`).
    pub window_ms: u64,
}

/// A sampled rate, shared by every connection under one quota. Samples are aligned to whole
/// windows of the clock (Kafka starts its samples at the first record; over `num` windows
/// the two measure the same).
#[derive(Debug)]
pub struct SampledRate {
    samples: Box<[AtomicU64]>,
    window_size_ms: u64,
}

impl SampledRate {
    pub fn new(num: usize, window_size_ms: u64) -> SampledRate {
        let num = num.max(2);
        SampledRate {
            samples: (0..num).map(|_| AtomicU64::new(0)).collect(),
            window_size_ms: window_size_ms.max(1),
        }
    }

    fn num(&self) -> u64 {
        self.samples.len() as u64
    }

    /// The sample of `window`: the slot it owns in the ring.
    fn slot(&self, window: u64) -> Option<&AtomicU64> {
        let i = usize::try_from(window % self.num()).ok()?;
        self.samples.get(i)
    }

    /// Adds `value` to the window of `now_ms` (starting that window afresh if its slot still
    /// holds an older one).
    pub fn record(&self, now_ms: u64, value: u64) {
        self.update(now_ms, |current| current.saturating_add(value), value);
    }

    /// Takes back `value` recorded in the window of `now_ms` (Kafka unrecords a throttled
    /// fetch's bytes, since its response goes out empty).
    pub fn unrecord(&self, now_ms: u64, value: u64) {
        self.update(now_ms, |current| current.saturating_sub(value), 0);
    }

    fn update(&self, now_ms: u64, change: impl Fn(u64) -> u64, fresh: u64) {
        let window = now_ms / self.window_size_ms;
        let Some(slot) = self.slot(window) else {
            return;
        };
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let next = if window_of(current) == window & WINDOW_MASK && current != 0 {
                pack(window, change(value_of(current)))
            } else {
                pack(window, fresh)
            };
            match slot.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// The rate at `now_ms`: the live samples' total over the time from the oldest live
    /// sample's start to now, padded to at least `num - 1` whole windows (Kafka's
    /// `Rate.windowSize`).
    pub fn measure(&self, now_ms: u64) -> Measure {
        let window = now_ms / self.window_size_ms;
        let mut total: u64 = 0;
        let mut oldest = window;
        for back in 0..self.num().min(window + 1) {
            let w = window - back;
            let Some(slot) = self.slot(w) else { continue };
            let s = slot.load(Ordering::Acquire);
            if s != 0 && window_of(s) == w & WINDOW_MASK {
                total = total.saturating_add(value_of(s));
                oldest = w;
            }
        }
        let mut elapsed_ms = now_ms.saturating_sub(oldest * self.window_size_ms);
        let full_windows = elapsed_ms / self.window_size_ms;
        let min_full = self.num() - 1;
        if full_windows < min_full {
            elapsed_ms += (min_full - full_windows) * self.window_size_ms;
        }
        Measure {
            rate: total as f64 * 1000.0 / elapsed_ms.max(1) as f64,
            window_ms: elapsed_ms,
        }
    }

    /// Records `value` and returns how long the client must wait for its rate to come back
    /// to `bound` (0 when within it), as Kafka's quota sensor: record first, then compare.
    /// `max_ms` bounds the answer (Kafka bounds the request quota's throttle to one window).
    pub fn record_and_throttle(&self, now_ms: u64, value: u64, bound: f64, max_ms: u64) -> u64 {
        self.record(now_ms, value);
        throttle_ms(self.measure(now_ms), bound, max_ms)
    }

    /// The newest window this rate has a sample of (for pruning idle rates).
    fn idle_since(&self, now_ms: u64) -> bool {
        let window = now_ms / self.window_size_ms;
        (0..self.num().min(window + 1)).all(|back| {
            let w = window - back;
            self.slot(w).is_none_or(|slot| {
                let s = slot.load(Ordering::Relaxed);
                s == 0 || window_of(s) != w & WINDOW_MASK
            })
        })
    }
}

/// KIP-219's throttle time: how long, with nothing more recorded, until `m.rate` over
/// `m.window_ms` is back to `bound`. Zero within the quota; a quota of zero or less throttles
/// for `max_ms`.
pub fn throttle_ms(m: Measure, bound: f64, max_ms: u64) -> u64 {
    if m.rate <= bound {
        return 0;
    }
    if bound <= 0.0 {
        return max_ms;
    }
    let t = (m.rate - bound) / bound * m.window_ms as f64;
    if t >= max_ms as f64 {
        max_ms
    } else {
        t as u64
    }
}

/// The broker's rates by sensor (Kafka's sensors by metric tags): every connection whose
/// quota resolves to the same sensor gets the same `SampledRate`.
#[derive(Debug)]
pub struct RateRegistry {
    num: usize,
    window_size_ms: u64,
    rates: Mutex<HashMap<SensorKey, Arc<SampledRate>>>,
}

impl RateRegistry {
    pub fn new(num: usize, window_size_ms: u64) -> RateRegistry {
        RateRegistry {
            num,
            window_size_ms,
            rates: Mutex::new(HashMap::new()),
        }
    }

    pub fn window_size_ms(&self) -> u64 {
        self.window_size_ms
    }

    /// The rate of `key`, created empty the first time. Past `QUOTA_SENSORS_PRUNE_AT`
    /// sensors, those no connection holds and with no live sample are dropped first: such a
    /// rate measures the same as a new one, so nothing is forgotten.
    pub fn rate(&self, key: &SensorKey, now_ms: u64) -> Arc<SampledRate> {
        // A poisoned lock only means another shard panicked mid-insert; the map is intact.
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = rates.get(key) {
            return r.clone();
        }
        if rates.len() >= QUOTA_SENSORS_PRUNE_AT {
            rates.retain(|_, r| Arc::strong_count(r) > 1 || !r.idle_since(now_ms));
        }
        let r = Arc::new(SampledRate::new(self.num, self.window_size_ms));
        rates.insert(key.clone(), r.clone());
        r
    }

    pub fn len(&self) -> usize {
        self.rates.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::quota::QuotaKey;

    /// A fresh client is judged over `num - 1` windows at least: 10 MB in its first second at
    /// 11 x 1 s is 1 MB/s; KIP-219's throttle brings a rate 2x over the quota back in one
    /// more window's worth of time; old samples fall out of the ring.
    #[test]
    fn rate_and_throttle_as_kafka() {
        let r = SampledRate::new(11, 1000);
        let t0 = 1_000_000;
        r.record(t0 + 500, 10_000_000);
        let m = r.measure(t0 + 500);
        assert_eq!(m.window_ms, 10_500);
        assert!((m.rate - 10_000_000.0 / 10.5).abs() < 1.0);
        assert_eq!(throttle_ms(m, 1_000_000.0, u64::MAX), 0);
        // 21 MB over 10.5 s against 1 MB/s: (2 - 1) / 1 x 10.5 s.
        let t = r.record_and_throttle(t0 + 500, 11_000_000, 1_000_000.0, u64::MAX);
        assert_eq!(t, 10_500);
        assert_eq!(throttle_ms(r.measure(t0 + 500), 1_000_000.0, 1000), 1000);
        // Unrecord takes back from the current window only.
        r.unrecord(t0 + 600, 11_000_000);
        assert!((r.measure(t0 + 600).rate - 10_000_000.0 / 10.6).abs() < 1.0);
        // 11 windows later the samples have expired.
        assert_eq!(r.measure(t0 + 11_500).rate, 0.0);
        assert!(r.idle_since(t0 + 11_500));
        // Steady traffic over more than num windows: the rate covers ~num windows.
        let r = SampledRate::new(11, 1000);
        for s in 0..30u64 {
            r.record(t0 + s * 1000 + 10, 1_000);
        }
        let m = r.measure(t0 + 29_500);
        assert_eq!(m.window_ms, 10_500);
        assert!((m.rate - 11_000.0 / 10.5).abs() < 0.01);
    }

    /// Shards adding to one rate at once lose nothing (the compare-and-swap), and the
    /// registry hands every caller of one sensor the same rate.
    #[test]
    fn concurrent_records_add_up_and_sensors_are_shared() {
        let r = Arc::new(SampledRate::new(11, 60_000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        r.record(120_000, 3);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().ok();
        }
        let m = r.measure(120_000);
        assert_eq!(m.rate * m.window_ms as f64 / 1000.0, 120_000.0);
        let reg = RateRegistry::new(11, 1000);
        let key = SensorKey {
            key: QuotaKey::ProducerByteRate,
            user: String::new(),
            client_id: "a".into(),
        };
        let a = reg.rate(&key, 0);
        let b = reg.rate(&key, 0);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(reg.len(), 1);
    }
}
