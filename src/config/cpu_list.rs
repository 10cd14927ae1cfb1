//! Linux CPU lists, the notation of `taskset -c`, cgroup `cpuset.cpus`, `/proc/<pid>/status`'s
//! `Cpus_allowed_list` and Redpanda's `--cpuset`: comma-separated CPU numbers and inclusive
//! ranges, `0-3,6`. Parsed into a sorted list without duplicates; every CPU number is at
//! most `CPU_NUMBER_MAX`, so no input can make the list long. Pure: the affinity mask the
//! list is checked against is read by `shard::cpus`.
use thiserror::Error;

use crate::limits::CPU_NUMBER_MAX;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuListError {
    #[error("the CPU list is empty")]
    Empty,
    #[error("{item:?} is neither a CPU number nor a range FIRST-LAST (expected e.g. \"0-3,6\")")]
    Malformed { item: String },
    #[error("the range {item:?} ends before it starts")]
    Reversed { item: String },
    #[error("CPU {cpu} is above {max}, the largest CPU number supported")]
    TooLarge { cpu: usize, max: usize },
}

/// Parses `0-3,6` into `[0, 1, 2, 3, 6]` (sorted, each CPU once). Blanks around items are
/// allowed; an empty item (`1,,2`, a trailing comma) is refused, as the kernel refuses it.
pub fn parse(text: &str) -> Result<Vec<usize>, CpuListError> {
    if text.trim().is_empty() {
        return Err(CpuListError::Empty);
    }
    let mut cpus = Vec::new();
    for raw in text.split(',') {
        let item = raw.trim();
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (cpu_number(a.trim(), item)?, cpu_number(b.trim(), item)?),
            None => {
                let cpu = cpu_number(item, item)?;
                (cpu, cpu)
            }
        };
        if last < first {
            return Err(CpuListError::Reversed { item: item.into() });
        }
        // Both ends are <= CPU_NUMBER_MAX, so the list never exceeds 1024 entries per item
        // and is deduplicated below.
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// One CPU number: decimal digits only (no sign, no `+`), at most `CPU_NUMBER_MAX`.
fn cpu_number(digits: &str, item: &str) -> Result<usize, CpuListError> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::Malformed { item: item.into() });
    }
    // All digits: the only way the parse fails is overflow, which is "too large" too.
    let cpu = digits.parse::<usize>().unwrap_or(usize::MAX);
    if cpu > CPU_NUMBER_MAX {
        return Err(CpuListError::TooLarge {
            cpu,
            max: CPU_NUMBER_MAX,
        });
    }
    Ok(cpu)
}

/// Writes a sorted CPU list back in the same notation, ranges folded: `[0, 1, 2, 3, 6]` is
/// `0-3,6`. For log lines and error messages.
pub fn format(cpus: &[usize]) -> String {
    // Runs of consecutive CPUs as (first, last).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &cpu in cpus {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == cpu => *last = cpu,
            _ => runs.push((cpu, cpu)),
        }
    }
    let items: Vec<String> = runs
        .into_iter()
        .map(|(first, last)| {
            if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            }
        })
        .collect();
    items.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accepted forms parse to the sorted, deduplicated CPU numbers they name.
    #[test]
    fn parses_numbers_ranges_and_commas() {
        let cases: &[(&str, &[usize])] = &[
            ("0", &[0]),
            ("1", &[1]),
            ("0-3", &[0, 1, 2, 3]),
            ("0-3,6", &[0, 1, 2, 3, 6]),
            ("6,0-2", &[0, 1, 2, 6]),
            (" 2 , 4 - 5 ", &[2, 4, 5]),
            ("3-3", &[3]),
            ("1,1,0-1", &[0, 1]),
            ("1023", &[1023]),
            ("1020-1023", &[1020, 1021, 1022, 1023]),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).as_deref(), Ok(*want), "{text:?}");
        }
    }

    /// Every malformed list is refused with the error naming what is wrong, never a panic.
    #[test]
    fn refuses_malformed_lists() {
        let malformed = |item: &str| CpuListError::Malformed { item: item.into() };
        let cases: &[(&str, CpuListError)] = &[
            ("", CpuListError::Empty),
            ("  ", CpuListError::Empty),
            ("1,,2", malformed("")),
            ("1,", malformed("")),
            (",1", malformed("")),
            ("a", malformed("a")),
            ("-1", malformed("-1")),
            ("1-", malformed("1-")),
            ("1-2-3", malformed("1-2-3")),
            ("+1", malformed("+1")),
            ("0x1", malformed("0x1")),
            ("1 2", malformed("1 2")),
            ("3-1", CpuListError::Reversed { item: "3-1".into() }),
            (
                "1024",
                CpuListError::TooLarge {
                    cpu: 1024,
                    max: CPU_NUMBER_MAX,
                },
            ),
            (
                "0-4000000000",
                CpuListError::TooLarge {
                    cpu: 4_000_000_000,
                    max: CPU_NUMBER_MAX,
                },
            ),
            (
                "99999999999999999999999",
                CpuListError::TooLarge {
                    cpu: usize::MAX,
                    max: CPU_NUMBER_MAX,
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).as_ref(), Err(want), "{text:?}");
        }
    }

    /// `format` folds runs into ranges, and parsing its output gives the list back.
    #[test]
    fn format_folds_ranges_and_round_trips() {
        let cases: &[(&[usize], &str)] = &[
            (&[], ""),
            (&[0], "0"),
            (&[0, 1], "0-1"),
            (&[0, 1, 2, 3, 6], "0-3,6"),
            (&[1, 3, 5], "1,3,5"),
            (&[0, 2, 3, 4, 9, 10], "0,2-4,9-10"),
        ];
        for (cpus, want) in cases {
            assert_eq!(format(cpus), *want);
            if !cpus.is_empty() {
                assert_eq!(parse(want).as_deref(), Ok(*cpus));
            }
        }
    }
}
