//! TCP between the voters of the metadata log.
//!
//! Frames are `[u32 payload len][u8 kind][payload]`, little-endian, with the payload bounded by
//! [`FRAME_BYTES_MAX`]: a raft `Message` (protobuf), a client request forwarded to the leader,
//! or the leader's reply to one. Connections are one-way: each node dials every peer and only
//! writes on that connection; it reads only on the connections peers dialled to it. Replies to
//! forwarded requests therefore travel on the leader's own connection back to the origin.
//!
//! Nothing here can block the raft loop: each peer has a sender thread behind a bounded queue,
//! and a full queue drops the frame (raft tolerates loss; forwarded requests are retried by
//! their origin). A peer that cannot be reached is redialled with exponential backoff. Bytes
//! read from the network are never trusted: a bad length or kind closes that connection.
//! Every connection is secured before its first frame (`secure`): TLS and a login as a broker
//! principal when `controller_listener_security_protocol` asks for them.
//!
//! A silent network (a partition that drops packets, not connections) must not leave a
//! connection that looks alive: writes would keep landing in the kernel's send buffer while
//! TCP retransmits with exponential backoff, and after the network heals the peer would hear
//! nothing for tens of seconds. Every dialled socket therefore has `TCP_USER_TIMEOUT`
//! ([`UNACKED_TIMEOUT`], in the spirit of KRaft's `controller.quorum.request.timeout.ms`): data
//! unacknowledged that long aborts the connection and the sender redials. A reader drops an
//! inbound connection that stayed silent for [`INBOUND_IDLE_MAX`], so the threads of dead
//! connections do not pile up against [`INBOUND_CONNECTIONS_MAX`].

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ::raft::eraftpb::{Entry, Message, MessageType, Snapshot};
use protobuf::Message as _;

use super::driver::Event;
use super::secure::{ControllerSecurity, SecureError, Stream};

/// Largest frame payload sent or accepted (a snapshot travels in one frame).
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// Frames queued for one peer before new ones are dropped.
pub const PEER_QUEUE_FRAMES_MAX: usize = 1024;
/// Inbound connections served at once; more are closed at accept.
pub const INBOUND_CONNECTIONS_MAX: usize = 64;
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(20);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_millis(1000);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
const WRITE_TIMEOUT: Duration = Duration::from_millis(5000);
/// Sent data unacknowledged for this long aborts a dialled connection (`TCP_USER_TIMEOUT`).
pub const UNACKED_TIMEOUT: Duration = Duration::from_millis(3000);
/// An inbound connection with no bytes for this long is closed; its peer redials when it has
/// something to say. Leaders send heartbeats far more often.
pub const INBOUND_IDLE_MAX: Duration = Duration::from_secs(30);
/// How often blocked reads and queue waits look at the shutdown flag.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
const FRAME_HEADER_BYTES: usize = 5;

const KIND_RAFT: u8 = 1;
const KIND_FORWARD: u8 = 2;
const KIND_FORWARD_REPLY: u8 = 3;
const KIND_FETCH: u8 = 4;
const KIND_FETCH_REPLY: u8 = 5;
const KIND_CLIENT_FORWARD: u8 = 6;
/// How long a voter's reader waits for the driver to answer an observer's frame.
const CLIENT_REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// How the leader answered a forwarded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStatus {
    /// Committed at `index`; the response is the machine's.
    Ok = 0,
    /// The receiver is not (or no longer) the leader, or is overloaded: try again.
    Retry = 1,
    /// The request's entries would not fit in a raft entry; it was not carried out.
    TooLarge = 2,
}

/// One frame on the wire.
#[derive(Debug)]
pub enum Frame {
    Raft(Message),
    /// `origin` and the ids are raft ids (Kafka node id + 1).
    Forward {
        origin: u64,
        request_id: u64,
        request: Vec<u8>,
    },
    ForwardReply {
        request_id: u64,
        status: ReplyStatus,
        index: u64,
        response: Vec<u8>,
    },
    /// Observer -> voter: committed entries from `from_index` on, please. Answered with a
    /// `FetchReply` on the same connection.
    Fetch {
        from_index: u64,
    },
    /// The voter's leader (raft id, 0 = unknown), its commit index, and either the snapshot
    /// (when `from_index` was compacted away) or committed entries from `from_index`.
    FetchReply {
        leader: u64,
        commit: u64,
        snapshot: Option<Snapshot>,
        entries: Vec<Entry>,
    },
    /// Observer -> voter: a request for the leader, answered with a `ForwardReply` on the
    /// same connection.
    ClientForward {
        request: Vec<u8>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds {max}")]
    TooLarge { len: usize, max: usize },
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("truncated frame")]
    Truncated,
    #[error("bad raft message: {0}")]
    BadMessage(String),
}

