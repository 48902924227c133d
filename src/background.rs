//! Work that must not delay requests: a reload's parse, dropping an old rule set. Their
//! threads run at the lowest priority (nice 19), so on a machine whose cores are busy
//! serving, the scheduler lets a serving thread preempt them at once instead of sharing the
//! core: the reload takes longer there, requests do not wait behind it.

/// Runs `work` on a thread of its own at the lowest priority and waits for it: the whole of a
/// reload (read, parse, validate, compile, swap), not only its parse, so that the callers'
/// threads (tokio's blocking pool, at normal priority) never compete with serving threads for
/// the tens of milliseconds a large config takes. Runs `work` on the calling thread when no
/// thread can be started.
pub(crate) fn at_lowest_priority<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    let mut work = Some(work);
    // The caller's runtime goes along: `work` may spawn on it (a reload publishes readiness to
    // gRPC health that way), as it could had it run on the calling thread.
    let runtime = tokio::runtime::Handle::try_current().ok();
    let ran = std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("sluice-reload".into())
            .spawn_scoped(scope, || {
                let _entered = runtime.as_ref().map(|rt| rt.enter());
                lowest_priority();
                work.take().map(|w| w())
            })
            .ok()?;
        // A panic in `work` goes on on the calling thread, as if `work` had run there.
        Some(
            handle
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        )
    });
    match (ran.flatten(), work) {
        (Some(out), _) => out,
        (None, Some(work)) => work(),
        (None, None) => unreachable!("the thread either ran `work` or left it"),
    }
}

/// Lowers the calling thread's priority to nice 19 (on Linux nice is per thread). Best
/// effort: where it cannot, the thread runs as it was.
pub(crate) fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn lowers_only_the_calling_thread() {
        let before = rustix::process::getpriority_process(None).unwrap();
        let lowered = std::thread::spawn(|| {
            super::lowest_priority();
            rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, 19);
        let (inside, answer) = super::at_lowest_priority(|| {
            let p = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
            (p, 42)
        });
        assert_eq!((inside, answer), (19, 42));
        assert_eq!(
            rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap(),
            before
        );
    }

    #[test]
    fn work_sees_the_callers_runtime() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let inside = rt.block_on(async {
            super::at_lowest_priority(|| tokio::runtime::Handle::try_current().is_ok())
        });
        assert!(
            inside,
            "a reload's work may spawn on the runtime that asked for it"
        );
        assert!(!super::at_lowest_priority(|| {
            tokio::runtime::Handle::try_current().is_ok()
        }));
    }
}
