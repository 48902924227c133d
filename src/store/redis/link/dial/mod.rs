//! Opening a link's connection ([`super`]): TCP (and TLS with the connector the settings
//! built, [`crate::store::redis::connect`]), then `AUTH`, `SELECT` and (a serving thread's
//! own link) `CLIENT SETNAME sluice-thread` in one write; with
//! Sentinel, the primary's address asked of the sentinels first and `ROLE` checked, so a thread never decides on a
//! demoted primary; in a Cluster, one per node ([`crate::store::redis::nodes`]).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::resp::{self, Frame};
use crate::secret::Secret;
use crate::store::redis::connect::{self, Config, ConnectOptions, RedisSettingsError, Server};

mod library;
pub(in crate::store::redis) use self::library::LoadError;

/// A byte stream to Redis, plain or TLS.
pub(in crate::store::redis) trait Io:
    AsyncRead + AsyncWrite + Unpin + Send
{
}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub(in crate::store::redis) type Stream = Box<dyn Io>;

/// The name a serving thread's own connections give themselves (`CLIENT LIST` tells them
/// from the store's shared links, which send no name: nothing an ACL refuses
/// `CLIENT SETNAME` to can keep them down).
pub const CLIENT_NAME: &str = "sluice-thread";

/// How to open one own connection; cheap to clone.
#[derive(Clone)]
pub(in crate::store::redis) struct Dial {
    target: Target,
    username: Option<String>,
    password: Option<Secret>,
    database: Option<u8>,
    tls: Option<tokio_rustls::TlsConnector>,
    timeout: Duration,
    /// `CLIENT SETNAME`'s, if any.
    name: Option<&'static str>,
}

#[derive(Clone)]
enum Target {
    Server(String, u16),
    Sentinel {
        sentinels: Vec<(String, u16)>,
        service: String,
        username: Option<String>,
        password: Option<Secret>,
    },
}

impl Dial {
    /// `None` for Cluster URLs (their nodes are dialled one by one: [`Dial::node`]).
    pub(in crate::store::redis) fn new(
        opts: &ConnectOptions,
    ) -> Result<Option<Dial>, RedisSettingsError> {
        let (config, _) = connect::config(opts)?;
        let target = match &config.server {
            Server::Standalone(host, port) => Target::Server(host.clone(), *port),
            Server::Sentinel {
                sentinels,
                service,
                username,
                password,
            } => Target::Sentinel {
                sentinels: sentinels.clone(),
                service: service.clone(),
                username: username.clone(),
                password: password.clone(),
            },
            Server::Cluster(_) => return Ok(None),
        };
        Ok(Some(Dial::with(config, target, opts)))
    }

    /// One node of a Cluster, with the URL's credentials and TLS.
    pub(in crate::store::redis) fn node(
        opts: &ConnectOptions,
        host: &str,
        port: u16,
    ) -> Result<Dial, RedisSettingsError> {
        let (config, _) = connect::config(opts)?;
        Ok(Dial::with(
            config,
            Target::Server(host.to_string(), port),
            opts,
        ))
    }

    fn with(config: Config, target: Target, opts: &ConnectOptions) -> Dial {
        Dial {
            target,
            username: config.username,
            password: config.password,
            database: config.database,
            tls: config.tls,
            timeout: opts.connect_timeout,
            name: Some(CLIENT_NAME),
        }
    }

    /// The same, for a shared link (no name).
    pub(in crate::store::redis) fn shared(&self) -> Dial {
        Dial {
            name: None,
            ..self.clone()
        }
    }

    /// A connection ready for commands, or why not; bounded by the connect timeout.
    pub(in crate::store::redis) async fn connect(&self) -> Result<Stream, String> {
        match tokio::time::timeout(self.timeout, self.open()).await {
            Ok(r) => r,
            Err(_) => Err(format!("not connected within {:?}", self.timeout)),
        }
    }

    async fn open(&self) -> Result<Stream, String> {
        match &self.target {
            Target::Server(host, port) => {
                let mut s = self.stream(host, *port).await?;
                self.handshake(&mut s, false).await?;
                Ok(s)
            }
            Target::Sentinel {
                sentinels,
                service,
                username,
                password,
            } => {
                let mut why = String::from("no sentinel configured");
                for (host, port) in sentinels {
                    match self
                        .primary_of(host, *port, service, username, password)
                        .await
                    {
                        Ok((h, p)) => {
                            let mut s = self.stream(&h, p).await?;
                            self.handshake(&mut s, true).await?;
                            return Ok(s);
                        }
                        Err(e) => why = format!("sentinel {host}:{port}: {e}"),
                    }
                }
                Err(why)
            }
        }
    }

