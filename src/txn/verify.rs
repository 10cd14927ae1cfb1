//! Batching a partition leader's transaction verifications (KIP-890 part 1) per coordinator
//! broker, sans-IO: Kafka's `AddPartitionsToTxnManager`.
//!
//! A leader that gets a transactional batch from a producer with no transaction open on the
//! partition asks the producer's transaction coordinator whether the partition is in the
//! ongoing transaction (AddPartitionsToTxn, broker-batched form, `verify_only`). Questions
//! for one coordinator broker are queued while a request to it is in flight and sent
//! together in the next one, one entry per transactional id: a second question for the same
//! id and producer epoch joins the first (Kafka answers the older one NETWORK_EXCEPTION
//! instead; joining spares the producer a retry), one with a newer epoch fences the older
//! (INVALID_PRODUCER_EPOCH), one with an older epoch is fenced at once.
//!
//! Bounds: at most `TXN_VERIFY_WAITERS_MAX` waiters (past it a question is answered
//! NETWORK_EXCEPTION at once); one request in flight per broker, whose timeout the I/O glue
//! enforces, so a queued question waits at most two request timeouts.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{ErrorCode, TxnPartition};
use crate::limits::TXN_VERIFY_WAITERS_MAX;
use crate::protocol::producer::{ProducerEpoch, ProducerId};

/// Who waits for an answer (the glue's handle).
pub type WaiterId = u64;
/// A broker id.
pub type NodeId = i32;

/// One transaction's question, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyTxn {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub partitions: BTreeSet<TxnPartition>,
}

/// One waiter's answer: each of its partitions, `None` when the coordinator confirmed it.
/// Errors are what Kafka's manager hands the produce path (before `produce_error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub waiter: WaiterId,
    pub answer: Vec<(TxnPartition, Option<ErrorCode>)>,
}

/// One transaction's answer: each partition's error (`None`: in the transaction), or one
/// error for all.
pub type TxnAnswer = Result<Vec<(TxnPartition, Option<ErrorCode>)>, ErrorCode>;

/// What came back for one request to a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeResult {
    /// The request failed as a whole: a timeout or a broken connection
    /// (NETWORK_EXCEPTION), or the response's top-level error.
    Failed(ErrorCode),
    /// The broker does not know verify-only requests: Kafka appends unverified then.
    Unsupported,
    /// Per transactional id, each partition's error (`None`: in the transaction), or an
    /// error for all its partitions.
    Answered(HashMap<String, TxnAnswer>),
}

#[derive(Debug)]
struct Entry {
    txn: VerifyTxn,
    waiters: Vec<(WaiterId, Vec<TxnPartition>)>,
}

#[derive(Debug, Default)]
struct NodeQueue {
    queued: BTreeMap<String, Entry>,
    in_flight: Option<BTreeMap<String, Entry>>,
}

#[derive(Debug, Default)]
pub struct Batcher {
    nodes: BTreeMap<NodeId, NodeQueue>,
    waiters: usize,
}

fn fail(entry: Entry, error: ErrorCode, out: &mut Vec<Completion>) {
    for (waiter, partitions) in entry.waiters {
        out.push(Completion {
            waiter,
            answer: partitions.into_iter().map(|p| (p, Some(error))).collect(),
        });
    }
}

impl Batcher {
    /// Waiters queued or in flight.
    pub fn waiting(&self) -> usize {
        self.waiters
    }

