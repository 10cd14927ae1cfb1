//! A partition directory's identity and its deletion, as Kafka keeps them.
//!
//! Directory names repeat: `<topic>-<partition>` is the same for a topic deleted and created
//! again under the same name, whose log must start empty. Two defences, both Kafka's:
//!
//! - `partition.metadata` (Kafka's file and text format) holds the topic id the directory was
//!   created for, written and fsynced before any log file. Opening a replica compares it with
//!   the topic id of the metadata: a directory of another topic (left by a broker that was
//!   down while its topic was deleted and created again, or by a crash mid-deletion) is never
//!   served; it is moved aside and deleted, and the replica starts in a fresh directory.
//!
//!   ```text
//!   version: 0
//!   topic_id: <the id, Kafka's base64url form>
//!   ```
//!
//! - Deleting a log renames its directory first, to `<topic>-<partition>.<uuid>-delete`
//!   (atomic, its parent fsynced), and removes the renamed directory afterwards. The name is
//!   free at once for a topic created again, a crash mid-removal never leaves a half-deleted
//!   log under the live name, and leftover `-delete` directories are removed at startup
//!   (`remove_deleted_dirs`).
//!
//! - Removing a renamed directory is the slow part (unlinking a GB segment takes tens of ms
//!   on ext4, more with `discard`; a topic's 16 partitions of 7 GB took 1.2 s), so it is
//!   done by a thread of its own (`remove_later`), never on a shard's thread, where it stalled
//!   every request of the shard (a producer's p99 went from 1.7 to 161 ms). Kafka too
//!   deletes log files off its request threads (its scheduled `kafka-delete-logs` task).
//!
//! - A stray log (a replica the metadata no longer places on this broker: its topic was
//!   deleted, or it moved away, while the broker was down) is renamed
//!   `<topic>-<partition>.<uuid>-stray`, as Kafka names it, then removed (`shard::stray`);
//!   a `-stray` directory left by a crash in between goes at the next start too.

use std::path::{Path, PathBuf};

use base64::Engine;

use super::state_file;
use super::Error;

pub(crate) const PARTITION_METADATA_FILE: &str = "partition.metadata";
const VERSION: u32 = 0;
/// Ends the name of a directory moved aside for deletion (Kafka's `-delete`).
pub(crate) const DELETE_SUFFIX: &str = "-delete";
/// Kafka's suffix for a stray log moved aside (`UnifiedLog.StrayDirSuffix`).
pub(crate) const STRAY_SUFFIX: &str = "-stray";

/// Why a `partition.metadata` file cannot be trusted. The directory is then neither served
/// nor deleted: whose log it holds is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataFileError {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("missing the `{0}` line")]
    Missing(&'static str),
    #[error("line {line} is not `{expected}: <value>`")]
    Malformed { line: usize, expected: &'static str },
    #[error("unsupported version `{0}`")]
    UnsupportedVersion(String),
    #[error("topic id `{0}` is not a base64url UUID")]
    BadTopicId(String),
    #[error("the zero topic id")]
    ZeroTopicId,
    #[error("unexpected content after the topic id")]
    TrailingContent,
}

/// The file's bytes for `topic_id`.
pub(crate) fn render(topic_id: u128) -> Vec<u8> {
    let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(topic_id.to_be_bytes());
    format!("version: {VERSION}\ntopic_id: {id}\n").into_bytes()
}

/// Parses the file strictly; any deviation is an error, never a guess.
pub(crate) fn parse(bytes: &[u8]) -> Result<u128, MetadataFileError> {
    let text = std::str::from_utf8(bytes).map_err(|_| MetadataFileError::NotUtf8)?;
    let mut lines = text.lines();
    let mut field = |line: usize, key: &'static str| -> Result<&str, MetadataFileError> {
        let l = lines.next().ok_or(MetadataFileError::Missing(key))?;
        let (k, v) = l.split_once(':').ok_or(MetadataFileError::Malformed {
            line,
            expected: key,
        })?;
        if k.trim() != key {
            return Err(MetadataFileError::Malformed {
                line,
                expected: key,
            });
        }
        Ok(v.trim())
    };
    let version = field(1, "version")?;
    if version.parse::<u32>().ok() != Some(VERSION) {
        return Err(MetadataFileError::UnsupportedVersion(version.to_string()));
    }
    let id = field(2, "topic_id")?;
    let bad = || MetadataFileError::BadTopicId(id.chars().take(64).collect());
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(id)
        .map_err(|_| bad())?;
    let raw: [u8; 16] = raw.try_into().map_err(|_| bad())?;
    let topic_id = u128::from_be_bytes(raw);
    if topic_id == 0 {
        return Err(MetadataFileError::ZeroTopicId);
    }
    if lines.any(|l| !l.trim().is_empty()) {
        return Err(MetadataFileError::TrailingContent);
    }
    Ok(topic_id)
}

