//! The I/O around transaction verification (KIP-890 part 1) on one shard: the partition
//! leader's side of Kafka's `AddPartitionsToTxnManager`.
//!
//! The produce path (`partition_service::produce`) calls [`verify`] for the partitions
//! whose transactional batches would open their producer's transaction. The question goes
//! to the coordinator of the transactional id, found as FindCoordinator finds it (the
//! leader of the id's `__transaction_state` partition). [`Batcher`] queues the questions
//! per coordinator broker, one request in flight each; this module sends them:
//! - to this broker: each transaction's question to the shard coordinating it, over the
//!   mesh (`txns::verify_partitions`);
//! - to another broker: one AddPartitionsToTxn (v5, `verify_only`) for the whole batch,
//!   over a connection kept per broker between requests (as the marker sends of
//!   `txns` reach other brokers), with `TXN_VERIFY_REQUEST_TIMEOUT_MS`.
//!
//! RefCell borrows are confined to synchronous blocks; none is held across an `.await`.
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use futures::channel::oneshot;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, warn};

use super::peer::PeerConnection;
use super::{txns, ShardCtx, TopicPartition};
use crate::limits::TXN_VERIFY_REQUEST_TIMEOUT_MS;
use crate::txn::verify::{Batcher, Completion, NodeId, NodeResult, VerifyTxn, WaiterId};
use crate::txn::{ErrorCode, TxnPartition};

/// The AddPartitionsToTxn version sent: v5, as Kafka 4.1's brokers send (a partition not in
/// the transaction is TRANSACTION_ABORTABLE, translated back for older producers).
const VERIFY_VERSION: i16 = 5;

type Answer = Vec<(TxnPartition, Option<ErrorCode>)>;

/// One shard's pending verifications.
#[derive(Default)]
pub struct VerifyShard {
    batcher: RefCell<Batcher>,
    waiters: RefCell<HashMap<WaiterId, oneshot::Sender<Answer>>>,
    next_waiter: Cell<WaiterId>,
    /// A send round is scheduled: questions asked before it runs join its requests.
    scheduled: Cell<bool>,
    /// An idle connection per coordinator broker (taken out while a request uses it).
    connections: RefCell<HashMap<NodeId, PeerConnection>>,
}

/// Asks the coordinator of `transactional_id` whether each of `partitions` is in the
/// ongoing transaction of `producer_id` at `producer_epoch`; returns each partition's
/// answer (`None`: confirmed), in Kafka's error terms before the produce translation
/// (`txn::verify::produce_error`).
pub async fn verify(
    ctx: &Rc<ShardCtx>,
    transactional_id: &str,
    producer_id: crate::protocol::producer::ProducerId,
    producer_epoch: crate::protocol::producer::ProducerEpoch,
    partitions: Vec<TopicPartition>,
) -> Vec<(TopicPartition, Option<ErrorCode>)> {
    let all = |e: ErrorCode, partitions: Vec<TopicPartition>| {
        partitions.into_iter().map(|tp| (tp, Some(e))).collect()
    };
    // Kafka's `getTransactionCoordinator`: no `__transaction_state`, or no leader for the
    // id's partition, means no transaction can be open.
    let node = match txns::coordinator_node(ctx, transactional_id) {
        Some((_, leader)) if leader >= 0 => leader,
        _ => return all(ErrorCode::CoordinatorNotAvailable, partitions),
    };
    let txn = VerifyTxn {
        transactional_id: transactional_id.to_string(),
        producer_id,
        producer_epoch,
        partitions: partitions
            .iter()
            .map(|tp| TxnPartition::new(&tp.topic, tp.partition))
            .collect(),
    };
    let vs = &ctx.txn_verify;
    let waiter = vs.next_waiter.get();
    vs.next_waiter.set(waiter.wrapping_add(1));
    let (tx, rx) = oneshot::channel();
    vs.waiters.borrow_mut().insert(waiter, tx);
    let mut out = Vec::new();
    vs.batcher.borrow_mut().submit(node, txn, waiter, &mut out);
    deliver(ctx, out);
    schedule(ctx);
    let answer: HashMap<TxnPartition, Option<ErrorCode>> = match rx.await {
        Ok(a) => a.into_iter().collect(),
        // The shard is stopping.
        Err(_) => return all(ErrorCode::NetworkException, partitions),
    };
    partitions
        .into_iter()
        .map(|tp| {
            let e = answer
                .get(&TxnPartition::new(&tp.topic, tp.partition))
                .copied()
                .unwrap_or(Some(ErrorCode::NetworkException));
            (tp, e)
        })
        .collect()
}

fn deliver(ctx: &ShardCtx, completions: Vec<Completion>) {
    for c in completions {
        let tx = ctx.txn_verify.waiters.borrow_mut().remove(&c.waiter);
        if let Some(tx) = tx {
            // The produce may have been dropped with its connection: nothing to answer.
            let _ = tx.send(c.answer);
        }
    }
}