    /// Queues `waiter`'s question for `node`; returns the answers decided at once (this
    /// waiter's if refused, or those of an older epoch's waiters it fences).
    pub fn submit(
        &mut self,
        node: NodeId,
        txn: VerifyTxn,
        waiter: WaiterId,
        out: &mut Vec<Completion>,
    ) {
        let mine: Vec<TxnPartition> = txn.partitions.iter().cloned().collect();
        let refuse = |error, out: &mut Vec<Completion>| {
            out.push(Completion {
                waiter,
                answer: mine.iter().map(|p| (p.clone(), Some(error))).collect(),
            })
        };
        if self.waiters >= TXN_VERIFY_WAITERS_MAX {
            return refuse(ErrorCode::NetworkException, out);
        }
        let queue = self.nodes.entry(node).or_default();
        if let Some(existing) = queue.queued.get_mut(&txn.transactional_id) {
            let old = &existing.txn;
            if old.producer_epoch > txn.producer_epoch {
                return refuse(ErrorCode::InvalidProducerEpoch, out);
            }
            if old.producer_epoch == txn.producer_epoch && old.producer_id == txn.producer_id {
                existing.txn.partitions.extend(txn.partitions);
                existing.waiters.push((waiter, mine));
                self.waiters += 1;
                return;
            }
            let error = if old.producer_epoch < txn.producer_epoch {
                ErrorCode::InvalidProducerEpoch
            } else {
                ErrorCode::NetworkException
            };
            if let Some(fenced) = queue.queued.remove(&txn.transactional_id) {
                self.waiters -= fenced.waiters.len();
                fail(fenced, error, out);
            }
        }
        queue.queued.insert(
            txn.transactional_id.clone(),
            Entry {
                txn,
                waiters: vec![(waiter, mine)],
            },
        );
        self.waiters += 1;
    }

    /// The requests to send now: for each broker with questions queued and no request in
    /// flight, its questions (now in flight).
    pub fn take_sendable(&mut self) -> Vec<(NodeId, Vec<VerifyTxn>)> {
        let mut sends = Vec::new();
        for (&node, queue) in self.nodes.iter_mut() {
            if queue.in_flight.is_some() || queue.queued.is_empty() {
                continue;
            }
            let batch = std::mem::take(&mut queue.queued);
            sends.push((node, batch.values().map(|e| e.txn.clone()).collect()));
            queue.in_flight = Some(batch);
        }
        sends
    }

    /// The answer to `node`'s request in flight; returns every waiter's answer, with Kafka's
    /// translations (`AddPartitionsToTxnManager`): PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
    /// to producers, TRANSACTION_ABORTABLE (a partition not in the transaction) is
    /// INVALID_TXN_STATE to clients of transaction version 1, and a top-level
    /// CLUSTER_AUTHORIZATION_FAILED is INVALID_TXN_STATE.
    pub fn complete(&mut self, node: NodeId, result: NodeResult, out: &mut Vec<Completion>) {
        let Some(queue) = self.nodes.get_mut(&node) else {
            return;
        };
        let Some(batch) = queue.in_flight.take() else {
            return;
        };
        if queue.queued.is_empty() {
            self.nodes.remove(&node);
        }
        let translate = |e: ErrorCode| match e {
            ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
            ErrorCode::TransactionAbortable => ErrorCode::InvalidTxnState,
            other => other,
        };
        let (mut answers, unsupported) = match result {
            NodeResult::Answered(a) => (a, false),
            NodeResult::Unsupported => (HashMap::new(), true),
            NodeResult::Failed(e) => {
                let e = match e {
                    ErrorCode::ClusterAuthorizationFailed => ErrorCode::InvalidTxnState,
                    other => other,
                };
                for entry in batch.into_values() {
                    self.waiters -= entry.waiters.len();
                    fail(entry, e, out);
                }
                return;
            }
        };
        for (id, entry) in batch {
            self.waiters -= entry.waiters.len();
            let errors: HashMap<TxnPartition, Option<ErrorCode>> = if unsupported {
                HashMap::new()
            } else {
                match answers.remove(&id) {
                    Some(Ok(parts)) => parts
                        .into_iter()
                        .map(|(p, e)| (p, e.map(translate)))
                        .collect(),
                    Some(Err(e)) => {
                        fail(entry, translate(e), out);
                        continue;
                    }
                    // The coordinator skipped the transaction: the producer retries.
                    None => {
                        fail(entry, ErrorCode::NetworkException, out);
                        continue;
                    }
                }
            };
            for (waiter, partitions) in entry.waiters {
                let answer = partitions
                    .into_iter()
                    .map(|p| {
                        let e = if unsupported {
                            None
                        } else {
                            // A partition the answer leaves out was not confirmed.
                            errors
                                .get(&p)
                                .copied()
                                .unwrap_or(Some(ErrorCode::InvalidTxnState))
                        };
                        (p, e)
                    })
                    .collect();
                out.push(Completion { waiter, answer });
            }
        }
    }
}

