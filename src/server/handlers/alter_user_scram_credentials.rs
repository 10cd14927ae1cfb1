//! AlterUserScramCredentials (v0, KIP-554): set and delete users' SCRAM credentials. The
//! client sends the salted password (never the password); the broker derives StoredKey and
//! ServerKey from it, checks each change as Kafka does (known mechanism, non-empty name,
//! 4096..=16384 iterations, salt and salted password present, a user and mechanism named at
//! most once), and the controller records the valid users' changes in the metadata log. A
//! user with any invalid change gets that change's error and none of its changes is made.
use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};

use super::str_bytes;
use crate::cluster::controller::{ControllerRequest, ControllerResponse, Status};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::security::sasl::scram::{SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN};
use crate::security::sasl::{ScramCredential, ScramMechanism};
use crate::server::admin::controller;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

type Deletions = Vec<(String, ScramMechanism)>;
type Upsertions = Vec<(String, ScramMechanism, ScramCredential)>;

/// Checks every change; returns the valid users' changes and the refused users' errors
/// (one per user, the first found), users in first-mention order.
pub fn validate(
    req: &AlterUserScramCredentialsRequest,
) -> (Deletions, Upsertions, Vec<(String, Status)>) {
    let mut errors: Vec<(String, Status)> = Vec::new();
    let mut seen: Vec<(String, i8)> = Vec::new();
    let mut deletions = Vec::new();
    for d in &req.deletions {
        if let Some(m) = check(&d.name, d.mechanism, &mut seen, &mut errors) {
            deletions.push((d.name.to_string(), m));
        }
    }
    let mut upsertions = Vec::new();
    for u in &req.upsertions {
        let Some(m) = check(&u.name, u.mechanism, &mut seen, &mut errors) else {
            continue;
        };
        let iterations = u32::try_from(u.iterations).unwrap_or(0);
        let refusal = if iterations < SCRAM_ITERATIONS_MIN {
            Some("Too few iterations")
        } else if iterations > SCRAM_ITERATIONS_MAX {
            Some("Too many iterations")
        } else if u.salt.is_empty() || u.salted_password.is_empty() {
            Some("Salt and salted password must not be empty")
        } else {
            None
        };
        match refusal {
            Some(why) => refuse(&mut errors, &u.name, ErrorCode::UnacceptableCredential, why),
            None => {
                let credential = ScramCredential::from_salted_password(
                    m,
                    &u.salted_password,
                    u.salt.to_vec(),
                    iterations,
                );
                upsertions.push((u.name.to_string(), m, credential));
            }
        }
    }
    deletions.retain(|(user, _)| !errors.iter().any(|(u, _)| u == user));
    upsertions.retain(|(user, _, _)| !errors.iter().any(|(u, _)| u == user));
    (deletions, upsertions, errors)
}

/// Records `user`'s first error.
fn refuse(errors: &mut Vec<(String, Status)>, user: &str, code: ErrorCode, why: &str) {
    if !errors.iter().any(|(u, _)| u == user) {
        errors.push((user.to_string(), Status::error(code, why)));
    }
}

