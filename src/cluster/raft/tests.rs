//! The metadata log end to end: real threads, real files in temp dirs, real TCP on
//! 127.0.0.1 ephemeral ports, driven through the public API with a tiny key/value machine.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::raft::eraftpb::Entry;
use futures::executor::block_on;

use super::storage::DiskStorage;
use super::*;

#[derive(Default)]
struct KvState {
    map: BTreeMap<String, String>,
    leadership: Vec<bool>,
    restores: usize,
    /// `tick` entries applied.
    ticks: usize,
}

/// Requests: `k=v` sets a key, `multi a=1,b=2` sets several atomically, `get k` reads.
/// On the leader, `tick` proposes a `tick` entry while `ticks_to_propose` lasts.
struct KvMachine {
    state: Arc<Mutex<KvState>>,
    ticks_to_propose: usize,
}

fn kv() -> (Box<dyn MetadataMachine>, Arc<Mutex<KvState>>) {
    kv_ticking(0)
}

fn kv_ticking(ticks_to_propose: usize) -> (Box<dyn MetadataMachine>, Arc<Mutex<KvState>>) {
    let state = Arc::new(Mutex::new(KvState::default()));
    (
        Box::new(KvMachine {
            state: state.clone(),
            ticks_to_propose,
        }),
        state,
    )
}

impl MetadataMachine for KvMachine {
    fn apply(&mut self, _index: u64, entry: &[u8]) {
        if entry == b"tick" {
            self.state.lock().expect("lock").ticks += 1;
            return;
        }
        let text = String::from_utf8_lossy(entry);
        if let Some((k, v)) = text.split_once('=') {
            self.state
                .lock()
                .expect("lock")
                .map
                .insert(k.into(), v.into());
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        let s = self.state.lock().expect("lock");
        s.map
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect::<String>()
            .into_bytes()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(snapshot).map_err(|e| e.to_string())?;
        let mut s = self.state.lock().expect("lock");
        s.restores += 1;
        s.map.clear();
        for line in text.lines() {
            let (k, v) = line.split_once('=').ok_or("bad snapshot line")?;
            s.map.insert(k.into(), v.into());
        }
        Ok(())
    }

    fn handle_request(&mut self, request: &[u8], _now_ms: u64) -> (Vec<Vec<u8>>, Vec<u8>) {
        let text = String::from_utf8_lossy(request).to_string();
        if let Some(key) = text.strip_prefix("get ") {
            let s = self.state.lock().expect("lock");
            let value = s.map.get(key).cloned().unwrap_or_default();
            return (Vec::new(), value.into_bytes());
        }
        if let Some(pairs) = text.strip_prefix("multi ") {
            let entries = pairs.split(',').map(|p| p.as_bytes().to_vec()).collect();
            return (entries, b"ok".to_vec());
        }
        (vec![request.to_vec()], b"ok".to_vec())
    }

    fn tick(&mut self, _now_ms: u64) -> Vec<Vec<u8>> {
        if self.ticks_to_propose == 0 {
            return Vec::new();
        }
        self.ticks_to_propose -= 1;
        vec![b"tick".to_vec()]
    }

    fn on_leadership(&mut self, active: bool, _now_ms: u64) {
        self.state.lock().expect("lock").leadership.push(active);
    }
}

fn map_of(state: &Arc<Mutex<KvState>>) -> BTreeMap<String, String> {
    state.lock().expect("lock").map.clone()
}

fn fast_config(node_id: u64, dir: &Path) -> RaftConfig {
    RaftConfig {
        node_id,
        listen: None,
        voters: Vec::new(),
        dir: dir.to_path_buf(),
        tick_ms: 10,
        election_ticks: 10,
        heartbeat_ticks: 2,
        snapshot_every_entries: 1000,
        request_timeout_ms: 5000,
        clock: crate::clock::SystemClock::shared(),
        security: super::ControllerSecurity::plaintext(),
    }
}

fn set(log: &MetadataLog, kv: &str) {
    let resp = block_on(log.request(kv.as_bytes().to_vec())).expect("request");
    assert_eq!(resp, b"ok");
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("log")
}

/// A single voter elects itself, applies requests (one entry, several atomically, and a read
/// with no entries) and the entries its machine's `tick` proposes, restores everything from
/// disk after a restart, and truncates a torn tail appended to its log file (a half-written
/// record, then a record with a bad CRC).
#[test]
fn single_node_applies_restarts_and_truncates_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (machine, state) = kv_ticking(3);
    let log = MetadataLog::start(fast_config(0, dir.path()), machine).expect("start");
    log.wait_caught_up(Duration::from_secs(5))
        .expect("caught up");
    set(&log, "a=1");
    set(&log, "b=2");
    set(&log, "multi c=3,d=4");
    // The future resolves after local apply: the state is visible right away.
    assert_eq!(map_of(&state).get("d").map(String::as_str), Some("4"));
    assert_eq!(block_on(log.request(b"get a".to_vec())).expect("get"), b"1");
    assert_eq!(log.active_controller(), Some(0));
    assert!(log.is_voter());
    assert_eq!(state.lock().expect("lock").leadership, vec![true]);
    wait_until("tick entries", Duration::from_secs(5), || {
        state.lock().expect("lock").ticks == 3
    });
    let applied = log.applied_index();
    log.shutdown();
    assert!(matches!(
        block_on(log.request(b"x=1".to_vec())),
        Err(RaftError::Shutdown)
    ));
    let before = map_of(&state);
    assert_eq!(before.len(), 4);

