//! Placement of partitions onto brokers and shards. A partition's replicas and each
//! replica's shard are decided once, at creation (or reassignment), and recorded in the
//! catalog, so they do not silently move when the broker or shard count changes.
//!
//! Brokers are chosen as Kafka's rack-aware round-robin does: brokers are listed alternating
//! racks, each partition's leader is the next broker in that list and its followers follow at
//! a shift that grows every full round, skipping a rack that already holds a replica until
//! every rack holds one. Shards are chosen per broker: the least-loaded one.
use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::catalog::Catalog;

/// Chooses shards for `count` new partitions given how many each shard owns already:
/// always the least-loaded shard, lowest index on ties, so creation keeps shards balanced.
pub fn place(load: &mut [usize], count: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(count);
    if load.is_empty() {
        return out;
    }
    for _ in 0..count {
        let mut best = 0;
        for (i, l) in load.iter().enumerate() {
            if *l < load[best] {
                best = i;
            }
        }
        load[best] += 1;
        out.push(best as u32);
    }
    out
}

/// A broker that may receive new replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub node_id: i32,
    pub rack: Option<String>,
}

/// Kafka's ordering of brokers for placement: sorted by id when no broker names a rack;
/// otherwise one broker from each rack in turn (racks and the brokers in each sorted), so
/// consecutive brokers sit on different racks. A broker without a rack counts as rack "".
fn rack_alternated(brokers: &[Candidate]) -> (Vec<i32>, usize) {
    if brokers.iter().all(|b| b.rack.is_none()) {
        let mut ids: Vec<i32> = brokers.iter().map(|b| b.node_id).collect();
        ids.sort_unstable();
        ids.dedup();
        return (ids, 1);
    }
    let mut racks: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
    for b in brokers {
        racks
            .entry(b.rack.as_deref().unwrap_or(""))
            .or_default()
            .insert(b.node_id);
    }
    let per_rack: Vec<Vec<i32>> = racks
        .values()
        .map(|s| s.iter().copied().collect())
        .collect();
    let longest = per_rack.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(brokers.len());
    for round in 0..longest {
        for rack in &per_rack {
            if let Some(id) = rack.get(round) {
                out.push(*id);
            }
        }
    }
    (out, per_rack.len())
}

/// The index of a partition's `nth` follower: one past the leader plus a shift, never the
/// leader itself (the shift stays within the other `n - 1` brokers).
fn follower_index(first: usize, shift: usize, nth: usize, n: usize) -> usize {
    (first + 1 + (shift + nth) % (n - 1)) % n
}

/// Chooses `replication_factor` brokers for each of `partitions` partitions, numbering them
/// on from `sequence` (a counter the caller advances by `partitions`, so successive topics
/// continue the rotation and leaders stay spread). Needs `1 <= replication_factor <=
/// brokers.len()`; returns no assignment otherwise. The first broker of each list leads.
pub fn assign_replicas(
    brokers: &[Candidate],
    partitions: usize,
    replication_factor: usize,
    sequence: usize,
) -> Vec<Vec<i32>> {
    let (arranged, racks) = rack_alternated(brokers);
    let n = arranged.len();
    if replication_factor == 0 || replication_factor > n {
        return Vec::new();
    }
    let rack_of: BTreeMap<i32, &str> = brokers
        .iter()
        .map(|b| (b.node_id, b.rack.as_deref().unwrap_or("")))
        .collect();
    let mut out = Vec::with_capacity(partitions);
    for p in 0..partitions {
        let seq = sequence.wrapping_add(p);
        let first = seq % n;
        // The followers' shift grows once per full round over the brokers, so the pairs
        // (leader, follower) vary from round to round instead of repeating.
        let shift = (seq / n) * racks;
        let mut chosen = vec![arranged[first]];
        let mut used_racks: BTreeSet<&str> = BTreeSet::new();
        used_racks.insert(rack_of.get(&arranged[first]).copied().unwrap_or(""));
        let mut nth = 0;
        // Each follower is found within one pass over the other n - 1 brokers: a broker not
        // yet chosen exists (replication_factor <= n), and one on an unused rack does while
        // some rack is unused. The bound only keeps the loop visibly finite.
        let steps_max = n * replication_factor;
        while chosen.len() < replication_factor && nth < steps_max {
            let candidate = arranged[follower_index(first, shift, nth, n)];
            nth += 1;
            let rack = rack_of.get(&candidate).copied().unwrap_or("");
            let rack_ok = !used_racks.contains(rack) || used_racks.len() == racks;
            if rack_ok && !chosen.contains(&candidate) {
                chosen.push(candidate);
                used_racks.insert(rack);
            }
        }
        // Unreachable by the argument above; kept so a bug yields a valid (if less spread)
        // assignment rather than a short replica list.
        for id in &arranged {
            if chosen.len() >= replication_factor {
                break;
            }
            if !chosen.contains(id) {
                chosen.push(*id);
            }
        }
        out.push(chosen);
    }
    out
}

