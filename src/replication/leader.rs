//! The leader side of one partition (Kafka's `Partition` leader paths and `Replica` fetch
//! state): it tracks each follower's log end offset (LEO), keeps the in-sync replica set and
//! advances the high watermark (HW).
//!
//! Invariants, asserted where they are established:
//! - HW never decreases, and it never exceeds the LEO of any member of the maximal ISR (so
//!   every replica the controller may elect holds every record below it).
//! - At most one AlterPartition is in flight. While it is, the HW is computed over the
//!   *maximal* ISR — the committed ISR together with the proposal — so neither a shrink the
//!   controller has not accepted nor an expansion it may have accepted can let the HW run
//!   ahead of a replica that could become leader (KIP-497's PendingExpandIsr /
//!   PendingShrinkIsr).
//! - A follower joins the ISR only when its LEO reached both the HW and the start offset of
//!   the current leader epoch: a new leader's HW may lag the previous leader's, and the
//!   epoch start is where every record committed before this epoch is known to be covered.
//!
//! Durability: a follower reports two ends in each fetch: its log end (the fetch offset) and
//! its fsynced end (`handle_follower_fetch`'s `durable_offset`; the same offset for a
//! follower that fetches only what is synced). The HW and ISR joins count only the durable
//! end, so the HW never counts a follower's bytes that a crash could take back; lag (ISR
//! shrink) is judged by the fetch offset, so a follower that fetches promptly while its
//! fsyncs queue behind the disk is not dropped from the ISR for it. The shard reports the leader's own LEO with
//! `handle_local_leo` as soon as it appends (and again once the append is durable): with
//! other members in the ISR a record below the HW is then fsynced on each of them, and a
//! leader that crashes before its own fsync is replaced by one of them. acks=all also waits
//! for the leader's fsync. With the leader alone in the ISR (min.insync.replicas=1), a
//! consumer may read a record the leader has not fsynced yet, as in Kafka, which never does.
//!
//! The proposal in flight lives only in memory. A broker that restarts must therefore not
//! lead from the metadata it had before the crash: it catches up with the controller first
//! (as KRaft brokers replay the metadata log), whose leader epoch has moved on by then. The
//! simulation found the interleaving where skipping that step loses a committed record.
use super::{LeaderCommand, ReplicaError};
use crate::protocol::ids::{LeaderEpoch, NodeId, Offset};

/// What the leader knows about one follower (Kafka's `ReplicaState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FollowerProgress {
    replica: NodeId,
    /// The follower's LEO as its last fetch reported (its fetch offset); -1 until it
    /// fetches in this epoch. Judges its lag.
    leo: Offset,
    /// The follower's durable (fsynced) end as its last fetch reported, at most `leo`; -1
    /// until it fetches in this epoch. Counts for the HW and for joining the ISR.
    durable: Offset,
    /// The last time the follower was known to be caught up to the leader's LEO.
    last_caught_up_ms: u64,
    /// The leader's LEO when the follower last fetched, and when that was: a fetch that
    /// reaches what the leader had at the previous fetch proves the follower was caught up
    /// at the previous fetch's time (Kafka's `Replica.updateFetchState`).
    last_fetch_leader_leo: Offset,
    last_fetch_ms: u64,
}

impl FollowerProgress {
    /// A follower that has not fetched in this epoch yet; `last_caught_up_ms` is when it
    /// last counts as caught up (now for an ISR member, 0 for one out of sync).
    fn new(replica: NodeId, last_caught_up_ms: u64) -> Self {
        Self {
            replica,
            leo: Offset::UNDEFINED,
            durable: Offset::UNDEFINED,
            last_caught_up_ms,
            last_fetch_leader_leo: Offset::UNDEFINED,
            last_fetch_ms: 0,
        }
    }
}

#[derive(Debug, Clone)]
pub struct LeaderState {
    local: NodeId,
    leader_epoch: LeaderEpoch,
    partition_epoch: i32,
    leader_epoch_start_offset: Offset,
    replicas: Vec<NodeId>,
    /// The ISR the controller committed; always contains `local`.
    isr: Vec<NodeId>,
    /// The ISR proposed in the AlterPartition in flight, if any.
    pending_isr: Option<Vec<NodeId>>,
    followers: Vec<FollowerProgress>,
    /// Replicas the metadata image says may not join the ISR now (fenced or unregistered
    /// brokers, KIP-841): the leader does not propose them, as the controller would refuse.
    ineligible: Vec<NodeId>,
    local_leo: Offset,
    hw: Offset,
    lag_time_max_ms: u64,
}

