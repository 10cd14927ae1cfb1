//! DescribeClientQuotas (v0-1, KIP-546): the quotas of the entities a filter matches, from
//! the metadata image. The filter is checked as Kafka checks it (a bad one is answered with
//! the error at the top and no entries); entities and keys come out in a stable order.
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};

use super::str_bytes;
use crate::security::quota::{ClientQuotas, QuotaFilter};

pub fn handle(
    quotas: &ClientQuotas,
    req: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let filter = QuotaFilter::from_wire(
        req.components
            .iter()
            .map(|c| (c.entity_type.as_str(), c.match_type, c._match.as_deref())),
        req.strict,
    );
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            return DescribeClientQuotasResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(&e.message)))
                .with_entries(None)
        }
    };
    let entries = quotas
        .describe(&filter)
        .into_iter()
        .map(|(entity, values)| {
            EntryData::default()
                .with_entity(
                    entity
                        .components()
                        .into_iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(str_bytes(t))
                                .with_entity_name(n.map(str_bytes))
                        })
                        .collect(),
                )
                .with_values(
                    values
                        .iter()
                        .map(|(k, v)| ValueData::default().with_key(str_bytes(k)).with_value(*v))
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::protocol::error::ErrorCode;
    use crate::security::quota::{EntityName, QuotaEntity};
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    use kafka_protocol::messages::ApiKey;

    /// A user's quotas come back with the entity as the wire names it (null for default);
    /// a bad filter gets the error at the top and null entries; both encode at v0 and v1.
    #[test]
    fn describes_and_refuses_bad_filters() {
        let mut q = ClientQuotas::default();
        let e = QuotaEntity {
            user: Some(EntityName::Named("alice".into())),
            client_id: Some(EntityName::Default),
        };
        q.apply(&e, "producer_byte_rate", Some(1024.0));
        q.apply(&e, "request_percentage", Some(12.5));
        let req =
            DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
                .with_entity_type(str_bytes("user"))
                .with_match_type(0)
                .with_match(Some(str_bytes("alice")))]);
        let (lo, hi) = crate::protocol::api_versions::range(ApiKey::DescribeClientQuotas).unwrap();
        for version in lo..=hi {
            let resp = crate::server::handlers::round_trip(&handle(&q, &req), version);
            let entries = resp.entries.unwrap();
            assert_eq!(entries.len(), 1);
            assert_eq!(entries[0].entity.len(), 2);
            assert_eq!(entries[0].entity[1].entity_name, None);
            assert_eq!(entries[0].values[1].value, 12.5);
        }
        let bad = req.with_components(vec![ComponentData::default()
            .with_entity_type(str_bytes("user"))
            .with_match_type(0)
            .with_match(None)]);
        let resp = handle(&q, &bad);
        assert_eq!(resp.error_code, ErrorCode::InvalidRequest.code());
        assert!(resp.entries.is_none());
    }
}
