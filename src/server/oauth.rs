//! OAUTHBEARER's verification keys on a shard: the JWKS file that
//! `sasl_oauthbearer_jwks_endpoint_url` names, read at start (a missing or bad file fails the
//! start, as a bad certificate does) and re-read when its modification time changes, looked
//! at no more than once a second and only when a client authenticates, so rotated keys are
//! taken without a restart. A changed file that cannot be used is logged and the previous
//! keys kept. Each shard keeps its own copy (a thread-local: shards share nothing mutable).
use std::cell::RefCell;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use tracing::{error, info};

use crate::config::Config;
use crate::limits::{OAUTHBEARER_JWKS_BYTES_MAX, OAUTHBEARER_JWKS_RELOAD_CHECK_INTERVAL_MS};
use crate::security::sasl::jwt::{Jwks, JwtValidator};

/// Reads and parses the JWKS at `path`, refusing a file larger than the bound.
fn read_jwks(path: &Path) -> Result<Jwks, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = Vec::new();
    file.take(OAUTHBEARER_JWKS_BYTES_MAX + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > OAUTHBEARER_JWKS_BYTES_MAX {
        return Err(format!(
            "{}: larger than {OAUTHBEARER_JWKS_BYTES_MAX} bytes",
            path.display()
        ));
    }
    Jwks::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn stamp(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Checks at start that the JWKS can be used, when OAUTHBEARER is enabled.
pub fn check(config: &Config) -> Result<(), String> {
    match config.oauthbearer_settings() {
        Ok(Some((path, _))) => read_jwks(&path).map(|_| ()),
        Ok(None) => Ok(()),
        Err((key, message)) => Err(format!("{key}: {message}")),
    }
}

struct Keys {
    path: PathBuf,
    validator: Rc<JwtValidator>,
    stamp: Option<SystemTime>,
    checked: Instant,
}

thread_local! {
    /// This shard's keys, loaded at its first OAUTHBEARER authentication.
    static KEYS: RefCell<Option<Keys>> = const { RefCell::new(None) };
}

/// The validator this shard checks tokens with now; `None` when OAUTHBEARER is not enabled
/// or its keys could never be read (every token is then refused, and the reason logged).
pub fn validator(config: &Config, shard: usize) -> Option<Rc<JwtValidator>> {
    let (path, settings) = config.oauthbearer_settings().ok().flatten()?;
    KEYS.with(|cell| {
        let mut keys = cell.borrow_mut();
        match keys.as_mut() {
            None => match read_jwks(&path) {
                Ok(jwks) => {
                    *keys = Some(Keys {
                        stamp: stamp(&path),
                        validator: Rc::new(JwtValidator::new(jwks, settings)),
                        path,
                        checked: Instant::now(),
                    });
                }
                Err(e) => error!(shard, "OAUTHBEARER keys cannot be loaded: {e}"),
            },
            Some(k) => {
                let interval = Duration::from_millis(OAUTHBEARER_JWKS_RELOAD_CHECK_INTERVAL_MS);
                if k.checked.elapsed() >= interval {
                    k.checked = Instant::now();
                    let now = stamp(&k.path);
                    if now != k.stamp {
                        k.stamp = now;
                        match read_jwks(&k.path) {
                            Ok(jwks) => {
                                info!(shard, keys = jwks.keys.len(), path = %k.path.display(), "OAUTHBEARER keys reloaded");
                                k.validator = Rc::new(JwtValidator::new(jwks, settings));
                            }
                            Err(e) => error!(
                                shard,
                                "OAUTHBEARER keys changed but cannot be loaded; keeping the previous ones: {e}"
                            ),
                        }
                    }
                }
            }
        }
        keys.as_ref().map(|k| k.validator.clone())
    })
}
