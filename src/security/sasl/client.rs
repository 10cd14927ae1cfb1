//! The client side of one SASL exchange, sans-IO: which token to send in each
//! SaslAuthenticate and what the server's answer means. Shared by Strata's blocking client
//! (the CLI, `client::connection`) and the brokers' own connections to each other
//! (`shard::peer`), which differ only in how the bytes travel.
//!
//! PLAIN is one token; SCRAM is two, and the server's final message is checked (the broker
//! proves it knows the credential); OAUTHBEARER sends the token, and a refusal comes as an
//! error challenge (RFC 7628 §3.2.2) that the client acknowledges with 0x01 to get the
//! broker's failure. Errors never carry the password.
use super::{oauthbearer, plain, Mechanism, SaslError, ScramClient};

/// The broker's own SASL login on the inter-broker listener (and on the controller
/// quorum's port, with the same user and password).
pub struct PeerLogin {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for PeerLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// One exchange, from the first token to the server's last answer.
#[derive(Debug)]
pub struct SaslClientExchange {
    state: State,
}

#[derive(Debug)]
enum State {
    /// Nothing sent yet.
    Start {
        mechanism: Mechanism,
        user: String,
        password: String,
        nonce: String,
    },
    /// PLAIN's or OAUTHBEARER's only token is out.
    SentOnly {
        mechanism: Mechanism,
    },
    /// SCRAM's client-first is out: the server-first comes next.
    ScramFirst(ScramClient),
    /// SCRAM's client-final is out: the server-final comes next.
    ScramFinal(ScramClient),
    Done,
}

/// What to do after the server answered a token.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientStep {
    /// Send this token in the next SaslAuthenticate.
    Send(Vec<u8>),
    /// Authenticated.
    Done,
    /// OAUTHBEARER's error challenge: send `ack`, which the broker answers with the failure;
    /// `challenge` is the broker's explanation (JSON, no secret).
    Refused { ack: Vec<u8>, challenge: String },
}

impl SaslClientExchange {
    /// `password` is the OAUTHBEARER token for that mechanism. `nonce` is SCRAM's client
    /// nonce (random, printable; `nonce_from`), unused by the others.
    pub fn new(mechanism: Mechanism, user: &str, password: &str, nonce: &str) -> Self {
        SaslClientExchange {
            state: State::Start {
                mechanism,
                user: user.to_string(),
                password: password.to_string(),
                nonce: nonce.to_string(),
            },
        }
    }

    /// The first token (call once, before any answer).
    pub fn first(&mut self) -> Result<Vec<u8>, SaslError> {
        let State::Start {
            mechanism,
            user,
            password,
            nonce,
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            return Err(SaslError::Finished);
        };
        let (token, next) = match mechanism {
            Mechanism::Plain => (
                plain::client_message(&user, &password),
                State::SentOnly { mechanism },
            ),
            Mechanism::OAuthBearer => (
                oauthbearer::client_first(&password),
                State::SentOnly { mechanism },
            ),
            Mechanism::Scram(m) => {
                let client = ScramClient::new(m, &user, &password, &nonce);
                (client.client_first(), State::ScramFirst(client))
            }
        };
        self.state = next;
        Ok(token)
    }

    /// The server's answer to the last token (a successful SaslAuthenticate's auth bytes; a
    /// failed one ends the exchange without coming here).
    pub fn answer(&mut self, server: &[u8]) -> Result<ClientStep, SaslError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::SentOnly {
                mechanism: Mechanism::OAuthBearer,
            } if !server.is_empty() => Ok(ClientStep::Refused {
                ack: vec![0x01],
                challenge: String::from_utf8_lossy(server).into_owned(),
            }),
            State::SentOnly { .. } => Ok(ClientStep::Done),
            State::ScramFirst(mut client) => {
                let token = client.client_final(server)?;
                self.state = State::ScramFinal(client);
                Ok(ClientStep::Send(token))
            }
            State::ScramFinal(client) => {
                client.verify_server_final(server)?;
                Ok(ClientStep::Done)
            }
            State::Start { .. } | State::Done => Err(SaslError::Finished),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::security::sasl::{Credentials, SaslServer, ScramCredential, ScramMechanism, Step};

    struct Users;
    impl Credentials for Users {
        fn plain_matches(&self, user: &str, password: &[u8]) -> bool {
            user == "broker" && password == b"s3cret"
        }
        fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
            (user == "broker").then(|| {
                ScramCredential::from_password(mechanism, "s3cret", b"salt".to_vec(), 4096)
            })
        }
    }

    /// Runs the client against the broker's own server side; Ok(user) when it authenticates.
    fn run(mechanism: Mechanism, password: &str) -> Result<String, String> {
        let mut client = SaslClientExchange::new(mechanism, "broker", password, "cnonce");
        let mut server = SaslServer::new(mechanism, "snonce".into());
        let mut token = client.first().map_err(|e| e.to_string())?;
        loop {
            match server.handle_token(&token, &Users) {
                Ok(Step::Continue(bytes)) => match client.answer(&bytes) {
                    Ok(ClientStep::Send(next)) => token = next,
                    other => return Err(format!("client: {other:?}")),
                },
                Ok(Step::Done { user, response, .. }) => {
                    return match client.answer(&response) {
                        Ok(ClientStep::Done) => Ok(user),
                        other => Err(format!("client after done: {other:?}")),
                    }
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    #[test]
    fn plain_and_scram_authenticate_against_the_server_side() {
        for m in [
            Mechanism::Plain,
            Mechanism::Scram(ScramMechanism::Sha256),
            Mechanism::Scram(ScramMechanism::Sha512),
        ] {
            assert_eq!(run(m, "s3cret"), Ok("broker".to_string()), "{m}");
            let wrong = run(m, "wrong").unwrap_err();
            assert!(
                !wrong.contains("wrong"),
                "{m}: the password leaked: {wrong}"
            );
        }
    }

    #[test]
    fn a_scram_server_that_does_not_know_the_credential_is_caught() {
        let m = Mechanism::Scram(ScramMechanism::Sha256);
        let mut client = SaslClientExchange::new(m, "broker", "s3cret", "cnonce");
        let first = client.first().unwrap();
        assert!(first.starts_with(b"n,,n=broker,r=cnonce"));
        let server_first = b"r=cnonceSERVER,s=c2FsdA==,i=4096";
        assert!(matches!(
            client.answer(server_first),
            Ok(ClientStep::Send(_))
        ));
        // A forged server-final (wrong signature) is an error, not Done.
        assert!(client.answer(b"v=AAAA").is_err());
        assert_eq!(client.answer(b"v=AAAA"), Err(SaslError::Finished));
    }

    #[test]
    fn oauthbearer_error_challenge_is_acknowledged() {
        let mut client = SaslClientExchange::new(Mechanism::OAuthBearer, "", "tok", "");
        assert_eq!(
            client.first().unwrap(),
            b"n,,\x01auth=Bearer tok\x01\x01".to_vec()
        );
        assert_eq!(
            client.answer(b"{\"status\":\"invalid_token\"}"),
            Ok(ClientStep::Refused {
                ack: vec![0x01],
                challenge: "{\"status\":\"invalid_token\"}".into()
            })
        );
        let mut client = SaslClientExchange::new(Mechanism::OAuthBearer, "", "tok", "");
        client.first().unwrap();
        assert_eq!(client.answer(b""), Ok(ClientStep::Done));
    }
}
