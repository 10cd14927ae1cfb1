//! Fetch: read each requested partition on its owner shard, long-poll (max.wait.ms /
//! min.bytes) on the partitions' append notifications, and encode the response so that the
//! record bytes go to the socket straight from the log's buffers.
//!
//! The response is encoded here by hand rather than through the codec crate because the
//! crate would copy every record batch into one contiguous buffer; instead the response is
//! a list of `Bytes`: small encoded pieces interleaved with the batches themselves. A unit
//! test decodes the result with the codec crate at every supported version to prove the
//! encoding is the same.
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::FutureExt;
use kafka_protocol::messages::{ApiKey, FetchRequest};

use crate::limits::FETCH_WAIT_MS_MAX;
use crate::protocol::error::ErrorCode;
use crate::protocol::ids::Offset;
use crate::replication::durable_tag;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::server::dispatch::PendingResponse;
use crate::server::route::{FanOut, Slot};
use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::partition_service::fetch::{
    FetchPart, FetchResult, Isolation, Waiter, DEBUGGING_REPLICA_ID,
};
use crate::shard::{ShardCtx, TopicPartition};
use crate::storage::txn_index::AbortedRange;

/// One requested partition, resolved.
struct Wanted {
    partition: i32,
    target: Result<(usize, TopicPartition), ErrorCode>,
    offset: i64,
    /// A follower's durable end (`replication::durable_tag`); the fetch offset otherwise.
    durable_offset: i64,
    max_bytes: usize,
    current_leader_epoch: i32,
}

struct WantedTopic {
    name: String,
    id: uuid::Uuid,
    partitions: Vec<Wanted>,
}

/// A consumer's consumer_byte_rate quota, when one applies (KIP-13).
pub struct FetchQuota {
    pub limit: crate::server::quota::Limit,
    pub window_size_ms: u64,
    pub throttle: Rc<crate::server::quota::Throttle>,
}

/// Fetch v8 is KIP-219's: a throttled answer goes out at once (empty) and the connection is
/// muted; older versions get their answer late instead.
const FETCH_KIP219_VERSION: i16 = 8;

