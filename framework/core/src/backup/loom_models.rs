//! Loom models of the buffer-queue backup's concurrent cores. Run with
//! `RUSTFLAGS="--cfg weir_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p weir --lib --release loom_`.
//!
//! 1. The primary (claims) and the backup (offers) race on the same batch ids, while the
//!    queue releases what got through; then the primary fails mid-step and a promotion plans
//!    the replay. Every id is processed exactly once: by the primary (its output got
//!    through) or by the replay, and no payload the replay needs was released.
//! 2. A promotion races a zombie primary that still emits: after the output channel is
//!    fenced and reopened, the downstream receives every record exactly once, in order.
//! 3. The backup applies a keyed primary's hand-offs while the primary hands changes at a
//!    checkpoint's barrier, holds that point, and hands more: the backup never applies past
//!    the held point, so the checkpoint's state resolves to what the barrier saw.

use crate::channel::loom_tests::send_spinning;
use crate::channel::{channel, Batch, Event, OutputChannel};
use crate::sync::{Arc, AtomicWaker};

use super::queue::{BufferQueue, Offer};

const N: u64 = 3;

/// Primary claims batches 0..`claimed` of one channel in order, each step emitting one
/// record; the last claimed step's output never gets out (it fails inside it). The backup
/// offers every batch concurrently.
fn claim_filter_release_then_promote(claimed: u64) {
    loom::model(move || {
        let q = Arc::new(BufferQueue::<u64>::new(1, 1, false, 1 << 20, None));
        let delivered = Arc::new(crate::sync::atomic::AtomicU64::new(0));
        let (qp, dp) = (q.clone(), delivered.clone());
        let primary = loom::thread::spawn(move || {
            for id in 0..claimed {
                // Output position now: one record per completed step.
                let pos = dp.load(crate::sync::atomic::Ordering::SeqCst);
                qp.claim(0, (0, id), &(100 + id), 1, 1, &[pos])
                    .expect("not fenced");
                if id + 1 < claimed {
                    dp.store(id + 1, crate::sync::atomic::Ordering::SeqCst);
                }
            }
        });
        let qb = q.clone();
        let backup = loom::thread::spawn(move || {
            let mut kept = 0;
            for id in 0..N {
                if qb.offer((0, id), 100 + id, 1, 1) == Offer::Added {
                    kept += 1;
                }
            }
            kept
        });
        primary.join().unwrap();
        let _ = backup.join().unwrap();
        q.fence();
        let d = delivered.load(crate::sync::atomic::Ordering::SeqCst);
        let plan = q.replay_plan(&[d]).expect("not degraded");
        let replayed: Vec<u64> = plan.batches().map(|(id, _)| id.1).collect();
        // Everything the downstream lacks is replayed, once, in order, with its payload.
        let expected: Vec<u64> = (d..N).collect();
        assert_eq!(replayed, expected, "delivered {d}");
        for (id, payload) in plan.batches() {
            assert_eq!(*payload, 100 + id.1);
        }
        assert_eq!(&*plan.positions, &[d]);
    });
}

#[test]
fn loom_buffer_queue_claim_filter_release_primary_failed_early() {
    claim_filter_release_then_promote(1);
}

#[test]
fn loom_buffer_queue_claim_filter_release_primary_failed_late() {
    claim_filter_release_then_promote(N);
}

/// The claim watermark: a batch claimed and released before the backup offers it is
/// filtered, never re-added (it would be replayed a second time).
#[test]
fn loom_buffer_queue_late_offer_after_release_is_filtered() {
    loom::model(|| {
        let q = Arc::new(BufferQueue::<u64>::new(1, 1, false, 1 << 20, None));
        let qp = q.clone();
        let primary = loom::thread::spawn(move || {
            qp.claim(0, (0, 0), &7, 1, 1, &[0]).unwrap();
            // Step 0's output is through once step 1 starts: step 0 is released.
            qp.claim(0, (0, 1), &8, 1, 1, &[1]).unwrap();
            qp.settle(0, &[2]);
        });
        let offer = q.offer((0, 0), 7, 1, 1);
        primary.join().unwrap();
        q.fence();
        let plan = q.replay_plan(&[2]).unwrap();
        assert!(
            plan.batches().next().is_none(),
            "offer was {offer:?}; replay {:?}",
            plan.batches().map(|(id, _)| *id).collect::<Vec<_>>()
        );
    });
}

/// A zombie primary keeps emitting records 0, 1, 2 (one per batch) while the supervisor
/// fences the channel and the promoted backup replays from the start: the downstream gets
/// each record once, in order.
#[test]
fn loom_fenced_zombie_primary_duplicates_nothing() {
    loom::model(|| {
        let (tx, rx) = channel::<u64>(4, Arc::new(AtomicWaker::new()));
        let handle: OutputChannel<u64> = tx.handle().unwrap();
        let zombie = loom::thread::spawn(move || {
            for id in 0..N {
                send_spinning(&tx, Event::Batch(Batch::Owned(vec![id])));
            }
        });
        // Promotion: fence, learn how far the channel got, replay everything from 0 with what
        // it has suppressed.
        let have = handle.fence();
        let promoted = handle.reopen(0, have);
        for id in 0..N {
            send_spinning(&promoted, Event::Batch(Batch::Owned(vec![id])));
        }
        zombie.join().unwrap();
        let mut got = Vec::new();
        while let Some(e) = rx.try_recv() {
            if let Event::Batch(b) = e {
                let mut v = Vec::new();
                b.move_into(&mut v);
                got.extend(v);
            }
        }
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "fenced at {have}");
    });
}

