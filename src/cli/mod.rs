//! The client-side subcommands: `strata topic ...`, `strata group ...`, `strata cluster ...`,
//! `strata txn ...`, `strata producers ...`, `strata user scram ...`, `strata quota ...`,
//! `strata acl ...`, `strata produce`,
//! `strata consume`.
//!
//! Each talks the Kafka protocol through [`crate::client`], so it works against any
//! Kafka-compatible broker. `main.rs` only parses and calls [`run_topic`], [`run_produce`] or
//! [`run_consume`]; argument types live here so the lead can embed them in the top-level `Cli`.

mod acl;
mod cluster;
mod command_config;
mod consume;
mod group;
pub mod log_dump;
mod produce;
mod quota;
mod topic;
mod txn;
mod user;

use crate::client::{Client, ClientConfig, BOOTSTRAP_DEFAULT};
use command_config::{CommandConfig, Protocol};

pub use acl::AclCommand;
pub use cluster::{ClusterCommand, ReassignArgs};
pub use consume::{ConsumeArgs, OutputFormat, StartFrom};
pub use group::{GroupCommand, ResetTarget};
pub use produce::{AcksArg, CompressionArg, ProduceArgs};
pub use quota::{EntityArgs, QuotaCommand};
pub use topic::TopicCommand;
pub use txn::{ProducersCommand, TxnCommand};
pub use user::{ScramCommand, UserCommand};

/// How to reach the cluster; flattened into every subcommand.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// Broker address(es) to bootstrap from, HOST:PORT[,HOST:PORT...].
    #[arg(long, env = "STRATA_BOOTSTRAP", default_value = BOOTSTRAP_DEFAULT)]
    pub bootstrap: String,
    /// Authenticate with SASL on a SASL_PLAINTEXT listener (or SASL_SSL, with TLS from
    /// --command-config): PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with --sasl-username and
    /// --sasl-password).
    #[arg(long, value_name = "MECHANISM")]
    pub sasl_mechanism: Option<String>,
    #[arg(long, value_name = "USER")]
    pub sasl_username: Option<String>,
    #[arg(long, value_name = "PASSWORD")]
    pub sasl_password: Option<String>,
    /// A Kafka client properties file, as kafka-acls.sh's and kafka-topics.sh's
    /// --command-config: `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL),
    /// `sasl.mechanism` and `sasl.jaas.config` (username and password of a PlainLoginModule or
    /// ScramLoginModule); for TLS a PEM CA bundle in `ssl.truststore.location` (or
    /// `ssl.ca.location`), for mTLS the client's key and certificate in one PEM
    /// `ssl.keystore.location` (or `ssl.key.location` with `ssl.certificate.location`), and
    /// `ssl.endpoint.identification.algorithm=` (empty) to skip the host name check. A setting
    /// the client cannot honour is an error naming it. The --sasl-* flags win over the file.
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
}

impl ConnectArgs {
    /// Connects to the cluster: in TLS when the --command-config file's `security.protocol`
    /// is SSL or SASL_SSL, authenticating first when --sasl-mechanism is given or the file
    /// names a mechanism.
    pub fn connect(&self) -> anyhow::Result<Client> {
        let mut config = ClientConfig::from_bootstrap(&self.bootstrap)?;
        let file = match &self.command_config {
            Some(path) => std::fs::read_to_string(path)
                .map_err(anyhow::Error::from)
                .and_then(|text| command_config::parse(&text))
                .and_then(|file| {
                    if file.protocol.is_some_and(Protocol::uses_tls) {
                        config.tls = Some(file.tls_config()?);
                    }
                    Ok(file)
                })
                .map_err(|e| anyhow::anyhow!("--command-config {}: {e:#}", path.display()))?,
            None => CommandConfig::default(),
        };
        // A file without `security.protocol` still lends its SASL settings (it always has);
        // PLAINTEXT and SSL ignore them, as Kafka's clients do.
        let file_sasl = file.protocol.is_none_or(Protocol::uses_sasl);
        let mechanism = match &self.sasl_mechanism {
            Some(name) => Some(
                crate::security::sasl::Mechanism::from_name(name)
                    .filter(|m| *m != crate::security::sasl::Mechanism::OAuthBearer)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "unknown SASL mechanism {name:?} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
                        )
                    })?,
            ),
            None => file.mechanism.filter(|_| file_sasl),
        };
        if file.protocol.is_some_and(Protocol::uses_sasl) && mechanism.is_none() {
            anyhow::bail!(
                "--command-config: security.protocol SASL_PLAINTEXT and SASL_SSL need \
                 sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) and sasl.jaas.config"
            );
        }
        let username = self.sasl_username.clone().or(file.username);
        let password = self.sasl_password.clone().or(file.password);
        if let Some(mechanism) = mechanism {
            let (Some(username), Some(password)) = (username, password) else {
                anyhow::bail!(
                    "SASL needs a username and password: --sasl-username and \
                     --sasl-password, or sasl.jaas.config in --command-config"
                );
            };
            config.sasl = Some(crate::client::SaslLogin {
                mechanism,
                username,
                password,
            });
        }
        Ok(Client::connect(config)?)
    }
}

/// Runs a `strata topic ...` command.
pub fn run_topic(cmd: TopicCommand) -> anyhow::Result<()> {
    topic::run(cmd)
}

/// Runs a `strata group ...` command.
pub fn run_group(cmd: GroupCommand) -> anyhow::Result<()> {
    group::run(cmd)
}

/// Runs a `strata cluster ...` command.
pub fn run_cluster(cmd: ClusterCommand) -> anyhow::Result<()> {
    cluster::run(cmd)
}

