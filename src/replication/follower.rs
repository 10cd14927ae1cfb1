//! The follower side of one partition (Kafka's `AbstractFetcherThread` for one partition):
//! after every leader change it validates its log against the leader's with
//! OffsetForLeaderEpoch, truncates what the leader's history does not contain (KIP-101,
//! KIP-279), then fetches from its log end and follows the leader's HW (the shard reports
//! the durable end beside each fetch offset: `durable_tag`).
//!
//! Invariants: the follower fetches only from its log end after validation, so every LEO it
//! reports lies on the leader's history; its HW never decreases except by truncation, and
//! never exceeds its LEO. Responses to requests it no longer waits for (reordered,
//! duplicated, from a superseded request) are ignored.
use super::epoch_cache::{EpochCache, UNDEFINED_EPOCH, UNDEFINED_OFFSET};
use super::{FollowerCommand, ReplicaError};
use crate::protocol::ids::{LeaderEpoch, NodeId, Offset};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the leader's end offset of `epoch`.
    Validating { epoch: LeaderEpoch },
    /// Waiting for the response to a Fetch from `offset`.
    Fetching { offset: Offset },
    /// Waiting for the leader's log start and end.
    ListingOffsets,
    /// The leader or epoch is stale; a new metadata image replaces this state.
    Stopped,
}

#[derive(Debug, Clone)]
pub struct FollowerState {
    leader: NodeId,
    leader_epoch: LeaderEpoch,
    phase: Phase,
    hw: Offset,
}

impl FollowerState {
    /// Starts following `leader` in `leader_epoch`, with the local log ending at `local_leo`,
    /// the local HW `local_hw` and the latest epoch in the local epoch cache. Returns the
    /// first request: with any epoch known, validate it first (KIP-279 validates after every
    /// leader change); with none, there is nothing to validate, so fetch.
    pub fn new(
        leader: NodeId,
        leader_epoch: LeaderEpoch,
        local_leo: Offset,
        local_hw: Offset,
        latest_local_epoch: Option<LeaderEpoch>,
    ) -> (Self, FollowerCommand) {
        let hw = local_hw.min(local_leo);
        let (phase, command) = match latest_local_epoch {
            Some(epoch) if epoch >= LeaderEpoch(0) => (
                Phase::Validating { epoch },
                FollowerCommand::SendOffsetForLeaderEpoch { epoch },
            ),
            _ => (
                Phase::Fetching { offset: local_leo },
                FollowerCommand::Fetch { offset: local_leo },
            ),
        };
        let state = Self {
            leader,
            leader_epoch,
            phase,
            hw,
        };
        (state, command)
    }

