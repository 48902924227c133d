//! Watches the config paths and calls back (debounced) when something there changes.
//!
//! Directories are watched, not files: editors, `sed -i` and Kubernetes replace files, and a
//! mounted ConfigMap changes by swapping its `..data` symlink inside the directory. Each
//! config directory is watched with its parent (a directory swapped as a whole shows there),
//! and the watches are renewed after each change, since a replaced directory loses its
//! watch. Reading a file fires access events: those are ignored. The callback decides
//! whether anything really changed (the reload compares content hashes).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

/// Quiet time after the last event before the callback runs (each save fires several).
const DEBOUNCE: Duration = Duration::from_millis(200);

/// The directories that show changes to `paths`.
fn dirs_of(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for p in paths {
        let parent = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        if p.is_dir() {
            dirs.push(p.clone());
        }
        dirs.push(parent);
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

fn rewatch(w: &Mutex<RecommendedWatcher>, dirs: &[PathBuf]) {
    let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
    for d in dirs {
        let _ = w.unwatch(d);
        if let Err(e) = w.watch(d, RecursiveMode::NonRecursive) {
            tracing::debug!(dir = %d.display(), error = %e, "cannot watch config directory");
        }
    }
}

/// Calls `on_change` (on a blocking thread) after changes under `paths`, until `stop` turns
/// true.
pub(crate) fn spawn(
    paths: &[PathBuf],
    on_change: Arc<dyn Fn() + Send + Sync>,
    mut stop: watch::Receiver<bool>,
) -> notify::Result<()> {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let relevant = match event {
            Ok(e) => !matches!(e.kind, EventKind::Access(_)),
            Err(_) => true,
        };
        if relevant {
            // A full channel already holds a wake-up: the events coalesce.
            let _ = tx.try_send(());
        }
    })?;
    let watcher = Arc::new(Mutex::new(watcher));
    let dirs = dirs_of(paths);
    rewatch(&watcher, &dirs);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                got = rx.recv() => if got.is_none() { return },
            }
            loop {
                match tokio::time::timeout(DEBOUNCE, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            rewatch(&watcher, &dirs);
            let f = on_change.clone();
            let _ = tokio::task::spawn_blocking(move || f()).await;
        }
    });
    Ok(())
}
