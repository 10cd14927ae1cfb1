//! AlterClientQuotas (v0-1, KIP-546): set and remove quotas of user, client-id and
//! user+client-id entities (names or `<default>`). Each entry is checked here as Kafka's
//! controller checks it (a key named twice, the entity, unknown keys, whole numbers for the
//! byte rates) and refused alone with INVALID_REQUEST; `validate_only` stops after the
//! checks. The valid entries go to the controller, which records what changes as
//! ClientQuota records in the metadata log, so every broker applies the same quotas and they
//! survive restarts and snapshots.
use std::rc::Rc;

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};

use super::str_bytes;
use crate::cluster::controller::{ControllerRequest, ControllerResponse, Status};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::security::quota::{check_alteration, checked_ops, QuotaEntity, QuotaOps};
use crate::server::admin::controller;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

/// Each entry's checked change, or its refusal, in request order.
pub fn validate(req: &AlterClientQuotasRequest) -> Vec<Result<(QuotaEntity, QuotaOps), Status>> {
    req.entries
        .iter()
        .map(|entry| {
            let ops: Vec<(String, f64, bool)> = entry
                .ops
                .iter()
                .map(|o| (o.key.to_string(), o.value, o.remove))
                .collect();
            check_alteration(
                entry
                    .entity
                    .iter()
                    .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref())),
                &ops,
            )
            .map_err(|e| Status::error(e.code, e.message))
        })
        .collect()
}

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    // Kafka: ALTER_CONFIGS on the cluster, else every entry CLUSTER_AUTHORIZATION_FAILED.
    let checked = if authz.allows_cluster(AclOperation::AlterConfigs) {
        validate(&req)
    } else {
        let denied = Status::error(
            ErrorCode::ClusterAuthorizationFailed,
            "Cluster authorization failed.",
        );
        req.entries.iter().map(|_| Err(denied.clone())).collect()
    };
    let mut statuses: Vec<Status> = checked
        .iter()
        .map(|c| c.as_ref().err().cloned().unwrap_or_default())
        .collect();
    let valid: Vec<(usize, (QuotaEntity, QuotaOps))> = checked
        .into_iter()
        .enumerate()
        .filter_map(|(i, c)| c.ok().map(|c| (i, c)))
        .collect();
    if !req.validate_only && !valid.is_empty() {
        let (indexes, entries): (Vec<usize>, Vec<_>) = valid
            .into_iter()
            .map(|(i, (entity, ops))| (i, (entity, checked_ops(ops))))
            .unzip();
        let answer = controller(ctx, ControllerRequest::AlterClientQuotas { entries }).await;
        let results = match answer {
            Ok(ControllerResponse::AlterClientQuotas { results }) => results,
            Ok(other) => vec![
                Status::error(
                    ErrorCode::UnknownServerError,
                    format!("unexpected controller response {other:?}"),
                );
                indexes.len()
            ],
            Err(e) => vec![Status::error(e.code, e.message); indexes.len()],
        };
        for (i, status) in indexes.into_iter().zip(results) {
            if let Some(s) = statuses.get_mut(i) {
                *s = status;
            }
        }
    }
    let entries = req
        .entries
        .iter()
        .zip(statuses)
        .map(|(entry, status)| {
            EntryData::default()
                .with_error_code(status.error_code)
                .with_error_message(status.message.as_deref().map(str_bytes))
                .with_entity(
                    entry
                        .entity
                        .iter()
                        .map(|e| {
                            EntityData::default()
                                .with_entity_type(e.entity_type.clone())
                                .with_entity_name(e.entity_name.clone())
                        })
                        .collect(),
                )
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::ApiKey;

    fn entry(entity: &[(&str, Option<&str>)], ops: &[(&str, f64, bool)]) -> EntryData {
        EntryData::default()
            .with_entity(
                entity
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(str_bytes(t))
                            .with_entity_name(n.map(str_bytes))
                    })
                    .collect(),
            )
            .with_ops(
                ops.iter()
                    .map(|(k, v, r)| {
                        OpData::default()
                            .with_key(str_bytes(k))
                            .with_value(*v)
                            .with_remove(*r)
                    })
                    .collect(),
            )
    }

    /// Entries are checked one by one (a bad one refused alone, with Kafka's error) and the
    /// request survives the wire at every advertised version, default names as nulls.
    #[test]
    fn entries_are_checked_alone_and_round_trip() {
        let req = AlterClientQuotasRequest::default().with_entries(vec![
            entry(
                &[("user", None)],
                &[("producer_byte_rate", 1048576.0, false)],
            ),
            entry(&[("client-id", Some("app"))], &[("bogus", 1.0, false)]),
            entry(
                &[("user", Some("alice")), ("client-id", None)],
                &[("request_percentage", 0.0, true)],
            ),
        ]);
        let (lo, hi) = crate::protocol::api_versions::range(ApiKey::AlterClientQuotas).unwrap();
        for version in lo..=hi {
            let back = crate::server::handlers::round_trip(&req, version);
            let checked = validate(&back);
            assert_eq!(checked.len(), 3);
            let (entity, ops) = checked[0].as_ref().unwrap();
            assert_eq!(entity.to_string(), "user=<default>");
            assert_eq!(ops[0], ("producer_byte_rate".to_string(), Some(1048576.0)));
            let refused = checked[1].as_ref().unwrap_err();
            assert_eq!(refused.error_code, ErrorCode::InvalidRequest.code());
            assert!(checked[2].is_ok());
            crate::server::handlers::round_trip(&AlterClientQuotasResponse::default(), version);
        }
    }
}
