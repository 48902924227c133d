//! Redis Cluster routing of sluice's own: the slot map (read with `CLUSTER SLOTS` over a
//! link), shared links ([`LinkSet`]) per primary and one [`Breaker`] per primary.
//!
//! Why per node: a client that reconnects to every node of the slot map at once when one
//! node's connection drops (fred's did) fails or holds the commands of every slot meanwhile;
//! a dead primary (until its replica is promoted) and a reshard's MOVED storm then fail every
//! request. Here a node's trouble stays with its slots: its links reconnect alone, its
//! breaker opens alone, and the slot map is read again (every
//! [`REFRESH_UNHEALTHY`] while a node fails, at once on a redirection) so a promoted replica
//! takes the slots over within a fraction of a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::store::redis::breaker::{Breaker, BreakerOptions};
use crate::store::redis::connect::{self, ConnectOptions, RedisSettingsError};
use crate::store::redis::dial::Dial;
use crate::store::redis::link::LinkSet;
use crate::store::redis::resp::{Frame, Value};

/// Slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// How often the slot map is read while some node fails (or a slot has no node).
pub(crate) const REFRESH_UNHEALTHY: Duration = Duration::from_millis(100);

/// How often the slot map is read while all is well (to see failovers and reshards that
/// caused no error here).
pub(crate) const REFRESH_HEALTHY: Duration = Duration::from_secs(5);

/// One primary: its shared links and breaker, and how a serving thread opens its own connection to
/// it ([`crate::store::redis::link`], made by the store on the thread's first call to this node).
pub(crate) struct Node {
    pub addr: String,
    pub(in crate::store::redis) links: LinkSet,
    pub breaker: Breaker,
    pub(in crate::store::redis) dial: Dial,
    tasks: Vec<JoinHandle<()>>,
    /// The serving threads' connection tasks to this node, each on its thread's runtime.
    pub(in crate::store::redis) thread_tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        // The connection tasks would otherwise reconnect forever to a node no longer used.
        for t in &self.tasks {
            t.abort();
        }
        crate::store::redis::abort_all(&mut self.thread_tasks);
    }
}

struct SlotMap {
    /// For each slot, an index into `nodes` (`NONE`: no node known).
    slots: Box<[u16]>,
    nodes: Vec<Arc<Node>>,
}

const NONE: u16 = u16::MAX;

/// The Cluster's primaries and who owns which slot.
pub(crate) struct Nodes {
    opts: ConnectOptions,
    breaker: BreakerOptions,
    /// The store's runtime: node connections run there, whichever thread found the node.
    runtime: Handle,
    seeds: Vec<(String, u16)>,
    map: RwLock<SlotMap>,
    /// Set by a redirection or an uncovered slot: the monitor reads the map at once.
    stale: AtomicBool,
    /// How long a node's link may leave commands unanswered before it is replaced.
    stall: Duration,
    /// Serialises the creation of nodes (two requests learning one node create one).
    creating: Mutex<()>,
}