impl Frame {
    /// The frame with its header, ready to write.
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let mut out = vec![0u8; FRAME_HEADER_BYTES];
        let kind = match self {
            Frame::Raft(m) => {
                m.write_to_vec(&mut out)
                    .map_err(|e| FrameError::BadMessage(e.to_string()))?;
                KIND_RAFT
            }
            Frame::Forward {
                origin,
                request_id,
                request,
            } => {
                out.extend_from_slice(&origin.to_le_bytes());
                out.extend_from_slice(&request_id.to_le_bytes());
                out.extend_from_slice(request);
                KIND_FORWARD
            }
            Frame::ForwardReply {
                request_id,
                status,
                index,
                response,
            } => {
                out.extend_from_slice(&request_id.to_le_bytes());
                out.push(*status as u8);
                out.extend_from_slice(&index.to_le_bytes());
                out.extend_from_slice(response);
                KIND_FORWARD_REPLY
            }
            Frame::Fetch { from_index } => {
                out.extend_from_slice(&from_index.to_le_bytes());
                KIND_FETCH
            }
            Frame::FetchReply {
                leader,
                commit,
                snapshot,
                entries,
            } => {
                out.extend_from_slice(&leader.to_le_bytes());
                out.extend_from_slice(&commit.to_le_bytes());
                let snap = match snapshot {
                    Some(s) => s
                        .write_to_bytes()
                        .map_err(|e| FrameError::BadMessage(e.to_string()))?,
                    None => Vec::new(),
                };
                out.extend_from_slice(&(snap.len() as u32).to_le_bytes());
                out.extend_from_slice(&snap);
                for e in entries {
                    let bytes = e
                        .write_to_bytes()
                        .map_err(|e| FrameError::BadMessage(e.to_string()))?;
                    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    out.extend_from_slice(&bytes);
                }
                KIND_FETCH_REPLY
            }
            Frame::ClientForward { request } => {
                out.extend_from_slice(request);
                KIND_CLIENT_FORWARD
            }
        };
        let len = out.len() - FRAME_HEADER_BYTES;
        if len > FRAME_BYTES_MAX {
            return Err(FrameError::TooLarge {
                len,
                max: FRAME_BYTES_MAX,
            });
        }
        out[..4].copy_from_slice(&(len as u32).to_le_bytes());
        out[4] = kind;
        Ok(out)
    }

    /// Decodes one payload of the given kind.
    pub fn decode(kind: u8, payload: &[u8]) -> Result<Frame, FrameError> {
        fn u64_at(b: &[u8], at: usize) -> Result<u64, FrameError> {
            let s = b.get(at..at + 8).ok_or(FrameError::Truncated)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            Ok(u64::from_le_bytes(a))
        }
        match kind {
            KIND_RAFT => Message::parse_from_bytes(payload)
                .map(Frame::Raft)
                .map_err(|e| FrameError::BadMessage(e.to_string())),
            KIND_FORWARD => Ok(Frame::Forward {
                origin: u64_at(payload, 0)?,
                request_id: u64_at(payload, 8)?,
                request: payload.get(16..).ok_or(FrameError::Truncated)?.to_vec(),
            }),
            KIND_FORWARD_REPLY => {
                let request_id = u64_at(payload, 0)?;
                let status = match payload.get(8) {
                    Some(0) => ReplyStatus::Ok,
                    Some(1) => ReplyStatus::Retry,
                    Some(2) => ReplyStatus::TooLarge,
                    Some(_) => return Err(FrameError::BadMessage("reply status".into())),
                    None => return Err(FrameError::Truncated),
                };
                Ok(Frame::ForwardReply {
                    request_id,
                    status,
                    index: u64_at(payload, 9)?,
                    response: payload.get(17..).ok_or(FrameError::Truncated)?.to_vec(),
                })
            }
            KIND_FETCH => Ok(Frame::Fetch {
                from_index: u64_at(payload, 0)?,
            }),
            KIND_FETCH_REPLY => {
                fn u32_at(b: &[u8], at: usize) -> Result<usize, FrameError> {
                    let s = b.get(at..at + 4).ok_or(FrameError::Truncated)?;
                    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
                }
                let leader = u64_at(payload, 0)?;
                let commit = u64_at(payload, 8)?;
                let snap_len = u32_at(payload, 16)?;
                let snap_bytes = payload
                    .get(20..20 + snap_len)
                    .ok_or(FrameError::Truncated)?;
                let snapshot = if snap_len == 0 {
                    None
                } else {
                    Some(
                        Snapshot::parse_from_bytes(snap_bytes)
                            .map_err(|e| FrameError::BadMessage(e.to_string()))?,
                    )
                };
                let mut entries = Vec::new();
                let mut at = 20 + snap_len;
                while at < payload.len() {
                    let len = u32_at(payload, at)?;
                    let bytes = payload
                        .get(at + 4..at + 4 + len)
                        .ok_or(FrameError::Truncated)?;
                    entries.push(
                        Entry::parse_from_bytes(bytes)
                            .map_err(|e| FrameError::BadMessage(e.to_string()))?,
                    );
                    at += 4 + len;
                }
                Ok(Frame::FetchReply {
                    leader,
                    commit,
                    snapshot,
                    entries,
                })
            }
            KIND_CLIENT_FORWARD => Ok(Frame::ClientForward {
                request: payload.to_vec(),
            }),
            other => Err(FrameError::UnknownKind(other)),
        }
    }
}