    // A torn append: a length prefix promising more bytes than were written.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(log_path(dir.path()))
            .expect("open log");
        f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 5]).expect("write");
    }
    let (machine, state) = kv();
    let log = MetadataLog::start(fast_config(0, dir.path()), machine).expect("restart");
    log.wait_caught_up(Duration::from_secs(5))
        .expect("caught up");
    assert_eq!(map_of(&state), before);
    assert_eq!(
        state.lock().expect("lock").ticks,
        3,
        "tick entries replayed"
    );
    assert!(log.applied_index() >= applied);
    set(&log, "e=5");
    log.shutdown();

    // A whole record whose CRC does not match its bytes.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(log_path(dir.path()))
            .expect("open log");
        f.write_all(&[3, 0, 0, 0, 9, 9, 9, 9, 1, 2, 3])
            .expect("write");
    }
    let (machine, state) = kv();
    let log = MetadataLog::start(fast_config(0, dir.path()), machine).expect("restart");
    log.wait_caught_up(Duration::from_secs(5))
        .expect("caught up");
    assert_eq!(map_of(&state).get("e").map(String::as_str), Some("5"));
    assert_eq!(map_of(&state).len(), 5);
    log.shutdown();
}

fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
    let mut e = Entry {
        index,
        term,
        ..Default::default()
    };
    e.set_data(data.to_vec().into());
    e
}

/// The log file follows raft-rs's overwrites: appending from an earlier index truncates the
/// replaced suffix, and a reopen sees exactly the surviving entries; a rewrite (compaction)
/// keeps only what it is given; an open directory cannot be opened twice.
#[test]
fn disk_log_truncates_replaced_suffix_and_rewrites() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut disk, rec) = DiskStorage::open(dir.path()).expect("open");
        assert!(rec.entries.is_empty() && rec.snapshot.is_none());
        let first: Vec<Entry> = (1..=5).map(|i| entry(i, 1, b"old")).collect();
        disk.append(&first).expect("append");
        disk.append(&[entry(3, 2, b"new"), entry(4, 2, b"new")])
            .expect("append over a suffix");
    }
    let (mut disk, rec) = DiskStorage::open(dir.path()).expect("reopen");
    // While open, the directory is locked against a second log.
    assert!(DiskStorage::open(dir.path()).is_err());
    let seen: Vec<(u64, u64)> = rec.entries.iter().map(|e| (e.index, e.term)).collect();
    assert_eq!(seen, vec![(1, 1), (2, 1), (3, 2), (4, 2)]);
    let before = disk.log_bytes();
    disk.rewrite_log(&[entry(4, 2, b"new")]).expect("rewrite");
    assert!(disk.log_bytes() < before);
    disk.append(&[entry(5, 2, b"more")]).expect("append");
    drop(disk);
    let (_, rec) = DiskStorage::open(dir.path()).expect("reopen");
    let seen: Vec<u64> = rec.entries.iter().map(|e| e.index).collect();
    assert_eq!(seen, vec![4, 5]);
}

