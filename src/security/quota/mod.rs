//! Client quotas, sans-IO (Kafka's KIP-13 byte rates, KIP-124 request_percentage, KIP-546's
//! Describe/AlterClientQuotas): quota entities (user, client-id, or both, each a name or
//! `<default>`), the quota keys and their checks, the set of quotas the metadata log holds
//! (`ClientQuotas`), which quota applies to a connection (Kafka's eight precedence levels),
//! and the sampled-window rates the broker measures clients with (`rate`).
//!
//! Invariants: a stored value is finite (the metadata log is JSON, which has no NaN) and its
//! key is one this module knows for the entity's types; an entity with no key left is gone.
//! Nothing here reads a clock: times come in as milliseconds.
pub mod rate;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::protocol::error::ErrorCode;

pub use rate::{RateRegistry, SampledRate};

/// Kafka's entity type names, as the wire carries them.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// One entity component's name: a user or client id, or the default for all of them
/// (Kafka's `<default>`, a null name on the wire).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// The wire form: `None` for the default.
    pub fn wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }

    pub fn from_wire(name: Option<&str>) -> EntityName {
        match name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        }
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntityName::Default => f.write_str("<default>"),
            EntityName::Named(n) => f.write_str(n),
        }
    }
}

/// A quota entity: a user, a client id, or a user's client id; at least one is set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    /// The entity's components as the wire lists them: (type, name or `None` for default).
    pub fn components(&self) -> Vec<(&'static str, Option<&str>)> {
        let mut out = Vec::with_capacity(2);
        if let Some(u) = &self.user {
            out.push((USER, u.wire()));
        }
        if let Some(c) = &self.client_id {
            out.push((CLIENT_ID, c.wire()));
        }
        out
    }

    fn component_count(&self) -> usize {
        usize::from(self.user.is_some()) + usize::from(self.client_id.is_some())
    }

    fn name_of(&self, entity_type: &str) -> Option<&EntityName> {
        match entity_type {
            USER => self.user.as_ref(),
            CLIENT_ID => self.client_id.as_ref(),
            _ => None,
        }
    }

    /// Checks an entity as the request names it, as Kafka's controller does: not empty,
    /// each type once, only types it knows, no empty name.
    pub fn from_wire<'a>(
        components: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<QuotaEntity, QuotaError> {
        let mut entity = QuotaEntity {
            user: None,
            client_id: None,
        };
        let mut any = false;
        for (entity_type, name) in components {
            any = true;
            let slot = match entity_type {
                USER => &mut entity.user,
                CLIENT_ID => &mut entity.client_id,
                IP => {
                    return Err(QuotaError::invalid(
                        "ip quotas (connection_creation_rate) are not supported",
                    ))
                }
                other => {
                    return Err(QuotaError::invalid(format!(
                        "Unhandled client quota entity type: {other}"
                    )))
                }
            };
            if slot.is_some() {
                return Err(QuotaError::invalid(format!(
                    "Invalid empty client quota entity, duplicate entity entry {entity_type}"
                )));
            }
            if name == Some("") {
                return Err(QuotaError::invalid(format!(
                    "Empty {entity_type} not supported"
                )));
            }
            *slot = Some(EntityName::from_wire(name));
        }
        if !any {
            return Err(QuotaError::invalid("Invalid empty client quota entity"));
        }
        Ok(entity)
    }
}

impl fmt::Display for QuotaEntity {
    /// As `kafka-configs` names entities: `user=alice, client-id=<default>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (t, n) in self.components() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{t}={}", n.unwrap_or("<default>"))?;
        }
        Ok(())
    }
}

/// A quota key Strata knows (Kafka's QuotaConfig names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaKey {
    /// Bytes per second a client may produce (KIP-13).
    ProducerByteRate,
    /// Bytes per second a client may fetch (KIP-13).
    ConsumerByteRate,
    /// Percent of one request-handling thread's time per quota window (KIP-124).
    RequestPercentage,
    /// Partition mutations per second (KIP-599); stored and described, not enforced yet.
    ControllerMutationRate,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 4] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
        QuotaKey::ControllerMutationRate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
        }
    }

    pub fn from_name(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Kafka types the byte rates as LONG (whole numbers) and the others as DOUBLE.
    fn is_integral(self) -> bool {
        matches!(
            self,
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate
        )
    }

    /// Checks a value to set, as Kafka 4.1: a LONG key takes a whole number.
    /// Non-finite values are refused too (the metadata log cannot hold them).
    pub fn check_value(self, value: f64) -> Result<(), QuotaError> {
        if !value.is_finite() {
            return Err(QuotaError::invalid(format!(
                "Configuration {} must be a finite number",
                self.name()
            )));
        }
        if self.is_integral() {
            // Kafka's test: the value within 1e-6 of the whole number it truncates to.
            const EPSILON: f64 = 1e-6;
            let whole = (value + EPSILON).trunc();
            if (whole - value).abs() > EPSILON || whole.abs() > i64::MAX as f64 {
                return Err(QuotaError::invalid(format!(
                    "{} cannot be a fractional value.",
                    self.name()
                )));
            }
        }
        Ok(())
    }
}

