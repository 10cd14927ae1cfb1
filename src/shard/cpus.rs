//! Where the shards' executors run: the CPUs of the process's affinity mask (what `taskset`
//! or a container's cpuset allows), narrowed by the `cpuset` setting, with each shard pinned
//! to one of them round-robin, or, with `pin_shards = false`, left to the kernel's scheduler.
//!
//! Invariant: a shard is only ever pinned or fenced to CPUs inside the affinity mask the
//! process started with. Indexing CPUs by shard number (`shard % cpus`) broke it under
//! `taskset -c 1` (shard 0 went to CPU 0) and put every one-shard broker of a one-box
//! cluster on CPU 0 while the other cores idled. `plan` is pure (the mask is an argument) so
//! the choice is unit-tested; `process_affinity` is the one system call.
use thiserror::Error;

use crate::config::cpu_list;
use crate::limits::CPU_NUMBER_MAX;

// The mask is read into glibc's `cpu_set_t`; the parser's bound must be the same size.
const _: () = assert!(CPU_NUMBER_MAX + 1 == libc::CPU_SETSIZE as usize);

#[derive(Debug, Error)]
pub enum CpuSetError {
    #[error("cannot read the process's CPU affinity (sched_getaffinity): {0}")]
    Affinity(std::io::Error),
    #[error(
        "cpuset {cpuset} names CPUs {outside} outside the CPUs this process may run on \
         ({allowed}; see taskset or the container's cpuset)"
    )]
    OutsideAffinity {
        cpuset: String,
        outside: String,
        allowed: String,
    },
    #[error("the process may run on no CPU at all")]
    NoCpus,
}

/// How the shards' executors are placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Shard i runs on CPU `cpus[i]` only (one entry per shard).
    Pinned(Vec<usize>),
    /// Every shard may run on any of these CPUs; the kernel moves them.
    Fenced(Vec<usize>),
    /// No binding: each shard inherits the process's affinity mask.
    Unbound,
}

/// The shard count and their placement, decided at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub nr_shards: usize,
    pub placement: Placement,
}

impl Plan {
    /// The glommio placement of one shard's executor.
    pub fn executor_placement(&self, shard: usize) -> Result<glommio::Placement, String> {
        match &self.placement {
            Placement::Pinned(cpus) => cpus
                .get(shard)
                .map(|&cpu| glommio::Placement::Fixed(cpu))
                .ok_or_else(|| format!("no CPU planned for shard {shard}")),
            Placement::Fenced(cpus) => {
                let online = glommio::CpuSet::online().map_err(|e| e.to_string())?;
                Ok(glommio::Placement::Fenced(
                    online.filter(|l| cpus.binary_search(&l.cpu).is_ok()),
                ))
            }
            Placement::Unbound => Ok(glommio::Placement::Unbound),
        }
    }

    /// One line for the start-up log: `pinned: shard 0 on CPU 1, ...`, or the fence.
    pub fn describe(&self) -> String {
        match &self.placement {
            Placement::Pinned(cpus) => {
                let each: Vec<String> = cpus
                    .iter()
                    .enumerate()
                    .map(|(shard, cpu)| format!("shard {shard} on CPU {cpu}"))
                    .collect();
                format!("pinned: {}", each.join(", "))
            }
            Placement::Fenced(cpus) => format!("unpinned, within CPUs {}", cpu_list::format(cpus)),
            Placement::Unbound => "unpinned".into(),
        }
    }
}

/// Decides the shard count and placement.
///
/// - `shards`: the setting; 0 means one shard per usable CPU, capped by `parallelism` (what
///   `std::thread::available_parallelism` says: the affinity mask and the cgroup CPU quota).
/// - `cpuset`: the parsed setting, `None` for every CPU of `allowed`.
/// - `allowed`: the process's affinity mask, sorted.
///
/// With more shards than CPUs the pinning wraps around: two shards share a CPU.
pub fn plan(
    shards: usize,
    cpuset: Option<&[usize]>,
    pin_shards: bool,
    allowed: &[usize],
    parallelism: usize,
) -> Result<Plan, CpuSetError> {
    if allowed.is_empty() {
        return Err(CpuSetError::NoCpus);
    }
    if let Some(set) = cpuset {
        let outside: Vec<usize> = set
            .iter()
            .copied()
            .filter(|c| allowed.binary_search(c).is_err())
            .collect();
        if !outside.is_empty() {
            return Err(CpuSetError::OutsideAffinity {
                cpuset: cpu_list::format(set),
                outside: cpu_list::format(&outside),
                allowed: cpu_list::format(allowed),
            });
        }
    }
    let cpus = cpuset.unwrap_or(allowed);
    if cpus.is_empty() {
        return Err(CpuSetError::NoCpus);
    }
    let nr_shards = if shards == 0 {
        cpus.len().min(parallelism).max(1)
    } else {
        shards
    };
    let placement = match (pin_shards, cpuset) {
        (true, _) => Placement::Pinned(
            (0..nr_shards)
                .filter_map(|shard| cpus.get(shard % cpus.len()).copied())
                .collect(),
        ),
        (false, Some(_)) => Placement::Fenced(cpus.to_vec()),
        (false, None) => Placement::Unbound,
    };
    Ok(Plan {
        nr_shards,
        placement,
    })
}

