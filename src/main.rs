//! The `strata` command line: parse, load configuration, start. No logic lives here.
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use strata::config::{Config, Overrides};

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Strata: a Kafka-compatible streaming log broker, thread-per-core on io_uring"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker. Settings: built-in defaults < --config file < STRATA_* environment < flags.
    Serve(ServeArgs),
    /// Create, list, describe, alter and delete topics (any Kafka-compatible broker).
    #[command(subcommand)]
    Topic(strata::cli::TopicCommand),
    /// List, describe, delete consumer groups and reset their offsets.
    #[command(subcommand)]
    Group(strata::cli::GroupCommand),
    /// Cluster status, partition reassignment and leader elections.
    #[command(subcommand)]
    Cluster(strata::cli::ClusterCommand),
    /// List and describe transactions; abort a hanging one.
    #[command(subcommand)]
    Txn(strata::cli::TxnCommand),
    /// Describe the producers (and their open transactions) of a partition.
    #[command(subcommand)]
    Producers(strata::cli::ProducersCommand),
    /// Users' SCRAM credentials: set, list, delete.
    #[command(subcommand)]
    User(strata::cli::UserCommand),
    /// Client quotas (producer_byte_rate, consumer_byte_rate, request_percentage) per
    /// user and/or client id: set, list, remove.
    #[command(subcommand)]
    Quota(strata::cli::QuotaCommand),
    /// ACLs (with `authorizer = "acl"`): add, list, remove, with kafka-acls.sh's flags.
    #[command(subcommand)]
    Acl(strata::cli::AclCommand),
    /// Write lines from stdin to a topic.
    Produce(strata::cli::ProduceArgs),
    /// Read records from a topic.
    Consume(strata::cli::ConsumeArgs),
    /// Load-test any Kafka-compatible broker: produce, consume, end-to-end.
    #[command(subcommand)]
    Bench(strata::bench::BenchCommand),
    /// Inspect partition directories offline (no broker needed).
    #[command(subcommand)]
    Log(strata::cli::log_dump::LogCommand),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address every shard listens on [default: 127.0.0.1:9092]
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Address clients are told to connect to [default: the listen address]
    #[arg(long, value_name = "HOST:PORT")]
    advertised_listener: Option<String>,
    /// Kafka's listeners; replaces --listen [default: PLAINTEXT on the listen address]
    #[arg(long, value_name = "NAME://HOST:PORT,...")]
    listeners: Option<String>,
    /// Kafka's advertised.listeners [default: the listeners]
    #[arg(long, value_name = "NAME://HOST:PORT,...")]
    advertised_listeners: Option<String>,
    /// Kafka's listener.security.protocol.map, for listeners not named after a protocol
    #[arg(long, value_name = "NAME:PROTOCOL,...")]
    listener_security_protocol_map: Option<String>,
    /// Kafka's inter.broker.listener.name [default: PLAINTEXT if listed, else the first]
    #[arg(long, value_name = "NAME")]
    inter_broker_listener_name: Option<String>,
    /// Directory for partitions and metadata [default: ./data]
    #[arg(long, value_name = "PATH")]
    data_dir: Option<PathBuf>,
    /// Shards (one executor each) [default: one per CPU of the cpuset]
    #[arg(long, value_name = "N")]
    shards: Option<usize>,
    /// CPUs the shards run on, e.g. 0-3,6 [default: the CPUs this process may run on]
    #[arg(long, value_name = "CPU-LIST")]
    cpuset: Option<String>,
    /// Leave the shards to the kernel's scheduler instead of pinning each to one CPU (several
    /// brokers on one host, noisy neighbours)
    #[arg(long)]
    no_pin_shards: bool,
    /// This broker's node id [default: 0]
    #[arg(long, value_name = "ID")]
    node_id: Option<i32>,
    /// Roles of this node: broker, controller or both [default: broker,controller]
    #[arg(long, value_name = "ROLES")]
    process_roles: Option<String>,
    /// Address the controller quorum listens on (needed by each voter of a multi-node quorum)
    #[arg(long, value_name = "HOST:PORT")]
    controller_listen: Option<String>,
    /// The controller quorum, as Kafka's controller.quorum.voters [default: this node alone]
    #[arg(long, value_name = "ID@HOST:PORT,...")]
    controller_voters: Option<String>,
    /// This broker's rack (replicas are spread across racks)
    #[arg(long, value_name = "RACK")]
    rack: Option<String>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics [default: off]
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Config file (TOML; see config/strata.toml for every setting)
    #[arg(long, value_name = "FILE", env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
}