/// A refused quota request: the Kafka error and its message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct QuotaError {
    pub code: ErrorCode,
    pub message: String,
}

impl QuotaError {
    pub fn invalid(message: impl Into<String>) -> QuotaError {
        QuotaError {
            code: ErrorCode::InvalidRequest,
            message: message.into(),
        }
    }
}

/// One entity's changes: key -> new value, `None` to remove.
pub type QuotaOps = Vec<(String, Option<f64>)>;

/// A checked (finite) quota value, as the controller's requests carry it: finite, so
/// equality is total and the requests can be `Eq`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QuotaValue(pub f64);

impl Eq for QuotaValue {}

/// One entity's checked changes, as the controller takes them.
pub type CheckedOps = Vec<(String, Option<QuotaValue>)>;

/// `ops` for the controller (every value passed `QuotaKey::check_value`, so is finite).
pub fn checked_ops(ops: QuotaOps) -> CheckedOps {
    ops.into_iter()
        .map(|(k, v)| (k, v.map(QuotaValue)))
        .collect()
}

/// Checks one AlterClientQuotas entry (entity and ops) in Kafka's order: a key named twice,
/// then the entity, then each key and value to set. A removal of a key the entity does not
/// have is no change, whatever the key (as Kafka: removals are not checked).
pub fn check_alteration<'a>(
    components: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ops: &[(String, f64, bool)],
) -> Result<(QuotaEntity, QuotaOps), QuotaError> {
    let mut seen: Vec<&str> = Vec::with_capacity(ops.len());
    for (key, _, _) in ops {
        if seen.contains(&key.as_str()) {
            return Err(QuotaError::invalid(format!(
                "Duplicate quota key {key} not updating quota for this entity"
            )));
        }
        seen.push(key);
    }
    let entity = QuotaEntity::from_wire(components)?;
    let mut out = Vec::with_capacity(ops.len());
    for (key, value, remove) in ops {
        if *remove {
            out.push((key.clone(), None));
            continue;
        }
        let Some(k) = QuotaKey::from_name(key) else {
            return Err(QuotaError::invalid(format!(
                "Invalid configuration key {key}"
            )));
        };
        k.check_value(*value)?;
        out.push((key.clone(), Some(*value)));
    }
    Ok((entity, out))
}

/// One describe filter component (DescribeClientQuotas).
#[derive(Debug, Clone, PartialEq)]
pub enum MatchName {
    /// MATCH_TYPE_EXACT with a name, or MATCH_TYPE_DEFAULT (`EntityName::Default`).
    Exact(EntityName),
    /// MATCH_TYPE_SPECIFIED: any entity with this type, whatever its name.
    Specified,
}

/// Kafka's match types.
pub const MATCH_TYPE_EXACT: i8 = 0;
pub const MATCH_TYPE_DEFAULT: i8 = 1;
pub const MATCH_TYPE_SPECIFIED: i8 = 2;

/// A checked describe filter: per entity type, what its name must be.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QuotaFilter {
    pub components: Vec<(String, MatchName)>,
    pub strict: bool,
}