    pub fn leader(&self) -> NodeId {
        self.leader
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    pub fn high_watermark(&self) -> Offset {
        self.hw
    }

    /// The offset of the Fetch this follower waits on. The shard appends the records of a
    /// Fetch response only when this is `Some` of that request's offset (and it equals the
    /// local LEO): a reordered or duplicated response must not be appended.
    pub fn expected_fetch_offset(&self) -> Option<Offset> {
        match self.phase {
            Phase::Fetching { offset } => Some(offset),
            _ => None,
        }
    }

    /// The leader answered OffsetForLeaderEpoch for `requested_epoch`: its largest epoch at
    /// most that one is `leader_epoch_found`, ending at `end_offset` (UNDEFINED when it has
    /// none). Truncate to the divergence point, asking again about an earlier epoch while
    /// the local log does not know the epoch the leader named.
    pub fn handle_epoch_end(
        &mut self,
        requested_epoch: LeaderEpoch,
        leader_epoch_found: LeaderEpoch,
        end_offset: Offset,
        local_leo: Offset,
        local_epoch_cache: &EpochCache,
    ) -> Vec<FollowerCommand> {
        if self.phase
            != (Phase::Validating {
                epoch: requested_epoch,
            })
        {
            return Vec::new();
        }
        if leader_epoch_found == UNDEFINED_EPOCH || end_offset == UNDEFINED_OFFSET {
            // The leader knows no epoch at or before ours: keep only what we know to be
            // committed, as Kafka truncates to the HW here.
            return self.truncate_then_fetch(self.hw.min(local_leo), local_leo);
        }
        let (follower_epoch, follower_end) =
            local_epoch_cache.end_offset_for(leader_epoch_found, local_leo);
        if follower_epoch == UNDEFINED_EPOCH {
            // No epochs tracked locally: the leader's end of the epoch is the bound.
            return self.truncate_then_fetch(end_offset.min(local_leo), local_leo);
        }
        if follower_epoch != leader_epoch_found {
            // The leader names an epoch we never saw. Our largest earlier epoch ends at
            // `follower_end`; everything past it is not ours to keep, and how much of that
            // epoch the leader shares needs another question.
            let to = follower_end.min(local_leo);
            let mut commands = self.truncate(to, local_leo);
            self.phase = Phase::Validating {
                epoch: follower_epoch,
            };
            commands.push(FollowerCommand::SendOffsetForLeaderEpoch {
                epoch: follower_epoch,
            });
            return commands;
        }
        let to = follower_end.min(end_offset).min(local_leo);
        self.truncate_then_fetch(to, local_leo)
    }

    /// The Fetch from `fetch_offset` was answered with data, now appended (not necessarily
    /// fsynced yet) so the local log ends at `local_leo`; the leader's HW was `leader_hw`.
    /// Fetch onward.
    pub fn handle_fetch_response(
        &mut self,
        fetch_offset: Offset,
        local_leo: Offset,
        leader_hw: Offset,
    ) -> Vec<FollowerCommand> {
        if self.phase
            != (Phase::Fetching {
                offset: fetch_offset,
            })
        {
            return Vec::new();
        }
        assert!(local_leo >= fetch_offset, "a fetch response shrank the log");
        let mut commands = Vec::new();
        let new_hw = leader_hw.min(local_leo);
        if new_hw > self.hw {
            self.hw = new_hw;
            commands.push(FollowerCommand::AdvanceHw(new_hw));
        }
        self.phase = Phase::Fetching { offset: local_leo };
        commands.push(FollowerCommand::Fetch { offset: local_leo });
        commands
    }

    /// The Fetch from `fetch_offset` failed with `error`.
    pub fn handle_fetch_error(
        &mut self,
        fetch_offset: Offset,
        error: ReplicaError,
    ) -> Vec<FollowerCommand> {
        if self.phase
            != (Phase::Fetching {
                offset: fetch_offset,
            })
        {
            return Vec::new();
        }
        match error {
            ReplicaError::NotLeaderOrFollower | ReplicaError::FencedLeaderEpoch => {
                self.phase = Phase::Stopped;
                vec![FollowerCommand::AwaitMetadata]
            }
            // The leader has not seen our epoch yet: try again (the shard backs off).
            ReplicaError::UnknownLeaderEpoch => vec![FollowerCommand::Fetch {
                offset: fetch_offset,
            }],
            ReplicaError::OffsetOutOfRange => {
                self.phase = Phase::ListingOffsets;
                vec![FollowerCommand::SendListOffsets]
            }
        }
    }

    /// OffsetForLeaderEpoch failed with `error`.
    pub fn handle_epoch_error(
        &mut self,
        requested_epoch: LeaderEpoch,
        error: ReplicaError,
    ) -> Vec<FollowerCommand> {
        if self.phase
            != (Phase::Validating {
                epoch: requested_epoch,
            })
        {
            return Vec::new();
        }
        match error {
            ReplicaError::UnknownLeaderEpoch | ReplicaError::OffsetOutOfRange => {
                vec![FollowerCommand::SendOffsetForLeaderEpoch {
                    epoch: requested_epoch,
                }]
            }
            ReplicaError::NotLeaderOrFollower | ReplicaError::FencedLeaderEpoch => {
                self.phase = Phase::Stopped;
                vec![FollowerCommand::AwaitMetadata]
            }
        }
    }

    /// The leader's log spans `[log_start, log_end)` (after an OffsetOutOfRange).
    pub fn handle_log_bounds(
        &mut self,
        log_start: Offset,
        log_end: Offset,
        local_leo: Offset,
    ) -> Vec<FollowerCommand> {
        if self.phase != Phase::ListingOffsets {
            return Vec::new();
        }
        if local_leo < log_start {
            // Nothing we hold is adjacent to the leader's log: start over at its start.
            self.hw = self.hw.min(log_start);
            self.phase = Phase::Fetching { offset: log_start };
            return vec![
                FollowerCommand::TruncateFully { start: log_start },
                FollowerCommand::Fetch { offset: log_start },
            ];
        }
        // Past the leader's end (Kafka truncates to the leader's LEO), or within range again.
        self.truncate_then_fetch(local_leo.min(log_end), local_leo)
    }

    /// The request in flight timed out or its connection dropped: send it again.
    pub fn handle_timeout(&mut self) -> Vec<FollowerCommand> {
        match self.phase {
            Phase::Validating { epoch } => {
                vec![FollowerCommand::SendOffsetForLeaderEpoch { epoch }]
            }
            Phase::Fetching { offset } => vec![FollowerCommand::Fetch { offset }],
            Phase::ListingOffsets => vec![FollowerCommand::SendListOffsets],
            Phase::Stopped => Vec::new(),
        }
    }

    fn truncate(&mut self, to: Offset, local_leo: Offset) -> Vec<FollowerCommand> {
        if to >= local_leo {
            return Vec::new();
        }
        self.hw = self.hw.min(to);
        vec![FollowerCommand::Truncate { to }]
    }

    fn truncate_then_fetch(&mut self, to: Offset, local_leo: Offset) -> Vec<FollowerCommand> {
        let mut commands = self.truncate(to, local_leo);
        let offset = to.min(local_leo);
        self.phase = Phase::Fetching { offset };
        commands.push(FollowerCommand::Fetch { offset });
        commands
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(pairs: &[(i32, i64)]) -> EpochCache {
        let mut c = EpochCache::default();
        for &(e, o) in pairs {
            c.assign(LeaderEpoch(e), Offset(o));
        }
        c
    }

    /// KIP-101's divergence: A led epoch 1 and wrote offsets 0..2, B copied only offset 0;
    /// both restart, B leads epoch 2 and writes offset 1. A asks where epoch 1 ends on B
    /// (offset 1) and truncates its own offset 1 away before fetching B's.
    #[test]
    fn kip101_truncates_to_divergence() {
        let a_cache = cache(&[(1, 0)]);
        let b_cache = cache(&[(1, 0), (2, 1)]);
        let (mut a, first) = FollowerState::new(
            NodeId(2),
            LeaderEpoch(2),
            Offset(2),
            Offset(0),
            Some(LeaderEpoch(1)),
        );
        assert_eq!(
            first,
            FollowerCommand::SendOffsetForLeaderEpoch {
                epoch: LeaderEpoch(1)
            }
        );
        let (found, end) = b_cache.end_offset_for(LeaderEpoch(1), Offset(2));
        assert_eq!((found, end), (LeaderEpoch(1), Offset(1)));
        let cmds = a.handle_epoch_end(LeaderEpoch(1), found, end, Offset(2), &a_cache);
        assert_eq!(
            cmds,
            vec![
                FollowerCommand::Truncate { to: Offset(1) },
                FollowerCommand::Fetch { offset: Offset(1) }
            ]
        );
        // The same answer again (a duplicate) changes nothing.
        assert_eq!(
            a.handle_epoch_end(LeaderEpoch(1), found, end, Offset(1), &a_cache),
            vec![]
        );
    }

    /// When the leader names an epoch the follower never had, the follower truncates to the
    /// end of its largest earlier epoch and asks about that one, until they agree.
    #[test]
    fn multi_round_validation() {
        let leader = cache(&[(1, 0), (2, 4), (4, 6)]);
        let mut local = cache(&[(1, 0), (3, 5)]);
        let (mut f, first) = FollowerState::new(
            NodeId(9),
            LeaderEpoch(4),
            Offset(8),
            Offset(3),
            Some(LeaderEpoch(3)),
        );
        assert_eq!(
            first,
            FollowerCommand::SendOffsetForLeaderEpoch {
                epoch: LeaderEpoch(3)
            }
        );
        let (found, end) = leader.end_offset_for(LeaderEpoch(3), Offset(10));
        assert_eq!((found, end), (LeaderEpoch(2), Offset(6)));
        let cmds = f.handle_epoch_end(LeaderEpoch(3), found, end, Offset(8), &local);
        assert_eq!(
            cmds,
            vec![
                FollowerCommand::Truncate { to: Offset(5) },
                FollowerCommand::SendOffsetForLeaderEpoch {
                    epoch: LeaderEpoch(1)
                }
            ]
        );
        local.truncate_from_end(Offset(5));
        let (found, end) = leader.end_offset_for(LeaderEpoch(1), Offset(10));
        let cmds = f.handle_epoch_end(LeaderEpoch(1), found, end, Offset(5), &local);
        assert_eq!(
            cmds,
            vec![
                FollowerCommand::Truncate { to: Offset(4) },
                FollowerCommand::Fetch { offset: Offset(4) }
            ]
        );
        assert_eq!(f.high_watermark(), Offset(3));
    }

    /// Answers that name no common epoch: an UNDEFINED leader answer keeps only what is
    /// known committed (the local HW); a follower tracking no epochs trusts the leader's end.
    #[test]
    fn undefined_epochs() {
        let local = cache(&[(2, 0)]);
        let (mut f, _) = FollowerState::new(
            NodeId(1),
            LeaderEpoch(3),
            Offset(10),
            Offset(4),
            Some(LeaderEpoch(2)),
        );
        let cmds = f.handle_epoch_end(
            LeaderEpoch(2),
            UNDEFINED_EPOCH,
            UNDEFINED_OFFSET,
            Offset(10),
            &local,
        );
        assert_eq!(
            cmds,
            vec![
                FollowerCommand::Truncate { to: Offset(4) },
                FollowerCommand::Fetch { offset: Offset(4) }
            ]
        );
        let (mut f, _) = FollowerState::new(
            NodeId(1),
            LeaderEpoch(3),
            Offset(10),
            Offset(4),
            Some(LeaderEpoch(2)),
        );
        let cmds = f.handle_epoch_end(
            LeaderEpoch(2),
            LeaderEpoch(2),
            Offset(7),
            Offset(10),
            &EpochCache::default(),
        );
        assert_eq!(
            cmds,
            vec![
                FollowerCommand::Truncate { to: Offset(7) },
                FollowerCommand::Fetch { offset: Offset(7) }
            ]
        );
        // A leader whose epoch lags ours is retried, not obeyed.
        assert_eq!(
            f.handle_fetch_error(Offset(7), ReplicaError::UnknownLeaderEpoch),
            vec![FollowerCommand::Fetch { offset: Offset(7) }]
        );
    }

    /// Fetch responses move the HW to min(leader HW, local LEO); stale ones are ignored, and
    /// fencing stops the follower.
    #[test]
    fn fetch_flow() {
        let (mut f, first) =
            FollowerState::new(NodeId(1), LeaderEpoch(3), Offset(0), Offset(0), None);
        assert_eq!(first, FollowerCommand::Fetch { offset: Offset(0) });
        let cmds = f.handle_fetch_response(Offset(0), Offset(5), Offset(9));
        assert_eq!(
            cmds,
            vec![
                FollowerCommand::AdvanceHw(Offset(5)),
                FollowerCommand::Fetch { offset: Offset(5) }
            ]
        );
        assert_eq!(
            f.handle_fetch_response(Offset(0), Offset(5), Offset(9)),
            vec![],
            "duplicate"
        );
        assert_eq!(
            f.handle_fetch_error(Offset(5), ReplicaError::OffsetOutOfRange),
            vec![FollowerCommand::SendListOffsets]
        );
        assert_eq!(
            f.handle_log_bounds(Offset(7), Offset(12), Offset(5)),
            vec![
                FollowerCommand::TruncateFully { start: Offset(7) },
                FollowerCommand::Fetch { offset: Offset(7) }
            ]
        );
        assert_eq!(
            f.handle_fetch_error(Offset(7), ReplicaError::FencedLeaderEpoch),
            vec![FollowerCommand::AwaitMetadata]
        );
        assert_eq!(f.handle_timeout(), vec![]);
    }
}
