//! The channel mesh between shards: every shard can send a `ShardOp` to every other shard
//! and await its `ShardReply`.
//!
//! Bounded glommio channels in a full mesh carry both requests and replies. Payloads are
//! `Bytes`, moved rather than copied. Replies are matched to requests by an id local to the
//! sending shard. Ordering guarantee the produce path relies on: ops sent from one shard to
//! another are *started* (their synchronous part, e.g. the append) in send order, because
//! the receiving loop starts each op before reading the next message.
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use futures::channel::oneshot;
use futures_lite::StreamExt;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};

use super::ops::{self, ShardOp, ShardReply};
use super::ShardCtx;

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
    pending: RefCell<HashMap<u64, oneshot::Sender<ShardReply>>>,
}

impl Mesh {
    pub async fn join(builder: Builder) -> Result<Mesh, ()> {
        let (senders, receivers) = builder.join().await.map_err(|_| ())?;
        Ok(Mesh {
            senders,
            receivers: RefCell::new(Some(receivers)),
            next_id: Cell::new(0),
            pending: RefCell::new(HashMap::new()),
        })
    }

    /// Sends `op` to shard `target` and returns a future for its reply. The op has been
    /// handed to the mesh (so its start is ordered after earlier sends) once this returns.
    pub async fn send(&self, target: usize, op: ShardOp) -> oneshot::Receiver<ShardReply> {
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        let (tx, rx) = oneshot::channel();
        self.pending.borrow_mut().insert(id, tx);
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
                        if let Some(tx) = waiter {
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
