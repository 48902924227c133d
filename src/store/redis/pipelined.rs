//! `PipelinedConnection`: a serving thread's own connection ([`super::link`]) for any command, outside
//! the store: the transport `sluice-bench`'s floor server sends the floor script on.

use std::time::Duration;

use super::resp::Value;
use tokio::task::JoinHandle;

use super::connect::{ConnectOptions, RedisSettingsError};
use super::dial::Dial;
use super::errors::from_call;
use super::link::Link;
use super::resp::Frame;
use crate::store::StoreError;

/// A serving thread's pipelined connection ([`super::link`]) on its own, for any command: what
/// `sluice-bench`'s floor server sends the floor script on, so that sluice and its floor are
/// measured over the same transport (the commands of one scheduler tick in one write).
/// Standalone and Sentinel URLs only; it connects in the background on the calling runtime
/// and again whenever the connection drops.
pub struct PipelinedConnection {
    link: Link,
    task: JoinHandle<()>,
}

impl PipelinedConnection {
    pub fn connect(opts: &ConnectOptions) -> Result<PipelinedConnection, RedisSettingsError> {
        let dial = Dial::new(opts)?.ok_or_else(|| {
            RedisSettingsError::new("a pipeline needs a standalone or Sentinel URL")
        })?;
        let (link, task) =
            Link::start(dial, opts.connect_timeout.max(Duration::from_secs(1)), true);
        Ok(PipelinedConnection { link, task })
    }

    pub fn is_up(&self) -> bool {
        self.link.is_up()
    }

    /// `name args..` and its reply (an error reply is an `Ok(Frame::Error)`).
    pub async fn call(
        &self,
        name: &str,
        args: &[Value],
        timeout: Duration,
    ) -> Result<Frame, StoreError> {
        self.link.call(name, args, timeout).await.map_err(from_call)
    }
}

impl Drop for PipelinedConnection {
    fn drop(&mut self) {
        self.task.abort();
    }
}
