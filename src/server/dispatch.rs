//! Request dispatch: header → version check → the API's handler → encoded response.
//!
//! Every handler returns its response body; `Produce` and `Fetch` return a future of it,
//! because their completion (durability, long polls) must not hold up the requests behind
//! them on the connection. A request Strata cannot parse or does not implement closes the
//! connection, as Kafka's broker does — except ApiVersions, which always answers so that a
//! client can learn what is supported.
use std::rc::Rc;

use bytes::Bytes;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use kafka_protocol::messages::*;
use tracing::debug;

use super::authz::Authz;
use super::handlers;
use super::quota::{ClientLimits, ConnectionQuota, Throttle};
use crate::protocol::api_versions;
use crate::protocol::error::ErrorCode;
use crate::protocol::frame::{decode_body, encode_response, parse_request, FrameError, RawRequest};
use crate::security::acl::AclOperation;
use crate::security::Session;
use crate::shard::ShardCtx;

/// A response that may still be in the making. `Ok(None)` means "send nothing" (acks=0); an
/// error means the response could not be encoded: the connection logs it and closes, since
/// the client would otherwise wait for that correlation id forever.
pub type PendingResponse = LocalBoxFuture<'static, Result<Option<Vec<Bytes>>, FrameError>>;

fn ready(bytes: Option<Vec<Bytes>>) -> PendingResponse {
    futures::future::ready(Ok(bytes)).boxed_local()
}

/// Encodes `body` as the response to `raw`, as an immediately ready `PendingResponse`.
fn respond<T: kafka_protocol::protocol::Encodable>(
    raw: &RawRequest,
    body: &T,
) -> Result<PendingResponse, FrameError> {
    let frame = encode_response(
        raw.api,
        raw.header.request_api_version,
        raw.header.correlation_id,
        body,
    )?;
    Ok(ready(Some(vec![frame.freeze()])))
}

/// A response computed by `fut`, encoded when it is ready.
fn deferred<T, F>(raw: &RawRequest, fut: F) -> Result<PendingResponse, FrameError>
where
    T: kafka_protocol::protocol::Encodable,
    F: std::future::Future<Output = T> + 'static,
{
    let (api, version, corr) = (
        raw.api,
        raw.header.request_api_version,
        raw.header.correlation_id,
    );
    Ok(async move {
        let body = fut.await;
        Ok(Some(vec![
            encode_response(api, version, corr, &body)?.freeze()
        ]))
    }
    .boxed_local())
}

/// Serves one request of the connection whose security context is `session` (its listener
/// decides the addresses Metadata answers; its principal is who the request acts as).
///
/// `quota` is the connection's client-quota state: the quotas of its principal and the
/// request's client id are looked up (nothing to do when the cluster has none), Produce and
/// Fetch are throttled on their byte rates, and every request but the inter-broker ones is
/// metered for `request_percentage` (`server::quota`).
pub async fn dispatch(
    ctx: &Rc<ShardCtx>,
    frame: Bytes,
    session: &mut Session,
    quota: &mut ConnectionQuota,
) -> Result<PendingResponse, FrameError> {
    let started = std::time::Instant::now();
    let raw = parse_request(frame)?;
    let version = raw.header.request_api_version;
    debug!(api = ?raw.api, version, correlation_id = raw.header.correlation_id, "request");
    if raw.api == ApiKey::ApiVersions {
        return api_versions_request(&raw);
    }
    if !api_versions::is_supported(raw.api, version) {
        return Err(FrameError::BadHeader(format!(
            "{:?} v{version} is not supported (supported: {:?})",
            raw.api,
            api_versions::range(raw.api)
        )));
    }
    let limits = quota.limits(
        ctx,
        &session.principal.name,
        raw.header.client_id.as_deref().unwrap_or(""),
    );
    let Some(limits) = limits else {
        return serve(ctx, raw, session, None).await;
    };
    let metering = limits.request.clone().filter(|_| !is_cluster_action(&raw));
    let response = (raw.api, version);
    let quotas = Quotas {
        limits,
        throttle: quota.throttle.clone(),
    };
    let pending = serve(ctx, raw, session, Some(&quotas)).await?;
    Ok(match metering {
        Some(limit) => super::quota::metered(
            pending,
            response,
            started.elapsed(),
            limit,
            quotas.limits.window_size_ms,
            ctx.shared.clock.clone(),
            quotas.throttle,
        ),
        None => pending,
    })
}

