//! `sluice::client`, the Rust client of the native API, against a real server: the
//! reservation guard commits, cancels, and cancels when dropped unsettled.

use std::time::Duration;

use sluice::client::{Client, ClientError, Descriptor, Reserved};
use tonic::Code;

use super::CONFIG;
use crate::support::poll::wait_until_async;
use crate::support::{Sluice, StoreKind};

fn user(name: &str, hits: u64) -> Descriptor {
    Descriptor::new([("user", name)]).hits(hits)
}

async fn left(c: &mut Client, name: &str) -> u64 {
    let r = c.check("native", [user(name, 0)]).await.expect("a look");
    r.statuses[0].remaining
}

async fn granted(c: &mut Client, name: &str, hits: u64) -> sluice::client::Reservation {
    match c
        .reserve("native", [user(name, hits)], Duration::from_secs(60))
        .await
        .expect("answered")
    {
        Reserved::Granted(r) => r,
        Reserved::Rejected(a) => panic!("rejected: {a:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reservation_guard_commits_cancels_and_cancels_when_dropped() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut c = Client::connect(format!("http://{}", s.server.grpc_addr))
        .await
        .expect("connects");

    let r = granted(&mut c, "commit", 6).await;
    assert!(super::is_reservation_id(r.id()), "{}", r.id());
    assert_eq!(r.answer().statuses[0].remaining, 4);
    r.commit(2).await.expect("committed");
    assert_eq!(left(&mut c, "commit").await, 8);

    granted(&mut c, "cancel", 6)
        .await
        .cancel()
        .await
        .expect("cancelled");
    assert_eq!(left(&mut c, "cancel").await, 10);

    // Dropped unsettled (an error or a panic in the work): the guard cancels in the
    // background.
    drop(granted(&mut c, "dropped", 7).await);
    let probe = c.clone();
    wait_until_async("the dropped reservation is cancelled", || {
        let mut p = probe.clone();
        async move { left(&mut p, "dropped").await == 10 }
    })
    .await;

    // Over the limit: nothing held, the statuses say why.
    match c
        .reserve("native", [user("over", 11)], Duration::from_secs(60))
        .await
        .expect("answered")
    {
        Reserved::Rejected(a) => assert!(a.statuses[0].retry_after.is_some()),
        Reserved::Granted(r) => panic!("granted {}", r.id()),
    }
    let dry = c
        .dry_run("native", [user("over", 10)])
        .await
        .expect("a dry run");
    assert!(dry.allowed);
    assert_eq!(
        left(&mut c, "over").await,
        10,
        "the dry run charged nothing"
    );

    // Errors are statuses.
    let e = c
        .reserve("nowhere", [user("x", 1)], Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Status(s) if s.code() == Code::FailedPrecondition),
        "{e}"
    );
    s.stop().await;
}
