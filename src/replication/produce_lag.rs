//! How far acks=0 and acks=1 produce may run ahead of the in-sync followers of a partition
//! (`replica_produce_lag_max_bytes`): the leader's decision, sans IO.
//!
//! Why a bound: an acks=1 leader answers once it has appended locally, so a closed-loop
//! producer is paced only by the leader's own disk. Its followers must fetch, write and fsync
//! the same bytes; where they share the leader's disk or are slower, they fall further
//! behind for as long as the load lasts. Nothing else limits that gap: after
//! `replica_lag_time_max_ms` the ISR shrinks to the leader, and a leader failure before then
//! loses everything acks=1 acknowledged beyond the followers. Redpanda's acks=1 writes go
//! through the same Raft replicate path as acks=all and are held there when that path's
//! memory is used up; this is the Kafka-shaped equivalent: the answer to an acks=0/1 append
//! waits while the client bytes above the high watermark exceed the bound.
//!
//! Measured against the high watermark, not the followers' fetch offsets: the HW is what
//! every ISR member holds fsynced (`leader` module), so bytes above it are exactly what a
//! leader failure could lose, and it is what `wait_for_hw_beyond` already wakes acks=all
//! waiters on. A follower that leaves the ISR no longer holds the HW back, so the wait ends
//! with it.
//!
//! Bytes are counted from the leader's client appends (a running count the shard keeps per
//! partition), not read from the log: `ProduceLag` keeps a few marks (log end, bytes
//! appended by then), at most `marks_max`, one per `granule` bytes, and finds the bytes above
//! the HW from the newest mark at or below it. The count is therefore coarse by one granule
//! (a small fraction of the bound); appends that carry no client bytes (transaction markers)
//! are counted with the next client append.
use std::collections::VecDeque;

use crate::protocol::ids::Offset;

/// A point of the leader's log: where it ended after a client append, and how many client
/// bytes had been appended in all by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    end: Offset,
    bytes: u64,
}

/// One led partition's client bytes above its high watermark.
#[derive(Debug, Clone)]
pub struct ProduceLag {
    max_bytes: u64,
    granule: u64,
    marks_max: usize,
    /// Oldest first; the first is the newest at or below the HW once the HW has passed one.
    marks: VecDeque<Mark>,
}

impl ProduceLag {
    /// `max_bytes` 0 turns the bound off. `marks_max` (at least 2) bounds the memory per
    /// partition; the granule is chosen so that a lag of twice the bound still fits.
    pub fn new(max_bytes: u64, marks_max: usize) -> Self {
        let marks_max = marks_max.max(2);
        let granule = (max_bytes.saturating_mul(2) / marks_max as u64).max(1);
        Self {
            max_bytes,
            granule,
            marks_max,
            marks: VecDeque::new(),
        }
    }

    /// A client's acks=0/1 append: the leader's log now ends at `end`, `bytes` client bytes
    /// have been appended in all (a running count), the high watermark is `hw`, and
    /// `followers_in_isr` says whether another replica is in the ISR. Returns the HW this
    /// produce's answer must wait for, or `None` if the lag is within the bound (or nothing
    /// to wait for: no follower in the ISR, the bound off).
    pub fn on_append(
        &mut self,
        end: Offset,
        bytes: u64,
        hw: Offset,
        followers_in_isr: bool,
    ) -> Option<Offset> {
        if self.max_bytes == 0 || !followers_in_isr {
            // Alone in the ISR the HW follows the log end: no lag to track. Starting over
            // later (a follower joined) only undercounts until the HW passes a new mark.
            self.marks.clear();
            return None;
        }
        self.record(end, bytes);
        self.trim(hw);
        let base = self.marks.front().map_or(bytes, |m| m.bytes);
        let lag = bytes.saturating_sub(base);
        if hw >= end || lag <= self.max_bytes {
            return None;
        }
        // The oldest mark that leaves no more than the bound above it; it is past the HW,
        // since the first mark (at or below the HW) leaves more.
        let target = self
            .marks
            .iter()
            .find(|m| bytes.saturating_sub(m.bytes) <= self.max_bytes)
            .map_or(end, |m| m.end);
        Some(target.max(hw.next()).min(end))
    }

    fn record(&mut self, end: Offset, bytes: u64) {
        let full = self.marks.len() >= self.marks_max;
        match self.marks.back_mut() {
            // A log that went back (a new leader epoch truncates; not expected while this
            // state lives) or a count that did: start over rather than measure nonsense.
            Some(last) if end < last.end || bytes < last.bytes => {
                self.marks.clear();
                self.marks.push_back(Mark { end, bytes });
            }
            Some(last) if bytes.saturating_sub(last.bytes) < self.granule => {}
            // Full: the newest mark moves forward instead, so the bound on memory holds
            // and the lag measured from the oldest marks stays exact.
            Some(last) if full => *last = Mark { end, bytes },
            _ => self.marks.push_back(Mark { end, bytes }),
        }
    }

    /// Drops the marks the HW has passed, but the newest of them: it is the base the bytes
    /// above the HW are counted from.
    fn trim(&mut self, hw: Offset) {
        while self.marks.get(1).is_some_and(|m| m.end <= hw) {
            self.marks.pop_front();
        }
    }