struct Outgoing {
    bytes: Vec<u8>,
    /// A MsgSnapshot: raft-rs must hear whether it was delivered.
    is_snapshot: bool,
}

struct Peer {
    queue: flume::Sender<Outgoing>,
}

/// The sending half: one queue and thread per peer.
pub struct Transport {
    peers: std::collections::HashMap<u64, Peer>,
    events: flume::Sender<Event>,
    threads: Vec<JoinHandle<()>>,
}

impl Transport {
    /// Starts a sender thread for every peer (raft id, address).
    pub fn new(
        peers: &[(u64, SocketAddr)],
        events: flume::Sender<Event>,
        shutdown: Arc<AtomicBool>,
        security: Arc<ControllerSecurity>,
    ) -> std::io::Result<Transport> {
        let mut map = std::collections::HashMap::new();
        let mut threads = Vec::new();
        for &(id, addr) in peers {
            let (tx, rx) = flume::bounded(PEER_QUEUE_FRAMES_MAX);
            let events = events.clone();
            let shutdown = shutdown.clone();
            let security = security.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("raft-send-{id}"))
                    .spawn(move || send_loop(id, addr, rx, events, shutdown, &security))?,
            );
            map.insert(id, Peer { queue: tx });
        }
        Ok(Transport {
            peers: map,
            events,
            threads,
        })
    }

    /// Queues `frame` for peer `to`; drops it when the queue is full or the peer unknown.
    pub fn send(&self, to: u64, frame: &Frame) {
        let is_snapshot =
            matches!(frame, Frame::Raft(m) if m.get_msg_type() == MessageType::MsgSnapshot);
        let Some(peer) = self.peers.get(&to) else {
            tracing::debug!(to, "no address for metadata log peer; dropping frame");
            return;
        };
        let bytes = match frame.encode() {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(to, error = %e, "cannot encode metadata log frame");
                if is_snapshot {
                    let _ = self
                        .events
                        .try_send(Event::SnapshotStatus { to, ok: false });
                }
                return;
            }
        };
        if peer
            .queue
            .try_send(Outgoing { bytes, is_snapshot })
            .is_err()
            && is_snapshot
        {
            let _ = self
                .events
                .try_send(Event::SnapshotStatus { to, ok: false });
        }
    }

    /// Stops the sender threads (their queues close) and waits for them.
    pub fn close(mut self) {
        self.peers.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn send_loop(
    to: u64,
    addr: SocketAddr,
    rx: flume::Receiver<Outgoing>,
    events: flume::Sender<Event>,
    shutdown: Arc<AtomicBool>,
    security: &ControllerSecurity,
) {
    let mut conn: Option<Stream> = None;
    let mut backoff = RECONNECT_BACKOFF_MIN;
    let mut next_dial = Instant::now();
    loop {
        if shutdown.load(Ordering::Acquire) {
            return;
        }
        let out = match rx.recv_timeout(POLL_INTERVAL) {
            Ok(o) => o,
            Err(flume::RecvTimeoutError::Timeout) => continue,
            Err(flume::RecvTimeoutError::Disconnected) => return,
        };
        if conn.is_none() && Instant::now() >= next_dial {
            match connect(addr, security) {
                Ok(s) => {
                    conn = Some(s);
                    backoff = RECONNECT_BACKOFF_MIN;
                }
                Err(e) => {
                    tracing::debug!(to, %addr, error = %e, "cannot reach metadata log peer");
                    next_dial = Instant::now() + backoff;
                    backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
                    let _ = events.try_send(Event::Unreachable { to });
                }
            }
        }
        let delivered = match conn.as_mut() {
            Some(s) => match s.send(&out.bytes) {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!(to, %addr, error = %e, "metadata log peer connection lost");
                    conn = None;
                    let _ = events.try_send(Event::Unreachable { to });
                    false
                }
            },
            None => false,
        };
        if out.is_snapshot {
            let _ = events.try_send(Event::SnapshotStatus { to, ok: delivered });
        }
    }
}