/// Authorization (Kafka's): a follower's fetch (replica id >= 0) needs CLUSTER_ACTION on
/// the cluster, so a client cannot claim to be a replica and move a high watermark; a
/// consumer's needs READ on each topic. Refused partitions answer TOPIC_AUTHORIZATION_FAILED.
pub fn handle(
    ctx: Rc<ShardCtx>,
    version: i16,
    correlation_id: i32,
    authz: Authz,
    req: FetchRequest,
    quota: Option<FetchQuota>,
) -> PendingResponse {
    async move {
        // Followers name themselves (v15+ in replica_state); consumers send -1.
        let replica_id = if version >= 15 {
            req.replica_state.replica_id.0
        } else {
            req.replica_id.0
        };
        // fetch.max.bytes bounds the response and every partition's share of it *before*
        // anything is read, whatever the request asks (2 GB asks read 55 MiB at most).
        let fetch_max_bytes = ctx.shared.config.fetch_max_bytes;
        // Replication is not a client: no consumer quota on a follower's fetch.
        let quota = quota.filter(|_| replica_id < 0);
        // A quota'd consumer is answered at most one window's worth of its quota at once
        // (Kafka's cap), so one response cannot earn it a throttle of many windows.
        let fetch_max_bytes = match &quota {
            Some(q) => {
                let window = q.limit.bound * q.window_size_ms as f64 / 1000.0;
                fetch_max_bytes.min((window as usize).max(1))
            }
            None => fetch_max_bytes,
        };
        let topics = resolve(&ctx, version, &req, replica_id, fetch_max_bytes, &authz);
        // read_committed (v4+): data only below the last stable offset, plus the aborted
        // transactions the consumer must drop.
        let isolation = Isolation::from_level(req.isolation_level);
        let waiter = if replica_id >= 0 {
            Waiter::Follower
        } else if isolation == Isolation::ReadCommitted {
            Waiter::CommittedConsumer
        } else {
            Waiter::Consumer
        };
        let wait = Duration::from_millis(req.max_wait_ms.clamp(0, FETCH_WAIT_MS_MAX) as u64);
        let deadline = Instant::now() + wait;
        let max_bytes = if version >= 3 {
            // A Strata follower's durable-end report asks for no bytes
            // (`shard::replica::fetcher::report_durable`): its position is recorded and
            // nothing is read. Kafka's followers never ask for 0; a consumer still gets at
            // least one batch (KIP-74).
            if replica_id >= 0 && req.max_bytes == 0 {
                0
            } else {
                req.max_bytes.max(1) as usize
            }
        } else {
            usize::MAX
        }
        .min(fetch_max_bytes);
        // Waiting for more than the response may carry would wait for nothing (Kafka clamps
        // the same way); it also bounds what is held while waiting.
        let min_bytes = (req.min_bytes.max(0) as usize).min(max_bytes);
        let mut results = read_all(&ctx, &topics, replica_id, isolation, max_bytes).await;
        loop {
            let total: usize = results.iter().flatten().map(|r| r.bytes()).sum();
            let failed = results.iter().flatten().any(|r| r.error.is_some());
            let now = Instant::now();
            if total >= min_bytes.max(1) || failed || now >= deadline {
                break;
            }
            wait_for_data(&ctx, &topics, deadline - now, waiter).await;
            // Drop what was read before reading again, so at most one read is held.
            drop(results);
            results = read_all(&ctx, &topics, replica_id, isolation, max_bytes).await;
        }
        let frame = encode(version, correlation_id, &topics, results, max_bytes, 0);
        let Some(q) = quota else {
            return Ok(Some(frame));
        };
        // consumer_byte_rate counts the response's bytes, recorded as it is ready.
        let bytes = frame.iter().map(|c| c.len() as u64).sum();
        let now_ms = ctx.shared.clock.monotonic_ms();
        let ms = q.limit.record(now_ms, bytes, u64::MAX);
        if ms == 0 {
            return Ok(Some(frame));
        }
        let throttle_ms = i32::try_from(ms).unwrap_or(i32::MAX);
        if version >= FETCH_KIP219_VERSION {
            // As Kafka: the data is not sent (and not counted), the answer is empty and
            // carries the throttle, and the connection is muted after it.
            q.limit.rate.unrecord(now_ms, bytes);
            q.throttle.decide(ms);
            return Ok(Some(encode(
                version,
                correlation_id,
                &[],
                Vec::new(),
                0,
                throttle_ms,
            )));
        }
        glommio::timer::sleep(Duration::from_millis(ms)).await;
        Ok(Some(patch_throttle(frame, version, throttle_ms)))
    }
    .boxed_local()
}

