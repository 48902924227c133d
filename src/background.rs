//! Work that must not delay requests: a reload's parse, dropping an old rule set. Their
//! threads run at the lowest priority (nice 19), so on a machine whose cores are busy
//! serving, the scheduler lets a serving thread preempt them at once instead of sharing the
//! core: the reload takes longer there, requests do not wait behind it.

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
        assert_eq!(
            rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap(),
            before
        );
    }
}
