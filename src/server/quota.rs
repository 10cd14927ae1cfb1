//! Client quotas on a connection: which quotas apply to it (resolved once, again only when
//! its principal, client id or the cluster's quotas change), the request-time meter for
//! `request_percentage`, and the muted channel of KIP-219.
//!
//! Throttling as Kafka's brokers do since KIP-219: a response that breaks a quota goes out
//! at once carrying `throttle_time_ms`, and the connection is then *muted* for that long:
//! its reader stops reading, so however fast the client sends, the broker takes nothing
//! more from it until its rate is back within the quota, and it cannot crowd out others.
//! (Clients that know KIP-219 also wait on their side.) For requests older than KIP-219
//! (Produce v0-5, Fetch v0-7) the response itself is held back instead, as Kafka does.
//!
//! Cost with no quota: one atomic load of the catalog's version per request and a
//! comparison; no lock, no allocation, no clock read.
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

use crate::clock::Clock;
use crate::security::quota::{ClientQuotas, QuotaKey, SampledRate};
use crate::server::dispatch::PendingResponse;
use crate::shard::ShardCtx;
use crate::storage::notify::Notify;

/// One quota a connection is under: its bound, in the units its rate records (bytes per
/// second; microseconds of handler time per second for `request_percentage`), and the
/// broker-wide rate it shares with every connection under the same quota.
#[derive(Debug, Clone)]
pub struct Limit {
    pub bound: f64,
    pub rate: Arc<SampledRate>,
}

impl Limit {
    /// Records `value` at `now_ms` and returns the throttle time it earns (0 within the
    /// quota), at most `max_ms`.
    pub fn record(&self, now_ms: u64, value: u64, max_ms: u64) -> u64 {
        self.rate
            .record_and_throttle(now_ms, value, self.bound, max_ms)
    }
}

/// The quotas that apply to a connection's principal and client id.
#[derive(Debug, Default)]
pub struct ClientLimits {
    pub produce: Option<Limit>,
    pub fetch: Option<Limit>,
    pub request: Option<Limit>,
    /// The quota window, for the fetch size cap and the request throttle bound.
    pub window_size_ms: u64,
}

/// A microsecond per second is 1e-4 %: `request_percentage` x this is the bound in the
/// units the request-time rate records.
const MICROS_PER_SECOND_PER_PERCENT: f64 = 10_000.0;

/// Per-connection quota state; only the connection's reader touches it.
#[derive(Default)]
pub struct ConnectionQuota {
    /// The catalog version the answer below was resolved at (`CatalogStore::version`).
    catalog_version: Option<u64>,
    /// The quotas resolved against (pointer identity), to resolve again only when they
    /// change, not at every metadata change.
    quotas: Option<Arc<ClientQuotas>>,
    user: String,
    client_id: String,
    limits: Option<Rc<ClientLimits>>,
    pub throttle: Rc<Throttle>,
}

impl ConnectionQuota {
    /// The quotas on this request's principal (`user`) and `client_id`; `None` when none
    /// applies (the common case, answered without touching the catalog).
    pub fn limits(
        &mut self,
        ctx: &ShardCtx,
        user: &str,
        client_id: &str,
    ) -> Option<Rc<ClientLimits>> {
        let store = &ctx.shared.catalog;
        let version = store.version();
        if self.catalog_version == Some(version) && self.quotas.is_none() {
            return None;
        }
        if self.catalog_version != Some(version) {
            self.catalog_version = Some(version);
            let catalog = store.load();
            if catalog.client_quotas.is_empty() {
                self.quotas = None;
                self.limits = None;
                return None;
            }
            if !self
                .quotas
                .as_ref()
                .is_some_and(|q| Arc::ptr_eq(q, &catalog.client_quotas))
            {
                self.quotas = Some(catalog.client_quotas.clone());
                self.user.clear();
                self.client_id.clear();
                self.limits = None;
            }
        }
        let quotas = self.quotas.as_ref()?;
        if self.limits.is_none() || self.user != user || self.client_id != client_id {
            self.user = user.to_string();
            self.client_id = client_id.to_string();
            let now_ms = ctx.shared.clock.monotonic_ms();
            let limits = resolve(quotas, &ctx.shared.quota_rates, user, client_id, now_ms);
            self.limits = Some(Rc::new(limits));
        }
        self.limits.clone()
    }
}

/// Looks up each quota key's quota and its shared rate.
fn resolve(
    quotas: &ClientQuotas,
    rates: &crate::security::quota::RateRegistry,
    user: &str,
    client_id: &str,
    now_ms: u64,
) -> ClientLimits {
    let limit = |key: QuotaKey, scale: f64| {
        quotas
            .resolve(key, user, client_id)
            .map(|(bound, sensor)| Limit {
                bound: bound * scale,
                rate: rates.rate(&sensor, now_ms),
            })
    };
    ClientLimits {
        produce: limit(QuotaKey::ProducerByteRate, 1.0),
        fetch: limit(QuotaKey::ConsumerByteRate, 1.0),
        request: limit(QuotaKey::RequestPercentage, MICROS_PER_SECOND_PER_PERCENT),
        window_size_ms: rates.window_size_ms(),
    }
}

