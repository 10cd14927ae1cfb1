//! ISR changes a partition leader asks for (AlterPartition, KIP-497): checked against the
//! current leader and partition epochs and the replicas' eligibility, then applied, which may
//! complete an ongoing reassignment.
use std::collections::BTreeSet;

use super::reassignment::try_complete_reassignment;
use super::{is_unfenced, partition_of, Batch, Controller, Status};
use crate::cluster::catalog::PartitionMeta;
use crate::protocol::error::ErrorCode;

impl Controller {
    /// Kafka's AlterPartition checks, in its order, then the ISR change (and the completion
    /// of a reassignment it makes possible).
    pub(super) fn alter_partition(
        batch: &mut Batch,
        broker_id: i32,
        topic: &str,
        partition: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<i32>,
    ) -> (Status, Option<PartitionMeta>) {
        let (index, old) = match partition_of(&batch.work, topic, partition) {
            Ok(found) => found,
            Err(status) => return (status, None),
        };
        let refuse = |code, message: String| (Status::error(code, message), Some(old.clone()));
        if leader_epoch != old.leader_epoch {
            return refuse(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "leader epoch {leader_epoch} is not the current {}",
                    old.leader_epoch
                ),
            );
        }
        if broker_id != old.leader {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("broker {broker_id} is not the leader ({})", old.leader),
            );
        }
        if partition_epoch != old.partition_epoch {
            return refuse(
                ErrorCode::InvalidUpdateVersion,
                format!(
                    "partition epoch {partition_epoch} is not the current {}",
                    old.partition_epoch
                ),
            );
        }
        let distinct: BTreeSet<&i32> = new_isr.iter().collect();
        if distinct.len() != new_isr.len() || !new_isr.contains(&old.leader) {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("ISR {new_isr:?} repeats a broker or leaves out the leader"),
            );
        }
        if let Some(r) = new_isr.iter().find(|r| {
            !old.replicas.contains(r)
                || (!old.isr.contains(r)
                    && (!is_unfenced(&batch.work, **r) || old.offline.contains_key(r)))
        }) {
            return refuse(
                ErrorCode::IneligibleReplica,
                format!("broker {r} may not join the ISR (not a replica, fenced or offline)"),
            );
        }
        let mut new = old.clone();
        new.isr = new_isr;
        try_complete_reassignment(&batch.work, &mut new);
        let state = batch.change(topic, index, &old, new);
        let status = if state.leader != old.leader {
            Status::error(
                ErrorCode::NewLeaderElected,
                format!("the reassignment completed and {} leads now", state.leader),
            )
        } else {
            Status::ok()
        };
        (status, Some(state))
    }
}