/// With a small `snapshot_every_entries` the log is compacted (the file keeps only the tail
/// after the snapshot), and a restart restores the machine from snapshot + tail exactly.
#[test]
fn snapshot_compacts_log_and_restart_restores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = fast_config(3, dir.path());
    cfg.snapshot_every_entries = 5;
    let (machine, state) = kv();
    let log = MetadataLog::start(cfg.clone(), machine).expect("start");
    for i in 0..23 {
        set(&log, &format!("k{i}={i}"));
    }
    assert_eq!(log.active_controller(), Some(3));
    log.shutdown();
    let before = map_of(&state);
    assert_eq!(before.len(), 23);
    {
        let (_, rec) = DiskStorage::open(dir.path()).expect("open");
        let snap = rec.snapshot.expect("a snapshot was written");
        assert!(snap.get_metadata().index >= 20, "snapshot is recent");
        assert!(
            rec.entries.len() <= 6,
            "log holds {} entries",
            rec.entries.len()
        );
    }
    let (machine, state) = kv();
    let log = MetadataLog::start(cfg, machine).expect("restart");
    log.wait_caught_up(Duration::from_secs(5))
        .expect("caught up");
    assert_eq!(map_of(&state), before);
    set(&log, "after=1");
    assert_eq!(map_of(&state).len(), 24);
    log.shutdown();
}

struct Cluster {
    dirs: Vec<tempfile::TempDir>,
    addrs: Vec<SocketAddr>,
    voters: Vec<(u64, SocketAddr)>,
    snapshot_every_entries: u64,
}

impl Cluster {
    fn new(n: usize, snapshot_every_entries: u64) -> (Cluster, Vec<TcpListener>) {
        let listeners: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let addrs: Vec<SocketAddr> = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr"))
            .collect();
        let voters = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (i as u64, *a))
            .collect();
        let dirs = (0..n)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        (
            Cluster {
                dirs,
                addrs,
                voters,
                snapshot_every_entries,
            },
            listeners,
        )
    }

    fn start(&self, i: usize, listener: Option<TcpListener>) -> (MetadataLog, Arc<Mutex<KvState>>) {
        let listener = match listener {
            Some(l) => l,
            None => TcpListener::bind(self.addrs[i]).expect("rebind"),
        };
        let mut cfg = fast_config(i as u64, self.dirs[i].path());
        cfg.listen = Some(self.addrs[i]);
        cfg.voters = self.voters.clone();
        cfg.snapshot_every_entries = self.snapshot_every_entries;
        let (machine, state) = kv();
        let log = MetadataLog::start_with_listener(cfg, machine, Some(listener)).expect("start");
        (log, state)
    }
}

/// Waits until every log in `logs` names the same leader, and returns it.
fn agreed_leader(logs: &[&MetadataLog]) -> u64 {
    let mut leader = None;
    wait_until("an agreed leader", Duration::from_secs(10), || {
        let seen: Vec<Option<u64>> = logs.iter().map(|l| l.active_controller()).collect();
        leader = seen[0];
        leader.is_some() && seen.iter().all(|s| *s == leader)
    });
    leader.expect("leader")
}

