//! Temporary developer entry point for the client subcommands, until `main.rs` wires them.

use clap::Parser;
use strata::cli::{ConsumeArgs, ProduceArgs, TopicCommand};

/// strata client commands (development binary).
#[derive(Parser)]
#[command(name = "strata", version, about = "Strata client commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Create, list, describe, alter and delete topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Write lines from stdin to a topic.
    Produce(ProduceArgs),
    /// Read records from a topic.
    Consume(ConsumeArgs),
}

fn main() {
    let result = match Cli::parse().command {
        Command::Topic(cmd) => strata::cli::run_topic(cmd),
        Command::Produce(args) => strata::cli::run_produce(args),
        Command::Consume(args) => strata::cli::run_consume(args),
    };
    // `{:#}` prints the error chain on one line, without anyhow's backtrace.
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
