//! What this broker's replicas tell the active controller: ISR changes a leader proposes
//! (AlterPartition, KIP-497) and replicas whose log cannot be opened (offline). Both are
//! retried until answered, the role changes, or the shard stops.
use std::rc::Rc;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::leader::run_leader_commands;
use crate::cluster::controller::{ControllerRequest, ControllerResponse};
use crate::protocol::error::{error_from_code, ErrorCode};
use crate::protocol::ids::{LeaderEpoch, NodeId};
use crate::shard::ShardCtx;
use crate::shard::TopicPartition;

/// Proposes an ISR change to the controller (KIP-497) and feeds the answer back. An answer
/// that may or may not have been applied (a timeout) is retried with the same epochs: the
/// controller refuses a stale one, and the metadata image then settles it.
pub(super) async fn alter_isr(
    ctx: Rc<ShardCtx>,
    tp: TopicPartition,
    new_isr: Vec<NodeId>,
    leader_epoch: LeaderEpoch,
    partition_epoch: i32,
) {
    loop {
        if ctx.shutting_down.get() || ctx.replicas.leader_epoch(&tp) != Some(leader_epoch.get()) {
            return;
        }
        info!(topic = %tp.topic, partition = tp.partition, ?new_isr, "proposing ISR change");
        let req = ControllerRequest::AlterPartition {
            broker_id: ctx.shared.config.node_id,
            broker_epoch: -1,
            topic: tp.topic.clone(),
            partition: tp.partition,
            leader_epoch: leader_epoch.get(),
            partition_epoch,
            new_isr: NodeId::to_wire_list(&new_isr),
        };
        match ctx.shared.quorum.request(req).await {
            Ok(ControllerResponse::AlterPartition { status, state }) => {
                let code = error_from_code(status.error_code);
                let cmds = ctx.replicas.leader_commands(&tp, |s, _| {
                    if s.leader_epoch() != leader_epoch {
                        return Vec::new();
                    }
                    let isr_before = s.isr().len();
                    let cmds = match (&state, status.is_ok()) {
                        (Some(st), true) => s.handle_isr_committed(
                            NodeId::from_wire_list(&st.isr),
                            st.partition_epoch,
                        ),
                        _ if matches!(
                            code,
                            ErrorCode::OperationNotAttempted | ErrorCode::IneligibleReplica
                        ) =>
                        {
                            s.handle_alter_failed()
                        }
                        // Stale epochs: the next metadata image carries the real state.
                        (Some(st), false) if st.partition_epoch > s.partition_epoch() => s
                            .handle_isr_committed(
                                NodeId::from_wire_list(&st.isr),
                                st.partition_epoch,
                            ),
                        _ => Vec::new(),
                    };
                    // Kafka's IsrShrinksPerSec / IsrExpandsPerSec, counted by the leader.
                    let isr_after = s.isr().len();
                    crate::metrics::with(|m| match isr_after.cmp(&isr_before) {
                        std::cmp::Ordering::Less => m.isr_shrink(),
                        std::cmp::Ordering::Greater => m.isr_expand(),
                        std::cmp::Ordering::Equal => {}
                    });
                    cmds
                });
                if let Some((p, cmds)) = cmds {
                    run_leader_commands(&ctx, &tp, &p, cmds);
                }
                if !status.is_ok() {
                    debug!(topic = %tp.topic, partition = tp.partition, ?code, "ISR change refused");
                }
                return;
            }
            Ok(other) => {
                warn!("unexpected AlterPartition answer {other:?}");
                return;
            }
            Err(e) => {
                warn!(topic = %tp.topic, partition = tp.partition, "AlterPartition: {e}; retrying");
                glommio::timer::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Tells the controller this broker's replica of `tp` is offline (Kafka's broker reports a
/// failed log dir), so it leaves the ISR and another replica leads. Retried until the
/// controller has it, the replica is no longer offline here, or the shard stops.
pub(super) async fn report_offline(ctx: Rc<ShardCtx>, tp: TopicPartition, reason: String) {
    loop {
        if ctx.shutting_down.get() || ctx.replicas.offline_reason(&tp).is_none() {
            return;
        }
        let req = ControllerRequest::ReplicaOffline {
            node_id: ctx.shared.config.node_id,
            topic: tp.topic.clone(),
            partition: tp.partition,
            reason: reason.clone(),
        };
        match ctx.shared.quorum.request(req).await {
            Ok(ControllerResponse::ReplicaOffline { status }) => {
                if !status.is_ok() {
                    // The topic went away or the replica moved: nothing left to report.
                    debug!(topic = %tp.topic, partition = tp.partition, ?status, "offline report refused");
                }
                return;
            }
            Ok(other) => {
                warn!("unexpected ReplicaOffline answer {other:?}");
                return;
            }
            Err(e) => {
                warn!(topic = %tp.topic, partition = tp.partition, "reporting offline replica: {e}; retrying");
                glommio::timer::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}