/// Connects to a peer with the options every dialled connection needs, and secures the
/// connection as `controller_listener_security_protocol` says.
fn connect(addr: SocketAddr, security: &ControllerSecurity) -> Result<Stream, SecureError> {
    let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    set_user_timeout(&s, UNACKED_TIMEOUT)?;
    security.secure_dialled(s, addr)
}

/// `TCP_USER_TIMEOUT` (Linux): how long transmitted data may stay unacknowledged before the
/// kernel aborts the connection.
fn set_user_timeout(s: &TcpStream, timeout: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let ms = libc::c_uint::try_from(timeout.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: a valid socket descriptor owned by `s`, and a pointer to a live c_uint whose
    // size is passed alongside it.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A request/response connection from an observer to one voter.
pub struct ClientConnection {
    pub addr: SocketAddr,
    stream: Option<Stream>,
    security: Arc<ControllerSecurity>,
}

impl ClientConnection {
    pub fn new(addr: SocketAddr, security: Arc<ControllerSecurity>) -> ClientConnection {
        ClientConnection {
            addr,
            stream: None,
            security,
        }
    }

    /// Sends `frame` and reads the one frame that answers it, within `timeout`. Any error
    /// drops the connection; the next call dials again.
    pub fn call(&mut self, frame: &Frame, timeout: Duration) -> Result<Frame, String> {
        let result = self.call_inner(frame, timeout);
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    fn call_inner(&mut self, frame: &Frame, timeout: Duration) -> Result<Frame, String> {
        let bytes = frame.encode().map_err(|e| e.to_string())?;
        if self.stream.is_none() {
            self.stream = Some(connect(self.addr, &self.security).map_err(|e| e.to_string())?);
        }
        let s = self.stream.as_mut().ok_or("not connected")?;
        s.tcp()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| e.to_string())?;
        s.send(&bytes).map_err(|e| e.to_string())?;
        let mut header = [0u8; FRAME_HEADER_BYTES];
        s.read_exact(&mut header).map_err(|e| e.to_string())?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if len > FRAME_BYTES_MAX {
            return Err(format!("frame of {len} bytes"));
        }
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).map_err(|e| e.to_string())?;
        Frame::decode(header[4], &payload).map_err(|e| e.to_string())
    }
}

/// Accepts peers' connections, secures them (`ControllerSecurity`: a connection that does
/// not authenticate is closed before any of its frames is read) and turns their frames into
/// driver events.
pub fn spawn_listener(
    listener: TcpListener,
    events: flume::Sender<Event>,
    shutdown: Arc<AtomicBool>,
    security: Arc<ControllerSecurity>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("raft-listen".into())
        .spawn(move || {
            let open = Arc::new(AtomicUsize::new(0));
            for stream in listener.incoming() {
                if shutdown.load(Ordering::Acquire) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                if open.load(Ordering::Acquire) >= INBOUND_CONNECTIONS_MAX {
                    tracing::warn!("too many metadata log connections; closing one");
                    continue;
                }
                open.fetch_add(1, Ordering::AcqRel);
                let (events, shutdown, open) = (events.clone(), shutdown.clone(), open.clone());
                let security = security.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("raft-recv".into())
                        .spawn(move || {
                            let peer = stream
                                .peer_addr()
                                .map_or_else(|_| "?".to_string(), |a| a.to_string());
                            if let Some(stream) = security.secure_accepted(stream, &peer) {
                                read_loop(stream, &events, &shutdown);
                            }
                            open.fetch_sub(1, Ordering::AcqRel);
                        });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start a metadata log reader");
                }
            }
        })
}

