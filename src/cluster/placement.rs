//! Placement of partitions onto shards. A partition's shard is decided once, at creation,
//! and recorded in the catalog, so it does not silently move when the shard count changes.

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

#[cfg(test)]
mod tests {
    use super::*;

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
