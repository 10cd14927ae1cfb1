//! The channel mesh between shards: every shard can send a `ShardOp` to every other shard
//! and await its `ShardReply`.
//!
//! Bounded glommio channels in a full mesh carry both requests and replies. Payloads are
//! `Bytes`, moved rather than copied. Replies are matched to requests by an id local to the
//! sending shard. Ordering guarantee the produce path relies on: ops sent from one shard to
//! another are *started* (their synchronous part, e.g. the append) in send order, because
//! the receiving loop starts each op before reading the next message.
//!
//! Bounds. The receiver starts each op and finishes it in a task of its own, so the channel's
//! bound alone would limit nothing. Ops in flight are bounded where they are sent: a sender
//! holds a permit per op, per target shard and per class (`OpClass`), from the send until the
//! reply arrives; past the bound it waits before sending. The pending-reply map therefore
//! holds at most one entry per permit. The bound is not enforced by the receiver pausing its
//! stream, because replies travel on the same stream: a receiver that stopped reading
//! requests would also stop reading the replies its own waiting ops need. Permits are taken
//! in FIFO order and before the op is handed to the channel, so send order — and with it start
//! order — is unchanged.
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use futures::channel::oneshot;
use futures_lite::StreamExt;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use glommio::sync::{Semaphore, StaticPermit};

use super::ops::{self, ShardOp, ShardReply};
use super::partition_service::fetch::Waiter;
use super::ShardCtx;
use crate::limits::{MESH_CLIENT_OPS_IN_FLIGHT_MAX, MESH_REPLICA_OPS_IN_FLIGHT_MAX};

/// Which in-flight bound an op counts against. Replication has its own so that a follower's
/// fetch, which moves the high watermark, never queues behind the acks=all produces that wait
/// for it (that would stall both until the produce timeout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    Client,
    Replication,
}

impl OpClass {
    pub fn of(op: &ShardOp) -> OpClass {
        match op {
            ShardOp::Fetch { parts, .. } if parts.iter().any(|p| p.replica_id >= 0) => {
                OpClass::Replication
            }
            ShardOp::WaitForData {
                waiter: Waiter::Follower,
                ..
            } => OpClass::Replication,
            _ => OpClass::Client,
        }
    }

    fn bound(self) -> usize {
        match self {
            OpClass::Client => MESH_CLIENT_OPS_IN_FLIGHT_MAX,
            OpClass::Replication => MESH_REPLICA_OPS_IN_FLIGHT_MAX,
        }
    }
}

/// Permits for ops in flight to one target shard, one semaphore per class.
struct PeerPermits {
    client: Rc<Semaphore>,
    replication: Rc<Semaphore>,
}

impl PeerPermits {
    fn new() -> Self {
        Self {
            client: Rc::new(Semaphore::new(OpClass::Client.bound() as u64)),
            replication: Rc::new(Semaphore::new(OpClass::Replication.bound() as u64)),
        }
    }

    fn of(&self, class: OpClass) -> &Rc<Semaphore> {
        match class {
            OpClass::Client => &self.client,
            OpClass::Replication => &self.replication,
        }
    }
}

pub enum MeshMsg {
    Request { id: u64, op: ShardOp },
    Reply { id: u64, reply: ShardReply },
}

pub type Builder = MeshBuilder<MeshMsg, Full>;

/// This shard's end of the mesh.
pub struct Mesh {
    senders: Senders<MeshMsg>,
    receivers: RefCell<Option<Receivers<MeshMsg>>>,
    next_id: Cell<u64>,
    /// Replies awaited, with the permit each op holds until its reply comes.
    pending: RefCell<HashMap<u64, (oneshot::Sender<ShardReply>, StaticPermit)>>,
    /// Per target shard (this shard's own entry is unused: local ops do not cross the mesh).
    permits: Vec<PeerPermits>,
}

impl Mesh {
    pub async fn join(builder: Builder) -> Result<Mesh, ()> {
        let (senders, receivers) = builder.join().await.map_err(|_| ())?;
        let permits = (0..senders.nr_consumers())
            .map(|_| PeerPermits::new())
            .collect();
        Ok(Mesh {
            senders,
            receivers: RefCell::new(Some(receivers)),
            next_id: Cell::new(0),
            pending: RefCell::new(HashMap::new()),
            permits,
        })
    }

    /// Replies this shard awaits (at most the permits of every peer and class).
    pub fn pending_replies(&self) -> usize {
        self.pending.borrow().len()
    }

    /// Sends `op` to shard `target` and returns a future for its reply. The op has been
    /// handed to the mesh (so its start is ordered after earlier sends) once this returns.
    /// Waits first while `target` already has its bound of this class's ops in flight.
    pub async fn send(&self, target: usize, op: ShardOp) -> oneshot::Receiver<ShardReply> {
        let (tx, rx) = oneshot::channel();
        let Some(permits) = self.permits.get(target) else {
            // No such shard: the dropped sender resolves the reply future to `Canceled`.
            return rx;
        };
        let Ok(permit) = permits.of(OpClass::of(&op)).acquire_static_permit(1).await else {
            return rx;
        };
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        {
            let mut pending = self.pending.borrow_mut();
            // Each entry holds a permit, so the map cannot outgrow the permits.
            assert!(
                pending.len()
                    < self.permits.len()
                        * (MESH_CLIENT_OPS_IN_FLIGHT_MAX + MESH_REPLICA_OPS_IN_FLIGHT_MAX),
                "pending mesh replies outgrew the in-flight permits"
            );
            pending.insert(id, (tx, permit));
        }
        if self
            .senders
            .send_to(target, MeshMsg::Request { id, op })
            .await
            .is_err()
        {
            // The peer is gone (shutting down): the dropped sender makes the reply future
            // resolve to `Canceled`, which callers map to an error code.
            self.pending.borrow_mut().remove(&id);
        }
        rx
    }
}

