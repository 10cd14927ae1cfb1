//! Admission of client connections: Kafka's `max.connections` and `max.connections.per.ip`,
//! counted across the whole broker.
//!
//! Every shard accepts on the same port, so the counts are shared between shards. They are
//! touched twice per connection (accept and close), never per request, so a mutex is cheap
//! here and keeps the counts exact; no request path takes it.
//!
//! Invariant: `total` equals the number of live `Slot`s and `per_ip[ip]` the number of live
//! slots for `ip`; an address with no slot has no entry, so the map holds at most
//! `max_connections` entries.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("max_connections ({max}) reached")]
    Total { max: usize },
    #[error("max_connections_per_ip ({max}) reached for {ip}")]
    PerIp { ip: IpAddr, max: usize },
}

#[derive(Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

pub struct Admission {
    max_total: usize,
    max_per_ip: usize,
    counts: Mutex<Counts>,
}

impl Admission {
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_ip,
            counts: Mutex::new(Counts::default()),
        })
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        // The counts are updated in one step under the lock, so a panic elsewhere cannot
        // leave them half-changed: a poisoned lock still holds consistent counts.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for a connection from `ip`, or says which limit refuses it.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let mut c = self.counts();
        if c.total >= self.max_total {
            return Err(Refusal::Total {
                max: self.max_total,
            });
        }
        let from_ip = c.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= self.max_per_ip {
            return Err(Refusal::PerIp {
                ip,
                max: self.max_per_ip,
            });
        }
        c.total += 1;
        c.per_ip.insert(ip, from_ip + 1);
        Ok(Slot {
            admission: self.clone(),
            ip,
        })
    }

    /// Live connections, in all.
    pub fn total(&self) -> usize {
        self.counts().total
    }

    fn release(&self, ip: IpAddr) {
        let mut c = self.counts();
        c.total = c.total.saturating_sub(1);
        match c.per_ip.get(&ip).copied() {
            Some(n) if n > 1 => {
                c.per_ip.insert(ip, n - 1);
            }
            _ => {
                c.per_ip.remove(&ip);
            }
        }
    }
}

/// One admitted connection; dropping it frees its place.
pub struct Slot {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.release(self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both limits refuse exactly at their bound, and a closed connection frees its place
    /// (and its address's entry) for the next one.
    #[test]
    fn limits_refuse_at_the_bound_and_free_on_close() {
        let a = Admission::new(3, 2);
        let ip1: IpAddr = [10, 0, 0, 1].into();
        let ip2: IpAddr = [10, 0, 0, 2].into();
        let s1 = a.admit(ip1).expect("first");
        let s2 = a.admit(ip1).expect("second from ip1");
        assert_eq!(a.admit(ip1).err(), Some(Refusal::PerIp { ip: ip1, max: 2 }));
        let s3 = a.admit(ip2).expect("other address");
        assert_eq!(a.admit(ip2).err(), Some(Refusal::Total { max: 3 }));
        drop(s1);
        let s4 = a.admit(ip1).expect("freed by the close");
        drop((s2, s3, s4));
        assert_eq!(a.total(), 0);
        assert!(a.counts().per_ip.is_empty());
    }
}
