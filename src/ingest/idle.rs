//! When an ingestion connection (syslog TCP, RELP, HTTP) has been silent too long, sans-IO:
//! the listener tells [`ReadWatch`] what it read and when, and asks it how long the next
//! read may take.
//!
//! Two rules, Kafka's settings with Kafka's meaning:
//! - `connections_max_idle_ms`: a connection with nothing read for this long, no partial
//!   frame pending and no answer owed to the peer (a RELP message not yet durable) is idle
//!   and closed. A sender that keeps its connection open and quiet is held this long.
//! - `request_timeout_ms`: a partial frame (a syslog frame, a RELP frame, an HTTP request's
//!   head or body) must be completed within this long of the moment it started. A sender
//!   that trickles a byte now and then is therefore not idle — it is read — but its frame
//!   cannot stay pending, holding its buffer, forever.
//!
//! Time is an argument (the listener reads its monotonic clock), so the rules are tested
//! without sleeping.
use thiserror::Error;

/// Why a connection was closed for silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Silence {
    #[error("idle for connections_max_idle_ms ({idle_ms} ms)")]
    Idle { idle_ms: u64 },
    #[error("frame incomplete after request_timeout_ms ({timeout_ms} ms): {pending_bytes} bytes pending")]
    PartialFrame {
        timeout_ms: u64,
        pending_bytes: usize,
    },
}

/// The read deadlines of one connection.
#[derive(Debug, Clone)]
pub struct ReadWatch {
    idle_ms: u64,
    partial_ms: u64,
    last_activity_ms: u64,
    /// When the frame now pending (incomplete) started; `None` with nothing pending.
    partial_since_ms: Option<u64>,
    pending_bytes: usize,
}

impl ReadWatch {
    /// A connection accepted at `now_ms`: it has `idle_ms` to send something.
    pub fn new(now_ms: u64, idle_ms: u64, partial_ms: u64) -> Self {
        Self {
            idle_ms,
            partial_ms,
            last_activity_ms: now_ms,
            partial_since_ms: None,
            pending_bytes: 0,
        }
    }

    /// Bytes were read at `now_ms` and decoded: `frames_done` whether at least one frame
    /// completed, `pending_bytes` what is left of an incomplete one. A frame that completes
    /// restarts the partial-frame clock for the next.
    pub fn handle_read(&mut self, now_ms: u64, frames_done: bool, pending_bytes: usize) {
        self.last_activity_ms = now_ms;
        self.pending_bytes = pending_bytes;
        self.partial_since_ms = match (pending_bytes, self.partial_since_ms) {
            (0, _) => None,
            (_, Some(since)) if !frames_done => Some(since),
            _ => Some(now_ms),
        };
    }

    /// The connection answered the peer at `now_ms` (RELP): the peer's silence until now
    /// was waiting, so the idle clock starts again.
    pub fn handle_answered(&mut self, now_ms: u64) {
        self.last_activity_ms = self.last_activity_ms.max(now_ms);
    }

    /// How long the next read may wait, from `now_ms`, or why the connection must close.
    /// `answers_owed`: the peer is waiting for us (RELP answers pending), so its silence is
    /// not idleness. `None`: no deadline.
    pub fn poll_wait_ms(&self, now_ms: u64, answers_owed: bool) -> Result<Option<u64>, Silence> {
        if let Some(since) = self.partial_since_ms {
            let due = since.saturating_add(self.partial_ms);
            return if now_ms >= due {
                Err(Silence::PartialFrame {
                    timeout_ms: self.partial_ms,
                    pending_bytes: self.pending_bytes,
                })
            } else {
                Ok(Some(due - now_ms))
            };
        }
        if answers_owed {
            return Ok(None);
        }
        let due = self.last_activity_ms.saturating_add(self.idle_ms);
        if now_ms >= due {
            Err(Silence::Idle {
                idle_ms: self.idle_ms,
            })
        } else {
            Ok(Some(due - now_ms))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn a_quiet_connection_is_idle_after_idle_ms() {
        // Proves the idle clock starts at accept, restarts at every read, and fires only
        // after idle_ms with nothing read.
        let mut w = ReadWatch::new(1_000, 500, 100);
        assert_eq!(w.poll_wait_ms(1_200, false), Ok(Some(300)));
        w.handle_read(1_400, true, 0);
        assert_eq!(w.poll_wait_ms(1_800, false), Ok(Some(100)));
        assert_eq!(
            w.poll_wait_ms(1_900, false),
            Err(Silence::Idle { idle_ms: 500 })
        );
    }

    #[test]
    fn answers_owed_keep_a_quiet_connection_open() {
        // Proves a peer waiting for answers (RELP messages not yet durable) is not idle, and
        // its idle time counts from the last answer.
        let mut w = ReadWatch::new(0, 500, 100);
        assert_eq!(w.poll_wait_ms(10_000, true), Ok(None));
        assert!(w.poll_wait_ms(10_000, false).is_err());
        // The last answer restarts the idle clock.
        w.handle_answered(10_000);
        assert_eq!(w.poll_wait_ms(10_100, false), Ok(Some(400)));
    }

    #[test]
    fn a_trickled_frame_times_out_though_bytes_keep_coming() {
        // Proves a partial frame has partial_ms from its first byte, however often more
        // bytes come, and even while answers are owed.
        let mut w = ReadWatch::new(0, 10_000, 100);
        w.handle_read(10, false, 3);
        w.handle_read(60, false, 4);
        w.handle_read(100, false, 5);
        assert_eq!(w.poll_wait_ms(100, true), Ok(Some(10)));
        assert_eq!(
            w.poll_wait_ms(110, true),
            Err(Silence::PartialFrame {
                timeout_ms: 100,
                pending_bytes: 5
            })
        );
    }

    #[test]
    fn a_completed_frame_restarts_the_partial_clock() {
        // Proves a steady stream, where every read completes frames and leaves the start of
        // the next, never trips the partial-frame timeout; and a finished frame clears it.
        let mut w = ReadWatch::new(0, 10_000, 100);
        for t in (0..1_000).step_by(50) {
            w.handle_read(t, true, 7);
            assert!(w.poll_wait_ms(t + 99, false).is_ok());
        }
        w.handle_read(1_000, true, 0);
        assert_eq!(w.poll_wait_ms(1_200, false), Ok(Some(9_800)));
    }
}
