//! `strata user scram set|list|delete`: SCRAM credentials of users (Kafka's
//! `kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users`).
//! The password is salted (random salt) and iterated here; the broker stores salt, StoredKey,
//! ServerKey and iterations in the metadata log, so every broker authenticates the user.
use std::fmt::Write as _;

use anyhow::{bail, Context};
use rand::RngCore;

use super::ConnectArgs;
use crate::security::sasl::scram::{SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN};
use crate::security::sasl::ScramMechanism;

/// Salt bytes for a new credential (Kafka's ScramFormatter uses a random salt too).
const SALT_BYTES: usize = 16;

/// Manage users.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum UserCommand {
    /// SCRAM credentials (SCRAM-SHA-256, SCRAM-SHA-512).
    #[command(subcommand)]
    Scram(ScramCommand),
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ScramCommand {
    /// Set (create or replace) a user's credential for one mechanism.
    Set {
        #[arg(long)]
        user: String,
        #[arg(long)]
        password: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        /// PBKDF2 iterations, 4096..=16384 (Kafka's bounds).
        #[arg(long, default_value_t = 8192)]
        iterations: u32,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// List users with SCRAM credentials: user, mechanism, iterations.
    List {
        /// Only these users (all when none).
        #[arg(long)]
        user: Vec<String>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Delete a user's credential for one mechanism, or for every mechanism it has.
    Delete {
        #[arg(long)]
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512; all of the user's when omitted.
        #[arg(long)]
        mechanism: Option<String>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

fn mechanism(name: &str) -> anyhow::Result<ScramMechanism> {
    ScramMechanism::from_name(name)
        .with_context(|| format!("unknown SCRAM mechanism {name:?} (SCRAM-SHA-256, SCRAM-SHA-512)"))
}

pub(super) fn run(cmd: UserCommand) -> anyhow::Result<()> {
    let UserCommand::Scram(cmd) = cmd;
    match cmd {
        ScramCommand::Set {
            user,
            password,
            mechanism: name,
            iterations,
            connect,
        } => {
            let m = mechanism(&name)?;
            if !(SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&iterations) {
                bail!(
                    "--iterations must be within {SCRAM_ITERATIONS_MIN}..={SCRAM_ITERATIONS_MAX}"
                );
            }
            let mut salt = [0u8; SALT_BYTES];
            rand::thread_rng().fill_bytes(&mut salt);
            let mut client = connect.connect()?;
            client
                .set_scram_credential(&user, m, &password, &salt, iterations)
                .with_context(|| format!("setting {m} credential of {user:?}"))?;
            println!("set {m} credential of {user} ({iterations} iterations)");
            Ok(())
        }
        ScramCommand::List { user, connect } => {
            let mut client = connect.connect()?;
            let users = client.describe_scram_credentials(&user)?;
            let mut out = String::new();
            writeln!(out, "{:<24} {:<14} ITERATIONS", "USER", "MECHANISM")?;
            for u in &users {
                for (m, i) in &u.mechanisms {
                    writeln!(out, "{:<24} {:<14} {i}", u.user, m.name())?;
                }
            }
            print!("{out}");
            Ok(())
        }
        ScramCommand::Delete {
            user,
            mechanism: name,
            connect,
        } => {
            let mut client = connect.connect()?;
            let mechanisms = match name {
                Some(n) => vec![mechanism(&n)?],
                None => client
                    .describe_scram_credentials(std::slice::from_ref(&user))?
                    .into_iter()
                    .flat_map(|u| u.mechanisms.into_iter().map(|(m, _)| m))
                    .collect(),
            };
            client
                .delete_scram_credentials(&user, &mechanisms)
                .with_context(|| format!("deleting SCRAM credentials of {user:?}"))?;
            let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
            println!("deleted {} credential(s) of {user}", names.join(", "));
            Ok(())
        }
    }
}