impl Nodes {
    /// Must be called within the runtime that is to drive the node connections.
    pub(crate) fn new(
        opts: &ConnectOptions,
        breaker: BreakerOptions,
    ) -> Result<Nodes, RedisSettingsError> {
        let seeds = connect::cluster_seeds(opts)?;
        Ok(Nodes {
            opts: opts.clone(),
            breaker,
            runtime: Handle::current(),
            seeds,
            map: RwLock::new(SlotMap {
                slots: vec![NONE; SLOTS].into_boxed_slice(),
                nodes: Vec::new(),
            }),
            stale: AtomicBool::new(true),
            stall: crate::store::redis::stall(opts),
            creating: Mutex::new(()),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, SlotMap> {
        // Plain data, valid after any panic: ignore poisoning.
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, SlotMap> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The primary owning `slot`, if known (if not, the map is read again soon).
    pub(crate) fn route(&self, slot: u16) -> Option<Arc<Node>> {
        let map = self.read();
        let node = match map.slots.get(usize::from(slot)) {
            Some(&i) if i != NONE => map.nodes.get(usize::from(i)).cloned(),
            _ => None,
        };
        if node.is_none() {
            self.stale.store(true, Ordering::Relaxed);
        }
        node
    }

    /// The node at `addr` (`host:port`), created when new (not yet in the map).
    pub(crate) fn node(&self, addr: &str) -> Result<Arc<Node>, RedisSettingsError> {
        if let Some(n) = self.read().nodes.iter().find(|n| n.addr == addr) {
            return Ok(n.clone());
        }
        let _one = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = self.read().nodes.iter().find(|n| n.addr == addr) {
            return Ok(n.clone());
        }
        let node = self.create(addr)?;
        self.write().nodes.push(node.clone());
        Ok(node)
    }

    fn create(&self, addr: &str) -> Result<Arc<Node>, RedisSettingsError> {
        let (host, port) = split_addr(addr).ok_or_else(|| {
            RedisSettingsError::new(format!("invalid cluster node address {addr}"))
        })?;
        let dial = Dial::node(&self.opts, host, port)?;
        let (links, tasks) = {
            let _rt = self.runtime.enter();
            // One slot per call on a node: no batch across slots.
            LinkSet::start(&dial, self.opts.pool_size, self.stall, false)
        };
        tracing::debug!(target: "sluice::store::redis", node = addr, "connecting to cluster node");
        Ok(Arc::new(Node {
            addr: addr.to_string(),
            links,
            breaker: Breaker::new(self.breaker),
            dial,
            tasks,
            thread_tasks: Mutex::new(Vec::new()),
        }))
    }

    /// A `MOVED slot addr` reply: the slot is `addr`'s from now on (and the whole map is
    /// read again soon, since a reshard or failover moves more than one slot).
    pub(crate) fn moved(&self, slot: u16, addr: &str) -> Result<Arc<Node>, RedisSettingsError> {
        let node = self.node(addr)?;
        let mut map = self.write();
        if let Some(i) = map.nodes.iter().position(|n| Arc::ptr_eq(n, &node)) {
            if let Some(s) = map.slots.get_mut(usize::from(slot)) {
                *s = i as u16;
            }
        }
        self.stale.store(true, Ordering::Relaxed);
        Ok(node)
    }

    /// Every node of the map (primaries, and nodes learnt from redirections).
    pub(crate) fn all(&self) -> Vec<Arc<Node>> {
        self.read().nodes.clone()
    }

    /// Every slot has a node, and that node is connected (with the function library loaded:
    /// a link is up only then).
    pub(crate) fn ready(&self) -> bool {
        let map = self.read();
        let used = used_nodes(&map);
        map.slots.iter().all(|&i| i != NONE) && used.iter().all(|&i| map.nodes[i].links.is_up())
    }

    /// Some slot has no node, or its node is down or its breaker open.
    pub(crate) fn unhealthy(&self) -> bool {
        let map = self.read();
        map.slots.contains(&NONE)
            || used_nodes(&map).iter().any(|&i| {
                let n = &map.nodes[i];
                n.breaker.is_open() || !n.links.is_up()
            })
    }

    /// Takes the "read the map again now" flag.
    pub(crate) fn take_stale(&self) -> bool {
        self.stale.swap(false, Ordering::Relaxed)
    }

    /// Reads `CLUSTER SLOTS` from a node that answers (a known primary, else a seed) and
    /// replaces the map; nodes no longer owning a slot are dropped.
    pub(crate) async fn refresh(&self, timeout: Duration) -> Result<(), String> {
        let mut candidates: Vec<String> = self
            .all()
            .iter()
            .filter(|n| !n.breaker.is_open() && n.links.is_up())
            .map(|n| n.addr.clone())
            .collect();
        candidates.extend(self.seeds.iter().map(|(h, p)| format!("{h}:{p}")));
        let mut last = String::from("no node to ask");
        for addr in candidates {
            let node = self.node(&addr).map_err(|e| e.to_string())?;
            let Some(link) = node.links.up(timeout).await else {
                last = format!("{addr}: not connected within {timeout:?}");
                continue;
            };
            let reply = link
                .command("CLUSTER", &[Value::from("SLOTS")], timeout)
                .await;
            let ranges = match reply {
                Ok(f) => match parse_slots(f, split_addr(&addr).map_or("", |a| a.0)) {
                    Some(r) if !r.is_empty() => r,
                    _ => {
                        last = format!("{addr}: unreadable CLUSTER SLOTS");
                        continue;
                    }
                },
                Err(e) => {
                    last = format!("{addr}: CLUSTER SLOTS: {e}");
                    continue;
                }
            };
            self.install(&ranges).map_err(|e| e.to_string())?;
            return Ok(());
        }
        Err(last)
    }

    fn install(&self, ranges: &[(u16, u16, String)]) -> Result<(), RedisSettingsError> {
        let mut nodes: Vec<Arc<Node>> = Vec::new();
        let mut slots = vec![NONE; SLOTS].into_boxed_slice();
        for (start, end, addr) in ranges {
            let i = match nodes.iter().position(|n| &n.addr == addr) {
                Some(i) => i,
                None => {
                    nodes.push(self.node(addr)?);
                    nodes.len() - 1
                }
            };
            for s in *start..=(*end).min(SLOTS as u16 - 1) {
                slots[usize::from(s)] = i as u16;
            }
        }
        let mut map = self.write();
        let changed = map.slots != slots;
        map.slots = slots;
        map.nodes = nodes;
        if changed {
            tracing::info!(
                target: "sluice::store::redis",
                primaries = map.nodes.len(),
                "cluster slot map changed"
            );
        }
        Ok(())
    }
}

/// The indexes of the nodes that own at least one slot.
fn used_nodes(map: &SlotMap) -> Vec<usize> {
    let mut used = vec![false; map.nodes.len()];
    for &i in map.slots.iter() {
        if let Some(u) = used.get_mut(usize::from(i)) {
            *u = true;
        }
    }
    (0..used.len()).filter(|&i| used[i]).collect()
}

/// `host:port` (the host may be an IPv6 address: the port follows the last colon).
pub(crate) fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

/// `CLUSTER SLOTS` as `(start, end, "host:port" of the primary)`; an empty host (a node that
/// does not know its own address) is `asked`'s.
fn parse_slots(reply: Frame, asked: &str) -> Option<Vec<(u16, u16, String)>> {
    let Frame::Array(Some(ranges)) = reply else {
        return None;
    };
    let int = |f: &Frame| match f {
        Frame::Integer(i) => u16::try_from(*i).ok(),
        _ => None,
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Frame::Array(Some(fields)) = range else {
            return None;
        };
        let start = int(fields.first()?)?;
        let end = int(fields.get(1)?)?;
        let Frame::Array(Some(primary)) = fields.get(2)? else {
            return None;
        };
        let host = match primary.first()? {
            Frame::Bulk(Some(h)) | Frame::Simple(h) => String::from_utf8_lossy(h).into_owned(),
            Frame::Bulk(None) => String::new(),
            _ => return None,
        };
        let port = int(primary.get(1)?)?;
        let host = if host.is_empty() || host == "?" {
            asked.to_string()
        } else {
            host
        };
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        out.push((start, end, addr));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_slots_reply_is_read() {
        let bulk = |s: &str| Frame::Bulk(Some(s.as_bytes().to_vec()));
        let node =
            |h: &str, p: i64| Frame::Array(Some(vec![bulk(h), Frame::Integer(p), bulk("id")]));
        let reply = Frame::Array(Some(vec![
            Frame::Array(Some(vec![
                Frame::Integer(0),
                Frame::Integer(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ])),
            Frame::Array(Some(vec![
                Frame::Integer(5461),
                Frame::Integer(16383),
                node("", 7001),
            ])),
            Frame::Array(Some(vec![
                Frame::Integer(16383),
                Frame::Integer(16383),
                node("::1", 7002),
            ])),
        ]));
        assert_eq!(
            parse_slots(reply, "10.0.0.9").unwrap(),
            vec![
                (0, 5460, "127.0.0.1:7000".to_string()),
                (5461, 16383, "10.0.0.9:7001".to_string()),
                (16383, 16383, "[::1]:7002".to_string())
            ]
        );
        assert!(parse_slots(Frame::Integer(1), "h").is_none());
        assert!(parse_slots(Frame::Array(Some(vec![Frame::Integer(1)])), "h").is_none());
        assert_eq!(split_addr("[::1]:7000"), Some(("::1", 7000)));
        assert_eq!(split_addr("h:x"), None);
    }
}