/// The queue's byte count never wraps: the primary claims and releases a batch the backup
/// has just inserted but not yet counted, then claims a smaller one. Counting after the
/// insert (as it once did) let the release come first, and the next count read the wrapped
/// total as a queue over its bound: the queue degraded, and a failure restarted the job
/// instead of promoting the backup.
#[test]
fn loom_buffer_queue_count_never_wraps() {
    loom::model(|| {
        let q = Arc::new(BufferQueue::<u64>::new(1, 1, false, 1 << 20, None));
        let qb = q.clone();
        let backup = loom::thread::spawn(move || qb.offer((0, 0), 7, 1, 10));
        q.claim(0, (0, 0), &7, 1, 10, &[0]).unwrap();
        q.settle(0, &[1]);
        q.claim(0, (0, 1), &8, 1, 1, &[1]).unwrap();
        let _ = backup.join().unwrap();
        assert!(!q.is_degraded(), "a wrapped count degraded the queue");
        let stats = q.stats();
        assert_eq!((stats.entries, stats.bytes), (1, 1), "only batch 1 is kept");
    });
}

/// Model 3: a hand-off, a barrier's hand-off and its hold, a later hand-off (the primary), the
/// backup applying one entry at a time beside it (when the image's lock is free), and the
/// checkpoint's writer resolving the held point on a third thread.
#[test]
fn loom_backup_image_never_applies_past_a_held_point() {
    use crate::state::changes::KeyedDelta;
    use std::sync::Arc as StdArc;

    fn delta(full: bool, key: u64, value: &str) -> KeyedDelta {
        let mut d = KeyedDelta::new(full);
        d.push(0, &key, Some(&(key, value.to_owned())))
            .expect("encodes");
        d
    }
    loom::model(|| {
        let image = StdArc::new(super::image::StateImage::new());
        let backup = {
            let image = image.clone();
            loom::thread::spawn(move || {
                for _ in 0..4 {
                    image.apply(1);
                }
            })
        };
        image.push(delta(true, 1, "a"));
        let at = image.push(delta(false, 1, "barrier"));
        let held = image.hold(at);
        // The checkpoint's writer resolves beside the backup (which never waits for the
        // image's lock) and the primary's next hand-off.
        let writer = loom::thread::spawn(move || held.resolve());
        image.push(delta(false, 1, "after"));
        backup.join().unwrap();
        let payload = writer
            .join()
            .unwrap()
            .expect("the held point was not passed");
        let groups: Vec<(usize, Vec<(u64, String)>)> =
            ciborium::from_reader(payload.as_slice()).expect("decodes");
        assert_eq!(groups, vec![(0, vec![(1, "barrier".to_owned())])]);
        let whole = image.snapshot().expect("the whole state").payload();
        let groups: Vec<(usize, Vec<(u64, String)>)> =
            ciborium::from_reader(whole.as_slice()).expect("decodes");
        assert_eq!(groups, vec![(0, vec![(1, "after".to_owned())])]);
    });
}

/// Model 4: a promotion (the whole state) while a checkpoint's writer resolves its held point
/// a part at a time (one entry a part under loom), with nothing appended after that point:
/// the writer lets the promotion go first and then goes on; neither fails, and both see the
/// state at the point.
#[test]
fn loom_a_promotion_beside_a_checkpoints_writer_fails_neither() {
    use crate::state::changes::KeyedDelta;
    use std::sync::Arc as StdArc;

    fn delta(full: bool, entries: &[(u64, &str)]) -> KeyedDelta {
        let mut d = KeyedDelta::new(full);
        for (key, value) in entries {
            d.push(0, key, Some(&(*key, value.to_string())))
                .expect("encodes");
        }
        d
    }
    let decode = |payload: Vec<u8>| {
        let groups: Vec<(usize, Vec<(u64, String)>)> =
            ciborium::from_reader(payload.as_slice()).expect("decodes");
        groups
    };
    loom::model(move || {
        let image = StdArc::new(super::image::StateImage::new());
        // Changes over the empty image (a whole hand-off would be taken as it is, not
        // applied a part at a time).
        let at = image.push(delta(false, &[(1, "a"), (2, "b")]));
        let held = image.hold(at);
        let writer = loom::thread::spawn(move || held.resolve());
        let whole = image.snapshot().expect("the whole state").payload();
        let payload = writer
            .join()
            .unwrap()
            .expect("the promotion did not pass the held point");
        let want = vec![(0, vec![(1, "a".to_owned()), (2, "b".to_owned())])];
        let mut got = decode(payload);
        got[0].1.sort();
        assert_eq!(got, want);
        let mut got = decode(whole);
        got[0].1.sort();
        assert_eq!(got, want);
    });
}
