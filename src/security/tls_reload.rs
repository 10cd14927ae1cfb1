//! The TLS configurations a broker uses for its own connections to the cluster (its client to
//! the other brokers' inter-broker listeners and to the controller quorum's port, and the
//! controller port's server side), rebuilt from their files when they change, so a rotated
//! certificate or CA is used without a restart, as the client listeners' is
//! (`server::tls`). Kafka reloads these keystores the same way (dynamic broker configs).
//!
//! When to look is `tls::ReloadCheck`'s decision (at most once per
//! `TLS_RELOAD_CHECK_INTERVAL_MS`, on a new connection). The looking and the reading are the
//! caller's (`Config::broker_tls_client`, `Config::broker_tls_server`), passed in as
//! closures, so this layer stays free of files. Used from shard threads and the controller
//! quorum's threads alike, so the state is behind a `Mutex`, held only while the closures
//! look at the files and, after a change, read them (small blocking reads, at most once per
//! interval), never across an await.
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use tracing::{error, info};

use super::tls::ReloadCheck;

/// The files' modification times (None: unreadable), in a fixed order.
pub type Look = Box<dyn Fn() -> Vec<Option<SystemTime>> + Send + Sync>;
/// Reads the files and builds the configuration; an error names the file or setting at fault.
pub type Build<T> = Box<dyn Fn() -> Result<Arc<T>, String> + Send + Sync>;

/// A TLS configuration of type `T` (`rustls::ClientConfig` or `ServerConfig`) and how to look
/// at and read the files it is built from.
pub struct ReloadingTls<T> {
    /// What it secures, for the logs: "inter-broker", "controller listener", ...
    what: &'static str,
    look: Look,
    build: Build<T>,
    state: Mutex<State<T>>,
}

struct State<T> {
    current: Arc<T>,
    check: ReloadCheck,
}

impl<T> std::fmt::Debug for ReloadingTls<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingTls")
            .field("what", &self.what)
            .finish_non_exhaustive()
    }
}

impl<T> ReloadingTls<T> {
    /// Built now; an error if it cannot be.
    pub fn new(what: &'static str, look: Look, build: Build<T>) -> Result<Self, String> {
        // The times before the contents, so a change made while they are read is seen.
        let check = ReloadCheck::new(look(), Instant::now());
        let current = build()?;
        Ok(ReloadingTls {
            what,
            look,
            build,
            state: Mutex::new(State { current, check }),
        })
    }

    /// The configuration for a connection about to be made or accepted: the current one,
    /// rebuilt first if a file changed. A replacement that does not load is logged and the
    /// previous configuration kept (tried again when the files change again).
    pub fn current(&self) -> Arc<T> {
        // A thread that panicked holding the lock left a whole state (a field is replaced at
        // once, never half written): keep using it.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.check.changed(Instant::now(), &self.look) {
            match (self.build)() {
                Ok(config) => {
                    state.current = config;
                    info!("{} TLS certificates reloaded", self.what);
                }
                Err(e) => error!(
                    "{} TLS certificates changed but cannot be loaded; keeping the previous ones: {e}",
                    self.what
                ),
            }
        }
        state.current.clone()
    }
}