/// The checks common to deletions and upsertions: a known mechanism, a name, and no user and
/// mechanism named twice in one request.
fn check(
    user: &str,
    mechanism: i8,
    seen: &mut Vec<(String, i8)>,
    errors: &mut Vec<(String, Status)>,
) -> Option<ScramMechanism> {
    let Some(m) = ScramMechanism::from_wire(mechanism) else {
        refuse(
            errors,
            user,
            ErrorCode::UnsupportedSaslMechanism,
            "Unknown SCRAM mechanism",
        );
        return None;
    };
    if user.is_empty() {
        refuse(
            errors,
            user,
            ErrorCode::UnacceptableCredential,
            "Username must not be empty",
        );
        return None;
    }
    if seen.iter().any(|(u, x)| u == user && *x == mechanism) {
        refuse(
            errors,
            user,
            ErrorCode::DuplicateResource,
            "A user credential cannot be altered twice in the same request",
        );
        return None;
    }
    seen.push((user.to_string(), mechanism));
    Some(m)
}

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    // Users in the order the request names them, for the answer.
    let mut order: Vec<String> = Vec::new();
    for name in req
        .deletions
        .iter()
        .map(|d| &d.name)
        .chain(req.upsertions.iter().map(|u| &u.name))
    {
        if !order.iter().any(|o| o.as_str() == name.as_str()) {
            order.push(name.to_string());
        }
    }
    // Kafka: ALTER on the cluster, else every user CLUSTER_AUTHORIZATION_FAILED.
    let (deletions, upsertions, mut results) = if authz.allows_cluster(AclOperation::Alter) {
        validate(&req)
    } else {
        let denied = Status::error(
            ErrorCode::ClusterAuthorizationFailed,
            "Cluster authorization failed.",
        );
        let all = order.iter().map(|u| (u.clone(), denied.clone())).collect();
        (Vec::new(), Vec::new(), all)
    };
    if !deletions.is_empty() || !upsertions.is_empty() {
        let answer = controller(
            ctx,
            ControllerRequest::AlterUserScramCredentials {
                deletions,
                upsertions,
            },
        )
        .await;
        match answer {
            Ok(ControllerResponse::AlterUserScramCredentials { results: done }) => {
                results.extend(done)
            }
            Ok(other) => {
                let status = Status::error(
                    ErrorCode::UnknownServerError,
                    format!("unexpected controller response {other:?}"),
                );
                fill_missing(&order, &mut results, status);
            }
            Err(e) => fill_missing(&order, &mut results, Status::error(e.code, e.message)),
        }
    }
    let results = order
        .iter()
        .map(|user| {
            let status = results
                .iter()
                .find(|(u, _)| u == user)
                .map(|(_, s)| s.clone())
                .unwrap_or_default();
            AlterUserScramCredentialsResult::default()
                .with_user(str_bytes(user))
                .with_error_code(status.error_code)
                .with_error_message(status.message.as_deref().map(str_bytes))
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Gives every user without a result `status` (the controller did not answer for them).
fn fill_missing(order: &[String], results: &mut Vec<(String, Status)>, status: Status) {
    for user in order {
        if !results.iter().any(|(u, _)| u == user) {
            results.push((user.clone(), status.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };

    fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
        ScramCredentialUpsertion::default()
            .with_name(str_bytes(name))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(Bytes::from_static(b"salt"))
            .with_salted_password(Bytes::from_static(b"salted"))
    }

    /// Kafka's checks, each refusing only its user: unknown mechanism, too few and too many
    /// iterations, an empty name, the same user and mechanism twice. A valid user's
    /// credential is derived from the salted password.
    #[test]
    fn validation_refuses_per_user() {
        let req = AlterUserScramCredentialsRequest::default()
            .with_deletions(vec![ScramCredentialDeletion::default()
                .with_name(str_bytes("dup"))
                .with_mechanism(1)])
            .with_upsertions(vec![
                upsert("ok", 2, 4096),
                upsert("mech", 3, 4096),
                upsert("few", 1, 4095),
                upsert("many", 1, 16385),
                upsert("", 1, 4096),
                upsert("dup", 1, 4096),
            ]);
        let (deletions, upsertions, errors) = validate(&req);
        assert!(deletions.is_empty());
        assert_eq!(upsertions.len(), 1);
        let (user, m, cred) = &upsertions[0];
        assert_eq!((user.as_str(), *m), ("ok", ScramMechanism::Sha512));
        assert_eq!(
            cred,
            &ScramCredential::from_salted_password(
                ScramMechanism::Sha512,
                b"salted",
                b"salt".to_vec(),
                4096
            )
        );
        let code = |u: &str| errors.iter().find(|(x, _)| x == u).unwrap().1.error_code;
        assert_eq!(code("mech"), ErrorCode::UnsupportedSaslMechanism.code());
        assert_eq!(code("few"), ErrorCode::UnacceptableCredential.code());
        assert_eq!(code("many"), ErrorCode::UnacceptableCredential.code());
        assert_eq!(code(""), ErrorCode::UnacceptableCredential.code());
        assert_eq!(code("dup"), ErrorCode::DuplicateResource.code());
    }
}