/// Runs on every shard: one task per peer reading its messages.
pub fn spawn_receivers(ctx: &Rc<ShardCtx>) {
    let Some(mut receivers) = ctx.mesh.receivers.borrow_mut().take() else {
        return;
    };
    for (peer, mut stream) in receivers.streams() {
        let ctx = ctx.clone();
        glommio::spawn_local(async move {
            while let Some(msg) = stream.next().await {
                match msg {
                    MeshMsg::Request { id, op } => {
                        // Start now (synchronous part runs before the next message is read),
                        // finish in the background.
                        let fut = ops::start(&ctx, op);
                        let ctx2 = ctx.clone();
                        glommio::spawn_local(async move {
                            let reply = fut.await;
                            // A closed peer means it is shutting down; nothing to answer.
                            let _ = ctx2
                                .mesh
                                .senders
                                .send_to(peer, MeshMsg::Reply { id, reply })
                                .await;
                        })
                        .detach();
                    }
                    MeshMsg::Reply { id, reply } => {
                        let waiter = ctx.mesh.pending.borrow_mut().remove(&id);
                        // Dropping the permit lets the next op to that shard be sent.
                        if let Some((tx, _permit)) = waiter {
                            let _ = tx.send(reply);
                        }
                    }
                }
            }
        })
        .detach();
    }
}

/// An op that has been started (its ordering-sensitive part done) and whose reply is
/// still to come.
pub enum Started {
    Local(futures::future::LocalBoxFuture<'static, ShardReply>),
    Remote(oneshot::Receiver<ShardReply>),
}

impl Started {
    pub async fn finish(self) -> ShardReply {
        match self {
            Started::Local(f) => f.await,
            Started::Remote(rx) => rx.await.unwrap_or(ShardReply::Unavailable),
        }
    }
}

/// Starts `op` on shard `target`: directly if that is this shard, else over the mesh. When
/// this returns, the op's synchronous part has run (local) or is queued in order (remote).
pub async fn begin(ctx: &Rc<ShardCtx>, target: usize, op: ShardOp) -> Started {
    if target == ctx.id {
        Started::Local(ops::start(ctx, op))
    } else {
        Started::Remote(ctx.mesh.send(target, op).await)
    }
}

/// Runs `op` on shard `target` and waits for its reply.
pub async fn call(ctx: &Rc<ShardCtx>, target: usize, op: ShardOp) -> ShardReply {
    begin(ctx, target, op).await.finish().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::partition_service::fetch::FetchPart;
    use crate::shard::TopicPartition;
    use std::time::Duration;

    fn follower_fetch() -> ShardOp {
        ShardOp::Fetch {
            parts: vec![FetchPart {
                tp: TopicPartition {
                    topic: "t".into(),
                    partition: 0,
                },
                offset: 0,
                max_bytes: 1,
                replica_id: 7,
                durable_offset: 0,
                current_leader_epoch: -1,
                isolation: Default::default(),
            }],
            max_bytes: 1,
        }
    }

    /// A shard sends at most the client bound of ops to a peer that does not answer: the next
    /// send waits, the pending-reply map stops growing, and a replication op still goes out
    /// (its class has its own bound).
    #[test]
    fn in_flight_ops_are_bounded_per_peer_and_class() {
        // Channels larger than the bound, so that only the permits can stop the sender.
        let builder: Builder = MeshBuilder::full(2, 2 * MESH_CLIENT_OPS_IN_FLIGHT_MAX);
        let (done_tx, done_rx) = flume::bounded::<()>(1);
        let peer = {
            let builder = builder.clone();
            glommio::LocalExecutorBuilder::default()
                .spawn(move || async move {
                    // Joins, then never reads: no op is ever answered.
                    let _mesh = Mesh::join(builder).await;
                    let _ = done_rx.recv_async().await;
                })
                .expect("peer executor")
        };
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let mesh = Mesh::join(builder).await.expect("join");
                let target = 1 - mesh.senders.peer_id();
                let mut replies = Vec::new();
                for _ in 0..MESH_CLIENT_OPS_IN_FLIGHT_MAX {
                    replies.push(
                        mesh.send(target, ShardOp::ListOffsets { parts: vec![] })
                            .await,
                    );
                }
                assert_eq!(mesh.pending_replies(), MESH_CLIENT_OPS_IN_FLIGHT_MAX);
                let blocked = futures_lite::future::or(
                    async {
                        let _reply = mesh
                            .send(target, ShardOp::ListOffsets { parts: vec![] })
                            .await;
                        true
                    },
                    async {
                        glommio::timer::sleep(Duration::from_millis(200)).await;
                        false
                    },
                )
                .await;
                assert!(!blocked, "a send past the bound must wait for a permit");
                assert_eq!(mesh.pending_replies(), MESH_CLIENT_OPS_IN_FLIGHT_MAX);
                replies.push(mesh.send(target, follower_fetch()).await);
                assert_eq!(mesh.pending_replies(), MESH_CLIENT_OPS_IN_FLIGHT_MAX + 1);
                let _ = done_tx.send(());
            })
            .expect("sender executor")
            .join()
            .expect("sender");
        peer.join().expect("peer");
    }
}