/// Runs a send round soon (after the current task yields, so that the questions of
/// concurrent produce requests on this shard join the same requests).
fn schedule(ctx: &Rc<ShardCtx>) {
    if ctx.txn_verify.scheduled.replace(true) {
        return;
    }
    let ctx = ctx.clone();
    glommio::spawn_local(async move {
        ctx.txn_verify.scheduled.set(false);
        let sends = ctx.txn_verify.batcher.borrow_mut().take_sendable();
        for (node, txns) in sends {
            glommio::spawn_local(send(ctx.clone(), node, txns)).detach();
        }
    })
    .detach();
}

/// One request to `node` and its answers; then the questions queued meanwhile go.
async fn send(ctx: Rc<ShardCtx>, node: NodeId, txns: Vec<VerifyTxn>) {
    let local = ctx.shared.catalog.load().local_node;
    let result = if node == local {
        local_round(&ctx, txns).await
    } else {
        remote_round(&ctx, node, txns).await
    };
    let mut out = Vec::new();
    ctx.txn_verify
        .batcher
        .borrow_mut()
        .complete(node, result, &mut out);
    deliver(&ctx, out);
    schedule(&ctx);
}

/// This broker coordinates the ids: each question to its coordinator shard.
async fn local_round(ctx: &Rc<ShardCtx>, txns: Vec<VerifyTxn>) -> NodeResult {
    let asks = txns.into_iter().map(|txn| async move {
        let id = txn.transactional_id.clone();
        (id, txns::verify_partitions(ctx, txn).await)
    });
    NodeResult::Answered(futures::future::join_all(asks).await.into_iter().collect())
}

/// One AddPartitionsToTxn verify-only request to `node` for every question.
async fn remote_round(ctx: &Rc<ShardCtx>, node: NodeId, txns: Vec<VerifyTxn>) -> NodeResult {
    let timeout = Duration::from_millis(TXN_VERIFY_REQUEST_TIMEOUT_MS);
    let request = verify_request(&txns);
    let conn = ctx.txn_verify.connections.borrow_mut().remove(&node);
    let mut conn = match conn {
        Some(c) => c,
        None => {
            let addr = {
                let catalog = ctx.shared.catalog.load();
                match catalog
                    .brokers
                    .get(&node)
                    .and_then(|b| ctx.shared.peer_address(b))
                {
                    Some(addr) => addr,
                    None => return NodeResult::Failed(ErrorCode::CoordinatorNotAvailable),
                }
            };
            let me = ctx.shared.catalog.load().local_node;
            let client_id = format!("strata-txn-verify-{me}");
            let security = &ctx.shared.peer_security;
            match PeerConnection::connect(security, &addr, &client_id, timeout).await {
                Ok(c) => c,
                Err(e) => {
                    if e.is_security() {
                        warn!(node, "transaction verification: {e}");
                    } else {
                        debug!(node, "transaction verification: {e}");
                    }
                    return NodeResult::Failed(ErrorCode::NetworkException);
                }
            }
        }
    };
    let response = match conn.call(&request, VERIFY_VERSION, timeout).await {
        Ok(r) => r,
        Err(e) => {
            // The connection is out of step or gone: dropped, a new one next time.
            debug!(node, "transaction verification: {e}");
            return NodeResult::Failed(ErrorCode::NetworkException);
        }
    };
    ctx.txn_verify.connections.borrow_mut().insert(node, conn);
    if response.error_code != 0 {
        let e = crate::protocol::error::error_from_code(response.error_code);
        return if e == ErrorCode::UnsupportedVersion {
            NodeResult::Unsupported
        } else {
            NodeResult::Failed(e)
        };
    }
    let mut answers = HashMap::new();
    for t in response.results_by_transaction {
        let mut parts = Vec::new();
        for topic in t.topic_results {
            for p in topic.results_by_partition {
                let e = (p.partition_error_code != 0)
                    .then(|| crate::protocol::error::error_from_code(p.partition_error_code));
                parts.push((TxnPartition::new(&topic.name.0, p.partition_index), e));
            }
        }
        answers.insert(t.transactional_id.0.to_string(), Ok(parts));
    }
    NodeResult::Answered(answers)
}

/// The broker-batched AddPartitionsToTxn for `txns`, every transaction `verify_only`.
fn verify_request(txns: &[VerifyTxn]) -> AddPartitionsToTxnRequest {
    let transactions = txns
        .iter()
        .map(|t| {
            let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
            for p in &t.partitions {
                by_topic
                    .entry(p.topic.as_str())
                    .or_default()
                    .push(p.partition);
            }
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(
                    t.transactional_id.clone(),
                )))
                .with_producer_id(ProducerId(t.producer_id.0))
                .with_producer_epoch(t.producer_epoch.0)
                .with_verify_only(true)
                .with_topics(
                    by_topic
                        .into_iter()
                        .map(|(name, partitions)| {
                            AddPartitionsToTxnTopic::default()
                                .with_name(kafka_protocol::messages::TopicName(
                                    StrBytes::from_string(name.to_string()),
                                ))
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
        })
        .collect();
    AddPartitionsToTxnRequest::default().with_transactions(transactions)
}