/// The muted channel of one connection, shared by its reader and writer.
#[derive(Default)]
pub struct Throttle {
    /// The longest throttle decided for responses not written yet (ms).
    pending_ms: Cell<u64>,
    /// The reader reads nothing before this.
    muted_until: Cell<Option<Instant>>,
    written: Notify,
}

impl Throttle {
    /// A response about to be written earns `ms` of throttle.
    pub fn decide(&self, ms: u64) {
        if ms > self.pending_ms.get() {
            self.pending_ms.set(ms);
        }
    }

    /// The writer is done with a response (written, or none to write): the throttle it
    /// earned starts now (KIP-219: muted after the response is sent).
    pub fn on_written(&self) {
        let ms = self.pending_ms.replace(0);
        if ms == 0 {
            return;
        }
        let until = Instant::now() + Duration::from_millis(ms);
        if self.muted_until.get().is_none_or(|t| t < until) {
            self.muted_until.set(Some(until));
        }
        self.written.notify_all();
    }

    /// Is the reader to wait before reading?
    pub fn is_muted(&self) -> bool {
        self.pending_ms.get() > 0 || self.muted_until.get().is_some_and(|t| t > Instant::now())
    }

    /// Waits while a throttled response is still to be written, then until the mute ends.
    pub async fn wait(&self) {
        loop {
            if self.pending_ms.get() > 0 {
                let written = self.written.listen();
                if self.pending_ms.get() > 0 {
                    written.await;
                }
                continue;
            }
            match self.muted_until.get() {
                Some(until) => {
                    let now = Instant::now();
                    if until > now {
                        glommio::timer::sleep(until - now).await;
                    }
                    if self.pending_ms.get() == 0 && self.muted_until.get() == Some(until) {
                        self.muted_until.set(None);
                        return;
                    }
                }
                None => return,
            }
        }
    }
}

/// Meters a request's handler time for `request_percentage` (KIP-124): the time its
/// dispatch took plus the time spent polling its response future (CPU on the shard, not the
/// time it waited for durability or a long poll), recorded when the response is ready. The
/// throttle it earns mutes the channel once the response is written (KIP-219) and is put
/// in the response's `throttle_time_ms` (raised in the encoded frame, every API whose field
/// `protocol::throttle` can find, Produce included), so the client also knows to back off.
/// Both the mute and the field take the larger of this and a byte-rate throttle.
pub fn metered(
    pending: PendingResponse,
    response: (ApiKey, i16),
    dispatch_time: Duration,
    limit: Limit,
    window_size_ms: u64,
    clock: Arc<dyn Clock>,
    throttle: Rc<Throttle>,
) -> PendingResponse {
    Box::pin(Metered {
        inner: pending,
        response,
        spent: dispatch_time,
        limit,
        window_size_ms,
        clock,
        throttle,
    })
}

struct Metered {
    inner: PendingResponse,
    /// The API and version of the response, to find its `throttle_time_ms`.
    response: (ApiKey, i16),
    spent: Duration,
    limit: Limit,
    window_size_ms: u64,
    clock: Arc<dyn Clock>,
    throttle: Rc<Throttle>,
}

impl Future for Metered {
    type Output = <PendingResponse as Future>::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = Instant::now();
        let mut answer = self.inner.as_mut().poll(cx);
        self.spent += started.elapsed();
        if let Poll::Ready(result) = &mut answer {
            let micros = u64::try_from(self.spent.as_micros()).unwrap_or(u64::MAX);
            // Kafka bounds the request quota's throttle to one window.
            let ms = self
                .limit
                .record(self.clock.monotonic_ms(), micros, self.window_size_ms);
            self.throttle.decide(ms);
            if let (true, Ok(Some(chunks))) = (ms > 0, result) {
                let (api, version) = self.response;
                show_throttle(api, version, chunks, ms);
            }
        }
        answer
    }
}

/// Puts `ms` in the `throttle_time_ms` of an encoded response, unless a larger throttle
/// is already there (Produce's and Fetch's byte-rate throttles: the answer carries the
/// larger, as Kafka's). The field is in the first chunk (the header and the body's first
/// fields), or for Produce at the end of its one chunk. Runs only for a throttled
/// response: it copies that chunk.
fn show_throttle(api: ApiKey, version: i16, chunks: &mut [Bytes], ms: u64) {
    if !crate::protocol::throttle::has_field(api, version) {
        return;
    }
    let chunk = if crate::protocol::throttle::is_last(api) {
        // Found from the end, the frame must be whole to tell the header from the body.
        match chunks {
            [only] => only,
            _ => return,
        }
    } else {
        let Some(first) = chunks.first_mut() else {
            return;
        };
        first
    };
    let mut frame = BytesMut::from(&chunk[..]);
    let ms = i32::try_from(ms).unwrap_or(i32::MAX);
    if crate::protocol::throttle::raise(api, version, &mut frame, ms) {
        *chunk = frame.freeze();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decided throttle mutes only once its response is written, for that long.
    #[test]
    fn mute_starts_when_the_response_is_written() {
        let t = Throttle::default();
        assert!(!t.is_muted());
        t.decide(50);
        t.decide(20);
        assert!(t.is_muted());
        t.on_written();
        assert!(t.is_muted());
        assert_eq!(t.pending_ms.get(), 0);
        let until = t.muted_until.get().unwrap_or_else(Instant::now);
        assert!(until > Instant::now() + Duration::from_millis(30));
    }
}