/// The topic id `dir` was created for; `None` if it has no `partition.metadata` (a log
/// written before the file existed).
pub(crate) async fn read_topic_id(dir: &Path) -> Result<Option<u128>, Error> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let Some(bytes) = state_file::read_raw(&path).await? else {
        return Ok(None);
    };
    parse(&bytes)
        .map(Some)
        .map_err(|e| Error::corruption(path, 0, e.to_string()))
}

/// Writes `partition.metadata` atomically (temp, fsync, rename, fsync the directory).
pub(crate) async fn write_topic_id(dir: &Path, topic_id: u128) -> Result<(), Error> {
    state_file::write_atomic(dir, PARTITION_METADATA_FILE, render(topic_id)).await
}

/// What `prepare` found in a partition's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// No directory: created, holding only `partition.metadata`.
    Created,
    /// The topic's own log.
    Existing,
    /// A log without `partition.metadata` (written before it existed): taken as the topic's,
    /// as Kafka does on upgrade, and the file written.
    Adopted,
    /// Another topic's log (`stale_id`): moved aside to `moved_to` for deletion; the
    /// directory was created again, empty.
    ReplacedStale { stale_id: u128, moved_to: PathBuf },
}

/// Makes `dir` hold `topic_id`'s log before it is opened (see the module comment). A topic
/// id of 0 (unknown) skips the check. The caller must know that no open log uses `dir`.
pub async fn prepare(dir: &Path, topic_id: u128) -> Result<Prepared, Error> {
    if topic_id == 0 {
        return Ok(Prepared::Existing);
    }
    let exists = dir
        .try_exists()
        .map_err(|e| Error::io(dir, "stat dir", e))?;
    if exists {
        match read_topic_id(dir).await? {
            Some(id) if id == topic_id => return Ok(Prepared::Existing),
            None => {
                write_topic_id(dir, topic_id).await?;
                return Ok(Prepared::Adopted);
            }
            Some(stale_id) => {
                let moved_to = rename_for_delete(dir).await?;
                create(dir, topic_id).await?;
                return Ok(Prepared::ReplacedStale { stale_id, moved_to });
            }
        }
    }
    create(dir, topic_id).await?;
    Ok(Prepared::Created)
}

/// Creates `dir` with its `partition.metadata`, durable before any log file is written.
/// Runs on a shard: the mkdir goes to glommio's blocking pool and the parent's fsync to
/// io_uring, so the shard's other partitions are served meanwhile (a blocking fsync of the
/// data directory held the event loop for the disk's cache flush, once per partition
/// created: seen in D state in `blkdev_issue_flush`, perf/RESULTS.md).
async fn create(dir: &Path, topic_id: u128) -> Result<(), Error> {
    // glommio opens directories with dirfd -1 rather than AT_FDCWD (see `sync_dir`).
    let abs = std::path::absolute(dir).map_err(|e| Error::io(dir, "resolve dir", e))?;
    let created = glommio::io::Directory::create(&abs)
        .await
        .map_err(|e| Error::io(dir, "create dir", e.into()))?;
    created
        .close()
        .await
        .map_err(|e| Error::io(dir, "close dir", e.into()))?;
    write_topic_id(dir, topic_id).await?;
    state_file::sync_dir(parent_of(dir)).await
}

/// Removes `dir` (a log already renamed `-delete` or `-stray`) on the removal thread and
/// returns at once. What cannot be queued, or fails, is logged and left for the next start
/// (`remove_deleted_dirs`).
pub fn remove_later(dir: PathBuf) {
    static QUEUE: std::sync::OnceLock<Option<flume::Sender<PathBuf>>> = std::sync::OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = flume::bounded::<PathBuf>(crate::limits::LOG_REMOVALS_QUEUED_MAX);
        let spawned = std::thread::Builder::new()
            .name("strata-log-remove".into())
            .spawn(move || {
                // Runs for the life of the process: the queue's sender is never dropped.
                for dir in rx.iter() {
                    remove_now(&dir);
                }
            });
        match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the log removal thread; deleted logs are removed at the next start");
                None
            }
        }
    });
    let Some(tx) = queue else {
        return;
    };
    if let Err(e) = tx.try_send(dir) {
        let dir = e.into_inner();
        tracing::warn!(dir = %dir.display(), "too many deleted logs waiting for removal; the next start removes this one");
    }
}

