//! The order of a shard's produce appends to each partition.
//!
//! A produce appends synchronously when its op starts on the owner shard, so requests that
//! reach a shard in order are appended in that order — until one of them must wait (the
//! log's staging buffer or the shard's memory budget is full, or the partition is still
//! opening). A later request that fits must not append first: a producer connection's later
//! batch would get a lower offset than its earlier one (per-partition order broken; for an
//! idempotent producer, an OutOfOrderSequence). So once anything waits on a partition, every
//! later append to it takes a [`Ticket`] and waits its turn: a FIFO per partition, kept until
//! it drains, after which appends go straight to the log again.
//!
//! Bound: at most `PRODUCE_APPENDS_WAITING_MAX` tickets per partition; past it an append is
//! refused (retriable) instead of queueing without limit. A ticket dropped before its turn (a
//! request that timed out, a connection that closed) leaves the line, so it never holds up
//! those behind it; the head's drop hands the turn on.
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use crate::limits::PRODUCE_APPENDS_WAITING_MAX;
use crate::shard::TopicPartition;
use crate::storage::notify::Notify;

/// One partition's waiting appends, oldest first.
struct Line {
    tickets: VecDeque<u64>,
    next_id: u64,
    /// Notified when the head leaves.
    turn: Rc<Notify>,
}

type Lines = Rc<RefCell<HashMap<TopicPartition, Line>>>;

/// The waiting appends of one shard's partitions (a line exists only while one waits).
#[derive(Default)]
pub struct AppendOrder {
    lines: Lines,
}

/// The line of `tp` is full: the append is refused rather than queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{waiting} produce appends already wait for this partition (at most {max})")]
pub struct LineFull {
    pub waiting: usize,
    pub max: usize,
}

impl AppendOrder {
    /// Whether an append to `tp` is waiting: a new one must then queue behind it.
    pub fn is_waiting(&self, tp: &TopicPartition) -> bool {
        self.lines.borrow().contains_key(tp)
    }

    /// Appends waiting on `tp`.
    pub fn waiting(&self, tp: &TopicPartition) -> usize {
        self.lines.borrow().get(tp).map_or(0, |l| l.tickets.len())
    }

    /// A place at the back of `tp`'s line.
    pub fn enqueue(&self, tp: &TopicPartition) -> Result<Ticket, LineFull> {
        let mut lines = self.lines.borrow_mut();
        let line = lines.entry(tp.clone()).or_insert_with(|| Line {
            tickets: VecDeque::new(),
            next_id: 0,
            turn: Rc::new(Notify::default()),
        });
        if line.tickets.len() >= PRODUCE_APPENDS_WAITING_MAX {
            return Err(LineFull {
                waiting: line.tickets.len(),
                max: PRODUCE_APPENDS_WAITING_MAX,
            });
        }
        let id = line.next_id;
        line.next_id = line.next_id.wrapping_add(1);
        line.tickets.push_back(id);
        Ok(Ticket {
            lines: Rc::clone(&self.lines),
            tp: tp.clone(),
            id,
            turn: Rc::clone(&line.turn),
        })
    }
}

/// A waiting append's place in its partition's line; leaving (drop) hands the turn on.
pub struct Ticket {
    lines: Lines,
    tp: TopicPartition,
    id: u64,
    turn: Rc<Notify>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("tp", &self.tp)
            .field("id", &self.id)
            .finish()
    }
}

impl Ticket {
    /// Whether every append queued before this one has left the line.
    pub fn is_turn(&self) -> bool {
        self.lines
            .borrow()
            .get(&self.tp)
            .and_then(|l| l.tickets.front())
            == Some(&self.id)
    }

    /// Resolves once it is this ticket's turn.
    pub async fn wait_turn(&self) {
        loop {
            // Listen before checking, so a hand-over between the check and the await is seen.
            let turn = self.turn.listen();
            if self.is_turn() {
                return;
            }
            turn.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let handed_on = {
            let mut lines = self.lines.borrow_mut();
            let Some(line) = lines.get_mut(&self.tp) else {
                return;
            };
            let was_head = line.tickets.front() == Some(&self.id);
            line.tickets.retain(|&id| id != self.id);
            if line.tickets.is_empty() {
                lines.remove(&self.tp);
            }
            was_head
        };
        // Outside the borrow: the woken tickets check `is_turn`.
        if handed_on {
            self.turn.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn tp(partition: i32) -> TopicPartition {
        TopicPartition {
            topic: "t".into(),
            partition,
        }
    }

    /// Proves the line is first-in first-out per partition, that a ticket leaving from the
    /// middle does not disturb the order, that partitions have separate lines, and that a
    /// drained line is forgotten (appends go straight to the log again).
    #[test]
    fn tickets_take_turns_in_order() {
        let order = AppendOrder::default();
        assert!(!order.is_waiting(&tp(0)));
        let a = order.enqueue(&tp(0)).unwrap();
        let b = order.enqueue(&tp(0)).unwrap();
        let c = order.enqueue(&tp(0)).unwrap();
        let other = order.enqueue(&tp(1)).unwrap();
        assert!(a.is_turn() && !b.is_turn() && !c.is_turn());
        assert!(other.is_turn(), "another partition has its own line");
        drop(b);
        assert!(
            a.is_turn() && !c.is_turn(),
            "leaving from the middle keeps the head"
        );
        drop(a);
        assert!(c.is_turn());
        assert_eq!(order.waiting(&tp(0)), 1);
        drop(c);
        assert!(!order.is_waiting(&tp(0)), "a drained line is gone");
        assert!(order.is_waiting(&tp(1)));
    }

    /// Proves the line is bounded: past `PRODUCE_APPENDS_WAITING_MAX` an append is refused,
    /// and room comes back as tickets leave.
    #[test]
    fn the_line_is_bounded() {
        let order = AppendOrder::default();
        let mut tickets: Vec<Ticket> = (0..PRODUCE_APPENDS_WAITING_MAX)
            .map(|_| order.enqueue(&tp(0)).unwrap())
            .collect();
        assert_eq!(
            order.enqueue(&tp(0)).unwrap_err(),
            LineFull {
                waiting: PRODUCE_APPENDS_WAITING_MAX,
                max: PRODUCE_APPENDS_WAITING_MAX
            }
        );
        tickets.pop();
        assert!(order.enqueue(&tp(0)).is_ok());
    }

    /// Proves `wait_turn` waits while an earlier ticket holds the turn and wakes when it
    /// leaves, on an executor.
    #[test]
    fn the_next_ticket_wakes_when_the_head_leaves() {
        crate::storage::tests::run(|| async {
            let order = AppendOrder::default();
            let head = order.enqueue(&tp(0)).unwrap();
            let next = order.enqueue(&tp(0)).unwrap();
            let woken = Rc::new(std::cell::Cell::new(false));
            let waiter = glommio::spawn_local({
                let woken = Rc::clone(&woken);
                async move {
                    next.wait_turn().await;
                    woken.set(true);
                }
            });
            // Let the waiter run up to its wait.
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            assert!(!woken.get(), "not its turn while the head waits");
            drop(head);
            waiter.await;
            assert!(woken.get());
        });
    }
}