fn resolve(
    ctx: &ShardCtx,
    version: i16,
    req: &FetchRequest,
    replica_id: i32,
    fetch_max_bytes: usize,
    authz: &Authz,
) -> Vec<WantedTopic> {
    let catalog = ctx.shared.catalog.load();
    let nr_shards = ctx.shared.nr_shards;
    let follower_denied = replica_id >= 0 && !authz.allows_cluster(AclOperation::ClusterAction);
    req.topics
        .iter()
        .map(|t| {
            let meta = if version >= 13 {
                catalog.topic_by_id(t.topic_id.as_u128())
            } else {
                catalog.topic(&t.topic)
            };
            let missing = if version >= 13 {
                ErrorCode::UnknownTopicId
            } else {
                ErrorCode::UnknownTopicOrPartition
            };
            let name = meta
                .map(|m| m.name.clone())
                .unwrap_or_else(|| t.topic.0.to_string());
            // An unknown topic id names nothing to authorize: it stays UNKNOWN_TOPIC_ID.
            let denied = follower_denied
                || (replica_id < 0
                    && (meta.is_some() || version < 13)
                    && !authz.allows_topic(AclOperation::Read, &name));
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let target = match meta {
                        _ if denied => Err(ErrorCode::TopicAuthorizationFailed),
                        None => Err(missing),
                        Some(m) => match usize::try_from(p.partition)
                            .ok()
                            .and_then(|i| m.partitions.get(i))
                        {
                            None => Err(ErrorCode::UnknownTopicOrPartition),
                            // Our replica's log could not be opened (Kafka: an offline log
                            // dir), whoever leads.
                            Some(pm) if pm.offline.contains_key(&catalog.local_node) => {
                                Err(ErrorCode::KafkaStorageError)
                            }
                            // Only the leader serves fetches (a debugging consumer may read
                            // any replica).
                            Some(pm)
                                if catalog.local_shard(pm).is_none()
                                    || (pm.leader != catalog.local_node
                                        && replica_id != DEBUGGING_REPLICA_ID) =>
                            {
                                Err(ErrorCode::NotLeaderOrFollower)
                            }
                            Some(pm) => Ok((
                                (catalog.local_shard(pm).unwrap_or(0) as usize)
                                    .min(nr_shards.saturating_sub(1)),
                                TopicPartition {
                                    topic: m.name.clone(),
                                    partition: p.partition,
                                },
                            )),
                        },
                    };
                    Wanted {
                        partition: p.partition,
                        target,
                        offset: p.fetch_offset,
                        // Only a follower's report counts (replica id >= 0, which needs
                        // CLUSTER_ACTION); tagged fields exist from v12.
                        durable_offset: if replica_id >= 0 && version >= 12 {
                            durable_tag::reported(&p.unknown_tagged_fields, Offset(p.fetch_offset))
                                .get()
                        } else {
                            p.fetch_offset
                        },
                        max_bytes: (p.partition_max_bytes.max(0) as usize).min(fetch_max_bytes),
                        current_leader_epoch: if version >= 9 {
                            p.current_leader_epoch
                        } else {
                            -1
                        },
                    }
                })
                .collect();
            WantedTopic {
                name,
                id: t.topic_id,
                partitions,
            }
        })
        .collect()
}

/// Reads every resolved partition; returns results shaped like `topics`. Each owner shard
/// reads at most `max_bytes` (plus one batch, KIP-74), so what is in memory at once is at
/// most shards x `max_bytes`; `encode` trims the response to `max_bytes`.
async fn read_all(
    ctx: &Rc<ShardCtx>,
    topics: &[WantedTopic],
    replica_id: i32,
    isolation: Isolation,
    max_bytes: usize,
) -> Vec<Vec<FetchResult>> {
    let mut fan_out = FanOut::new(ctx.shared.nr_shards);
    let slots: Vec<Vec<Result<Slot, ErrorCode>>> = topics
        .iter()
        .map(|t| {
            t.partitions
                .iter()
                .map(|w| match &w.target {
                    Err(e) => Err(*e),
                    Ok((shard, tp)) => Ok(fan_out.push(
                        *shard,
                        FetchPart {
                            tp: tp.clone(),
                            offset: w.offset,
                            max_bytes: w.max_bytes,
                            replica_id,
                            durable_offset: w.durable_offset,
                            current_leader_epoch: w.current_leader_epoch,
                            isolation,
                        },
                    )),
                })
                .collect()
        })
        .collect();
    let mut replies = fan_out
        .start(ctx, |parts| ShardOp::Fetch { parts, max_bytes })
        .await
        .finish(|reply| match reply {
            ShardReply::Fetch(r) => Some(r),
            _ => None,
        })
        .await;
    slots
        .into_iter()
        .map(|s| {
            s.into_iter()
                .map(|slot| match slot {
                    Err(e) => FetchResult::error(e),
                    Ok(slot) => replies
                        .take(slot)
                        .unwrap_or_else(|| FetchResult::error(ErrorCode::NotLeaderOrFollower)),
                })
                .collect()
        })
        .collect()
}

/// Waits until any partition has data past its fetch offset, or `timeout`.
async fn wait_for_data(
    ctx: &Rc<ShardCtx>,
    topics: &[WantedTopic],
    timeout: Duration,
    waiter: Waiter,
) {
    let mut fan_out = FanOut::new(ctx.shared.nr_shards);
    for t in topics {
        for w in &t.partitions {
            if let Ok((shard, tp)) = &w.target {
                fan_out.push(*shard, (tp.clone(), w.offset));
            }
        }
    }
    let launched = fan_out
        .start(ctx, |parts| ShardOp::WaitForData {
            parts,
            timeout,
            waiter,
        })
        .await;
    // The first shard to see data ends the wait; with no partition to watch, only the timer.
    futures_lite::future::or(launched.any(), glommio::timer::sleep(timeout)).await;
}

