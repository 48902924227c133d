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
use crate::store::redis::library::LIBRARY;

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

impl Dial {
    /// `FUNCTION LOAD` of the decision library ([`crate::store::redis::library`]) unless the server has it
    /// already: whether this connection decides with `FCALL`s. A server without functions
    /// (before Redis 7) or an ACL that refuses `FUNCTION LOAD` is no error: the connection
    /// decides with `EVALSHA`, as before. `Err`: the connection failed.
    pub(in crate::store::redis) async fn load_library(
        &self,
        s: &mut Stream,
    ) -> Result<bool, String> {
        let mut out = Vec::new();
        resp::encode_strs(&mut out, &[b"FUNCTION", b"LOAD", LIBRARY.source.as_bytes()]);
        let replies = tokio::time::timeout(self.timeout, exchange(s, &out, 1))
            .await
            .map_err(|_| format!("FUNCTION LOAD: no reply within {:?}", self.timeout))??;
        match &replies[0] {
            Frame::Error(e) if e.contains("already exists") => Ok(true),
            Frame::Error(e) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(target: "sluice::store::redis", error = %e, "redis refused the function library: decisions go as one EVALSHA each (more Redis CPU per decision)");
                });
                Ok(false)
            }
            _ => {
                self.delete_other_libraries(s).await?;
                Ok(true)
            }
        }
    }

    /// Deletes every `sluice_*` function library but this build's. A refusal (an ACL without
    /// `FUNCTION DELETE`) leaves them, as before; a reply that does not come fails the
    /// connection, since a late one would be read as the reply to its first decision.
    async fn delete_other_libraries(&self, s: &mut Stream) -> Result<(), String> {
        let mut out = Vec::new();
        resp::encode_strs(
            &mut out,
            &[b"FUNCTION", b"LIST", b"LIBRARYNAME", b"sluice_*"],
        );
        let replies = tokio::time::timeout(self.timeout, exchange(s, &out, 1))
            .await
            .map_err(|_| format!("FUNCTION LIST: no reply within {:?}", self.timeout))??;
        let others: Vec<Vec<u8>> = library_names(&replies[0])
            .into_iter()
            .filter(|n| n.starts_with(b"sluice_") && n != LIBRARY.name.as_bytes())
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        let mut out = Vec::new();
        for name in &others {
            resp::encode_strs(&mut out, &[b"FUNCTION", b"DELETE", name]);
        }
        tokio::time::timeout(self.timeout, exchange(s, &out, others.len()))
            .await
            .map_err(|_| format!("FUNCTION DELETE: no reply within {:?}", self.timeout))??;
        Ok(())
    }
}

/// The library names in a `FUNCTION LIST` reply (each library a flat array of name/value
/// pairs in RESP2).
fn library_names(reply: &Frame) -> Vec<Vec<u8>> {
    let Frame::Array(Some(libraries)) = reply else {
        return Vec::new();
    };
    libraries
        .iter()
        .filter_map(|lib| {
            let Frame::Array(Some(fields)) = lib else {
                return None;
            };
            fields.chunks_exact(2).find_map(|kv| match kv {
                [Frame::Bulk(Some(k)), Frame::Bulk(Some(v))] if k == b"library_name" => {
                    Some(v.clone())
                }
                _ => None,
            })
        })
        .collect()
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
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    type Seen = tokio::task::JoinHandle<Vec<String>>;

    /// A fake server for one connection: answers each command with `answer(its words)`;
    /// returns its port and the commands it saw (words joined by spaces) once closed.
    async fn fake(answer: impl Fn(&[String]) -> Vec<u8> + Send + 'static) -> (u16, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (mut buf, mut seen) = (Vec::new(), Vec::new());
            loop {
                match resp::parse(&buf).unwrap() {
                    Some((Frame::Array(Some(words)), used)) => {
                        buf.drain(..used);
                        let words: Vec<String> = words
                            .iter()
                            .map(|w| match w {
                                Frame::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
                                _ => String::new(),
                            })
                            .collect();
                        s.write_all(&answer(&words)).await.unwrap();
                        seen.push(words.join(" "));
                    }
                    Some(_) => panic!("not a command"),
                    None => {
                        if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                            return seen;
                        }
                    }
                }
            }
        });
        (port, task)
    }

    /// A server whose `ROLE` answers `role`, and `+OK` to the rest.
    fn server(role: &'static str) -> impl Fn(&[String]) -> Vec<u8> + Send + 'static {
        move |w| match w[0].as_str() {
            "ROLE" => format!("*3\r\n${}\r\n{role}\r\n:0\r\n*0\r\n", role.len()).into_bytes(),
            _ => b"+OK\r\n".to_vec(),
        }
    }

    /// A sentinel naming the primary at `port` (`None`: no such service).
    fn sentinel(port: Option<u16>) -> impl Fn(&[String]) -> Vec<u8> + Send + 'static {
        move |w| match (w[0].as_str(), port) {
            ("SENTINEL", Some(p)) => {
                let p = p.to_string();
                format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{p}\r\n", p.len()).into_bytes()
            }
            ("SENTINEL", None) => b"*-1\r\n".to_vec(),
            _ => b"+OK\r\n".to_vec(),
        }
    }

    fn dial(sentinel: u16, query: &str) -> Dial {
        let url =
            format!("redis-sentinel://u:pw@127.0.0.1:{sentinel}/2?sentinelServiceName=m{query}");
        Dial::new(&ConnectOptions::for_url(url)).unwrap().unwrap()
    }

    #[tokio::test]
    async fn the_sentinel_names_the_primary_which_must_say_it_is_one() {
        let (p, primary_seen) = fake(server("master")).await;
        let (s, sentinel_seen) = fake(sentinel(Some(p))).await;
        let stream = dial(s, "&sentinelPassword=spw").connect().await.unwrap();
        drop(stream);
        assert_eq!(
            sentinel_seen.await.unwrap(),
            ["AUTH spw", "SENTINEL get-master-addr-by-name m"]
        );
        assert_eq!(
            primary_seen.await.unwrap(),
            [
                "AUTH u pw",
                "SELECT 2",
                "CLIENT SETNAME sluice-thread",
                "ROLE"
            ]
        );
    }

    #[tokio::test]
    async fn a_replica_or_an_unknown_service_is_refused() {
        let (s, _) = fake(sentinel(None)).await;
        let e = dial(s, "").connect().await.err().unwrap();
        assert!(e.contains("no primary named m"), "{e}");
        let (r, _) = fake(server("slave")).await;
        let (s, _) = fake(sentinel(Some(r))).await;
        let e = dial(s, "").connect().await.err().unwrap();
        assert!(e.contains("not a primary"), "{e}");
    }
}