fn remove_now(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a deleted log; the next start will");
    }
}

/// Moves `dir` aside to `<name>.<uuid>-delete` (atomic; the parent fsynced) and returns the
/// new path. The name is free as soon as this returns. For a shard: the rename goes to
/// glommio's blocking pool and the fsync to io_uring, as in `create`.
pub async fn rename_for_delete(dir: &Path) -> Result<PathBuf, Error> {
    let to = aside_path(dir, DELETE_SUFFIX)?;
    glommio::io::rename(dir, &to)
        .await
        .map_err(|e| Error::io(dir, "rename for deletion", e.into()))?;
    state_file::sync_dir(parent_of(&to)).await?;
    Ok(to)
}

/// Moves a stray log's `dir` aside to `<name>.<uuid>-stray`, as `rename_for_delete` does,
/// with blocking calls: for the start-up scan, which runs before any shard.
pub fn rename_as_stray(dir: &Path) -> Result<PathBuf, Error> {
    let to = aside_path(dir, STRAY_SUFFIX)?;
    std::fs::rename(dir, &to).map_err(|e| Error::io(dir, "rename for deletion", e))?;
    let parent = parent_of(&to);
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(parent, "fsync dir", e))?;
    Ok(to)
}

/// `<dir>.<uuid><suffix>`: a fresh name beside `dir` to move it to.
fn aside_path(dir: &Path, suffix: &str) -> Result<PathBuf, Error> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::corruption(dir, 0, "a partition directory needs a UTF-8 name"))?;
    let id = uuid::Uuid::new_v4().simple();
    Ok(dir.with_file_name(format!("{name}.{id}{suffix}")))
}

/// Is `name` a directory `rename_for_delete` or `rename_as_stray` made
/// (`<anything>.<32 hex digits>-delete` or `-stray`)?
pub fn is_deleted_dir_name(name: &str) -> bool {
    name.strip_suffix(DELETE_SUFFIX)
        .or_else(|| name.strip_suffix(STRAY_SUFFIX))
        .and_then(|stem| stem.rsplit_once('.'))
        .is_some_and(|(base, id)| {
            !base.is_empty() && id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// The topic and partition a live partition directory's name `<topic>-<partition>` names;
/// `None` for anything else in the data directory (the metadata log, a directory left for
/// deletion).
pub fn partition_of_dir_name(name: &str) -> Option<(&str, i32)> {
    if is_deleted_dir_name(name) {
        return None;
    }
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((topic, partition.parse().ok()?))
}

/// `read_topic_id` with blocking reads, for the start-up scan outside any executor.
pub fn read_topic_id_blocking(dir: &Path) -> Result<Option<u128>, Error> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, "read", e)),
    };
    parse(&bytes)
        .map(Some)
        .map_err(|e| Error::corruption(path, 0, e.to_string()))
}

/// Removes every directory in `data_dir` left for deletion by a previous run (a crash or
/// shutdown between the rename and the removal). Returns how many went; one that cannot be
/// removed is logged and left for the next start.
pub fn remove_deleted_dirs(data_dir: &Path) -> Result<usize, Error> {
    let entries = std::fs::read_dir(data_dir).map_err(|e| Error::io(data_dir, "read dir", e))?;
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(data_dir, "read dir", e))?;
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || !entry.file_name().to_str().is_some_and(is_deleted_dir_name) {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                tracing::info!(dir = %path.display(), "removed a log left for deletion");
                removed += 1;
            }
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "cannot remove a log left for deletion")
            }
        }
    }
    Ok(removed)
}

