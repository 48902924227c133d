//! A store's shared links ([`LinkSet`]): `--redis-pool-size` links to one server, on the
//! store's runtime, for everything that is not a serving thread's decision on its own link:
//! decisions of other threads (and of a thread whose own link is down), reservation records,
//! health probes, the Cluster slot map.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::dial::Dial;
use super::Link;

/// A few links to one server, used in turn.
pub(in crate::store::redis) struct LinkSet {
    links: Vec<Link>,
    next: AtomicUsize,
}

impl LinkSet {
    /// Starts `n` (at least one) links on the calling task's runtime (unnamed: see
    /// [`super::dial::CLIENT_NAME`]); their tasks end when aborted.
    pub(in crate::store::redis) fn start(
        dial: &Dial,
        n: usize,
        stall: Duration,
        batch: bool,
    ) -> (LinkSet, Vec<JoinHandle<()>>) {
        let (links, tasks) = (0..n.max(1))
            .map(|_| Link::start(dial.shared(), stall, batch))
            .unzip();
        let set = LinkSet {
            links,
            next: AtomicUsize::new(0),
        };
        (set, tasks)
    }

    /// The next link that is up, in turn; the next one at all when none is (its calls then
    /// fail at once as [`super::CallError::NotSent`]).
    pub(in crate::store::redis) fn next(&self) -> &Link {
        let n = self.links.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| &self.links[(start + i) % n])
            .find(|l| l.is_up())
            .unwrap_or(&self.links[start % n])
    }

    /// Some link is up.
    pub(in crate::store::redis) fn is_up(&self) -> bool {
        self.links.iter().any(Link::is_up)
    }

    /// A link that is up, waiting at most `timeout` for one.
    pub(in crate::store::redis) async fn up(&self, timeout: Duration) -> Option<&Link> {
        let link = self.next();
        if link.is_up() || link.wait_up(timeout).await {
            Some(link)
        } else {
            None
        }
    }
}
