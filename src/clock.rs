//! Time, passed in: the one place Strata reads a clock.
//!
//! Two clocks, for two jobs:
//! - **monotonic** milliseconds (arbitrary origin, never steps back) for every timeout,
//!   session, interval and deadline: a wall-clock step (NTP, an operator) must not expire
//!   every broker's or consumer's session at once;
//! - **wall** milliseconds since the Unix epoch, only for what is a date: record timestamps,
//!   commit timestamps and retention.
//!
//! Logic takes time as an argument (a `now_ms`, or a [`Now`]) and never reads a clock itself;
//! the code that drives it holds a [`Clock`] (`SystemClock` in the broker, `ManualClock` in
//! tests and simulators, which then decide what time it is).
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of both clocks. Shared by every thread of a broker (`Arc<dyn Clock>`).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Monotonic milliseconds since an arbitrary origin shared by every reader of this clock.
    fn monotonic_ms(&self) -> u64;
    /// Wall-clock milliseconds since the Unix epoch (may step back or forward).
    fn wall_ms(&self) -> i64;
    /// Both readings at once, for logic that needs a deadline and a date from one moment.
    fn now(&self) -> Now {
        Now {
            monotonic_ms: i64::try_from(self.monotonic_ms()).unwrap_or(i64::MAX),
            wall_ms: self.wall_ms(),
        }
    }
}

/// One moment on both clocks, handed to sans-IO state machines (the group coordinator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic milliseconds (as `Clock::monotonic_ms`), signed like Kafka's times.
    pub monotonic_ms: i64,
    pub wall_ms: i64,
}

impl Now {
    /// The same reading on both clocks: what tests and simulators use when the difference
    /// does not matter to them.
    pub fn at(ms: i64) -> Self {
        Self {
            monotonic_ms: ms,
            wall_ms: ms,
        }
    }
}

/// The process's clocks. Monotonic time counts from the first reading in this process, so
/// every `SystemClock` agrees with every other; the values never leave the process.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(SystemClock)
    }
}

impl Clock for SystemClock {
    fn monotonic_ms(&self) -> u64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let ms = ORIGIN.get_or_init(Instant::now).elapsed().as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX)
    }

    fn wall_ms(&self) -> i64 {
        // Before 1970 only on a badly broken host; 0 then, as a timestamp Kafka accepts.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told: tests and simulators set both readings.
#[derive(Debug, Default)]
pub struct ManualClock {
    monotonic_ms: AtomicU64,
    wall_ms: AtomicI64,
}

impl ManualClock {
    pub fn new(monotonic_ms: u64, wall_ms: i64) -> Arc<Self> {
        Arc::new(Self {
            monotonic_ms: AtomicU64::new(monotonic_ms),
            wall_ms: AtomicI64::new(wall_ms),
        })
    }

    /// Moves both clocks forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.monotonic_ms.fetch_add(ms, Ordering::Relaxed);
        self.wall_ms
            .fetch_add(i64::try_from(ms).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// Steps the wall clock alone (NTP, an operator); monotonic time does not move.
    pub fn set_wall_ms(&self, wall_ms: i64) {
        self.wall_ms.store(wall_ms, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn monotonic_ms(&self) -> u64 {
        self.monotonic_ms.load(Ordering::Relaxed)
    }

    fn wall_ms(&self) -> i64 {
        self.wall_ms.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The system clock's monotonic reading counts from this process's start (far below a
    /// wall-clock reading of about 1.7e12 ms) and never goes back; its wall reading is a date.
    #[test]
    fn system_clock_monotonic_is_not_wall_time() {
        let clock = SystemClock;
        let a = clock.monotonic_ms();
        let b = clock.monotonic_ms();
        assert!(b >= a);
        let ten_years_ms = 10 * 365 * 24 * 3600 * 1000u64;
        assert!(a < ten_years_ms, "monotonic time reads the wall clock");
        assert!(clock.wall_ms() > 1_600_000_000_000);
    }

    /// A manual clock moves only when told, and a wall-clock step leaves monotonic time alone.
    #[test]
    fn manual_clock_moves_when_told() {
        let clock = ManualClock::new(5, 1_000);
        clock.advance(10);
        assert_eq!(
            clock.now(),
            Now {
                monotonic_ms: 15,
                wall_ms: 1_010
            }
        );
        clock.set_wall_ms(0);
        assert_eq!(clock.monotonic_ms(), 15);
        assert_eq!(clock.wall_ms(), 0);
    }
}