/// Three voters over TCP elect a leader; requests sent to any node (so, forwarded from
/// followers) succeed and all machines converge; when the leader shuts down the other two
/// elect a new one and keep serving; the old leader restarted from its directory catches up.
#[test]
fn three_voters_replicate_fail_over_and_catch_up() {
    let (cluster, listeners) = Cluster::new(3, 1000);
    let mut nodes: Vec<Option<(MetadataLog, Arc<Mutex<KvState>>)>> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| Some(cluster.start(i, Some(l))))
        .collect();
    let logs: Vec<MetadataLog> = nodes
        .iter()
        .map(|n| n.as_ref().expect("node").0.clone())
        .collect();
    let leader = agreed_leader(&logs.iter().collect::<Vec<_>>()) as usize;
    for (i, log) in logs.iter().enumerate() {
        set(log, &format!("from{i}=x"));
        // Applied locally before the answer, even on a follower.
        let (_, state) = nodes[i].as_ref().expect("node");
        assert!(map_of(state).contains_key(&format!("from{i}")));
    }
    set(&logs[(leader + 1) % 3], "multi m1=1,m2=2");
    let expected = map_of(&nodes[leader].as_ref().expect("leader").1);
    assert_eq!(expected.len(), 5);
    for n in nodes.iter().flatten() {
        wait_until("convergence", Duration::from_secs(5), || {
            map_of(&n.1) == expected
        });
    }

    // The leader goes away; the survivors elect another and keep going.
    let (old, old_state) = nodes[leader].take().expect("leader");
    old.shutdown();
    // It was told when it became the active controller and when it stopped.
    let calls = old_state.lock().expect("lock").leadership.clone();
    assert_eq!(calls.first(), Some(&true));
    assert_eq!(calls.last(), Some(&false));
    let survivors: Vec<&MetadataLog> = nodes.iter().flatten().map(|n| &n.0).collect();
    let new_leader = {
        let mut l = 0;
        wait_until("a new leader", Duration::from_secs(10), || {
            l = agreed_leader(&survivors);
            l as usize != leader
        });
        l as usize
    };
    assert_ne!(new_leader, leader);
    for (j, log) in survivors.iter().enumerate() {
        set(log, &format!("after{j}=y"));
    }
    let new_state = &nodes[new_leader].as_ref().expect("new leader").1;
    let calls = new_state.lock().expect("lock").leadership.clone();
    assert_eq!(calls.last(), Some(&true));

    // The old leader comes back from its directory and catches up.
    let (back, back_state) = cluster.start(leader, None);
    back.wait_caught_up(Duration::from_secs(10))
        .expect("caught up");
    let expected = map_of(&nodes[new_leader].as_ref().expect("new leader").1);
    assert_eq!(expected.len(), 7);
    wait_until("restarted node converges", Duration::from_secs(5), || {
        map_of(&back_state) == expected
    });
    set(&back, "back=z");
    assert_eq!(
        map_of(&back_state).get("back").map(String::as_str),
        Some("z")
    );

    back.shutdown();
    for n in nodes.iter().flatten() {
        n.0.shutdown();
    }
}

/// A voter that starts empty after the others compacted their logs cannot be sent the old
/// entries: it receives the leader's snapshot (MsgSnapshot), restores its machine from it,
/// keeps it on disk, and then follows new entries.
#[test]
fn fresh_voter_catches_up_from_snapshot() {
    let (cluster, mut listeners) = Cluster::new(3, 5);
    let third_listener = listeners.pop();
    let nodes: Vec<(MetadataLog, Arc<Mutex<KvState>>)> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| cluster.start(i, Some(l)))
        .collect();
    agreed_leader(&[&nodes[0].0, &nodes[1].0]);
    for i in 0..20 {
        set(&nodes[i % 2].0, &format!("k{i}={i}"));
    }
    let (third, third_state) = cluster.start(2, third_listener);
    third
        .wait_caught_up(Duration::from_secs(10))
        .expect("caught up");
    let expected = map_of(&nodes[0].1);
    assert_eq!(expected.len(), 20);
    wait_until("snapshot installed", Duration::from_secs(5), || {
        map_of(&third_state) == expected
    });
    // It started with no snapshot on disk, so a restore can only be the leader's snapshot.
    assert_eq!(third_state.lock().expect("lock").restores, 1);
    assert!(cluster.dirs[2].path().join("snapshot").exists());
    set(&third, "late=1");
    assert_eq!(map_of(&third_state).len(), 21);
    third.shutdown();
    for n in &nodes {
        n.0.shutdown();
    }
}

