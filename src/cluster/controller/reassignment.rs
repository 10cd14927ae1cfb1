//! Partition reassignment (KIP-455): a target replica list is added beside the current one,
//! completes once every target replica is in the ISR, and can be cancelled (reverted) while
//! the original replicas still hold the acknowledged writes.
use std::collections::BTreeMap;

use super::election::elect;
use super::topics::validate_assignments;
use super::{partition_of, Batch, Controller, OngoingReassignment, Reassignment, Status};
use crate::cluster::catalog::{Catalog, PartitionMeta};
use crate::cluster::placement::place_on;
use crate::protocol::error::ErrorCode;

/// Finishes a reassignment once every target replica is in the ISR (Kafka's
/// PartitionChangeBuilder.tryCompleteReassignment): the assignment becomes the target, the
/// removed replicas leave the ISR, and a leader that was removed is replaced.
pub(super) fn try_complete_reassignment(c: &Catalog, p: &mut PartitionMeta) {
    if p.adding.is_empty() && p.removing.is_empty() {
        return;
    }
    let target: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.removing.contains(r))
        .collect();
    if !target.iter().all(|r| p.isr.contains(r)) {
        return;
    }
    p.shards = target.iter().map(|r| p.shard_of(*r).unwrap_or(0)).collect();
    p.isr.retain(|r| target.contains(r));
    p.offline.retain(|r, _| target.contains(r));
    p.replicas = target;
    p.adding.clear();
    p.removing.clear();
    if !p.replicas.contains(&p.leader) {
        elect(c, p, false);
    }
}

/// The partition as it was before its ongoing reassignment (Kafka's
/// PartitionReassignmentRevert): the replicas being added leave the assignment and the ISR.
/// The original replicas keep their order within the reassignment's list.
///
/// Refused when only replicas being added are in sync: reverting would drop every replica
/// known to hold the acknowledged writes. (Kafka makes the original replicas the ISR then
/// and elects uncleanly; Strata keeps the data and lets the reassignment finish instead.)
pub(super) fn revert_reassignment(c: &Catalog, p: &PartitionMeta) -> Result<PartitionMeta, Status> {
    let mut n = p.clone();
    if p.adding.is_empty() && p.removing.is_empty() {
        return Ok(n);
    }
    let original: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.adding.contains(r))
        .collect();
    n.shards = original
        .iter()
        .map(|r| p.shard_of(*r).unwrap_or(0))
        .collect();
    n.isr.retain(|r| original.contains(r));
    n.offline.retain(|r, _| original.contains(r));
    if n.isr.is_empty() {
        return Err(Status::error(
            ErrorCode::InvalidReplicaAssignment,
            format!(
                "only replicas being added ({:?}) are in sync; undoing the reassignment \
                 would drop every in-sync replica",
                p.isr
            ),
        ));
    }
    n.replicas = original;
    n.adding.clear();
    n.removing.clear();
    if !n.replicas.contains(&n.leader) || !n.isr.contains(&n.leader) {
        elect(c, &mut n, false);
    }
    Ok(n)
}

impl Controller {
    /// KIP-455: starts, replaces or cancels one partition's reassignment.
    pub(super) fn reassign(
        batch: &mut Batch,
        loads: &mut BTreeMap<i32, Vec<usize>>,
        r: &Reassignment,
    ) -> Result<(), Status> {
        let (index, old) = partition_of(&batch.work, &r.topic, r.partition)?;
        let ongoing = !old.adding.is_empty() || !old.removing.is_empty();
        let Some(target) = &r.replicas else {
            if !ongoing {
                return Err(Status::error(
                    ErrorCode::NoReassignmentInProgress,
                    format!("no reassignment of {}-{} to cancel", r.topic, r.partition),
                ));
            }
            let reverted = revert_reassignment(&batch.work, &old)?;
            batch.change(&r.topic, index, &old, reverted);
            return Ok(());
        };
        validate_assignments(&batch.work, std::slice::from_ref(target), None)?;
        // A new target replaces an ongoing reassignment: it starts from the original replicas.
        let base = revert_reassignment(&batch.work, &old)?;
        let mut new = base.clone();
        if *target != base.replicas {
            let mut replicas = target.clone();
            replicas.extend(base.replicas.iter().filter(|b| !target.contains(b)));
            new.shards = replicas
                .iter()
                .map(|b| base.shard_of(*b).unwrap_or_else(|| place_on(loads, *b)))
                .collect();
            new.adding = target
                .iter()
                .copied()
                .filter(|t| !base.replicas.contains(t))
                .collect();
            new.removing = base
                .replicas
                .iter()
                .copied()
                .filter(|b| !target.contains(b))
                .collect();
            new.replicas = replicas;
            // Removing replicas only: done at once if the target is all in sync.
            try_complete_reassignment(&batch.work, &mut new);
        }
        batch.change(&r.topic, index, &old, new);
        Ok(())
    }

    pub(super) fn list_reassignments(
        c: &Catalog,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Vec<OngoingReassignment> {
        let wanted: Vec<(String, i32)> = match partitions {
            Some(p) => p,
            None => Self::all_partitions(c)
                .into_iter()
                .map(|(t, i)| (t, i as i32))
                .collect(),
        };
        wanted
            .into_iter()
            .filter_map(|(topic, partition)| {
                let (_, p) = partition_of(c, &topic, partition).ok()?;
                (!p.adding.is_empty() || !p.removing.is_empty()).then_some(OngoingReassignment {
                    topic,
                    partition,
                    replicas: p.replicas,
                    adding: p.adding,
                    removing: p.removing,
                })
            })
            .collect()
    }
}
