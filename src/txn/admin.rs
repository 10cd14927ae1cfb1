//! The admin side of transactions, sans-IO: ListTransactions' filters (states, producer ids,
//! KIP-994's duration and id pattern), applied to the coordinator's descriptions as Kafka's
//! `TransactionStateManager.listTransactionStates` applies them.
use super::state::TxnState;
use super::{ErrorCode, TxnDescription};

/// Longest transactional-id pattern accepted (a regex is compiled per request; this bounds
/// the work one request can ask for).
pub const ID_PATTERN_LEN_MAX: usize = 1024;

/// ListTransactions' filters; an empty list filters nothing.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub states: Vec<TxnState>,
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this (ms since their start); -1: no filter.
    pub duration_ms: i64,
    /// Only ids the whole of which this matches (Java's `Matcher.matches`).
    pub id_pattern: Option<regex::Regex>,
}

/// What a request's filters say, before they are checked.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub state_names: Vec<String>,
    pub producer_ids: Vec<i64>,
    pub duration_ms: i64,
    pub id_pattern: Option<String>,
}

impl ListFilter {
    /// Builds the filter; returns it with the state names no state has (the response's
    /// `unknown_state_filters`), or INVALID_REGULAR_EXPRESSION for a pattern that does not
    /// compile. An empty pattern filters nothing, as in Kafka.
    pub fn parse(q: ListQuery) -> Result<(ListFilter, Vec<String>), ErrorCode> {
        let mut states = Vec::new();
        let mut unknown = Vec::new();
        for name in q.state_names {
            match TxnState::ALL.into_iter().find(|s| s.name() == name) {
                Some(s) => states.push(s),
                None => unknown.push(name),
            }
        }
        let id_pattern = match q.id_pattern.filter(|p| !p.is_empty()) {
            None => None,
            Some(p) if p.len() > ID_PATTERN_LEN_MAX => {
                return Err(ErrorCode::InvalidRegularExpression)
            }
            Some(p) => Some(
                regex::Regex::new(&format!("^(?:{p})$"))
                    .map_err(|_| ErrorCode::InvalidRegularExpression)?,
            ),
        };
        Ok((
            ListFilter {
                states,
                producer_ids: q.producer_ids,
                duration_ms: q.duration_ms,
                id_pattern,
            },
            unknown,
        ))
    }

    /// Whether `d` is listed at wall time `now_wall_ms`. Dead ids are being removed and are
    /// never listed (Kafka's rule).
    pub fn matches(&self, d: &TxnDescription, now_wall_ms: i64) -> bool {
        if d.state == TxnState::Dead {
            return false;
        }
        if !self.producer_ids.is_empty() && !self.producer_ids.contains(&d.producer_id.0) {
            return false;
        }
        if !self.states.is_empty() && !self.states.contains(&d.state) {
            return false;
        }
        if self.duration_ms >= 0
            && now_wall_ms.saturating_sub(d.start_timestamp_ms) <= self.duration_ms
        {
            return false;
        }
        match &self.id_pattern {
            Some(p) => p.is_match(&d.transactional_id),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::producer::{ProducerEpoch, ProducerId};

    fn txn(id: &str, state: TxnState, producer_id: i64, start: i64) -> TxnDescription {
        TxnDescription {
            transactional_id: id.into(),
            state,
            producer_id: ProducerId(producer_id),
            producer_epoch: ProducerEpoch(0),
            timeout_ms: 60_000,
            start_timestamp_ms: start,
            partitions: Vec::new(),
        }
    }

    fn filter(q: ListQuery) -> ListFilter {
        ListFilter::parse(q).expect("valid").0
    }

    fn no_filter() -> ListQuery {
        ListQuery {
            duration_ms: -1,
            ..ListQuery::default()
        }
    }

    /// Proves each filter alone keeps exactly the matching ids, and Dead is never listed.
    #[test]
    fn each_filter_keeps_only_its_matches() {
        let a = txn("app-1", TxnState::Ongoing, 7, 1_000);
        let b = txn("app-2", TxnState::CompleteCommit, 8, 9_000);
        let dead = txn("gone", TxnState::Dead, 9, 1_000);
        let now = 10_000;
        let all = filter(no_filter());
        assert!(all.matches(&a, now) && all.matches(&b, now));
        assert!(!all.matches(&dead, now));

        let ongoing = filter(ListQuery {
            state_names: vec!["Ongoing".into()],
            ..no_filter()
        });
        assert!(ongoing.matches(&a, now) && !ongoing.matches(&b, now));

        let pid = filter(ListQuery {
            producer_ids: vec![8],
            ..no_filter()
        });
        assert!(!pid.matches(&a, now) && pid.matches(&b, now));

        // Running longer than 5 s: a (9 s) yes, b (1 s) no; exactly the duration is not longer.
        let long = filter(ListQuery {
            duration_ms: 5_000,
            ..no_filter()
        });
        assert!(long.matches(&a, now) && !long.matches(&b, now));
        assert!(!long.matches(&a, 6_000));

        let pattern = filter(ListQuery {
            id_pattern: Some("app-[2-9]".into()),
            ..no_filter()
        });
        assert!(!pattern.matches(&a, now) && pattern.matches(&b, now));
        // The whole id must match, as Java's `matches`.
        let partial = filter(ListQuery {
            id_pattern: Some("app".into()),
            ..no_filter()
        });
        assert!(!partial.matches(&a, now));
    }

    /// Proves unknown state names are reported back, and a bad or empty pattern is handled
    /// as Kafka handles it.
    #[test]
    fn unknown_states_and_bad_patterns() {
        let (f, unknown) = ListFilter::parse(ListQuery {
            state_names: vec!["Ongoing".into(), "Sleeping".into()],
            ..no_filter()
        })
        .expect("valid");
        assert_eq!(f.states, vec![TxnState::Ongoing]);
        assert_eq!(unknown, vec!["Sleeping".to_string()]);
        assert_eq!(
            ListFilter::parse(ListQuery {
                id_pattern: Some("(".into()),
                ..no_filter()
            })
            .err(),
            Some(ErrorCode::InvalidRegularExpression)
        );
        let empty = filter(ListQuery {
            id_pattern: Some(String::new()),
            ..no_filter()
        });
        assert!(empty.id_pattern.is_none());
    }
}