fn main() {
    let result = match Cli::parse().command {
        Command::Serve(args) => serve(args),
        Command::Topic(cmd) => strata::cli::run_topic(cmd),
        Command::Group(cmd) => strata::cli::run_group(cmd),
        Command::Cluster(cmd) => strata::cli::run_cluster(cmd),
        Command::Txn(cmd) => strata::cli::run_txn(cmd),
        Command::Producers(cmd) => strata::cli::run_producers(cmd),
        Command::User(cmd) => strata::cli::run_user(cmd),
        Command::Quota(cmd) => strata::cli::run_quota(cmd),
        Command::Acl(cmd) => strata::cli::run_acl(cmd),
        Command::Produce(args) => strata::cli::run_produce(args),
        Command::Consume(args) => strata::cli::run_consume(args),
        Command::Bench(cmd) => strata::bench::run(cmd),
        Command::Log(cmd) => strata::cli::log_dump::run(cmd),
    };
    // `{:#}` prints the error chain on one line, without a backtrace: these are user-facing.
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a log redirected to a file stays greppable text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let overrides = Overrides {
        listen: args.listen,
        advertised_listener: args.advertised_listener,
        listeners: args.listeners,
        advertised_listeners: args.advertised_listeners,
        listener_security_protocol_map: args.listener_security_protocol_map,
        inter_broker_listener_name: args.inter_broker_listener_name,
        data_dir: args.data_dir,
        shards: args.shards,
        cpuset: args.cpuset,
        pin_shards: args.no_pin_shards.then_some(false),
        node_id: args.node_id,
        process_roles: args.process_roles,
        controller_listen: args.controller_listen,
        controller_voters: args.controller_voters,
        rack: args.rack,
        metrics_listen: args.metrics_listen,
    };
    let config = Config::load(args.config.as_deref(), std::env::vars(), &overrides)?;
    let listeners = config.listeners()?.bound_text();
    let data_dir = config.data_dir.clone();
    let signals = SignalWatch::start().context("installing signal handlers")?;
    let broker = strata::broker::start(config).context("starting the broker")?;
    tracing::info!(%listeners, data_dir = %data_dir.display(), "strata is serving");
    let signal = signals.serving_until_signal();
    tracing::info!(signal, "stopping");
    broker.stop();
    broker.join();
    tracing::info!("stopped cleanly");
    Ok(())
}

/// SIGTERM and SIGINT, read on a thread of their own from before the broker starts.
///
/// The handlers catch the signals (their default action would end the process), so a signal
/// only acts if someone reads it, and the main thread cannot while it starts the broker,
/// which may take long: waiting for the controller quorum to form (as long as it takes),
/// recovering logs, loading coordinators. Read only after the start, a SIGTERM sent during it
/// was ignored until the start ended, or for ever. So the watcher reads them:
/// - during the start, a signal ends the process at once, exit code 0 (nothing is served
///   yet; what is on disk is recovered at the next start, as after a crash), as Kafka exits
///   on SIGTERM at any point;
/// - once the broker serves, the first signal is handed to the main thread, which stops
///   gracefully (drain, flush, close);
/// - another signal while that runs (connections drain and logs flush, which under load
///   takes long) ends the process at once, with 128 + the signal as a shell reports a kill.
struct SignalWatch {
    serving: std::sync::Arc<std::sync::atomic::AtomicBool>,
    first: std::sync::mpsc::Receiver<i32>,
}

impl SignalWatch {
    fn start() -> anyhow::Result<Self> {
        use std::sync::atomic::Ordering;
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ])?;
        let serving = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, first) = std::sync::mpsc::sync_channel(1);
        let watching = serving.clone();
        std::thread::Builder::new()
            .name("strata-signals".into())
            .spawn(move || {
                let mut stopping = false;
                for signal in signals.forever() {
                    if !watching.load(Ordering::SeqCst) {
                        tracing::info!(signal, "stopping during start-up: exiting at once");
                        std::process::exit(0);
                    }
                    if stopping {
                        tracing::warn!(signal, "signalled again while stopping: exiting at once");
                        std::process::exit(128 + signal);
                    }
                    stopping = true;
                    let _ = tx.send(signal);
                }
            })?;
        Ok(Self { serving, first })
    }

    /// Marks the broker serving, then waits for the first signal.
    fn serving_until_signal(self) -> i32 {
        self.serving
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // The watcher never drops its sender before a signal; if it ended anyway, stop.
        self.first.recv().unwrap_or(signal_hook::consts::SIGTERM)
    }
}