fn read_loop(mut stream: Stream, events: &flume::Sender<Event>, shutdown: &AtomicBool) {
    let _ = stream.tcp().set_read_timeout(Some(POLL_INTERVAL));
    let _ = stream.tcp().set_write_timeout(Some(WRITE_TIMEOUT));
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut last_heard = Instant::now();
    loop {
        if shutdown.load(Ordering::Acquire) {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                last_heard = Instant::now();
                buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if last_heard.elapsed() >= INBOUND_IDLE_MAX {
                    tracing::debug!("metadata log connection idle; closing it");
                    return;
                }
                continue;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        let mut consumed = 0;
        while let Some(header) = buf.get(consumed..consumed + FRAME_HEADER_BYTES) {
            let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
            let kind = header[4];
            if len > FRAME_BYTES_MAX {
                tracing::warn!(len, "oversized metadata log frame; closing the connection");
                return;
            }
            let start = consumed + FRAME_HEADER_BYTES;
            let Some(payload) = buf.get(start..start + len) else {
                break;
            };
            match Frame::decode(kind, payload) {
                Ok(frame @ (Frame::Fetch { .. } | Frame::ClientForward { .. })) => {
                    // An observer waits for the answer on this connection.
                    let (tx, rx) = flume::bounded(1);
                    if events.try_send(Event::Client { frame, reply: tx }).is_err() {
                        return;
                    }
                    let Ok(answer) = rx.recv_timeout(CLIENT_REPLY_TIMEOUT) else {
                        return;
                    };
                    let Ok(bytes) = answer.encode() else { return };
                    if stream.send(&bytes).is_err() {
                        return;
                    }
                }
                Ok(frame) => {
                    // A full driver queue drops the frame; raft and forwarders retry.
                    let _ = events.try_send(Event::Frame(frame));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "bad metadata log frame; closing the connection");
                    return;
                }
            }
            consumed = start + len;
        }
        buf.drain(..consumed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every frame kind survives encode/decode, and bad kinds, truncation and oversized
    /// lengths are errors rather than panics.
    #[test]
    fn frames_round_trip_and_reject_garbage() {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = 2;
        m.to = 3;
        m.term = 9;
        let frames = [
            Frame::Raft(m),
            Frame::Forward {
                origin: 1,
                request_id: 7,
                request: b"req".to_vec(),
            },
            Frame::ForwardReply {
                request_id: 7,
                status: ReplyStatus::Ok,
                index: 42,
                response: b"resp".to_vec(),
            },
            Frame::Fetch { from_index: 5 },
            Frame::FetchReply {
                leader: 2,
                commit: 9,
                snapshot: Some({
                    let mut snap = Snapshot::default();
                    snap.mut_metadata().index = 4;
                    snap.set_data(b"machine".to_vec().into());
                    snap
                }),
                entries: vec![Entry {
                    index: 5,
                    term: 1,
                    ..Default::default()
                }],
            },
            Frame::ClientForward {
                request: b"req".to_vec(),
            },
        ];
        for f in &frames {
            let bytes = f.encode().expect("encode");
            let back = Frame::decode(bytes[4], &bytes[5..]).expect("decode");
            assert_eq!(format!("{f:?}"), format!("{back:?}"));
        }
        assert!(Frame::decode(9, b"").is_err());
        assert!(Frame::decode(KIND_FORWARD, b"short").is_err());
        assert!(Frame::decode(KIND_FORWARD_REPLY, &[0u8; 9]).is_err());
        assert!(Frame::decode(KIND_RAFT, &[0xff, 0xff, 0xff]).is_err());
        let mut reply = vec![0u8; 20];
        reply[16] = 200; // a snapshot length past the end
        assert!(Frame::decode(KIND_FETCH_REPLY, &reply).is_err());
    }
}
