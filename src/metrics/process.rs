//! The process's own resource use, from the text of `/proc/self/stat` and
//! `/proc/self/statm` (the server reads the files; parsing is here, testable). Rendered under
//! Prometheus's standard `process_*` names, so dashboards built for any exporter work.

/// The process's CPU time and resident memory.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessSnapshot {
    /// User plus system CPU time.
    pub cpu_seconds: f64,
    pub resident_memory_bytes: u64,
}

/// CPU seconds (user + system) from `/proc/self/stat`, given the clock ticks per second.
/// The command name (field 2) may hold spaces and parentheses, so fields are counted from
/// the last `)`; `utime` and `stime` are fields 14 and 15.
pub fn cpu_seconds(stat: &str, ticks_per_second: u64) -> Option<f64> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_ascii_whitespace();
    // After the name: state is field 3, so utime (14) is the 12th field here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    if ticks_per_second == 0 {
        return None;
    }
    Some((utime.saturating_add(stime)) as f64 / ticks_per_second as f64)
}

/// Resident bytes from `/proc/self/statm` (its second field, in pages).
pub fn resident_bytes(statm: &str, page_bytes: u64) -> Option<u64> {
    let pages: u64 = statm.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(page_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_statm_parse() {
        // Proves utime+stime are found past a command name with spaces and ')' in it, and
        // that garbage gives None rather than a wrong number.
        let stat =
            "4242 (strata (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1 2 3";
        assert_eq!(cpu_seconds(stat, 100), Some(3.0));
        assert_eq!(cpu_seconds("4242 (strata) S 1", 100), None);
        assert_eq!(cpu_seconds(stat, 0), None);
        assert_eq!(resident_bytes("1000 25 3 1 0 9 0\n", 4096), Some(25 * 4096));
        assert_eq!(resident_bytes("1000", 4096), None);
    }
}