    /// Marks kept (tests).
    #[cfg(test)]
    fn marks_len(&self) -> usize {
        self.marks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    /// Appends `n` batches of `size` bytes, one record each, to a log ending at `*end` after
    /// `*bytes` bytes, with the HW at `hw`; returns the last verdict.
    fn append(
        lag: &mut ProduceLag,
        end: &mut i64,
        bytes: &mut u64,
        n: usize,
        size: u64,
        hw: i64,
    ) -> Option<Offset> {
        let mut verdict = None;
        for _ in 0..n {
            *end += 1;
            *bytes += size;
            verdict = lag.on_append(Offset(*end), *bytes, Offset(hw), true);
        }
        verdict
    }

    #[test]
    fn within_the_bound_nothing_waits() {
        let mut lag = ProduceLag::new(100 * KIB, 64);
        let (mut end, mut bytes) = (0, 0);
        // 99 KiB above a HW that stays at 0.
        assert_eq!(append(&mut lag, &mut end, &mut bytes, 99, KIB, 0), None);
    }

    #[test]
    fn past_the_bound_the_produce_waits_for_the_hw_to_come_within_it() {
        let mut lag = ProduceLag::new(100 * KIB, 64);
        let (mut end, mut bytes) = (0, 0);
        assert_eq!(append(&mut lag, &mut end, &mut bytes, 100, KIB, 0), None);
        let target = append(&mut lag, &mut end, &mut bytes, 20, KIB, 0).expect("over the bound");
        // 120 records of 1 KiB above HW 0: the HW must pass about 20 of them (a granule of
        // slack: 100 KiB * 2 / 64 = 3.1 KiB, so at most 4 records more).
        assert!(
            (Offset(20)..=Offset(24)).contains(&target),
            "target {target}"
        );
        // Once the HW is there, the next append is within the bound again.
        let again = lag.on_append(Offset(end + 1), bytes + KIB, target, true);
        assert!(
            again.is_none_or(|t| t.get() <= target.get() + 4),
            "{again:?}"
        );
    }

    #[test]
    fn no_follower_in_the_isr_never_waits_and_forgets() {
        let mut lag = ProduceLag::new(10 * KIB, 64);
        for i in 1..1000u64 {
            assert_eq!(
                lag.on_append(Offset(i as i64), i * KIB, Offset::ZERO, false),
                None
            );
        }
        assert_eq!(lag.marks_len(), 0);
    }

    #[test]
    fn zero_turns_the_bound_off() {
        let mut lag = ProduceLag::new(0, 64);
        let (mut end, mut bytes) = (0, 0);
        assert_eq!(append(&mut lag, &mut end, &mut bytes, 10_000, KIB, 0), None);
        assert_eq!(lag.marks_len(), 0);
    }

    #[test]
    fn a_caught_up_hw_never_waits() {
        let mut lag = ProduceLag::new(4 * KIB, 16);
        let mut bytes = 0;
        for end in 1..1000i64 {
            bytes += 100 * KIB;
            assert_eq!(lag.on_append(Offset(end), bytes, Offset(end), true), None);
        }
        assert!(lag.marks_len() <= 2, "{}", lag.marks_len());
    }

    #[test]
    fn marks_stay_bounded_when_the_hw_is_stuck() {
        let mut lag = ProduceLag::new(64 * KIB, 16);
        let (mut end, mut bytes) = (0, 0);
        // A stuck follower: the HW never moves while the producers go on (they are answered
        // after the time bound, which is the shard's business).
        let target = append(&mut lag, &mut end, &mut bytes, 100_000, KIB, 0);
        assert!(lag.marks_len() <= 16, "{}", lag.marks_len());
        // Still waiting, for a point past the HW, never past the log end.
        let target = target.expect("over the bound");
        assert!(target > Offset::ZERO && target <= Offset(end), "{target}");
    }

    #[test]
    fn the_target_follows_the_bytes_not_the_record_count() {
        // Large and small records mixed: 10 batches of 10 KiB, then 1000 of 100 bytes.
        let mut lag = ProduceLag::new(50 * KIB, 64);
        let (mut end, mut bytes) = (0, 0);
        append(&mut lag, &mut end, &mut bytes, 10, 10 * KIB, 0);
        let target =
            append(&mut lag, &mut end, &mut bytes, 1000, 100, 0).expect("~198 KB > 50 KiB");
        // The last 50 KiB are ~512 small records: the HW must reach about 1010 - 512 = 498.
        assert!(
            (Offset(470)..=Offset(520)).contains(&target),
            "target {target}"
        );
    }

    #[test]
    fn a_log_that_went_back_starts_over() {
        let mut lag = ProduceLag::new(10 * KIB, 16);
        let (mut end, mut bytes) = (0, 0);
        assert!(append(&mut lag, &mut end, &mut bytes, 100, KIB, 0).is_some());
        // A truncated log (end 5): no nonsense target below the HW or past the end.
        assert_eq!(lag.on_append(Offset(5), bytes + KIB, Offset(3), true), None);
    }
}