impl QuotaFilter {
    /// Checks the filter as Kafka's metadata image does (same errors and messages).
    pub fn from_wire<'a>(
        components: impl IntoIterator<Item = (&'a str, i8, Option<&'a str>)>,
        strict: bool,
    ) -> Result<QuotaFilter, QuotaError> {
        let mut out: Vec<(String, MatchName)> = Vec::new();
        for (entity_type, match_type, name) in components {
            if entity_type.is_empty() {
                return Err(QuotaError::invalid("Invalid empty entity type."));
            }
            if out.iter().any(|(t, _)| t == entity_type) {
                return Err(QuotaError::invalid(format!(
                    "Entity type {entity_type} cannot appear more than once in the filter."
                )));
            }
            if ![USER, CLIENT_ID, IP].contains(&entity_type) {
                return Err(QuotaError {
                    code: ErrorCode::UnsupportedVersion,
                    message: format!("Unsupported entity type {entity_type}"),
                });
            }
            let m = match (match_type, name) {
                (MATCH_TYPE_EXACT, None) => {
                    return Err(QuotaError::invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                    ))
                }
                (MATCH_TYPE_EXACT, Some(n)) => MatchName::Exact(EntityName::Named(n.to_string())),
                (MATCH_TYPE_DEFAULT, Some(_)) => {
                    return Err(QuotaError::invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                    ))
                }
                (MATCH_TYPE_DEFAULT, None) => MatchName::Exact(EntityName::Default),
                (MATCH_TYPE_SPECIFIED, Some(_)) => return Err(QuotaError::invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )),
                (MATCH_TYPE_SPECIFIED, None) => MatchName::Specified,
                (other, _) => {
                    return Err(QuotaError::invalid(format!("Unknown match type {other}")))
                }
            };
            out.push((entity_type.to_string(), m));
        }
        let has = |t: &str| out.iter().any(|(x, _)| x == t);
        if has(IP) && (has(USER) || has(CLIENT_ID)) {
            return Err(QuotaError::invalid(
                "Invalid entity filter component combination. IP filter component should not \
                 be used with user or clientId filter component.",
            ));
        }
        Ok(QuotaFilter {
            components: out,
            strict,
        })
    }

    /// Does `entity` pass? Every component must match one of the entity's; strict also
    /// wants the entity to have no other component. An empty filter matches every entity
    /// unless strict (then none), as Kafka's.
    pub fn matches(&self, entity: &QuotaEntity) -> bool {
        let each = self
            .components
            .iter()
            .all(|(t, m)| match entity.name_of(t) {
                None => false,
                Some(name) => match m {
                    MatchName::Exact(want) => want == name,
                    MatchName::Specified => true,
                },
            });
        if self.components.is_empty() {
            return !self.strict;
        }
        each && (!self.strict || entity.component_count() == self.components.len())
    }
}

/// Every entity's quotas, as the metadata log has set them (Kafka's ClientQuotasImage).
/// Kept in the catalog; serialised as a list because JSON map keys must be strings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Vec<(QuotaEntity, BTreeMap<String, f64>)>")]
#[serde(into = "Vec<(QuotaEntity, BTreeMap<String, f64>)>")]
pub struct ClientQuotas {
    entities: BTreeMap<QuotaEntity, BTreeMap<String, f64>>,
}

impl From<Vec<(QuotaEntity, BTreeMap<String, f64>)>> for ClientQuotas {
    fn from(v: Vec<(QuotaEntity, BTreeMap<String, f64>)>) -> Self {
        ClientQuotas {
            entities: v.into_iter().filter(|(_, q)| !q.is_empty()).collect(),
        }
    }
}

impl From<ClientQuotas> for Vec<(QuotaEntity, BTreeMap<String, f64>)> {
    fn from(q: ClientQuotas) -> Self {
        q.entities.into_iter().collect()
    }
}

/// Which quota a connection falls under for one key, and the rate it shares with every
/// connection under the same one: Kafka's metric tags, (user, client-id), where a level
/// without a user (or client-id) component tags it "".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SensorKey {
    pub key: QuotaKey,
    pub user: String,
    pub client_id: String,
}

impl ClientQuotas {
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    pub fn get(&self, entity: &QuotaEntity) -> Option<&BTreeMap<String, f64>> {
        self.entities.get(entity)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&QuotaEntity, &BTreeMap<String, f64>)> {
        self.entities.iter()
    }

    /// Sets (`Some`) or removes (`None`) one key of one entity (Kafka's ClientQuotaRecord
    /// replay); an entity with no key left is removed.
    pub fn apply(&mut self, entity: &QuotaEntity, key: &str, value: Option<f64>) {
        match value {
            Some(v) => {
                self.entities
                    .entry(entity.clone())
                    .or_default()
                    .insert(key.to_string(), v);
            }
            None => {
                if let Some(q) = self.entities.get_mut(entity) {
                    q.remove(key);
                    if q.is_empty() {
                        self.entities.remove(entity);
                    }
                }
            }
        }
    }

    /// The entities `filter` matches, with their quotas.
    pub fn describe(&self, filter: &QuotaFilter) -> Vec<(&QuotaEntity, &BTreeMap<String, f64>)> {
        self.entities
            .iter()
            .filter(|(e, _)| filter.matches(e))
            .collect()
    }