/// A node outside the voter set runs as an observer: it follows the log by fetching from the
/// voters (including a snapshot once their logs are compacted), its requests are forwarded
/// to the leader and answered after it applied them, and it never votes.
#[test]
fn observer_follows_and_forwards() {
    let (cluster, listeners) = Cluster::new(3, 5);
    let nodes: Vec<(MetadataLog, Arc<Mutex<KvState>>)> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| cluster.start(i, Some(l)))
        .collect();
    agreed_leader(&nodes.iter().map(|n| &n.0).collect::<Vec<_>>());
    for i in 0..12 {
        set(&nodes[i % 3].0, &format!("k{i}={i}"));
    }
    let observer_dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = fast_config(7, observer_dir.path());
    cfg.voters = cluster.voters.clone();
    let (machine, state) = kv();
    let observer = MetadataLog::start(cfg, machine).expect("observer");
    assert!(!observer.is_voter());
    observer
        .wait_caught_up(Duration::from_secs(10))
        .expect("caught up");
    let expected = map_of(&nodes[0].1);
    wait_until("observer converges", Duration::from_secs(5), || {
        map_of(&state) == expected
    });
    // The voters compacted at 5 entries, so the observer started from their snapshot.
    assert_eq!(state.lock().expect("lock").restores, 1);
    set(&observer, "from_observer=1");
    assert_eq!(
        map_of(&state).get("from_observer").map(String::as_str),
        Some("1")
    );
    assert!(observer.active_controller().is_some_and(|l| l < 3));
    for n in &nodes {
        wait_until("voters see it", Duration::from_secs(5), || {
            map_of(&n.1).contains_key("from_observer")
        });
    }
    observer.shutdown();
    for n in &nodes {
        n.0.shutdown();
    }
}

/// Hard state, conf state and snapshot read back exactly as saved; a flipped bit in either
/// file is reported as `Corrupt` at open instead of being trusted.
#[test]
fn state_and_snapshot_files_round_trip_and_detect_corruption() {
    use ::raft::eraftpb::{ConfState, HardState, Snapshot};
    let dir = tempfile::tempdir().expect("tempdir");
    let hs = HardState {
        term: 7,
        vote: 2,
        commit: 0,
        ..Default::default()
    };
    let cs = ConfState::from((vec![1u64, 2, 3], Vec::<u64>::new()));
    let mut snap = Snapshot::default();
    snap.set_data(b"machine bytes".to_vec().into());
    snap.mut_metadata().index = 0;
    snap.mut_metadata().term = 1;
    {
        let (mut disk, _) = DiskStorage::open(dir.path()).expect("open");
        disk.save_state(&hs, &cs).expect("save state");
        disk.save_snapshot(&snap).expect("save snapshot");
    }
    {
        let (_, rec) = DiskStorage::open(dir.path()).expect("reopen");
        assert_eq!(rec.hard_state, Some(hs));
        assert_eq!(rec.conf_state, Some(cs));
        assert_eq!(rec.snapshot, Some(snap));
    }
    for file in ["state", "snapshot"] {
        let path = dir.path().join(file);
        let mut bytes = std::fs::read(&path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).expect("write");
        assert!(matches!(
            DiskStorage::open(dir.path()),
            Err(RaftError::Corrupt { .. })
        ));
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).expect("write");
    }
}
