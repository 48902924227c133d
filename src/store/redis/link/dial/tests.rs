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
    let url = format!("redis-sentinel://u:pw@127.0.0.1:{sentinel}/2?sentinelServiceName=m{query}");
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
