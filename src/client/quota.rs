//! Client quota administration (KIP-546): DescribeClientQuotas and AlterClientQuotas.
//! Entities are lists of (entity type, name), a `None` name meaning the type's default, as
//! on the wire, so this works against any Kafka-compatible broker.
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
use kafka_protocol::protocol::StrBytes;

use super::error::{check_code, Result};
use super::{str_of, Client};

/// An entity: (type, name), `None` for the default (`<default>`).
pub type QuotaEntityParts = Vec<(String, Option<String>)>;

/// One entity's quotas, as the broker describes them.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaEntry {
    pub entity: QuotaEntityParts,
    pub values: Vec<(String, f64)>,
}

/// One describe filter component: the entity type and the name it must have (`Some(None)`
/// for the default), or `None` for any entity with that type.
pub type QuotaMatch = (String, Option<Option<String>>);

fn string(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl Client {
    /// The quotas of the entities matching every component (all entities when none);
    /// `strict` leaves out entities with other components.
    pub fn describe_client_quotas(
        &mut self,
        components: &[QuotaMatch],
        strict: bool,
    ) -> Result<Vec<QuotaEntry>> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<DescribeClientQuotasRequest>(None)?;
        let components = components
            .iter()
            .map(|(t, m)| {
                let c = ComponentData::default().with_entity_type(string(t));
                match m {
                    Some(Some(name)) => c.with_match_type(0).with_match(Some(string(name))),
                    // The codec's default match is "", not null: say null.
                    Some(None) => c.with_match_type(1).with_match(None),
                    None => c.with_match_type(2).with_match(None),
                }
            })
            .collect();
        let request = DescribeClientQuotasRequest::default()
            .with_components(components)
            .with_strict(strict);
        let response = conn.send(&request, version)?;
        check_code(
            response.error_code,
            response.error_message.as_ref().map(str_of),
            || "describing client quotas".to_owned(),
        )?;
        Ok(response
            .entries
            .unwrap_or_default()
            .iter()
            .map(|e| QuotaEntry {
                entity: e
                    .entity
                    .iter()
                    .map(|x| (str_of(&x.entity_type), x.entity_name.as_ref().map(str_of)))
                    .collect(),
                values: e.values.iter().map(|v| (str_of(&v.key), v.value)).collect(),
            })
            .collect())
    }

    /// Sets (`Some`) and removes (`None`) quota keys of one entity.
    pub fn alter_client_quotas(
        &mut self,
        entity: &[(String, Option<String>)],
        ops: &[(String, Option<f64>)],
        validate_only: bool,
    ) -> Result<()> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<AlterClientQuotasRequest>(None)?;
        let entry = EntryData::default()
            .with_entity(
                entity
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(string(t))
                            .with_entity_name(n.as_deref().map(string))
                    })
                    .collect(),
            )
            .with_ops(
                ops.iter()
                    .map(|(k, v)| {
                        OpData::default()
                            .with_key(string(k))
                            .with_value(v.unwrap_or(0.0))
                            .with_remove(v.is_none())
                    })
                    .collect(),
            );
        let request = AlterClientQuotasRequest::default()
            .with_entries(vec![entry])
            .with_validate_only(validate_only);
        let response = conn.send(&request, version)?;
        for e in &response.entries {
            check_code(e.error_code, e.error_message.as_ref().map(str_of), || {
                "altering client quotas".to_owned()
            })?;
        }
        Ok(())
    }
}