/// `frame` (as `encode` made it) with its throttle_time_ms (v1+) set to `throttle_ms`: the
/// field follows the size, the correlation id and, in flexible versions, the header's
/// empty tagged fields, all in the first buffer.
fn patch_throttle(mut frame: Vec<Bytes>, version: i16, throttle_ms: i32) -> Vec<Bytes> {
    if version < 1 {
        return frame;
    }
    let at = if ApiKey::Fetch.response_header_version(version) >= 1 {
        9
    } else {
        8
    };
    if let Some(first) = frame.first_mut() {
        if first.len() >= at + 4 {
            let mut patched = BytesMut::from(&first[..]);
            if let Some(field) = patched.get_mut(at..at + 4) {
                field.copy_from_slice(&throttle_ms.to_be_bytes());
            }
            *first = patched.freeze();
        }
    }
    frame
}

/// Encodes the response frame as a list of buffers, record batches included by reference.
fn encode(
    version: i16,
    correlation_id: i32,
    topics: &[WantedTopic],
    mut results: Vec<Vec<FetchResult>>,
    max_bytes: usize,
    throttle_ms: i32,
) -> Vec<Bytes> {
    let flexible = version >= 12;
    let mut out: Vec<Bytes> = Vec::new();
    let mut cur = BytesMut::with_capacity(256);
    cur.put_i32(0); // size, patched below
    cur.put_i32(correlation_id);
    if ApiKey::Fetch.response_header_version(version) >= 1 {
        cur.put_u8(0); // header tagged fields
    }
    if version >= 1 {
        cur.put_i32(throttle_ms);
    }
    if version >= 7 {
        cur.put_i16(0); // error_code
        cur.put_i32(0); // session_id: 0 = no fetch session; clients send full requests
    }
    put_array_len(&mut cur, topics.len(), flexible);
    let mut budget = max_bytes;
    let mut first_records = true;
    for (t, topic_results) in topics.iter().zip(results.iter_mut()) {
        if version >= 13 {
            cur.put_slice(t.id.as_bytes());
        } else {
            put_string(&mut cur, &t.name, flexible);
        }
        put_array_len(&mut cur, t.partitions.len(), flexible);
        for (w, r) in t.partitions.iter().zip(topic_results.iter_mut()) {
            // Stay within the response's max_bytes, except that the first partition with
            // data always gets at least one whole batch (KIP-74), so a consumer can make
            // progress past a batch larger than its limit.
            let size = r.bytes();
            if size > budget && !first_records {
                r.chunks.clear();
            }
            let size = r.bytes();
            if size > 0 {
                first_records = false;
                budget = budget.saturating_sub(size);
            }
            cur.put_i32(w.partition);
            cur.put_i16(r.error.map(|e| e.code()).unwrap_or(0));
            cur.put_i64(r.high_watermark);
            if version >= 4 {
                cur.put_i64(r.last_stable_offset);
            }
            if version >= 5 {
                cur.put_i64(r.log_start_offset);
            }
            if version >= 4 {
                // The aborted transactions matter only with the records they overlap.
                let aborted: &[AbortedRange] = if size > 0 { &r.aborted } else { &[] };
                put_array_len(&mut cur, aborted.len(), flexible);
                for a in aborted {
                    cur.put_i64(a.producer_id);
                    cur.put_i64(a.first_offset);
                    if flexible {
                        cur.put_u8(0); // aborted transaction tagged fields
                    }
                }
            }
            if version >= 11 {
                cur.put_i32(-1); // preferred_read_replica
            }
            if flexible {
                put_unsigned_varint(&mut cur, size as u32 + 1);
            } else {
                cur.put_i32(size as i32);
            }
            if size > 0 {
                out.push(cur.split().freeze());
                out.append(&mut r.chunks);
            }
            if flexible {
                cur.put_u8(0); // partition tagged fields
            }
        }
        if flexible {
            cur.put_u8(0); // topic tagged fields
        }
    }
    if flexible {
        cur.put_u8(0); // top-level tagged fields
    }
    out.push(cur.freeze());
    let total: usize = out.iter().map(|b| b.len()).sum();
    // The first buffer begins with the size prefix: rewrite it now that the size is known.
    if let Some(first) = out.first_mut() {
        let mut patched = BytesMut::from(&first[..]);
        if patched.len() >= 4 {
            patched[..4].copy_from_slice(&((total - 4) as i32).to_be_bytes());
        }
        *first = patched.freeze();
    }
    out
}