/// The error (and message) a producer hears for a partition whose verification failed:
/// Kafka's `ReplicaManager` translation for transaction version 1 clients. Errors an older
/// client might not retry become NOT_ENOUGH_REPLICAS (retriable, no metadata refresh).
pub fn produce_error(e: ErrorCode) -> (ErrorCode, Option<String>) {
    match e {
        ErrorCode::InvalidTxnState => (
            e,
            Some("Partition was not added to the transaction".to_string()),
        ),
        ErrorCode::NetworkException
        | ErrorCode::CoordinatorLoadInProgress
        | ErrorCode::CoordinatorNotAvailable
        | ErrorCode::NotCoordinator
        | ErrorCode::ConcurrentTransactions => (
            ErrorCode::NotEnoughReplicas,
            Some(format!(
                "Unable to verify the partition has been added to the transaction. Underlying \
                 error: {}",
                wire_name(e)
            )),
        ),
        other => (other, None),
    }
}

/// Kafka's enum name of the errors `produce_error` names in its message.
fn wire_name(e: ErrorCode) -> &'static str {
    match e {
        ErrorCode::NetworkException => "NETWORK_EXCEPTION",
        ErrorCode::CoordinatorLoadInProgress => "COORDINATOR_LOAD_IN_PROGRESS",
        ErrorCode::CoordinatorNotAvailable => "COORDINATOR_NOT_AVAILABLE",
        ErrorCode::NotCoordinator => "NOT_COORDINATOR",
        ErrorCode::ConcurrentTransactions => "CONCURRENT_TRANSACTIONS",
        _ => "UNKNOWN_SERVER_ERROR",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn tp(p: i32) -> TxnPartition {
        TxnPartition::new("t", p)
    }

    fn txn(id: &str, pid: i64, epoch: i16, parts: &[i32]) -> VerifyTxn {
        VerifyTxn {
            transactional_id: id.to_string(),
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            partitions: parts.iter().map(|&p| tp(p)).collect(),
        }
    }

    #[test]
    fn questions_for_one_broker_batch_behind_the_one_in_flight() {
        let mut b = Batcher::default();
        let mut out = Vec::new();
        b.submit(1, txn("a", 5, 0, &[0]), 10, &mut out);
        let sends = b.take_sendable();
        assert_eq!(sends.len(), 1);
        assert_eq!(sends[0].1.len(), 1);
        // In flight: later questions queue, and one request carries them all.
        b.submit(1, txn("b", 6, 0, &[1]), 11, &mut out);
        b.submit(1, txn("c", 7, 0, &[2]), 12, &mut out);
        b.submit(2, txn("d", 8, 0, &[3]), 13, &mut out);
        let sends = b.take_sendable();
        assert_eq!(sends.len(), 1, "broker 1 still has a request in flight");
        assert_eq!(sends[0].0, 2);
        assert!(out.is_empty());
        b.complete(
            1,
            NodeResult::Answered(HashMap::from([("a".into(), Ok(vec![(tp(0), None)]))])),
            &mut out,
        );
        assert_eq!(
            out,
            vec![Completion {
                waiter: 10,
                answer: vec![(tp(0), None)]
            }]
        );
        let sends = b.take_sendable();
        assert_eq!(sends.len(), 1);
        assert_eq!(sends[0].1.len(), 2, "b and c in one request");
        assert_eq!(b.waiting(), 3);
    }

    #[test]
    fn same_epoch_joins_newer_epoch_fences_older() {
        let mut b = Batcher::default();
        let mut out = Vec::new();
        b.submit(1, txn("x", 5, 3, &[0]), 1, &mut out);
        b.submit(1, txn("x", 5, 3, &[1]), 2, &mut out);
        assert!(out.is_empty());
        // An older epoch is fenced at once.
        b.submit(1, txn("x", 5, 2, &[2]), 3, &mut out);
        assert_eq!(out[0].waiter, 3);
        assert_eq!(out[0].answer[0].1, Some(ErrorCode::InvalidProducerEpoch));
        out.clear();
        // A newer epoch fences both earlier waiters.
        b.submit(1, txn("x", 5, 4, &[0]), 4, &mut out);
        let fenced: Vec<WaiterId> = out.iter().map(|c| c.waiter).collect();
        assert_eq!(fenced, vec![1, 2]);
        assert!(out
            .iter()
            .all(|c| c.answer[0].1 == Some(ErrorCode::InvalidProducerEpoch)));
        assert_eq!(b.waiting(), 1);
        let sends = b.take_sendable();
        assert_eq!(sends[0].1, vec![txn("x", 5, 4, &[0])]);
    }

    #[test]
    fn joined_waiters_each_hear_their_own_partitions() {
        let mut b = Batcher::default();
        let mut out = Vec::new();
        b.submit(1, txn("x", 5, 0, &[0]), 1, &mut out);
        b.submit(1, txn("x", 5, 0, &[1]), 2, &mut out);
        let sends = b.take_sendable();
        assert_eq!(sends[0].1[0].partitions.len(), 2);
        b.complete(
            1,
            NodeResult::Answered(HashMap::from([(
                "x".into(),
                Ok(vec![
                    (tp(0), None),
                    (tp(1), Some(ErrorCode::TransactionAbortable)),
                ]),
            )])),
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                Completion {
                    waiter: 1,
                    answer: vec![(tp(0), None)]
                },
                Completion {
                    waiter: 2,
                    answer: vec![(tp(1), Some(ErrorCode::InvalidTxnState))]
                },
            ]
        );
        assert_eq!(b.waiting(), 0);
    }

    #[test]
    fn failures_and_translations() {
        let mut b = Batcher::default();
        let mut out = Vec::new();
        b.submit(1, txn("x", 5, 0, &[0]), 1, &mut out);
        b.submit(1, txn("y", 6, 0, &[0]), 2, &mut out);
        b.take_sendable();
        b.complete(
            1,
            NodeResult::Answered(HashMap::from([(
                "x".into(),
                Err(ErrorCode::ProducerFenced),
            )])),
            &mut out,
        );
        assert_eq!(out[0].answer[0].1, Some(ErrorCode::InvalidProducerEpoch));
        assert_eq!(
            out[1].answer[0].1,
            Some(ErrorCode::NetworkException),
            "a transaction left out of the answer is retried"
        );
        out.clear();
        b.submit(1, txn("x", 5, 0, &[0]), 3, &mut out);
        b.take_sendable();
        b.complete(1, NodeResult::Failed(ErrorCode::NetworkException), &mut out);
        assert_eq!(out[0].answer[0].1, Some(ErrorCode::NetworkException));
        out.clear();
        b.submit(1, txn("x", 5, 0, &[0]), 4, &mut out);
        b.take_sendable();
        b.complete(1, NodeResult::Unsupported, &mut out);
        assert_eq!(out[0].answer[0].1, None, "unsupported: appended unverified");
        assert_eq!(b.waiting(), 0);
        assert!(b.take_sendable().is_empty());
        // An answer that leaves every transaction out verifies nothing.
        b.submit(1, txn("x", 5, 0, &[0]), 5, &mut out);
        b.take_sendable();
        out.clear();
        b.complete(1, NodeResult::Answered(HashMap::new()), &mut out);
        assert_eq!(out[0].answer[0].1, Some(ErrorCode::NetworkException));
        // A completion for a broker with nothing in flight changes nothing.
        out.clear();
        b.complete(9, NodeResult::Unsupported, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn waiters_are_bounded() {
        let mut b = Batcher::default();
        let mut out = Vec::new();
        for i in 0..TXN_VERIFY_WAITERS_MAX {
            b.submit(1, txn(&format!("t{i}"), 1, 0, &[0]), i as u64, &mut out);
        }
        assert!(out.is_empty());
        b.submit(1, txn("late", 1, 0, &[0]), 0, &mut out);
        assert_eq!(out[0].answer[0].1, Some(ErrorCode::NetworkException));
    }

    #[test]
    fn produce_errors_follow_kafka() {
        assert_eq!(
            produce_error(ErrorCode::InvalidTxnState),
            (
                ErrorCode::InvalidTxnState,
                Some("Partition was not added to the transaction".into())
            )
        );
        let (code, message) = produce_error(ErrorCode::NotCoordinator);
        assert_eq!(code, ErrorCode::NotEnoughReplicas);
        assert!(message
            .unwrap()
            .ends_with("Underlying error: NOT_COORDINATOR"));
        assert_eq!(
            produce_error(ErrorCode::InvalidProducerEpoch),
            (ErrorCode::InvalidProducerEpoch, None)
        );
    }
}