    async fn stream(&self, host: &str, port: u16) -> Result<Stream, String> {
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("{host}:{port}: {e}"))?;
        // Commands are coalesced by the link itself: never delay a write further.
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        match &self.tls {
            None => Ok(Box::new(tcp)),
            Some(tls) => {
                let name = rustls_pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| format!("TLS name {host}: {e}"))?;
                let s = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS with {host}:{port}: {e}"))?;
                Ok(Box::new(s))
            }
        }
    }

    /// Asks one sentinel where the primary is.
    async fn primary_of(
        &self,
        host: &str,
        port: u16,
        service: &str,
        username: &Option<String>,
        password: &Option<Secret>,
    ) -> Result<(String, u16), String> {
        let mut s = self.stream(host, port).await?;
        let mut out = Vec::new();
        let mut n = 0;
        if let Some(p) = password {
            auth(&mut out, username.as_deref(), p);
            n += 1;
        }
        resp::encode_strs(
            &mut out,
            &[b"SENTINEL", b"get-master-addr-by-name", service.as_bytes()],
        );
        let replies = exchange(&mut s, &out, n + 1).await?;
        for r in &replies[..n] {
            refused(r)?;
        }
        match &replies[n] {
            Frame::Array(Some(a)) => match a.as_slice() {
                [Frame::Bulk(Some(h)), Frame::Bulk(Some(p))] => {
                    let h = String::from_utf8_lossy(h).into_owned();
                    let p = std::str::from_utf8(p)
                        .ok()
                        .and_then(|p| p.parse().ok())
                        .ok_or("the sentinel named an invalid port")?;
                    Ok((h, p))
                }
                _ => Err("unexpected SENTINEL reply".into()),
            },
            Frame::Array(None) | Frame::Bulk(None) => Err(format!("no primary named {service}")),
            other => Err(format!("unexpected SENTINEL reply {other:?}")),
        }
    }

    /// `AUTH`, `SELECT`, the name, and (`primary`) `ROLE`, in one write.
    async fn handshake(&self, s: &mut Stream, primary: bool) -> Result<(), String> {
        let mut out = Vec::new();
        let mut n = 0;
        if let Some(p) = &self.password {
            auth(&mut out, self.username.as_deref(), p);
            n += 1;
        }
        if let Some(db) = self.database {
            resp::encode_strs(&mut out, &[b"SELECT", db.to_string().as_bytes()]);
            n += 1;
        }
        if let Some(name) = self.name {
            resp::encode_strs(&mut out, &[b"CLIENT", b"SETNAME", name.as_bytes()]);
            n += 1;
        }
        if primary {
            resp::encode_strs(&mut out, &[b"ROLE"]);
            n += 1;
        }
        let replies = exchange(s, &out, n).await?;
        for r in &replies {
            refused(r)?;
        }
        if primary {
            match replies.last() {
                Some(Frame::Array(Some(a))) if matches!(a.first(), Some(Frame::Bulk(Some(r))) if r == b"master") =>
                    {}
                _ => return Err("not a primary (yet)".into()),
            }
        }
        Ok(())
    }
}

fn auth(out: &mut Vec<u8>, username: Option<&str>, password: &Secret) {
    match username {
        Some(u) => resp::encode_strs(out, &[b"AUTH", u.as_bytes(), password.expose().as_bytes()]),
        None => resp::encode_strs(out, &[b"AUTH", password.expose().as_bytes()]),
    }
}

/// An error reply, as an error (its text never holds the password: Redis does not echo it).
fn refused(f: &Frame) -> Result<(), String> {
    match f {
        Frame::Error(e) => Err(e.clone()),
        _ => Ok(()),
    }
}

/// Writes `out` and reads `n` replies: the connection's set-up, before pipelining starts.
async fn exchange(s: &mut Stream, out: &[u8], n: usize) -> Result<Vec<Frame>, String> {
    s.write_all(out).await.map_err(|e| e.to_string())?;
    s.flush().await.map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(1024);
    let mut replies = Vec::with_capacity(n);
    let mut at = 0;
    while replies.len() < n {
        match resp::parse(&buf[at..]).map_err(|e| e.to_string())? {
            Some((f, used)) => {
                at += used;
                replies.push(f);
            }
            None => {
                buf.reserve(1024);
                if s.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                    return Err("connection closed during set-up".into());
                }
            }
        }
    }
    Ok(replies)
}

#[cfg(test)]
mod tests;
