//! SCRAM credential administration (KIP-554): AlterUserScramCredentials and
//! DescribeUserScramCredentials. The password is salted and iterated here, on the client, as
//! Kafka's admin client does: only the salted password travels.
use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::error::{check_code, Result};
use super::{str_of, Client};
use crate::security::sasl::ScramMechanism;

/// One user's SCRAM mechanisms, as the broker describes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUser {
    pub user: String,
    /// (mechanism, iterations); mechanisms Strata does not know are left out.
    pub mechanisms: Vec<(ScramMechanism, i32)>,
}

impl Client {
    /// Sets `user`'s credential for `mechanism` from `password`, salted with `salt`.
    pub fn set_scram_credential(
        &mut self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<()> {
        let salted = mechanism.salted_password(password.as_bytes(), salt, iterations);
        let upsertion = ScramCredentialUpsertion::default()
            .with_name(StrBytes::from_string(user.to_owned()))
            .with_mechanism(mechanism.wire())
            .with_iterations(i32::try_from(iterations).unwrap_or(i32::MAX))
            .with_salt(Bytes::copy_from_slice(salt))
            .with_salted_password(Bytes::from(salted));
        let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsertion]);
        self.alter_scram(request, user)
    }

    /// Deletes `user`'s credential for each of `mechanisms`.
    pub fn delete_scram_credentials(
        &mut self,
        user: &str,
        mechanisms: &[ScramMechanism],
    ) -> Result<()> {
        let deletions = mechanisms
            .iter()
            .map(|m| {
                ScramCredentialDeletion::default()
                    .with_name(StrBytes::from_string(user.to_owned()))
                    .with_mechanism(m.wire())
            })
            .collect();
        let request = AlterUserScramCredentialsRequest::default().with_deletions(deletions);
        self.alter_scram(request, user)
    }

    fn alter_scram(&mut self, request: AlterUserScramCredentialsRequest, user: &str) -> Result<()> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<AlterUserScramCredentialsRequest>(None)?;
        let response = conn.send(&request, version)?;
        for r in &response.results {
            check_code(r.error_code, r.error_message.as_ref().map(str_of), || {
                format!("altering SCRAM credentials of {user:?}")
            })?;
        }
        Ok(())
    }

    /// Describes the SCRAM credentials of `users` (every user when empty).
    pub fn describe_scram_credentials(&mut self, users: &[String]) -> Result<Vec<ScramUser>> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<DescribeUserScramCredentialsRequest>(None)?;
        let names = (!users.is_empty()).then(|| {
            users
                .iter()
                .map(|u| UserName::default().with_name(StrBytes::from_string(u.clone())))
                .collect()
        });
        let request = DescribeUserScramCredentialsRequest::default().with_users(names);
        let response = conn.send(&request, version)?;
        check_code(
            response.error_code,
            response.error_message.as_ref().map(str_of),
            || "describing SCRAM credentials".to_owned(),
        )?;
        let mut out = Vec::with_capacity(response.results.len());
        for r in &response.results {
            let user = str_of(&r.user);
            check_code(r.error_code, r.error_message.as_ref().map(str_of), || {
                format!("describing SCRAM credentials of {user:?}")
            })?;
            let mechanisms = r
                .credential_infos
                .iter()
                .filter_map(|c| ScramMechanism::from_wire(c.mechanism).map(|m| (m, c.iterations)))
                .collect();
            out.push(ScramUser { user, mechanisms });
        }
        Ok(out)
    }
}
