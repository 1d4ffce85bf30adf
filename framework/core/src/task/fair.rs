//! Fair turns on a shared arbiter for a subtask whose units of work are long.
//!
//! An arbiter runs its subtasks on a tokio `LocalSet`, which polls the tasks woken on its own
//! thread first and looks at those woken from other threads (a checkpoint's trigger, any
//! mail from the controller, a channel's wake from another arbiter) only every 31 polls or
//! when it has nothing local. A subtask that wakes itself after each unit of work is woken
//! locally: with units of a millisecond (a slow sink behind it) the mail of a subtask beside
//! it waited some 20 ms. A subtask whose unit was long is therefore woken from another thread
//! ([`wake_behind_remote`]): its next turn queues behind what other threads woke before it.
//! Short units keep the local wake, which costs nothing. This module owns only that wake.

use std::sync::mpsc;
use std::sync::OnceLock;
use std::task::Waker;
use std::time::Duration;

/// A unit of work at least this long yields its turn behind the wakes from other threads.
pub(super) const LONG_UNIT: Duration = Duration::from_micros(200);

/// Wakes `waker` from a helper thread (one per process, started on first use), so that the
/// task is queued behind the tasks other threads woke before it. Without the helper (it could
/// not be started) the task wakes itself as usual.
pub(super) fn wake_behind_remote(waker: &Waker) {
    static HELPER: OnceLock<Option<mpsc::Sender<Waker>>> = OnceLock::new();
    let helper = HELPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Waker>();
        std::thread::Builder::new()
            .name("weir-fair-wake".into())
            .spawn(move || rx.into_iter().for_each(Waker::wake))
            .ok()
            .map(|_| tx)
    });
    match helper {
        Some(tx) if tx.send(waker.clone()).is_ok() => {}
        _ => waker.wake_by_ref(),
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    /// The helper wakes what it is given.
    #[test]
    fn a_long_unit_is_woken_by_the_helper() {
        struct Counting(std::sync::atomic::AtomicUsize);
        impl std::task::Wake for Counting {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let n = std::sync::Arc::new(Counting(std::sync::atomic::AtomicUsize::new(0)));
        wake_behind_remote(&Waker::from(n.clone()));
        let n = &n.0;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while n.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "never woken");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
