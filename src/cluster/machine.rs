//! The seam between the metadata log (Raft, `cluster::raft`) and what it replicates (the
//! controller and the catalog, `cluster::controller`). The log moves opaque entries; the
//! machine decides what they mean. Everything here is called from the metadata log's own
//! thread, one call at a time, in log order — so implementations need no locking of their own.

/// The replicated state machine behind the metadata log.
pub trait MetadataMachine: Send + 'static {
    /// Applies one committed entry, in log order, on every node (voters and observers).
    /// Must be deterministic: no clock, no randomness; everything comes from `entry`.
    fn apply(&mut self, index: u64, entry: &[u8]);

    /// The whole applied state, for a snapshot taken at the last applied index.
    fn snapshot(&self) -> Vec<u8>;

    /// Replaces the state with a snapshot's (on start-up, or when a lagging node is sent one).
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;

    /// On the active controller only: turns a request into the entries that carry it out
    /// (appended atomically, in order, possibly none) and the response to send back once
    /// they are committed. Entries proposed by earlier requests have all been applied when
    /// this is called, so decisions see the latest state.
    fn handle_request(&mut self, request: &[u8], now_ms: u64) -> (Vec<Vec<u8>>, Vec<u8>);

    /// On the active controller only, every tick: entries to append on its own initiative
    /// (fencing brokers that stopped heartbeating, electing leaders, finishing reassignments).
    fn tick(&mut self, now_ms: u64) -> Vec<Vec<u8>>;

    /// This node became (`true`) or stopped being (`false`) the active controller.
    fn on_leadership(&mut self, active: bool, now_ms: u64);
}
