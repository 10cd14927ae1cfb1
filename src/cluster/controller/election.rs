//! Leader election: Kafka's choice of leader among a partition's replicas (clean from the
//! ISR, or unclean when allowed), leaderless partitions elected as brokers return, the
//! operator's ElectLeaders (preferred or unclean), and the periodic preferred-leader
//! rebalance.
use std::collections::BTreeMap;

use super::{
    is_unfenced, partition_of, unknown_partition, Batch, Controller, PartitionResult, Status,
    UNCLEAN_LEADER_ELECTION,
};
use crate::cluster::catalog::{Catalog, PartitionMeta};
use crate::protocol::error::ErrorCode;

pub(super) fn unclean_allowed(c: &Catalog, topic: &str) -> bool {
    let topic_value = c
        .topic(topic)
        .and_then(|t| t.configs.get(UNCLEAN_LEADER_ELECTION));
    topic_value
        .or_else(|| c.broker_configs.get(UNCLEAN_LEADER_ELECTION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Kafka's leader choice for `p`: the first replica in assignment order that is in the ISR,
/// unfenced and not offline. Failing that, and only if `unclean`, the first unfenced replica; the ISR
/// then shrinks to that replica alone, since nothing else is known to hold its log. Sets
/// `leader = -1` when no replica qualifies.
pub(super) fn elect(c: &Catalog, p: &mut PartitionMeta, unclean: bool) {
    let eligible = |r: &i32| is_unfenced(c, *r) && !p.offline.contains_key(r);
    if let Some(r) = p.replicas.iter().find(|r| p.isr.contains(r) && eligible(r)) {
        p.leader = *r;
        return;
    }
    if unclean {
        if let Some(r) = p.replicas.iter().find(|r| eligible(r)) {
            p.leader = *r;
            p.isr = vec![*r];
            return;
        }
    }
    p.leader = -1;
}

impl Controller {
    /// Whether a leader-imbalance check is due now; starts the clock on the first call.
    pub(super) fn rebalance_due(&mut self, now_ms: u64) -> bool {
        let last = *self.last_rebalance_ms.get_or_insert(now_ms);
        if now_ms.saturating_sub(last) < self.config.leader_imbalance_check_interval_ms {
            return false;
        }
        self.last_rebalance_ms = Some(now_ms);
        true
    }

    /// Kafka's auto leader rebalance: for each broker, the partitions it is the preferred
    /// replica of (first in the assignment) but does not lead; if their share of all its
    /// preferred partitions is above `percentage`, those partitions are returned (their
    /// preferred election still needs the broker unfenced and in the ISR).
    pub(super) fn imbalanced_partitions(c: &Catalog, percentage: u32) -> Vec<(String, usize)> {
        let mut by_broker: BTreeMap<i32, (usize, Vec<(String, usize)>)> = BTreeMap::new();
        for t in c.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                let Some(&preferred) = p.replicas.first() else {
                    continue;
                };
                let entry = by_broker.entry(preferred).or_default();
                entry.0 += 1;
                if p.leader != preferred {
                    entry.1.push((t.name.clone(), i));
                }
            }
        }
        by_broker
            .into_values()
            .filter(|(total, not_led)| not_led.len() * 100 > *total * percentage as usize)
            .flat_map(|(_, not_led)| not_led)
            .collect()
    }

    /// Elects a leader for each leaderless partition that has an eligible replica now,
    /// at most `budget` of them.
    pub(super) fn elect_leaderless(batch: &mut Batch, budget: &mut usize) {
        let mut leaderless = Vec::new();
        for t in batch.work.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                if p.leader == -1 {
                    leaderless.push((t.name.clone(), i, p.clone()));
                }
            }
        }
        for (topic, index, old) in leaderless {
            if *budget == 0 {
                return;
            }
            let mut new = old.clone();
            let unclean = unclean_allowed(&batch.work, &topic);
            elect(&batch.work, &mut new, unclean);
            if new.leader != -1 {
                batch.change(&topic, index, &old, new);
                *budget -= 1;
            }
        }
    }

    /// Moves leadership to replicas[0] if it is in the ISR and unfenced.
    pub(super) fn elect_preferred(
        batch: &mut Batch,
        topic: &str,
        index: usize,
    ) -> Result<(), Status> {
        let (_, old) = partition_of(&batch.work, topic, index as i32)?;
        let Some(preferred) = old.replicas.first().copied() else {
            return Err(Status::error(
                ErrorCode::PreferredLeaderNotAvailable,
                "no replicas",
            ));
        };
        if old.leader == preferred {
            return Err(Status::error(
                ErrorCode::ElectionNotNeeded,
                format!("{preferred} leads already"),
            ));
        }
        if !old.isr.contains(&preferred)
            || !is_unfenced(&batch.work, preferred)
            || old.offline.contains_key(&preferred)
        {
            return Err(Status::error(
                ErrorCode::PreferredLeaderNotAvailable,
                format!("preferred leader {preferred} is fenced, offline or out of the ISR"),
            ));
        }
        let mut new = old.clone();
        new.leader = preferred;
        batch.change(topic, index, &old, new);
        Ok(())
    }

    /// Elects a leader for a leaderless partition, from outside the ISR if need be (the
    /// operator asked for an unclean election).
    pub(super) fn elect_unclean(
        batch: &mut Batch,
        topic: &str,
        index: usize,
    ) -> Result<(), Status> {
        let (_, old) = partition_of(&batch.work, topic, index as i32)?;
        if old.leader != -1 {
            return Err(Status::error(
                ErrorCode::ElectionNotNeeded,
                format!("{} leads already", old.leader),
            ));
        }
        let mut new = old.clone();
        elect(&batch.work, &mut new, true);
        if new.leader == -1 {
            return Err(Status::error(
                ErrorCode::EligibleLeadersNotAvailable,
                "no replica is unfenced",
            ));
        }
        batch.change(topic, index, &old, new);
        Ok(())
    }

    pub(super) fn elect_leaders(
        batch: &mut Batch,
        partitions: Option<Vec<(String, i32)>>,
        preferred: bool,
    ) -> Vec<PartitionResult> {
        // Asked for every partition, Kafka reports only those where something was tried.
        let all = partitions.is_none();
        let wanted: Vec<(String, i32)> = partitions.unwrap_or_else(|| {
            Self::all_partitions(&batch.work)
                .into_iter()
                .map(|(t, i)| (t, i as i32))
                .collect()
        });
        let mut results = Vec::with_capacity(wanted.len());
        for (topic, partition) in wanted {
            let outcome = match usize::try_from(partition) {
                Err(_) => Err(unknown_partition(&topic, partition)),
                Ok(index) if preferred => Self::elect_preferred(batch, &topic, index),
                Ok(index) => Self::elect_unclean(batch, &topic, index),
            };
            let status = outcome.err().unwrap_or_default();
            if all && status.error_code == ErrorCode::ElectionNotNeeded.code() {
                continue;
            }
            results.push(PartitionResult {
                topic,
                partition,
                status,
            });
        }
        results
    }
}