fn put_array_len(buf: &mut BytesMut, len: usize, flexible: bool) {
    if flexible {
        put_unsigned_varint(buf, len as u32 + 1);
    } else {
        buf.put_i32(len as i32);
    }
}

fn put_string(buf: &mut BytesMut, s: &str, flexible: bool) {
    if flexible {
        put_unsigned_varint(buf, s.len() as u32 + 1);
    } else {
        buf.put_i16(s.len() as i16);
    }
    buf.put_slice(s.as_bytes());
}

fn put_unsigned_varint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::messages::{FetchResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;

    /// The hand-written encoding decodes with the codec crate, at every advertised version,
    /// to the same fields and the same record bytes.
    #[test]
    fn encoding_matches_codec_crate() {
        let (lo, hi) = crate::protocol::api_versions::range(ApiKey::Fetch).unwrap_or((4, 4));
        for version in lo..=hi {
            let topics = vec![WantedTopic {
                name: "orders".into(),
                id: uuid::Uuid::from_u128(42),
                partitions: vec![
                    Wanted {
                        partition: 0,
                        target: Err(ErrorCode::UnknownServerError),
                        offset: 0,
                        durable_offset: 0,
                        max_bytes: 100,
                        current_leader_epoch: -1,
                    },
                    Wanted {
                        partition: 1,
                        target: Err(ErrorCode::UnknownServerError),
                        offset: 0,
                        durable_offset: 0,
                        max_bytes: 100,
                        current_leader_epoch: -1,
                    },
                ],
            }];
            let results = vec![vec![
                FetchResult {
                    error: None,
                    high_watermark: 10,
                    last_stable_offset: 7,
                    log_start_offset: 2,
                    chunks: vec![Bytes::from_static(b"abc"), Bytes::from_static(b"defg")],
                    aborted: vec![
                        AbortedRange {
                            producer_id: 5,
                            first_offset: 3,
                        },
                        AbortedRange {
                            producer_id: 6,
                            first_offset: 4,
                        },
                    ],
                },
                FetchResult::error(ErrorCode::UnknownTopicOrPartition),
            ]];
            let frame: Vec<u8> = encode(version, 77, &topics, results, 1 << 20, 0).concat();
            let mut buf = Bytes::from(frame);
            let size = buf.get_i32() as usize;
            assert_eq!(size, buf.len(), "v{version} size prefix");
            let header =
                ResponseHeader::decode(&mut buf, ApiKey::Fetch.response_header_version(version))
                    .expect("header");
            assert_eq!(header.correlation_id, 77);
            let resp = FetchResponse::decode(&mut buf, version).expect("body");
            assert_eq!(buf.len(), 0, "v{version} trailing bytes");
            let t = &resp.responses[0];
            if version >= 13 {
                assert_eq!(t.topic_id, uuid::Uuid::from_u128(42));
            } else {
                assert_eq!(&*t.topic.0, "orders");
            }
            assert_eq!(t.partitions[0].records.as_deref(), Some(&b"abcdefg"[..]));
            assert_eq!(t.partitions[0].high_watermark, 10);
            assert_eq!(t.partitions[0].last_stable_offset, 7);
            let aborted: Vec<(i64, i64)> = t.partitions[0]
                .aborted_transactions
                .iter()
                .flatten()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect();
            assert_eq!(aborted, vec![(5, 3), (6, 4)]);
            assert_eq!(
                t.partitions[1].error_code,
                ErrorCode::UnknownTopicOrPartition.code()
            );
            if version >= 5 {
                assert_eq!(t.partitions[0].log_start_offset, 2);
            }
        }
    }
}