    /// The quota on `key` for a connection of `user` with `client_id`, and the sensor it is
    /// measured by: the first of Kafka's eight levels that sets `key`, most specific first:
    /// user+client-id, user+default client, user, default user+client-id, default
    /// user+default client, default user, client-id, default client.
    pub fn resolve(&self, key: QuotaKey, user: &str, client_id: &str) -> Option<(f64, SensorKey)> {
        use EntityName::{Default as D, Named as N};
        let (u, c) = (|| N(user.to_string()), || N(client_id.to_string()));
        let levels: [(Option<EntityName>, Option<EntityName>); 8] = [
            (Some(u()), Some(c())),
            (Some(u()), Some(D)),
            (Some(u()), None),
            (Some(D), Some(c())),
            (Some(D), Some(D)),
            (Some(D), None),
            (None, Some(c())),
            (None, Some(D)),
        ];
        for (user_level, client_level) in levels {
            let tags = (
                if user_level.is_some() { user } else { "" },
                if client_level.is_some() {
                    client_id
                } else {
                    ""
                },
            );
            let entity = QuotaEntity {
                user: user_level,
                client_id: client_level,
            };
            if let Some(v) = self.entities.get(&entity).and_then(|q| q.get(key.name())) {
                let sensor = SensorKey {
                    key,
                    user: tags.0.to_string(),
                    client_id: tags.1.to_string(),
                };
                return Some((*v, sensor));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn named(n: &str) -> Option<EntityName> {
        Some(EntityName::Named(n.into()))
    }

    /// Each of Kafka's eight levels wins over the ones below it, per key, and names the
    /// sensor with the connection's user and client id where the level has that component.
    #[test]
    fn precedence_follows_kafkas_eight_levels() {
        let levels = [
            (named("alice"), named("app")),
            (named("alice"), Some(EntityName::Default)),
            (named("alice"), None),
            (Some(EntityName::Default), named("app")),
            (Some(EntityName::Default), Some(EntityName::Default)),
            (Some(EntityName::Default), None),
            (None, named("app")),
            (None, Some(EntityName::Default)),
        ];
        let mut q = ClientQuotas::default();
        for (i, (u, c)) in levels.iter().enumerate() {
            let e = QuotaEntity {
                user: u.clone(),
                client_id: c.clone(),
            };
            q.apply(&e, "producer_byte_rate", Some(i as f64 + 1.0));
        }
        for (i, (u, c)) in levels.iter().enumerate() {
            let (v, sensor) = q
                .resolve(QuotaKey::ProducerByteRate, "alice", "app")
                .unwrap();
            assert_eq!(v, i as f64 + 1.0);
            assert_eq!(sensor.user, if u.is_some() { "alice" } else { "" });
            assert_eq!(sensor.client_id, if c.is_some() { "app" } else { "" });
            q.apply(
                &QuotaEntity {
                    user: u.clone(),
                    client_id: c.clone(),
                },
                "producer_byte_rate",
                None,
            );
        }
        assert!(q.is_empty());
        assert!(q
            .resolve(QuotaKey::ProducerByteRate, "alice", "app")
            .is_none());
        // Another key does not make a level win.
        let e = QuotaEntity {
            user: named("alice"),
            client_id: None,
        };
        q.apply(&e, "consumer_byte_rate", Some(5.0));
        assert!(q
            .resolve(QuotaKey::ProducerByteRate, "alice", "x")
            .is_none());
        assert_eq!(
            q.resolve(QuotaKey::ConsumerByteRate, "alice", "x")
                .unwrap()
                .0,
            5.0
        );
        assert!(q.resolve(QuotaKey::ConsumerByteRate, "bob", "x").is_none());
    }

    /// Kafka's checks of an alteration, with its errors: duplicate keys, empty or repeated
    /// entity types, unknown types, empty names, unknown keys, fractional byte rates; a
    /// removal is never checked; and the catalog form survives JSON.
    #[test]
    fn alterations_are_checked_as_kafka_does() {
        let set = |k: &str, v: f64| (k.to_string(), v, false);
        let ok = check_alteration(
            [(USER, Some("alice")), (CLIENT_ID, None)],
            &[
                set("producer_byte_rate", 1024.0),
                ("nope".into(), 0.0, true),
            ],
        )
        .unwrap();
        assert_eq!(ok.0.to_string(), "user=alice, client-id=<default>");
        assert_eq!(ok.1[1], ("nope".to_string(), None));
        let err = |c: Vec<(&str, Option<&str>)>, ops: &[(String, f64, bool)]| {
            check_alteration(c, ops).unwrap_err()
        };
        let e = err(
            vec![(USER, Some("a"))],
            &[
                set("producer_byte_rate", 1.0),
                set("producer_byte_rate", 2.0),
            ],
        );
        assert!(e.message.starts_with("Duplicate quota key"));
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(
            err(vec![], &[]).message,
            "Invalid empty client quota entity"
        );
        assert!(err(vec![(USER, Some("a")), (USER, Some("b"))], &[])
            .message
            .contains("duplicate entity entry user"));
        assert!(err(vec![("group", Some("a"))], &[])
            .message
            .contains("Unhandled client quota entity type: group"));
        assert_eq!(
            err(vec![(CLIENT_ID, Some(""))], &[]).message,
            "Empty client-id not supported"
        );
        assert_eq!(
            err(vec![(USER, Some("a"))], &[set("bogus", 1.0)]).message,
            "Invalid configuration key bogus"
        );
        assert_eq!(
            err(vec![(USER, Some("a"))], &[set("consumer_byte_rate", 1.5)]).message,
            "consumer_byte_rate cannot be a fractional value."
        );
        assert!(check_alteration([(USER, Some("a"))], &[set("request_percentage", 12.5)]).is_ok());
        assert!(
            check_alteration([(USER, Some("a"))], &[set("request_percentage", f64::NAN)]).is_err()
        );

        let mut q = ClientQuotas::default();
        q.apply(&ok.0, "producer_byte_rate", Some(1024.0));
        let json = serde_json::to_string(&q).unwrap();
        let back: ClientQuotas = serde_json::from_str(&json).unwrap();
        assert_eq!(back, q);
    }

    /// Describe filters: Kafka's errors, exact/default/specified matching, strict wanting
    /// the same components, and the empty filter.
    #[test]
    fn filters_match_as_kafkas_image() {
        let mut q = ClientQuotas::default();
        let entities = [
            QuotaEntity {
                user: named("alice"),
                client_id: None,
            },
            QuotaEntity {
                user: Some(EntityName::Default),
                client_id: None,
            },
            QuotaEntity {
                user: named("alice"),
                client_id: named("app"),
            },
            QuotaEntity {
                user: None,
                client_id: Some(EntityName::Default),
            },
        ];
        for e in &entities {
            q.apply(e, "request_percentage", Some(50.0));
        }
        let count = |c: Vec<(&str, i8, Option<&str>)>, strict| {
            q.describe(&QuotaFilter::from_wire(c, strict).unwrap())
                .len()
        };
        assert_eq!(count(vec![], false), 4);
        assert_eq!(count(vec![], true), 0);
        assert_eq!(
            count(vec![(USER, MATCH_TYPE_EXACT, Some("alice"))], false),
            2
        );
        assert_eq!(
            count(vec![(USER, MATCH_TYPE_EXACT, Some("alice"))], true),
            1
        );
        assert_eq!(count(vec![(USER, MATCH_TYPE_DEFAULT, None)], false), 1);
        assert_eq!(count(vec![(USER, MATCH_TYPE_SPECIFIED, None)], false), 3);
        assert_eq!(count(vec![(USER, MATCH_TYPE_SPECIFIED, None)], true), 2);
        assert_eq!(
            count(vec![(CLIENT_ID, MATCH_TYPE_SPECIFIED, None)], false),
            2
        );
        assert_eq!(count(vec![(IP, MATCH_TYPE_SPECIFIED, None)], false), 0);
        let err = |c: Vec<(&str, i8, Option<&str>)>| QuotaFilter::from_wire(c, false).unwrap_err();
        assert_eq!(
            err(vec![("", 0, Some("a"))]).message,
            "Invalid empty entity type."
        );
        assert_eq!(
            err(vec![("group", 2, None)]).code,
            ErrorCode::UnsupportedVersion
        );
        assert!(err(vec![(USER, 2, None), (USER, 1, None)])
            .message
            .contains("cannot appear more than once"));
        assert!(err(vec![(USER, 0, None)])
            .message
            .contains("MATCH_TYPE_EXACT"));
        assert!(err(vec![(USER, 1, Some("a"))])
            .message
            .contains("MATCH_TYPE_DEFAULT"));
        assert!(err(vec![(USER, 2, Some("a"))])
            .message
            .contains("MATCH_TYPE_SPECIFIED"));
        assert_eq!(err(vec![(USER, 7, None)]).message, "Unknown match type 7");
        assert!(err(vec![(USER, 2, None), (IP, 2, None)])
            .message
            .contains("IP filter component"));
    }
}