impl LeaderState {
    /// Becomes leader of a partition. Before calling this the shard assigns
    /// `leader_epoch` to start at the local LEO in the epoch cache, and passes that LEO as
    /// `leader_epoch_start_offset` (Kafka's `maybeAssignEpochStartOffset`). `hw` is the local
    /// HW the broker had (as a follower, or from its checkpoint). Followers in the ISR count
    /// as caught up now, as Kafka resets them; their LEO is unknown until they fetch, so the
    /// HW waits for them.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        local: NodeId,
        leader_epoch: LeaderEpoch,
        partition_epoch: i32,
        replicas: Vec<NodeId>,
        isr: Vec<NodeId>,
        local_leo: Offset,
        hw: Offset,
        leader_epoch_start_offset: Offset,
        now_ms: u64,
        lag_time_max_ms: u64,
    ) -> Self {
        assert!(hw <= local_leo, "HW {hw} past the leader's LEO {local_leo}");
        let followers = replicas
            .iter()
            .filter(|&&r| r != local)
            .map(|&replica| {
                FollowerProgress::new(replica, if isr.contains(&replica) { now_ms } else { 0 })
            })
            .collect();
        let mut isr = isr;
        if !isr.contains(&local) {
            // The controller only elects from the ISR; a leader outside it would be a bug
            // upstream, and the HW must still count the leader's own log.
            isr.push(local);
        }
        Self {
            local,
            leader_epoch,
            partition_epoch,
            leader_epoch_start_offset,
            replicas,
            isr,
            pending_isr: None,
            followers,
            ineligible: Vec::new(),
            local_leo,
            hw,
            lag_time_max_ms,
        }
    }

    pub fn high_watermark(&self) -> Offset {
        self.hw
    }

    /// All assigned replicas (AR), the leader included.
    pub fn replicas(&self) -> &[NodeId] {
        &self.replicas
    }

    /// The ISR the controller committed.
    pub fn isr(&self) -> &[NodeId] {
        &self.isr
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn local_leo(&self) -> Offset {
        self.local_leo
    }

    /// True while an AlterPartition is in flight.
    pub fn alter_pending(&self) -> bool {
        self.pending_isr.is_some()
    }

    /// The follower's LEO as the leader knows it (-1 before its first fetch in this epoch);
    /// `None` for a replica that is not a follower of this partition.
    pub fn follower_leo(&self, replica: NodeId) -> Option<Offset> {
        self.followers
            .iter()
            .find(|f| f.replica == replica)
            .map(|f| f.leo)
    }

    /// The follower's durable end as the leader knows it (-1 before its first fetch in this
    /// epoch); `None` for a replica that is not a follower of this partition.
    pub fn follower_durable(&self, replica: NodeId) -> Option<Offset> {
        self.followers
            .iter()
            .find(|f| f.replica == replica)
            .map(|f| f.durable)
    }

    /// Whether an `acks=all` produce may be appended now: the committed ISR has at least
    /// `min_isr` members (else NOT_ENOUGH_REPLICAS). Check it again when the HW passes the
    /// batch, before answering success.
    pub fn acks_all_allowed(&self, min_isr: usize) -> bool {
        self.isr.len() >= min_isr
    }

    /// The leader's own log end advanced (an append, durable or not yet: see the module
    /// documentation).
    pub fn handle_local_leo(&mut self, leo: Offset, _now_ms: u64) -> Vec<LeaderCommand> {
        assert!(
            leo >= self.local_leo,
            "leader LEO went back from {} to {leo}",
            self.local_leo
        );
        self.local_leo = leo;
        let mut commands = Vec::new();
        self.maybe_advance_hw(&mut commands);
        commands
    }

    /// A follower fetched from `fetch_offset` (its LEO) with `current_leader_epoch`,
    /// reporting that its log is fsynced below `durable_offset` (a follower that reports
    /// nothing else is durable at its fetch offset: pass the fetch offset). On `Ok` the
    /// shard serves the fetch, with the HW as it is after these commands.
    pub fn handle_follower_fetch(
        &mut self,
        replica: NodeId,
        fetch_offset: Offset,
        durable_offset: Offset,
        current_leader_epoch: LeaderEpoch,
        now_ms: u64,
    ) -> Result<Vec<LeaderCommand>, ReplicaError> {
        if current_leader_epoch < self.leader_epoch {
            return Err(ReplicaError::FencedLeaderEpoch);
        }
        if current_leader_epoch > self.leader_epoch {
            return Err(ReplicaError::UnknownLeaderEpoch);
        }
        if fetch_offset < Offset::ZERO || fetch_offset > self.local_leo {
            // The shard checks the log start offset; the end is ours to check.
            return Err(ReplicaError::OffsetOutOfRange);
        }
        let leader_leo = self.local_leo;
        let Some(follower) = self.followers.iter_mut().find(|f| f.replica == replica) else {
            return Err(ReplicaError::NotLeaderOrFollower);
        };
        if fetch_offset >= leader_leo {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= follower.last_fetch_leader_leo {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(follower.last_fetch_ms);
        }
        follower.last_fetch_leader_leo = leader_leo;
        follower.last_fetch_ms = now_ms;
        // A follower's log only grows within one leader epoch (it truncates before its first
        // fetch in the epoch), so a lower offset is a reordered older fetch: keep the newer.
        follower.leo = follower.leo.max(fetch_offset);
        // Nothing past the fetch offset can be durable (the follower's log ends there); the
        // same reordering rule keeps the newer report.
        follower.durable = follower.durable.max(durable_offset.min(fetch_offset));

        let mut commands = Vec::new();
        self.maybe_expand_isr(replica, &mut commands);
        self.maybe_advance_hw(&mut commands);
        Ok(commands)
    }

    /// Time passed: propose removing followers that have not been caught up for longer than
    /// `replica.lag.time.max.ms`.
    pub fn handle_tick(&mut self, now_ms: u64) -> Vec<LeaderCommand> {
        let mut commands = Vec::new();
        if self.pending_isr.is_some() {
            return commands;
        }
        let out_of_sync: Vec<NodeId> = self
            .isr
            .iter()
            .copied()
            .filter(|&r| r != self.local && !self.caught_up(r, now_ms))
            .collect();
        if !out_of_sync.is_empty() {
            let new_isr: Vec<NodeId> = self
                .isr
                .iter()
                .copied()
                .filter(|r| !out_of_sync.contains(r))
                .collect();
            self.propose(new_isr, &mut commands);
        }
        commands
    }

    /// A newer metadata image for this leader epoch changed the replica set (a reassignment
    /// added or removed replicas, KIP-455) and possibly the ISR. An added replica starts out
    /// of sync with an unknown LEO and joins the ISR by catching up like any follower; a
    /// removed one stops counting. Stale images (an older partition epoch) are ignored.
    pub fn handle_partition_change(
        &mut self,
        replicas: Vec<NodeId>,
        isr: Vec<NodeId>,
        partition_epoch: i32,
    ) -> Vec<LeaderCommand> {
        if partition_epoch < self.partition_epoch {
            return Vec::new();
        }
        if replicas != self.replicas {
            let local = self.local;
            self.followers
                .retain(|f| replicas.contains(&f.replica) && f.replica != local);
            for &replica in &replicas {
                if replica != local && !self.followers.iter().any(|f| f.replica == replica) {
                    self.followers.push(FollowerProgress::new(replica, 0));
                }
            }
            self.replicas = replicas;
        }
        self.handle_isr_committed(isr, partition_epoch)
    }

    /// The controller accepted an ISR (our proposal, or a newer metadata image for this
    /// leader epoch). Stale images (an older partition epoch) are ignored.
    pub fn handle_isr_committed(
        &mut self,
        isr: Vec<NodeId>,
        partition_epoch: i32,
    ) -> Vec<LeaderCommand> {
        let mut commands = Vec::new();
        if partition_epoch < self.partition_epoch {
            return commands;
        }
        if partition_epoch == self.partition_epoch && isr == self.isr {
            // A repeat of what we have; an AlterPartition in flight is still in flight.
            return commands;
        }
        self.partition_epoch = partition_epoch;
        self.isr = isr;
        if !self.isr.contains(&self.local) {
            self.isr.push(self.local);
        }
        self.pending_isr = None;
        self.maybe_advance_hw(&mut commands);
        commands
    }

    /// The controller answered the AlterPartition in flight with an error that proves it
    /// was not applied (OPERATION_NOT_ATTEMPTED, INELIGIBLE_REPLICA, ...). Back to the
    /// committed ISR; the next fetch or tick proposes again from the state then.
    ///
    /// Not for failures after which the proposal may have been applied (a timeout, a lost
    /// connection, INVALID_UPDATE_VERSION, a controller change): the shard retries the same
    /// request or waits for the next metadata image, and the proposal keeps counting toward
    /// the maximal ISR until `handle_isr_committed` says what the controller holds. Dropping
    /// it early could let the HW pass a follower the controller has already added.
    pub fn handle_alter_failed(&mut self) -> Vec<LeaderCommand> {
        self.pending_isr = None;
        let mut commands = Vec::new();
        self.maybe_advance_hw(&mut commands);
        commands
    }

    /// The replicas the latest metadata image makes ineligible for the ISR (Kafka's
    /// `isReplicaIsrEligible`). Without this a leader would propose a fenced follower again on
    /// every fetch, each proposal refused with INELIGIBLE_REPLICA.
    pub fn set_ineligible(&mut self, replicas: Vec<NodeId>) {
        self.ineligible = replicas;
    }

    /// Kafka's `isCaughtUp`: at the leader's end now, or caught up within the lag time.
    fn caught_up(&self, replica: NodeId, now_ms: u64) -> bool {
        self.followers
            .iter()
            .find(|f| f.replica == replica)
            .is_some_and(|f| {
                f.leo == self.local_leo
                    || now_ms.saturating_sub(f.last_caught_up_ms) <= self.lag_time_max_ms
            })
    }

    fn maybe_expand_isr(&mut self, replica: NodeId, commands: &mut Vec<LeaderCommand>) {
        if self.pending_isr.is_some()
            || self.isr.contains(&replica)
            || self.ineligible.contains(&replica)
        {
            return;
        }
        // The durable end, not the fetch offset: once in the ISR the follower holds the HW,
        // and a member must hold on disk everything below the HW it joins at.
        let Some(durable) = self.follower_durable(replica) else {
            return;
        };
        if durable >= self.hw && durable >= self.leader_epoch_start_offset {
            let mut new_isr = self.isr.clone();
            new_isr.push(replica);
            self.propose(new_isr, commands);
        }
    }

    fn propose(&mut self, new_isr: Vec<NodeId>, commands: &mut Vec<LeaderCommand>) {
        debug_assert!(new_isr.contains(&self.local));
        commands.push(LeaderCommand::AlterIsr {
            new_isr: new_isr.clone(),
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
        });
        self.pending_isr = Some(new_isr);
    }

    /// Members of the committed ISR and of the proposal in flight.
    fn maximal_isr_contains(&self, replica: NodeId) -> bool {
        self.isr.contains(&replica)
            || self
                .pending_isr
                .as_ref()
                .is_some_and(|pending| pending.contains(&replica))
    }

    fn maybe_advance_hw(&mut self, commands: &mut Vec<LeaderCommand>) {
        let mut candidate = self.local_leo;
        for f in &self.followers {
            if self.maximal_isr_contains(f.replica) {
                candidate = candidate.min(f.durable);
            }
        }
        if candidate > self.hw {
            self.hw = candidate;
            assert!(self.hw <= self.local_leo);
            commands.push(LeaderCommand::AdvanceHw(candidate));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[i32]) -> Vec<NodeId> {
        NodeId::from_wire_list(ids)
    }

    /// `LeaderState::new` with the ids and offsets as plain numbers.
    #[allow(clippy::too_many_arguments)]
    fn state(
        local: i32,
        epoch: i32,
        partition_epoch: i32,
        replicas: &[i32],
        isr: &[i32],
        leo: i64,
        hw: i64,
        epoch_start: i64,
        now_ms: u64,
        lag_ms: u64,
    ) -> LeaderState {
        LeaderState::new(
            NodeId(local),
            LeaderEpoch(epoch),
            partition_epoch,
            nodes(replicas),
            nodes(isr),
            Offset(leo),
            Offset(hw),
            Offset(epoch_start),
            now_ms,
            lag_ms,
        )
    }

    fn leader(isr: Vec<i32>) -> LeaderState {
        // Broker 1 leads epoch 5 over replicas 1,2,3; its log ends at 10, HW 10.
        state(1, 5, 7, &[1, 2, 3], &isr, 10, 10, 10, 0, 100)
    }

    /// HW is the minimum LEO over the ISR, the leader included, in a table of fetches.
    #[test]
    fn hw_is_min_over_isr() {
        // (local LEO, follower 2 LEO, follower 3 LEO, expected HW) with ISR {1,2,3}.
        let table = [
            (20, 15, 18, 15),
            (20, 20, 18, 18),
            (25, 20, 25, 20),
            (30, 30, 30, 30),
        ];
        let mut l = leader(vec![1, 2, 3]);
        for (local, f2, f3, hw) in table {
            l.handle_local_leo(Offset(local), 1);
            l.handle_follower_fetch(NodeId(2), Offset(f2), Offset(f2), LeaderEpoch(5), 1)
                .expect("fetch");
            l.handle_follower_fetch(NodeId(3), Offset(f3), Offset(f3), LeaderEpoch(5), 1)
                .expect("fetch");
            assert_eq!(
                l.high_watermark(),
                Offset(hw),
                "local {local} f2 {f2} f3 {f3}"
            );
        }
        // A reordered older fetch never lowers a LEO nor the HW.
        l.handle_follower_fetch(NodeId(2), Offset(12), Offset(12), LeaderEpoch(5), 2)
            .expect("fetch");
        assert_eq!(l.follower_leo(NodeId(2)), Some(Offset(30)));
        assert_eq!(l.high_watermark(), Offset(30));
    }

    /// The HW waits for an ISR member that has not fetched yet in this epoch, and ignores a
    /// replica outside the ISR.
    #[test]
    fn hw_waits_for_isr_only() {
        let mut l = leader(vec![1, 2]);
        assert_eq!(l.handle_local_leo(Offset(20), 1), vec![]);
        // Replica 3 is out of sync and far behind: it must not hold the HW back.
        l.handle_follower_fetch(NodeId(3), Offset(0), Offset(0), LeaderEpoch(5), 1)
            .expect("fetch");
        assert_eq!(l.high_watermark(), Offset(10));
        let cmds = l
            .handle_follower_fetch(NodeId(2), Offset(20), Offset(20), LeaderEpoch(5), 1)
            .expect("fetch");
        assert_eq!(cmds, vec![LeaderCommand::AdvanceHw(Offset(20))]);
    }

    /// A replica added by a reassignment is tracked from its first fetch and proposed for
    /// the ISR once caught up; a removed one no longer holds the HW back.
    #[test]
    fn reassignment_adds_and_removes_followers() {
        let mut l = leader(vec![1, 2, 3]);
        assert_eq!(
            l.handle_follower_fetch(NodeId(4), Offset(0), Offset(0), LeaderEpoch(5), 1),
            Err(ReplicaError::NotLeaderOrFollower)
        );
        l.handle_partition_change(nodes(&[1, 2, 3, 4]), nodes(&[1, 2, 3]), 8);
        l.handle_follower_fetch(NodeId(2), Offset(10), Offset(10), LeaderEpoch(5), 1)
            .expect("fetch");
        l.handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 1)
            .expect("fetch");
        assert!(!l.alter_pending());
        let cmds = l
            .handle_follower_fetch(NodeId(4), Offset(10), Offset(10), LeaderEpoch(5), 2)
            .expect("fetch");
        assert!(cmds.contains(&LeaderCommand::AlterIsr {
            new_isr: nodes(&[1, 2, 3, 4]),
            leader_epoch: LeaderEpoch(5),
            partition_epoch: 8,
        }));
        l.handle_isr_committed(nodes(&[1, 2, 3, 4]), 9);
        // Replica 3 leaves the assignment: it no longer holds the HW back.
        l.handle_partition_change(nodes(&[1, 2, 4]), nodes(&[1, 2, 4]), 10);
        l.handle_local_leo(Offset(20), 3);
        l.handle_follower_fetch(NodeId(2), Offset(20), Offset(20), LeaderEpoch(5), 3)
            .expect("fetch");
        l.handle_follower_fetch(NodeId(4), Offset(20), Offset(20), LeaderEpoch(5), 3)
            .expect("fetch");
        assert_eq!(l.high_watermark(), Offset(20));
        assert_eq!(
            l.handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 3),
            Err(ReplicaError::NotLeaderOrFollower)
        );
    }

    /// A caught-up follower on a fenced broker is not proposed for the ISR (the controller
    /// would refuse it); once the image says it is live again, its next fetch proposes it.
    #[test]
    fn ineligible_follower_is_not_proposed() {
        let mut l = leader(vec![1, 2]);
        l.set_ineligible(nodes(&[3]));
        let cmds = l
            .handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 1)
            .expect("fetch");
        assert!(!l.alter_pending(), "proposed a fenced replica: {cmds:?}");
        l.set_ineligible(Vec::new());
        let cmds = l
            .handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 2)
            .expect("fetch");
        assert!(cmds.contains(&LeaderCommand::AlterIsr {
            new_isr: nodes(&[1, 2, 3]),
            leader_epoch: LeaderEpoch(5),
            partition_epoch: 7,
        }));
    }

    /// A follower that stops catching up is proposed for removal after the lag time, and
    /// the HW then advances once the shrink is committed.
    #[test]
    fn shrink_after_lag_time() {
        let mut l = leader(vec![1, 2, 3]);
        l.handle_follower_fetch(NodeId(2), Offset(10), Offset(10), LeaderEpoch(5), 0)
            .expect("fetch");
        l.handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 0)
            .expect("fetch");
        l.handle_local_leo(Offset(20), 10);
        // Follower 2 keeps up; follower 3 stops fetching.
        for t in (20..=200).step_by(20) {
            l.handle_follower_fetch(NodeId(2), Offset(20), Offset(20), LeaderEpoch(5), t)
                .expect("fetch");
        }
        assert_eq!(
            l.high_watermark(),
            Offset(10),
            "follower 3 still in ISR holds the HW"
        );
        assert_eq!(l.handle_tick(100), vec![], "within the lag time");
        let cmds = l.handle_tick(150);
        assert_eq!(
            cmds,
            vec![LeaderCommand::AlterIsr {
                new_isr: nodes(&[1, 2]),
                leader_epoch: LeaderEpoch(5),
                partition_epoch: 7
            }]
        );
        // While the shrink is pending the HW still counts follower 3 (maximal ISR).
        assert_eq!(l.handle_tick(160), vec![], "one AlterIsr in flight");
        assert_eq!(l.high_watermark(), Offset(10));
        let cmds = l.handle_isr_committed(nodes(&[1, 2]), 8);
        assert_eq!(cmds, vec![LeaderCommand::AdvanceHw(Offset(20))]);
        assert_eq!(l.isr(), nodes(&[1, 2]));
    }

    /// An out-of-sync follower rejoins once it reaches the HW and the epoch start; while the
    /// expansion is pending it already counts toward the HW.
    #[test]
    fn expand_when_caught_up() {
        let mut l = state(1, 5, 7, &[1, 2, 3], &[1, 2], 10, 8, 10, 0, 100);
        l.handle_follower_fetch(NodeId(2), Offset(10), Offset(10), LeaderEpoch(5), 0)
            .expect("fetch");
        assert_eq!(l.high_watermark(), Offset(10));
        // At the HW but before the epoch start would also be refused; here LEO 9 < HW 10.
        assert_eq!(
            l.handle_follower_fetch(NodeId(3), Offset(9), Offset(9), LeaderEpoch(5), 1)
                .expect("fetch"),
            vec![]
        );
        let cmds = l
            .handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 2)
            .expect("fetch");
        assert_eq!(
            cmds,
            vec![LeaderCommand::AlterIsr {
                new_isr: nodes(&[1, 2, 3]),
                leader_epoch: LeaderEpoch(5),
                partition_epoch: 7
            }]
        );
        l.handle_local_leo(Offset(15), 3);
        l.handle_follower_fetch(NodeId(2), Offset(15), Offset(15), LeaderEpoch(5), 4)
            .expect("fetch");
        assert_eq!(
            l.high_watermark(),
            Offset(10),
            "pending member 3 holds the HW"
        );
        l.handle_follower_fetch(NodeId(3), Offset(15), Offset(15), LeaderEpoch(5), 5)
            .expect("fetch");
        assert_eq!(l.high_watermark(), Offset(15));
        l.handle_isr_committed(nodes(&[1, 2, 3]), 8);
        assert!(l.acks_all_allowed(3));
    }

    /// A new leader does not admit a follower below its epoch start even if it is past the
    /// (lagging) HW: that follower may miss records the previous leader committed.
    #[test]
    fn expansion_needs_epoch_start() {
        let mut l = state(1, 5, 7, &[1, 2, 3], &[1, 2], 10, 6, 10, 0, 100);
        assert_eq!(
            l.handle_follower_fetch(NodeId(3), Offset(8), Offset(8), LeaderEpoch(5), 1)
                .expect("fetch"),
            vec![]
        );
        assert!(!l.alter_pending());
    }

    /// Kafka's caught-up rule, as a table: a fetch reaching the leader's LEO now counts as
    /// caught up now; one reaching the LEO the leader had at the previous fetch counts as
    /// caught up at that previous fetch's time; otherwise nothing changes.
    #[test]
    fn caught_up_time_follows_previous_fetch() {
        // (leader LEO, fetch offset, fetch time, expected last_caught_up_ms after)
        let table = [
            (10, 10, 50, 50),  // at the leader's end: caught up now
            (20, 12, 80, 50),  // reached LEO 10 of the previous fetch: caught up at 50
            (30, 15, 120, 50), // short of LEO 20 of the previous fetch: unchanged
            (30, 30, 130, 130),
        ];
        let mut l = leader(vec![1, 2, 3]);
        for (leo, offset, t, expected) in table {
            l.handle_local_leo(Offset(leo), t);
            l.handle_follower_fetch(NodeId(2), Offset(offset), Offset(offset), LeaderEpoch(5), t)
                .expect("fetch");
            let f = l
                .followers
                .iter()
                .find(|f| f.replica == NodeId(2))
                .expect("follower");
            assert_eq!(f.last_caught_up_ms, expected, "fetch {offset} at {t}");
        }
    }

    /// A refused AlterPartition returns to the committed ISR and is proposed again on the
    /// next fetch; a stale metadata image is ignored and a repeat keeps the proposal.
    #[test]
    fn alter_failed_and_stale_images() {
        let mut l = leader(vec![1, 2]);
        let propose = l
            .handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 1)
            .expect("fetch");
        assert_eq!(propose.len(), 1);
        assert!(l.alter_pending());
        assert_eq!(l.handle_isr_committed(nodes(&[1, 2]), 7), vec![]);
        assert!(
            l.alter_pending(),
            "a repeat of the committed image keeps the proposal"
        );
        assert_eq!(l.handle_isr_committed(nodes(&[1]), 6), vec![]);
        assert_eq!(
            l.isr(),
            nodes(&[1, 2]),
            "an older partition epoch is ignored"
        );
        l.handle_alter_failed();
        assert!(!l.alter_pending());
        assert_eq!(
            l.handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 2)
                .expect("fetch"),
            propose
        );
    }

    /// Fetches from strangers, older or newer epochs, or past the log end are refused.
    #[test]
    fn fetch_validation() {
        let mut l = leader(vec![1, 2, 3]);
        assert_eq!(
            l.handle_follower_fetch(NodeId(9), Offset(0), Offset(0), LeaderEpoch(5), 0),
            Err(ReplicaError::NotLeaderOrFollower)
        );
        assert_eq!(
            l.handle_follower_fetch(NodeId(2), Offset(0), Offset(0), LeaderEpoch(4), 0),
            Err(ReplicaError::FencedLeaderEpoch)
        );
        assert_eq!(
            l.handle_follower_fetch(NodeId(2), Offset(0), Offset(0), LeaderEpoch(6), 0),
            Err(ReplicaError::UnknownLeaderEpoch)
        );
        assert_eq!(
            l.handle_follower_fetch(NodeId(2), Offset(11), Offset(11), LeaderEpoch(5), 0),
            Err(ReplicaError::OffsetOutOfRange)
        );
    }

    /// The HW counts each ISR member's durable end, never its fetch offset: a follower that
    /// has fetched (and appended) up to 20 but synced only to 12 holds the HW at 12.
    #[test]
    fn hw_counts_durable_offsets_only() {
        let mut l = leader(vec![1, 2, 3]);
        l.handle_local_leo(Offset(20), 1);
        l.handle_follower_fetch(NodeId(2), Offset(20), Offset(12), LeaderEpoch(5), 1)
            .expect("fetch");
        l.handle_follower_fetch(NodeId(3), Offset(20), Offset(20), LeaderEpoch(5), 1)
            .expect("fetch");
        assert_eq!(l.high_watermark(), Offset(12));
        assert_eq!(l.follower_leo(NodeId(2)), Some(Offset(20)));
        assert_eq!(l.follower_durable(NodeId(2)), Some(Offset(12)));
        // The sync completes: a fetch that only carries the newer durable end (the same
        // fetch offset, no new data) moves the HW at once.
        let cmds = l
            .handle_follower_fetch(NodeId(2), Offset(20), Offset(20), LeaderEpoch(5), 2)
            .expect("fetch");
        assert_eq!(cmds, vec![LeaderCommand::AdvanceHw(Offset(20))]);
        // A durable end past the fetch offset is capped at it; an older report (reordered)
        // lowers nothing.
        l.handle_local_leo(Offset(30), 3);
        l.handle_follower_fetch(NodeId(2), Offset(25), Offset(40), LeaderEpoch(5), 3)
            .expect("fetch");
        assert_eq!(l.follower_durable(NodeId(2)), Some(Offset(25)));
        l.handle_follower_fetch(NodeId(2), Offset(22), Offset(21), LeaderEpoch(5), 4)
            .expect("fetch");
        assert_eq!(l.follower_durable(NodeId(2)), Some(Offset(25)));
        assert_eq!(l.follower_leo(NodeId(2)), Some(Offset(25)));
        assert_eq!(
            l.high_watermark(),
            Offset(20),
            "follower 3 is durable at 20"
        );
    }

    /// Lag (ISR shrink) is judged by the fetch offset, the HW by the durable end: a follower
    /// that fetches to the leader's end promptly but whose fsyncs trail stays in the ISR,
    /// and holds the HW at what it has synced.
    #[test]
    fn lag_is_judged_by_fetch_offset_hw_by_durable() {
        let mut l = leader(vec![1, 2, 3]);
        for t in (50..=400u64).step_by(50) {
            let leo = 10 + t as i64;
            l.handle_local_leo(Offset(leo), t);
            l.handle_follower_fetch(NodeId(2), Offset(leo), Offset(leo - 5), LeaderEpoch(5), t)
                .expect("fetch");
            l.handle_follower_fetch(NodeId(3), Offset(leo), Offset(leo), LeaderEpoch(5), t)
                .expect("fetch");
            assert_eq!(l.high_watermark(), Offset(leo - 5), "at {t}");
        }
        // Well past the lag time (100 ms) since the durable end last reached the leader's
        // end, yet the follower fetches at the end: no shrink.
        assert_eq!(l.handle_tick(400), vec![]);
        assert!(!l.alter_pending());
        // A follower that stops fetching is still dropped after the lag time.
        l.handle_local_leo(Offset(500), 450);
        l.handle_follower_fetch(NodeId(3), Offset(500), Offset(500), LeaderEpoch(5), 600)
            .expect("fetch");
        assert_eq!(
            l.handle_tick(600),
            vec![LeaderCommand::AlterIsr {
                new_isr: nodes(&[1, 3]),
                leader_epoch: LeaderEpoch(5),
                partition_epoch: 7
            }]
        );
    }

    /// An out-of-sync follower joins the ISR only once its durable end reaches the HW (and
    /// the epoch start): a fetch offset there with unsynced bytes below it is not enough.
    #[test]
    fn expansion_waits_for_durable_offset() {
        let mut l = leader(vec![1, 2]);
        l.handle_follower_fetch(NodeId(2), Offset(10), Offset(10), LeaderEpoch(5), 0)
            .expect("fetch");
        assert_eq!(l.high_watermark(), Offset(10));
        assert_eq!(
            l.handle_follower_fetch(NodeId(3), Offset(10), Offset(4), LeaderEpoch(5), 1)
                .expect("fetch"),
            vec![]
        );
        assert!(!l.alter_pending());
        let cmds = l
            .handle_follower_fetch(NodeId(3), Offset(10), Offset(10), LeaderEpoch(5), 2)
            .expect("fetch");
        assert_eq!(
            cmds,
            vec![LeaderCommand::AlterIsr {
                new_isr: nodes(&[1, 2, 3]),
                leader_epoch: LeaderEpoch(5),
                partition_epoch: 7
            }]
        );
    }

    /// A follower that reports no durable end (an older peer: the caller passes the fetch
    /// offset) behaves as before: its fetch offset counts for the HW and for joining.
    #[test]
    fn no_durable_report_counts_fetch_offset() {
        let mut l = leader(vec![1, 2]);
        l.handle_local_leo(Offset(20), 1);
        let cmds = l
            .handle_follower_fetch(NodeId(2), Offset(20), Offset(20), LeaderEpoch(5), 1)
            .expect("fetch");
        assert_eq!(cmds, vec![LeaderCommand::AdvanceHw(Offset(20))]);
        let cmds = l
            .handle_follower_fetch(NodeId(3), Offset(20), Offset(20), LeaderEpoch(5), 1)
            .expect("fetch");
        assert!(l.alter_pending(), "{cmds:?}");
    }
}