/// Partitions per shard of every registered broker, counting every replica in `catalog`.
pub fn shard_loads(catalog: &Catalog) -> BTreeMap<i32, Vec<usize>> {
    let mut loads: BTreeMap<i32, Vec<usize>> = catalog
        .brokers
        .values()
        .map(|b| (b.node_id, vec![0; b.shards.max(1) as usize]))
        .collect();
    for t in catalog.topics.values() {
        for p in &t.partitions {
            for (node, shard) in p.replicas.iter().zip(&p.shards) {
                if let Some(l) = loads.get_mut(node).and_then(|l| l.get_mut(*shard as usize)) {
                    *l += 1;
                }
            }
        }
    }
    loads
}

/// The shard for one more replica on `node`: its least-loaded shard, counted in `loads`.
/// A broker `loads` does not know gets shard 0.
pub fn place_on(loads: &mut BTreeMap<i32, Vec<usize>>, node: i32) -> u32 {
    loads
        .get_mut(&node)
        .and_then(|l| place(l, 1).first().copied())
        .unwrap_or(0)
}
#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(racks: &[(i32, Option<&str>)]) -> Vec<Candidate> {
        racks
            .iter()
            .map(|(id, r)| Candidate {
                node_id: *id,
                rack: r.map(str::to_string),
            })
            .collect()
    }

    /// Over 3 brokers, 6 partitions at RF 3 give each broker 2 leaderships and 6 replicas,
    /// and 1-partition topics created in a row (the sequence carried on) rotate leaders.
    #[test]
    fn spreads_leaders_and_replicas() {
        let b = brokers(&[(1, None), (2, None), (3, None)]);
        let a = assign_replicas(&b, 6, 3, 0);
        let mut leaders = BTreeMap::new();
        let mut replicas = BTreeMap::new();
        for r in &a {
            assert_eq!(r.len(), 3);
            let distinct: BTreeSet<_> = r.iter().collect();
            assert_eq!(distinct.len(), 3, "a broker twice in {r:?}");
            *leaders.entry(r[0]).or_insert(0) += 1;
            for id in r {
                *replicas.entry(*id).or_insert(0) += 1;
            }
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
        assert_eq!(
            replicas.values().copied().collect::<Vec<_>>(),
            vec![6, 6, 6]
        );
        let singles: Vec<i32> = (0..3)
            .map(|seq| assign_replicas(&b, 1, 2, seq)[0][0])
            .collect();
        assert_eq!(singles, vec![1, 2, 3]);
        assert!(assign_replicas(&b, 1, 4, 0).is_empty());
    }

    /// With two racks, every partition at RF 2 has one replica on each rack, and leaders
    /// cover all four brokers.
    #[test]
    fn rack_aware() {
        let b = brokers(&[
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("b")),
            (4, Some("b")),
        ]);
        let rack = |id: i32| if id <= 2 { "a" } else { "b" };
        let a = assign_replicas(&b, 8, 2, 0);
        let mut leaders = BTreeSet::new();
        for r in &a {
            assert_ne!(rack(r[0]), rack(r[1]), "{r:?} on one rack");
            leaders.insert(r[0]);
        }
        assert_eq!(leaders.len(), 4);
        // RF 3 over 2 racks: both racks used, no broker twice.
        for r in assign_replicas(&b, 8, 3, 5) {
            let racks: BTreeSet<_> = r.iter().map(|id| rack(*id)).collect();
            let ids: BTreeSet<_> = r.iter().collect();
            assert_eq!((racks.len(), ids.len()), (2, 3), "{r:?}");
        }
    }

    /// Placement fills the emptiest shard first and stays within one of perfect balance.
    #[test]
    fn balanced() {
        let mut load = vec![3, 0, 1];
        assert_eq!(place(&mut load, 4), vec![1, 1, 2, 1]);
        assert_eq!(load, vec![3, 3, 2]);
        let mut load = vec![0; 4];
        place(&mut load, 10);
        assert!(load.iter().max().unwrap_or(&0) - load.iter().min().unwrap_or(&0) <= 1);
    }
}