/// The directory holding `path`, whose fsync makes a rename or creation in it durable.
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const ID: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;

    #[test]
    fn render_then_parse_round_trips() {
        let bytes = render(ID);
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.starts_with("version: 0\ntopic_id: "), "{text}");
        assert_eq!(parse(&bytes), Ok(ID));
    }

    #[test]
    fn parses_kafkas_file() {
        // Uuid.toString() of Kafka: base64url, no padding, 22 characters.
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(ID.to_be_bytes());
        assert_eq!(id.len(), 22);
        let file = format!("version: 0\ntopic_id: {id}");
        assert_eq!(parse(file.as_bytes()), Ok(ID));
    }

    #[test]
    fn bad_content_is_a_typed_error() {
        use MetadataFileError as E;
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(ID.to_be_bytes());
        let cases: Vec<(Vec<u8>, E)> = vec![
            (vec![], E::Missing("version")),
            (vec![0xff, 0xfe, 0x00], E::NotUtf8),
            (b"version: 0\n".to_vec(), E::Missing("topic_id")),
            (
                b"garbage".to_vec(),
                E::Malformed {
                    line: 1,
                    expected: "version",
                },
            ),
            (
                format!("topic_id: {id}\nversion: 0\n").into_bytes(),
                E::Malformed {
                    line: 1,
                    expected: "version",
                },
            ),
            (
                format!("version: 1\ntopic_id: {id}\n").into_bytes(),
                E::UnsupportedVersion("1".into()),
            ),
            (
                b"version: -0x\ntopic_id: x\n".to_vec(),
                E::UnsupportedVersion("-0x".into()),
            ),
            (
                b"version: 0\ntopic_id: not base64!\n".to_vec(),
                E::BadTopicId("not base64!".into()),
            ),
            (
                b"version: 0\ntopic_id: AAAA\n".to_vec(),
                E::BadTopicId("AAAA".into()),
            ),
            (
                b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n".to_vec(),
                E::ZeroTopicId,
            ),
            (
                format!("version: 0\ntopic_id: {id}\nmore: 1\n").into_bytes(),
                E::TrailingContent,
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                parse(&bytes),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // A fixed-seed xorshift: the same bytes every run.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..400 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly the file's own alphabet, so the parse gets past its first checks.
                    b"version: 0\ntopic_id AQZ-_\x00\xff"[(x % 23) as usize]
                })
                .collect();
            let _ = parse(&bytes);
        }
    }

    use crate::storage::tests::{run, test_dir};
    use crate::storage::{LogConfig, Partition};

    const OTHER: u128 = 7;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn prepare_creates_keeps_and_replaces_a_stale_dir() {
        run(|| async {
            let root = test_dir();
            let dir = root.path().join("t-0");
            assert_eq!(prepare(&dir, ID).await, Ok(Prepared::Created));
            assert_eq!(names(&dir), vec![PARTITION_METADATA_FILE]);
            assert_eq!(read_topic_id(&dir).await, Ok(Some(ID)));
            // The topic's own log is kept.
            std::fs::write(dir.join("00000000000000000000.log"), b"old records").unwrap();
            assert_eq!(prepare(&dir, ID).await, Ok(Prepared::Existing));
            assert_eq!(names(&dir).len(), 2);
            // Another topic of the same name: the old log is moved aside, the dir starts empty.
            let Ok(Prepared::ReplacedStale { stale_id, moved_to }) = prepare(&dir, OTHER).await
            else {
                panic!("not replaced");
            };
            assert_eq!(stale_id, ID);
            assert_eq!(names(&dir), vec![PARTITION_METADATA_FILE]);
            assert_eq!(read_topic_id(&dir).await, Ok(Some(OTHER)));
            let moved_name = moved_to.file_name().unwrap().to_str().unwrap();
            assert!(is_deleted_dir_name(moved_name), "{moved_name}");
            assert!(names(&moved_to).contains(&"00000000000000000000.log".to_string()));
            // An unknown topic id (0) checks nothing.
            assert_eq!(prepare(&dir, 0).await, Ok(Prepared::Existing));
        });
    }

    #[test]
    fn prepare_adopts_a_log_without_the_file() {
        run(|| async {
            let root = test_dir();
            let dir = root.path().join("t-0");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("00000000000000000000.log"), b"records").unwrap();
            assert_eq!(prepare(&dir, ID).await, Ok(Prepared::Adopted));
            assert_eq!(read_topic_id(&dir).await, Ok(Some(ID)));
            assert_eq!(names(&dir).len(), 2);
        });
    }

    #[test]
    fn prepare_refuses_a_garbage_file_and_touches_nothing() {
        run(|| async {
            let root = test_dir();
            let dir = root.path().join("t-0");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(PARTITION_METADATA_FILE), b"\x00garbage\xff").unwrap();
            std::fs::write(dir.join("00000000000000000000.log"), b"records").unwrap();
            let e = prepare(&dir, ID).await.unwrap_err();
            assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
            assert_eq!(names(&dir).len(), 2);
            assert_eq!(names(root.path()), vec!["t-0"]);
        });
    }

    #[test]
    fn delete_renames_first_then_removes() {
        run(|| async {
            let root = test_dir();
            let dir = root.path().join("t-0");
            assert_eq!(prepare(&dir, ID).await, Ok(Prepared::Created));
            let p = Partition::open(dir.clone(), LogConfig::default())
                .await
                .unwrap();
            let moved = p.delete().await.unwrap().unwrap();
            // The name is free as soon as `delete` returns: a topic created again gets a
            // fresh directory even while the old one is still being removed.
            assert!(!dir.exists());
            assert!(is_deleted_dir_name(
                moved.file_name().unwrap().to_str().unwrap()
            ));
            assert_eq!(prepare(&dir, OTHER).await, Ok(Prepared::Created));
            // Then the background removal finishes.
            for _ in 0..200 {
                if !moved.exists() {
                    break;
                }
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(!moved.exists());
            assert_eq!(names(root.path()), vec!["t-0"]);
            // Deleting a log whose directory is already gone is not an error.
            let q = Partition::open(root.path().join("u-0"), LogConfig::default())
                .await
                .unwrap();
            std::fs::remove_dir_all(root.path().join("u-0")).unwrap();
            assert_eq!(q.delete().await, Ok(None));
        });
    }

    #[test]
    fn startup_removes_only_dirs_left_for_deletion() {
        let root = test_dir();
        let id = uuid::Uuid::new_v4().simple();
        let left = root.path().join(format!("t-0.{id}{DELETE_SUFFIX}"));
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("00000000000000000000.log"), b"old").unwrap();
        std::fs::create_dir_all(root.path().join("t-1")).unwrap();
        std::fs::create_dir_all(root.path().join("strata.meta")).unwrap();
        std::fs::create_dir_all(root.path().join("x-delete")).unwrap();
        // A file with the pattern is not a log directory.
        std::fs::write(root.path().join(format!("f.{id}{DELETE_SUFFIX}")), b"").unwrap();
        assert_eq!(remove_deleted_dirs(root.path()), Ok(1));
        assert_eq!(
            names(root.path()),
            vec![
                format!("f.{id}{DELETE_SUFFIX}"),
                "strata.meta".into(),
                "t-1".into(),
                "x-delete".into()
            ]
        );
    }

    #[test]
    fn partition_dir_names() {
        let id = uuid::Uuid::new_v4().simple().to_string();
        assert_eq!(partition_of_dir_name("t-0"), Some(("t", 0)));
        assert_eq!(
            partition_of_dir_name("my-topic.x-12"),
            Some(("my-topic.x", 12))
        );
        assert_eq!(
            partition_of_dir_name("__consumer_offsets-49"),
            Some(("__consumer_offsets", 49))
        );
        for not_one in [
            "strata.meta",
            "t-",
            "-3",
            "t-1a",
            "t-+1",
            "t-99999999999",
            "t",
            &format!("t-0.{id}-delete"),
            &format!("t-0.{id}-stray"),
        ] {
            assert_eq!(partition_of_dir_name(not_one), None, "{not_one}");
        }
    }

    #[test]
    fn stray_dirs_are_moved_aside_and_removed_at_startup() {
        let root = test_dir();
        let dir = root.path().join("t-0");
        std::fs::create_dir_all(&dir).unwrap();
        let moved = rename_as_stray(&dir).unwrap();
        let moved_name = moved.file_name().unwrap().to_str().unwrap().to_string();
        assert!(moved_name.starts_with("t-0.") && moved_name.ends_with("-stray"));
        assert!(is_deleted_dir_name(&moved_name), "{moved_name}");
        assert_eq!(remove_deleted_dirs(root.path()), Ok(1));
        assert!(names(root.path()).is_empty());
    }

    #[test]
    fn blocking_read_of_the_topic_id() {
        let root = test_dir();
        let dir = root.path().join("t-0");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read_topic_id_blocking(&dir), Ok(None));
        std::fs::write(dir.join(PARTITION_METADATA_FILE), render(ID)).unwrap();
        assert_eq!(read_topic_id_blocking(&dir), Ok(Some(ID)));
        std::fs::write(dir.join(PARTITION_METADATA_FILE), b"garbage").unwrap();
        assert!(read_topic_id_blocking(&dir).is_err());
    }

    #[test]
    fn deleted_dir_names() {
        let id = uuid::Uuid::new_v4().simple().to_string();
        assert!(is_deleted_dir_name(&format!("t-0.{id}-delete")));
        assert!(is_deleted_dir_name(&format!("my.topic-12.{id}-delete")));
        // A topic may itself be named like this, short of the 32-digit id.
        assert!(!is_deleted_dir_name("my-delete"));
        assert!(!is_deleted_dir_name("t-0.abc-delete"));
        assert!(!is_deleted_dir_name(&format!(".{id}-delete")));
        assert!(!is_deleted_dir_name(&format!("t-0.{id}")));
        assert!(!is_deleted_dir_name("strata.meta"));
    }
}
