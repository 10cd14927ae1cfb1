//! When the cleaner may issue its next piece of disk work, so that it yields the disk to the
//! shard's foreground I/O (the flushers' segment writes and `fdatasync`s, which produce and
//! replication wait on) — sans-IO: the caller reports whether foreground I/O is in flight,
//! and sleeps for what [`DiskYield::turn`] answers.
//!
//! Two rules, each with a bound that keeps the cleaner progressing:
//! - at most one piece per `min_interval` (spreads work that costs the disk more than its
//!   own latency, such as freeing a replaced segment's blocks: ext4 mounted with `discard`
//!   trims them in the next journal commit, which every produce `fdatasync` waits for);
//! - not while foreground I/O is in flight, waiting at most `wait_max` for it to drain, so a
//!   shard that always has a write or fsync in flight still lets the cleaner go once per
//!   `wait_max`.

use std::time::{Duration, Instant};

/// What the cleaner does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Issue the piece now.
    Go,
    /// Sleep this long, then ask again.
    Wait(Duration),
}

/// One kind of cleaner disk work's pacing state.
#[derive(Debug, Clone)]
pub struct DiskYield {
    min_interval: Duration,
    wait_max: Duration,
    poll: Duration,
    last_go: Option<Instant>,
    waiting_since: Option<Instant>,
}

impl DiskYield {
    /// `poll` is how often a waiting cleaner looks again while foreground I/O is in flight.
    pub fn new(min_interval: Duration, wait_max: Duration, poll: Duration) -> Self {
        Self {
            min_interval,
            wait_max,
            poll,
            last_go: None,
            waiting_since: None,
        }
    }

    /// Whether the next piece may go at `now`, given whether foreground I/O is in flight.
    /// A `Go` is counted as issued at `now`.
    pub fn turn(&mut self, now: Instant, foreground_in_flight: bool) -> Turn {
        if let Some(last) = self.last_go {
            let due = last + self.min_interval;
            if now < due {
                return Turn::Wait(due - now);
            }
        }
        let since = *self.waiting_since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        if foreground_in_flight && waited < self.wait_max {
            return Turn::Wait(self.poll.min(self.wait_max - waited));
        }
        self.waiting_since = None;
        self.last_go = Some(now);
        Turn::Go
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn goes_at_once_when_the_foreground_is_idle() {
        let mut y = DiskYield::new(Duration::ZERO, 5 * MS, MS / 2);
        let t = Instant::now();
        assert_eq!(y.turn(t, false), Turn::Go);
        assert_eq!(y.turn(t, false), Turn::Go);
    }

    #[test]
    fn waits_for_foreground_io_then_goes() {
        let mut y = DiskYield::new(Duration::ZERO, 5 * MS, MS / 2);
        let t = Instant::now();
        assert_eq!(y.turn(t, true), Turn::Wait(MS / 2));
        assert_eq!(y.turn(t + MS, true), Turn::Wait(MS / 2));
        // The foreground drained: go, and the next piece starts a fresh wait.
        assert_eq!(y.turn(t + 2 * MS, false), Turn::Go);
        assert_eq!(y.turn(t + 2 * MS, true), Turn::Wait(MS / 2));
    }

    #[test]
    fn a_foreground_that_never_drains_delays_a_piece_by_wait_max_at_most() {
        let mut y = DiskYield::new(Duration::ZERO, 5 * MS, 2 * MS);
        let t = Instant::now();
        assert_eq!(y.turn(t, true), Turn::Wait(2 * MS));
        assert_eq!(y.turn(t + 4 * MS, true), Turn::Wait(MS));
        assert_eq!(y.turn(t + 5 * MS, true), Turn::Go);
        // Each piece gets its own bound.
        assert_eq!(y.turn(t + 5 * MS, true), Turn::Wait(2 * MS));
        assert_eq!(y.turn(t + 10 * MS, true), Turn::Go);
    }

    #[test]
    fn pieces_are_spaced_by_min_interval() {
        let mut y = DiskYield::new(10 * MS, 50 * MS, MS);
        let t = Instant::now();
        assert_eq!(y.turn(t, false), Turn::Go);
        assert_eq!(y.turn(t + 3 * MS, false), Turn::Wait(7 * MS));
        assert_eq!(y.turn(t + 10 * MS, false), Turn::Go);
        // The wait for the foreground starts once the interval is over.
        assert_eq!(y.turn(t + 20 * MS, true), Turn::Wait(MS));
        assert_eq!(y.turn(t + 69 * MS, true), Turn::Wait(MS));
        assert_eq!(y.turn(t + 70 * MS, true), Turn::Go);
    }
}