/// The CPUs the calling thread may run on (at start, before any shard is pinned, the
/// process's mask: `taskset`, the container's cpuset), sorted.
pub fn process_affinity() -> Result<Vec<usize>, CpuSetError> {
    // SAFETY: cpu_set_t is a plain bit array, valid when zeroed; sched_getaffinity writes at
    // most `size_of::<cpu_set_t>()` bytes into it, and CPU_ISSET only reads it, below
    // CPU_SETSIZE (checked against CPU_NUMBER_MAX at compile time above).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(CpuSetError::Affinity(std::io::Error::last_os_error()));
    }
    Ok((0..=CPU_NUMBER_MAX)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pinned(shards: usize, cpuset: Option<&[usize]>, allowed: &[usize]) -> Plan {
        plan(shards, cpuset, true, allowed, allowed.len()).expect("plan")
    }

    /// Shards go round-robin over the CPUs the process may use, not over CPU numbers from 0:
    /// under `taskset -c 1` shard 0 is on CPU 1, under a cpuset of 2-3 shards are on 2 and 3.
    #[test]
    fn pins_round_robin_within_the_affinity_mask() {
        let cases: &[(usize, &[usize], Plan)] = &[
            (
                1,
                &[1],
                Plan {
                    nr_shards: 1,
                    placement: Placement::Pinned(vec![1]),
                },
            ),
            (
                3,
                &[2, 3],
                Plan {
                    nr_shards: 3,
                    placement: Placement::Pinned(vec![2, 3, 2]),
                },
            ),
            (
                0,
                &[2, 3],
                Plan {
                    nr_shards: 2,
                    placement: Placement::Pinned(vec![2, 3]),
                },
            ),
            (
                0,
                &[0, 1, 2, 3],
                Plan {
                    nr_shards: 4,
                    placement: Placement::Pinned(vec![0, 1, 2, 3]),
                },
            ),
        ];
        for (shards, allowed, want) in cases {
            assert_eq!(
                &pinned(*shards, None, allowed),
                want,
                "{shards} on {allowed:?}"
            );
        }
    }

    /// A cpuset narrows the CPUs, and `shards = 0` means one shard per CPU of it.
    #[test]
    fn cpuset_narrows_the_cpus() {
        let p = pinned(0, Some(&[1, 3]), &[0, 1, 2, 3]);
        assert_eq!(p.nr_shards, 2);
        assert_eq!(p.placement, Placement::Pinned(vec![1, 3]));
        let p = pinned(3, Some(&[3]), &[0, 1, 2, 3]);
        assert_eq!(p.placement, Placement::Pinned(vec![3, 3, 3]));
    }

    /// `shards = 0` is capped by the available parallelism (a cgroup CPU quota of 2 on an
    /// 8-CPU mask makes 2 shards), but never falls to 0.
    #[test]
    fn shard_count_capped_by_parallelism() {
        let all: Vec<usize> = (0..8).collect();
        let p = plan(0, None, true, &all, 2).expect("plan");
        assert_eq!(p.nr_shards, 2);
        assert_eq!(p.placement, Placement::Pinned(vec![0, 1]));
        assert_eq!(plan(0, None, true, &all, 0).expect("plan").nr_shards, 1);
    }

    /// A cpuset naming CPUs the process may not run on is refused, naming them.
    #[test]
    fn refuses_cpus_outside_the_affinity_mask() {
        let e = plan(1, Some(&[0, 1, 5]), true, &[1, 2, 3], 3).expect_err("outside");
        match &e {
            CpuSetError::OutsideAffinity {
                cpuset,
                outside,
                allowed,
            } => {
                assert_eq!((cpuset.as_str(), outside.as_str()), ("0-1,5", "0,5"));
                assert_eq!(allowed, "1-3");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(e.to_string().contains("outside the CPUs"), "{e}");
        assert!(matches!(
            plan(1, None, true, &[], 1),
            Err(CpuSetError::NoCpus)
        ));
    }

    /// Unpinned: no binding without a cpuset, a fence over the cpuset with one; a cpuset
    /// outside the mask is refused either way.
    #[test]
    fn unpinned_is_unbound_or_fenced() {
        let p = plan(2, None, false, &[0, 1], 2).expect("plan");
        assert_eq!(p.placement, Placement::Unbound);
        assert_eq!(p.describe(), "unpinned");
        let p = plan(0, Some(&[2, 3]), false, &[0, 1, 2, 3], 4).expect("plan");
        assert_eq!(p.nr_shards, 2);
        assert_eq!(p.placement, Placement::Fenced(vec![2, 3]));
        assert!(plan(1, Some(&[4]), false, &[0, 1], 2).is_err());
    }

    /// The mask read from the kernel is non-empty, sorted, and within CPU_NUMBER_MAX.
    #[test]
    fn reads_this_process_affinity() {
        let cpus = process_affinity().expect("sched_getaffinity");
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
        assert!(cpus.iter().all(|&c| c <= CPU_NUMBER_MAX));
    }
}
