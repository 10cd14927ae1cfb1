//! DescribeUserScramCredentials (v0, KIP-554): which SCRAM mechanisms each user has, with
//! their iteration counts (never salts or keys), from the metadata image. No user list (or
//! an empty one) means every user; a user named twice gets DUPLICATE_RESOURCE, an unknown one
//! RESOURCE_NOT_FOUND, as Kafka answers.
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use super::str_bytes;
use crate::cluster::catalog::Catalog;
use crate::protocol::error::ErrorCode;

pub fn handle(
    catalog: &Catalog,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let requested: Vec<String> = req
        .users
        .unwrap_or_default()
        .iter()
        .map(|u| u.name.to_string())
        .collect();
    let users: Vec<String> = if requested.is_empty() {
        catalog.scram_credentials.keys().cloned().collect()
    } else {
        requested.clone()
    };
    let mut results: Vec<DescribeUserScramCredentialsResult> = Vec::new();
    for user in &users {
        let result = DescribeUserScramCredentialsResult::default().with_user(str_bytes(user));
        if results.iter().any(|r| r.user.as_str() == user.as_str()) {
            continue;
        }
        let result = if requested.iter().filter(|u| *u == user).count() > 1 {
            result
                .with_error_code(ErrorCode::DuplicateResource.code())
                .with_error_message(Some(str_bytes(
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                )))
        } else {
            match catalog.scram_credentials.get(user) {
                Some(creds) => result.with_credential_infos(
                    creds
                        .iter()
                        .map(|(m, c)| {
                            CredentialInfo::default()
                                .with_mechanism(m.wire())
                                .with_iterations(i32::try_from(c.iterations).unwrap_or(i32::MAX))
                        })
                        .collect(),
                ),
                None => result
                    .with_error_code(ErrorCode::ResourceNotFound.code())
                    .with_error_message(Some(str_bytes(&format!(
                        "Attempt to describe a user credential that does not exist: {user}"
                    )))),
            }
        };
        results.push(result);
    }
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::cluster::records::MetadataRecord;
    use crate::security::sasl::{ScramCredential, ScramMechanism};
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;

    /// All users when none is named; per named user its mechanisms and iterations, or
    /// RESOURCE_NOT_FOUND, or DUPLICATE_RESOURCE when named twice.
    #[test]
    fn describes_users() {
        let mut c = Catalog::default();
        c.apply(&MetadataRecord::UserScramCredential {
            name: "alice".into(),
            mechanism: ScramMechanism::Sha512,
            credential: ScramCredential::from_password(ScramMechanism::Sha512, "pw", vec![1], 8192),
        });
        let all = handle(&c, DescribeUserScramCredentialsRequest::default());
        assert_eq!(all.results.len(), 1);
        assert_eq!(all.results[0].credential_infos[0].mechanism, 2);
        assert_eq!(all.results[0].credential_infos[0].iterations, 8192);
        let name = |n: &str| UserName::default().with_name(str_bytes(n));
        let some = handle(
            &c,
            DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                name("bob"),
                name("alice"),
                name("alice"),
            ])),
        );
        assert_eq!(
            some.results[0].error_code,
            ErrorCode::ResourceNotFound.code()
        );
        assert_eq!(
            some.results[1].error_code,
            ErrorCode::DuplicateResource.code()
        );
        crate::server::handlers::round_trip(&some, 0);
    }
}