/// What a request's handler needs of the connection's quotas.
pub struct Quotas {
    pub limits: Rc<ClientLimits>,
    pub throttle: Rc<Throttle>,
}

/// Inter-broker requests (replica fetches, transaction markers) are exempt from client
/// quotas, as Kafka exempts cluster actions: a default client quota must not slow
/// replication.
fn is_cluster_action(raw: &RawRequest) -> bool {
    match raw.api {
        ApiKey::WriteTxnMarkers => true,
        ApiKey::Fetch => fetch_replica_id(raw) >= 0,
        _ => false,
    }
}

/// A Fetch's replica id without decoding the request: the body's first field until v15
/// (-1 for consumers); v15+ moved it into a tagged field that only brokers send, so a v15+
/// fetch counts as a consumer's here and the handler decides from the decoded request.
fn fetch_replica_id(raw: &RawRequest) -> i32 {
    if raw.header.request_api_version >= 15 {
        return -1;
    }
    raw.body
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(-1, i32::from_be_bytes)
}

/// Kafka's message for a request refused CLUSTER_AUTHORIZATION_FAILED.
const CLUSTER_DENIED: &str = "Cluster authorization failed.";

/// Serves a parsed, supported request (`quotas` set when a client quota applies).
async fn serve(
    ctx: &Rc<ShardCtx>,
    raw: RawRequest,
    session: &mut Session,
    quotas: Option<&Quotas>,
) -> Result<PendingResponse, FrameError> {
    let version = raw.header.request_api_version;
    // Authorization off: an empty context, every check one branch.
    let authz = Authz::for_session(ctx, session);
    match raw.api {
        ApiKey::Metadata => {
            let req: MetadataRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::metadata::handle(ctx, version, req, &session.listener, &authz).await,
            )
        }
        ApiKey::Produce => {
            let req: ProduceRequest = decode_body(&raw)?;
            let (api, corr) = (raw.api, raw.header.correlation_id);
            // producer_byte_rate counts the request's bytes (Kafka: its size on the wire),
            // recorded as it arrives; the throttle goes out in the response.
            // Produce v6 is KIP-219's: the connection is muted after the response (decided
            // now, so the reader stops at once); older clients get a late answer instead.
            let kip219 = version >= 6;
            let throttle_ms = quotas.map_or(0, |q| {
                let Some(limit) = q.limits.produce.as_ref() else {
                    return 0;
                };
                let bytes = u64::try_from(raw.body.len()).unwrap_or(u64::MAX);
                let ms = limit.record(ctx.shared.clock.monotonic_ms(), bytes, u64::MAX);
                if kip219 {
                    q.throttle.decide(ms);
                }
                ms
            });
            let pending = handlers::produce::handle(ctx, version, &authz, req).await;
            Ok(async move {
                let answer = pending.await;
                if !kip219 && throttle_ms > 0 {
                    glommio::timer::sleep(std::time::Duration::from_millis(throttle_ms)).await;
                }
                let throttle_ms = i32::try_from(throttle_ms).unwrap_or(i32::MAX);
                let Some(body) = answer else {
                    return Ok(None);
                };
                let body = body.with_throttle_time_ms(throttle_ms);
                Ok(Some(vec![
                    encode_response(api, version, corr, &body)?.freeze()
                ]))
            }
            .boxed_local())
        }
        ApiKey::Fetch => {
            let req: FetchRequest = decode_body(&raw)?;
            let corr = raw.header.correlation_id;
            let quota = quotas.and_then(|q| {
                Some(handlers::fetch::FetchQuota {
                    limit: q.limits.fetch.clone()?,
                    window_size_ms: q.limits.window_size_ms,
                    throttle: q.throttle.clone(),
                })
            });
            Ok(handlers::fetch::handle(
                ctx.clone(),
                version,
                corr,
                authz,
                req,
                quota,
            ))
        }
        ApiKey::ListOffsets => {
            let req: ListOffsetsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::list_offsets::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::OffsetForLeaderEpoch => {
            let req: OffsetForLeaderEpochRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::offset_for_leader_epoch::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::CreateTopics => {
            let req: CreateTopicsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::create_topics::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::DeleteTopics => {
            let req: DeleteTopicsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::delete_topics::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::CreatePartitions => {
            let req: CreatePartitionsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::create_partitions::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::DeleteRecords => {
            let req: DeleteRecordsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::delete_records::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::WriteTxnMarkers => {
            let req: WriteTxnMarkersRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::write_txn_markers::handle(ctx, version, &authz, req).await,
            )
        }
        // Transactions: the coordinator's answers wait for `__transaction_state` appends,
        // so they answer through a future and do not hold up the connection's reader.
        ApiKey::InitProducerId => {
            let req: InitProducerIdRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::init_producer_id::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::AddPartitionsToTxn => {
            let req: AddPartitionsToTxnRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::add_partitions_to_txn::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::AddOffsetsToTxn => {
            let req: AddOffsetsToTxnRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::add_offsets_to_txn::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::EndTxn => {
            let req: EndTxnRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::end_txn::handle(&ctx, version, &authz, req).await
            })
        }
        // The admin side of transactions (KIP-664): answered from producer and coordinator
        // state at once, no log write.
        ApiKey::DescribeProducers => {
            let req: DescribeProducersRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::describe_producers::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::DescribeTransactions => {
            let req: DescribeTransactionsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::describe_transactions::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::ListTransactions => {
            let req: ListTransactionsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::list_transactions::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::DescribeConfigs => {
            let req: DescribeConfigsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::describe_configs::handle(ctx, version, &authz, req),
            )
        }
        ApiKey::IncrementalAlterConfigs => {
            let req: IncrementalAlterConfigsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::incremental_alter_configs::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::DescribeLogDirs => {
            let req: DescribeLogDirsRequest = decode_body(&raw)?;
            // Kafka: DESCRIBE on the cluster; refused, no log dirs (and v3+ say why).
            if !authz.allows_cluster(AclOperation::Describe) {
                return respond(
                    &raw,
                    &DescribeLogDirsResponse::default()
                        .with_error_code(ErrorCode::ClusterAuthorizationFailed.code()),
                );
            }
            respond(
                &raw,
                &handlers::describe_log_dirs::handle(ctx, version, req).await,
            )
        }
        ApiKey::DescribeCluster => {
            let req: DescribeClusterRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::describe_cluster::handle(ctx, version, req, &session.listener, &authz),
            )
        }
        ApiKey::DescribeTopicPartitions => {
            let req: DescribeTopicPartitionsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::describe_topic_partitions::handle(ctx, &authz, req),
            )
        }
        ApiKey::ElectLeaders => {
            let req: ElectLeadersRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::elect_leaders::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::AlterPartitionReassignments => {
            let req: AlterPartitionReassignmentsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::alter_partition_reassignments::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::ListPartitionReassignments => {
            let req: ListPartitionReassignmentsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::list_partition_reassignments::handle(ctx, version, &authz, req).await,
            )
        }
        // Group coordination. JoinGroup and SyncGroup may wait for a rebalance, so like
        // Produce they answer through a future and do not hold up the connection's reader.
        ApiKey::FindCoordinator => {
            let req: FindCoordinatorRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::find_coordinator::handle(ctx, version, req, &session.listener, &authz)
                    .await,
            )
        }
        ApiKey::JoinGroup => {
            let req: JoinGroupRequest = decode_body(&raw)?;
            let client_id = raw
                .header
                .client_id
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default();
            let (ctx, peer) = (ctx.clone(), session.peer.clone());
            deferred(&raw, async move {
                handlers::join_group::handle(&ctx, version, &client_id, &peer, &authz, req).await
            })
        }
        ApiKey::SyncGroup => {
            let req: SyncGroupRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::sync_group::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::Heartbeat => {
            let req: HeartbeatRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::heartbeat::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::LeaveGroup => {
            let req: LeaveGroupRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::leave_group::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::OffsetCommit => {
            let req: OffsetCommitRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::offset_commit::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::TxnOffsetCommit => {
            let req: TxnOffsetCommitRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::txn_offset_commit::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::OffsetFetch => {
            let req: OffsetFetchRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::offset_fetch::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::DescribeGroups => {
            let req: DescribeGroupsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::describe_groups::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::ListGroups => {
            let req: ListGroupsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::list_groups::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::DeleteGroups => {
            let req: DeleteGroupsRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::delete_groups::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::OffsetDelete => {
            let req: OffsetDeleteRequest = decode_body(&raw)?;
            respond(
                &raw,
                &handlers::offset_delete::handle(ctx, version, &authz, req).await,
            )
        }
        ApiKey::DescribeUserScramCredentials => {
            let req: DescribeUserScramCredentialsRequest = decode_body(&raw)?;
            // Kafka: DESCRIBE on the cluster.
            if !authz.allows_cluster(AclOperation::Describe) {
                return respond(
                    &raw,
                    &DescribeUserScramCredentialsResponse::default()
                        .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
                        .with_error_message(Some(handlers::str_bytes(CLUSTER_DENIED))),
                );
            }
            let catalog = ctx.shared.catalog.load();
            respond(
                &raw,
                &handlers::describe_user_scram_credentials::handle(&catalog, req),
            )
        }
        ApiKey::AlterUserScramCredentials => {
            let req: AlterUserScramCredentialsRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::alter_user_scram_credentials::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::DescribeClientQuotas => {
            let req: DescribeClientQuotasRequest = decode_body(&raw)?;
            // Kafka: DESCRIBE_CONFIGS on the cluster.
            if !authz.allows_cluster(AclOperation::DescribeConfigs) {
                return respond(
                    &raw,
                    &DescribeClientQuotasResponse::default()
                        .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
                        .with_error_message(Some(handlers::str_bytes(CLUSTER_DENIED)))
                        .with_entries(None),
                );
            }
            let catalog = ctx.shared.catalog.load();
            respond(
                &raw,
                &handlers::describe_client_quotas::handle(&catalog.client_quotas, &req),
            )
        }
        ApiKey::DescribeAcls => {
            let req: DescribeAclsRequest = decode_body(&raw)?;
            respond(&raw, &handlers::describe_acls::handle(&authz, &req))
        }
        ApiKey::CreateAcls => {
            let req: CreateAclsRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::create_acls::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::DeleteAcls => {
            let req: DeleteAclsRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::delete_acls::handle(&ctx, version, &authz, req).await
            })
        }
        ApiKey::AlterClientQuotas => {
            let req: AlterClientQuotasRequest = decode_body(&raw)?;
            let ctx = ctx.clone();
            deferred(&raw, async move {
                handlers::alter_client_quotas::handle(&ctx, version, &authz, req).await
            })
        }
        // On a SASL listener the connection answers these itself (`server::sasl`); here the
        // listener takes no SASL, so the handshake is refused as Kafka refuses it.
        ApiKey::SaslHandshake => {
            let req: SaslHandshakeRequest = decode_body(&raw)?;
            let mut session = super::sasl::SaslSession::new(false);
            let (body, _) = handlers::sasl_handshake::handle(&mut session, &[], version, req);
            respond(&raw, &body)
        }
        ApiKey::SaslAuthenticate => {
            let _req: SaslAuthenticateRequest = decode_body(&raw)?;
            let body = SaslAuthenticateResponse::default()
                .with_error_code(crate::protocol::error::ErrorCode::IllegalSaslState.code())
                .with_error_message(Some(handlers::str_bytes(
                    "this listener does not take SASL authentication",
                )));
            respond(&raw, &body)
        }
        other => Err(FrameError::BadHeader(format!(
            "{other:?} is not implemented"
        ))),
    }
}

thread_local! {
    /// This shard's log of failed authentications (rate-limited).
    static SASL_FAILURES: std::cell::RefCell<super::sasl::FailureLog> =
        std::cell::RefCell::new(super::sasl::FailureLog::default());
}

/// What a SASL frame asks of the connection after its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslNext {
    Serve,
    /// Stop reading; close once the response is written.
    Close,
}

/// Serves SaslHandshake and SaslAuthenticate on a SASL listener, where the connection holds
/// the exchange's state. A failed authentication is answered after
/// `connection_failed_authentication_delay_ms` and closes the connection.
pub fn sasl_request(
    ctx: &Rc<ShardCtx>,
    session: &mut super::sasl::SaslSession,
    frame: Bytes,
    peer: &str,
) -> Result<(PendingResponse, SaslNext), FrameError> {
    let raw = parse_request(frame)?;
    let version = raw.header.request_api_version;
    if !api_versions::is_supported(raw.api, version) {
        return Err(FrameError::BadHeader(format!(
            "{:?} v{version} is not supported",
            raw.api
        )));
    }
    let config = &ctx.shared.config;
    match raw.api {
        ApiKey::SaslHandshake => {
            let req: SaslHandshakeRequest = decode_body(&raw)?;
            let enabled = config.sasl_mechanisms().unwrap_or_default();
            let (body, close) = handlers::sasl_handshake::handle(session, &enabled, version, req);
            let next = if close {
                SaslNext::Close
            } else {
                SaslNext::Serve
            };
            Ok((respond(&raw, &body)?, next))
        }
        ApiKey::SaslAuthenticate => {
            let req: SaslAuthenticateRequest = decode_body(&raw)?;
            let (body, after) = authenticate_token(ctx, session, &req.auth_bytes, peer);
            let frame =
                encode_response(raw.api, version, raw.header.correlation_id, &body)?.freeze();
            Ok(answer_after(ctx, frame, after))
        }
        other => Err(FrameError::BadHeader(format!("{other:?} is not SASL"))),
    }
}

/// A raw SASL token, after a v0 SaslHandshake: answered with the raw token (size-prefixed,
/// no Kafka header). A failure has no way to say so: the connection closes.
pub fn sasl_raw_token(
    ctx: &Rc<ShardCtx>,
    session: &mut super::sasl::SaslSession,
    token: &[u8],
    peer: &str,
) -> (PendingResponse, SaslNext) {
    let (body, after) = authenticate_token(ctx, session, token, peer);
    if body.error_code != 0 {
        return (ready(None), SaslNext::Close);
    }
    let mut frame = Vec::with_capacity(4 + body.auth_bytes.len());
    let len = u32::try_from(body.auth_bytes.len()).unwrap_or(u32::MAX);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body.auth_bytes);
    answer_after(ctx, Bytes::from(frame), after)
}

/// Runs one token through the session, logging the outcome (user and peer, never the
/// secret; failures rate-limited).
fn authenticate_token(
    ctx: &Rc<ShardCtx>,
    session: &mut super::sasl::SaslSession,
    token: &[u8],
    peer: &str,
) -> (SaslAuthenticateResponse, handlers::sasl_authenticate::After) {
    use handlers::sasl_authenticate::After;
    let config = &ctx.shared.config;
    let plain_users = config.plain_users().unwrap_or_default();
    let catalog = ctx.shared.catalog.load();
    // Loaded (or looked at for a change) only when a client uses OAUTHBEARER.
    let oauth = session
        .pending_mechanism()
        .filter(|m| *m == crate::security::sasl::Mechanism::OAuthBearer)
        .and_then(|_| super::oauth::validator(config, ctx.id));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let credentials = super::sasl::BrokerCredentials {
        plain_users: &plain_users,
        catalog: &catalog,
        oauth: oauth.as_deref(),
        now_ms,
    };
    let nonce = crate::security::sasl::nonce_from(&mut rand::thread_rng(), 32);
    let reauth_ms = u64::try_from(config.connections_max_reauth_ms).unwrap_or(0);
    let now = std::time::Instant::now();
    let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token));
    let (body, after) =
        handlers::sasl_authenticate::handle(session, &credentials, nonce, reauth_ms, now, req);
    match &after {
        After::Authenticated(user) => debug!(%peer, %user, "SASL authenticated"),
        After::Failed { user, why } => {
            let due = SASL_FAILURES.with(|log| log.borrow_mut().note(now));
            if let Some(failures) = due {
                tracing::warn!(
                    %peer,
                    user = user.as_deref().unwrap_or("?"),
                    failures,
                    "SASL authentication failed: {why}"
                );
            }
        }
        After::Continue | After::IllegalState => {}
    }
    (body, after)
}

/// The pending answer to a token and what the connection does next: a failure waits
/// `connection_failed_authentication_delay_ms` (slowing password guessing) and closes.
fn answer_after(
    ctx: &Rc<ShardCtx>,
    frame: Bytes,
    after: handlers::sasl_authenticate::After,
) -> (PendingResponse, SaslNext) {
    use handlers::sasl_authenticate::After;
    match after {
        After::Continue | After::Authenticated(_) => (ready(Some(vec![frame])), SaslNext::Serve),
        After::IllegalState => (ready(Some(vec![frame])), SaslNext::Close),
        After::Failed { .. } => {
            let delay = std::time::Duration::from_millis(
                ctx.shared.config.connection_failed_authentication_delay_ms,
            );
            let pending = async move {
                glommio::timer::sleep(delay).await;
                Ok(Some(vec![frame]))
            }
            .boxed_local();
            (pending, SaslNext::Close)
        }
    }
}

/// ApiVersions answers even a version it does not know: with v0's encoding and
/// UNSUPPORTED_VERSION, listing what is supported, so the client can retry (KIP-511).
fn api_versions_request(raw: &RawRequest) -> Result<PendingResponse, FrameError> {
    let version = raw.header.request_api_version;
    let supported = api_versions::is_supported(ApiKey::ApiVersions, version);
    let decoded = if supported {
        decode_body::<ApiVersionsRequest>(raw).ok()
    } else {
        None
    };
    let (encode_version, error) = match decoded {
        Some(_) => (version, None),
        None if supported => (
            version,
            Some(crate::protocol::error::ErrorCode::InvalidRequest),
        ),
        None => (
            0,
            Some(crate::protocol::error::ErrorCode::UnsupportedVersion),
        ),
    };
    let body = handlers::api_versions::handle(error);
    let frame = encode_response(
        ApiKey::ApiVersions,
        encode_version,
        raw.header.correlation_id,
        &body,
    )?;
    Ok(ready(Some(vec![frame.freeze()])))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kafka_protocol::messages::RequestHeader;

    fn raw(api: ApiKey, version: i16) -> RawRequest {
        RawRequest {
            api,
            header: RequestHeader::default()
                .with_request_api_key(api as i16)
                .with_request_api_version(version)
                .with_correlation_id(7),
            body: Bytes::new(),
        }
    }

    /// A deferred response that cannot be encoded (here: a version the codec does not know)
    /// must come out as an error the connection acts on, not as "send nothing", which would
    /// leave the client waiting for its correlation id forever.
    #[test]
    fn a_response_that_fails_to_encode_is_an_error_not_silence() {
        let pending = deferred(&raw(ApiKey::Heartbeat, 99), async {
            HeartbeatResponse::default()
        })
        .unwrap();
        let out = futures::executor::block_on(pending);
        assert!(
            matches!(out, Err(FrameError::Encode { .. })),
            "the encode failure was swallowed: {out:?}"
        );
    }
}