/// Runs a `strata txn ...` command.
pub fn run_txn(cmd: TxnCommand) -> anyhow::Result<()> {
    txn::run(cmd)
}

/// Runs a `strata producers ...` command.
pub fn run_producers(cmd: ProducersCommand) -> anyhow::Result<()> {
    txn::run_producers(cmd)
}

/// Runs `strata produce`.
pub fn run_user(cmd: UserCommand) -> anyhow::Result<()> {
    user::run(cmd)
}

/// Runs a `strata acl ...` command.
pub fn run_acl(cmd: AclCommand) -> anyhow::Result<()> {
    acl::run(cmd)
}

/// Runs a `strata quota ...` command.
pub fn run_quota(cmd: QuotaCommand) -> anyhow::Result<()> {
    quota::run(cmd)
}

pub fn run_produce(args: ProduceArgs) -> anyhow::Result<()> {
    produce::run(args)
}

/// Runs `strata consume`.
pub fn run_consume(args: ConsumeArgs) -> anyhow::Result<()> {
    consume::run(args)
}

/// Parses `KEY=VALUE` (split at the first `=`; the value may contain `=`).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// Whether an error is a closed stdout (`strata consume | head`), which is not a failure.
pub(crate) fn is_broken_pipe(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::BrokenPipe
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A stand-in for the lead's top-level command line, shaped as the brief describes.
    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Command {
        #[command(subcommand)]
        Topic(TopicCommand),
        Produce(ProduceArgs),
        Consume(ConsumeArgs),
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("strata").chain(args.iter().copied()))
    }

    #[test]
    fn from_accepts_every_documented_form() {
        // Proves `--from` parses earliest, latest, a plain offset and @timestamp, and rejects junk.
        let cases = [
            ("earliest", StartFrom::Earliest),
            ("latest", StartFrom::Latest),
            ("42", StartFrom::Offset(42)),
            ("0", StartFrom::Offset(0)),
            ("@1700000000000", StartFrom::Timestamp(1_700_000_000_000)),
        ];
        for (text, want) in cases {
            let cli = parse(&["consume", "--topic", "t", "--from", text]).expect(text);
            let Command::Consume(args) = cli.command else {
                panic!("not consume")
            };
            assert_eq!(args.from, want, "{text}");
        }
        for bad in ["-5", "@", "@x", "soon", ""] {
            assert!(
                parse(&["consume", "--topic", "t", "--from", bad]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn consume_defaults_are_earliest_plain_and_end_of_log() {
        // Proves the documented defaults of `consume`.
        let cli = parse(&["consume", "--topic", "t"]).expect("parse");
        let Command::Consume(args) = cli.command else {
            panic!("not consume")
        };
        assert_eq!(args.from, StartFrom::Earliest);
        assert_eq!(args.format, OutputFormat::Plain);
        assert!(!args.follow);
        assert_eq!(args.partition, None);
        assert_eq!(args.count, None);
        assert_eq!(args.timeout_ms, None);
    }

    #[test]
    fn produce_flags_parse() {
        // Proves acks, compression, headers and batch size parse as documented.
        let cli = parse(&[
            "produce",
            "--topic",
            "t",
            "--acks",
            "1",
            "--compression",
            "zstd",
            "--header",
            "a=b=c",
            "--header",
            "x=",
            "--key-separator",
            ":",
            "--batch-size",
            "10",
            "--bootstrap",
            "h:1",
        ])
        .expect("parse");
        let Command::Produce(args) = cli.command else {
            panic!("not produce")
        };
        assert_eq!(args.acks, AcksArg::Leader);
        assert_eq!(args.compression, CompressionArg::Zstd);
        assert_eq!(
            args.header,
            vec![("a".into(), "b=c".into()), ("x".into(), String::new())]
        );
        assert_eq!(args.key_separator.as_deref(), Some(":"));
        assert_eq!(args.batch_size, 10);
        assert_eq!(args.connect.bootstrap, "h:1");
        let all = parse(&["produce", "--topic", "t"]).expect("parse");
        let Command::Produce(args) = all.command else {
            panic!("not produce")
        };
        assert_eq!(args.acks, AcksArg::All);
        assert!(parse(&["produce", "--topic", "t", "--acks", "2"]).is_err());
        assert!(parse(&["produce", "--topic", "t", "--batch-size", "0"]).is_err());
    }

    #[test]
    fn topic_commands_parse() {
        // Proves the topic subcommands and their repeatable config flags parse.
        let cli = parse(&[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=1000",
            "--config",
            "cleanup.policy=compact",
        ])
        .expect("parse");
        let Command::Topic(TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            config,
            ..
        }) = cli.command
        else {
            panic!("not topic create")
        };
        assert_eq!(
            (name.as_str(), partitions, replication_factor),
            ("orders", 3, 1)
        );
        assert_eq!(config.len(), 2);
        assert!(parse(&["topic", "create", "x", "--config", "novalue"]).is_err());
        let alter = parse(&[
            "topic",
            "alter",
            "orders",
            "--partitions",
            "6",
            "--delete-config",
            "retention.ms",
        ])
        .expect("parse");
        assert!(matches!(
            alter.command,
            Command::Topic(TopicCommand::Alter {
                partitions: Some(6),
                ..
            })
        ));
    }

    #[test]
    fn key_value_splits_at_first_equals() {
        // Proves `k=v=w` keeps `v=w` as the value and `=v` is refused.
        assert_eq!(parse_key_value("k=v=w"), Ok(("k".into(), "v=w".into())));
        assert!(parse_key_value("=v").is_err());
        assert!(parse_key_value("k").is_err());
    }
}
