//! DeleteTopics: by name (all versions) or by topic id (v6+).
use std::rc::Rc;

use kafka_protocol::messages::delete_topics_response::*;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};

use super::{str_bytes, topic_name};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::admin::delete_topic;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    // v0-5 name topics in `topic_names`; v6+ in `topics`, by name or id.
    let wanted: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let name = match name {
            Some(n) => Some(n),
            None => ctx
                .shared
                .catalog
                .load()
                .topic_by_id(id.as_u128())
                .map(|m| m.name.clone()),
        };
        let entry = match name {
            None => DeletableTopicResult::default()
                .with_topic_id(id)
                .with_error_code(ErrorCode::UnknownTopicId.code())
                .with_error_message(Some(str_bytes("unknown topic id"))),
            // Kafka: DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED.
            Some(name) if !authz.allows_topic(AclOperation::Delete, &name) => {
                DeletableTopicResult::default()
                    .with_name(Some(topic_name(&name)))
                    .with_topic_id(id)
                    .with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                    .with_error_message(Some(str_bytes("Authorization failed.")))
            }
            Some(name) => match delete_topic(ctx, &name).await {
                Ok(meta) => DeletableTopicResult::default()
                    .with_name(Some(topic_name(&name)))
                    .with_topic_id(meta.uuid()),
                Err(e) => DeletableTopicResult::default()
                    .with_name(Some(topic_name(&name)))
                    .with_topic_id(id)
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(&e.message))),
            },
        };
        responses.push(entry);
    }
    DeleteTopicsResponse::default().with_responses(responses)
}
