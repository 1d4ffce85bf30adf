use super::*;
use crate::channel::{channel, Credit, NO_BATCH_LIMIT};
use crate::key_group::key_group_of;
use crate::sync::{Arc, AtomicWaker};
use std::time::Duration;

fn cfg(batch_size: usize) -> OutputConfig {
    OutputConfig {
        batch_size,
        subtask: 0,
        max_parallelism: 128,
        owners: crate::key_group::Owners::by_count(128, 1),
        load: None,
        load_when_single: false,
        counts_unsent: false,
        target_uid: std::sync::Arc::new("next".into()),
        routed_before: 0,
        adaptive_batch: AdaptBatches::fixed(true),
    }
}

/// Every event `rx` has, and then what `out` still holds for it, until both are empty.
fn drain<O: Output<u32>>(out: &mut O, rx: &crate::channel::Receiver<u32>) -> Vec<Vec<u32>> {
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut batches = Vec::new();
    loop {
        while let Some(e) = rx.try_recv() {
            if let Event::Batch(b) = e {
                let mut v = Vec::new();
                b.move_into(&mut v);
                batches.push(v);
            }
        }
        if out.poll_pending(&mut cx).is_ready() && rx.queued() == 0 {
            return batches;
        }
    }
}

/// A channel whose receiver needed about 3 ms per batch of 100 records, against a 1 ms
/// target with a floor of two batches, and the batch limit it asks for: at most
/// 1 ms / 2 / 30 µs = 16 records (a slower machine only makes it smaller), then a little
/// more once the channel is emptied.
fn slow_channel() -> (Sender<u32>, crate::channel::Receiver<u32>, u64) {
    let credit = Credit {
        min: 2,
        max: 64,
        target: Some(Duration::from_millis(1)),
    };
    let (tx, rx) = channel::<u32>(credit, Arc::new(AtomicWaker::new()));
    assert_eq!(tx.batch_limit(), NO_BATCH_LIMIT);
    for _ in 0..6 {
        while tx
            .try_send(Event::Batch(Batch::Owned(vec![0; 100])))
            .is_ok()
        {}
        std::thread::sleep(Duration::from_millis(3));
        rx.try_recv();
    }
    let limit = tx.batch_limit();
    assert!((1..=16).contains(&limit), "limit {limit}");
    // Taking the rest at once is one fast sample in the average (at most 8/7 of it).
    while rx.try_recv().is_some() {}
    let limit = tx.batch_limit();
    assert!((1..=18).contains(&limit), "limit {limit}");
    (tx, rx, limit)
}

/// The outputs cut what they are given to a slow receiver's batch limit, as credit
/// allows, and every record arrives once, in order.
#[test]
fn outputs_cut_batches_to_a_slow_receivers_limit() {
    let records: Vec<u32> = (0..1000).collect();
    // With batches of 64 the floor is 8, under the slow receiver's limit.
    let (tx, rx, limit) = slow_channel();
    let limit = limit.max(8);
    let mut out = NetOutput::new(vec![tx], OneTarget, cfg(64));
    out.push(&mut records.clone()).unwrap();
    // The channel's window is full and one batch waits for credit; the rest waits in
    // the buffer, not as a queue of small batches.
    assert_eq!(out.pending.queue.len(), 1);
    assert_eq!(out.bufs[0].len(), 1000 - 3 * limit as usize);
    // A linger flush leaves them there (`poll_pending` sends them as credit returns);
    // an in-band event goes behind all of them.
    out.flush();
    assert_eq!(out.pending.queue.len(), 1);
    out.flush_all();
    let forward = drain(&mut out, &rx);
    let (tx, rx, limit2) = slow_channel();
    let limit2 = limit2.max(8);
    let mut out = BroadcastOutput::new(vec![tx], cfg(64));
    out.push(&mut records.clone()).unwrap();
    out.flush_all();
    let broadcast = drain(&mut out, &rx);
    for (batches, limit) in [(forward, limit), (broadcast, limit2)] {
        assert!(
            batches.iter().all(|b| b.len() as u64 <= limit),
            "limit {limit}: {:?}",
            batches.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert_eq!(batches.concat(), records);
    }
}

/// While rate control paces a source the job's flag is off and a slow receiver gets whole
/// batches; the flag follows the config when rate control is turned on and off, and the
/// output follows the flag from its next batch on.
#[test]
fn batches_stop_adapting_while_rate_control_is_on() {
    let mut env = crate::config::EnvConfig::default();
    assert!(env.adaptive_batch_size, "on by default");
    let flag = AdaptBatches::new(&env);
    assert!(flag.on());
    env.rate_control.enabled = true;
    flag.follow(&env);
    assert!(!flag.on(), "off while rate control is on");

    let (tx, rx, _) = slow_channel();
    let mut c = cfg(64);
    c.adaptive_batch = flag.clone();
    let mut out = NetOutput::new(vec![tx], OneTarget, c);
    let records: Vec<u32> = (0..64).collect();
    out.push(&mut records.clone()).unwrap();
    assert_eq!(
        drain(&mut out, &rx),
        vec![records.clone()],
        "one whole batch"
    );

    env.rate_control.enabled = false;
    flag.follow(&env);
    assert!(flag.on(), "on again once rate control is off");
    // The limit is read at each batch sent: the first batch after the flip is still
    // whole, the ones after it are cut below the batch size.
    let records: Vec<u32> = (0..256).collect();
    for chunk in records.chunks(64) {
        out.push(&mut chunk.to_vec()).unwrap();
    }
    out.flush_all();
    let batches = drain(&mut out, &rx);
    assert!(batches.len() > 4, "{batches:?}");
    assert!(batches[1..].iter().all(|b| b.len() < 64), "{batches:?}");
    assert_eq!(batches.concat(), records);

    env.adaptive_batch_size = false;
    flag.follow(&env);
    assert!(!flag.on(), "off when the setting is off");
}

/// A receiver that keeps up sets no limit below the batch size: the output moves the
/// batch it is given whole.
#[test]
fn a_fast_receiver_takes_whole_batches() {
    let credit = Credit {
        min: 2,
        max: 64,
        target: Some(Duration::from_secs(10)),
    };
    let (tx, rx) = channel::<u32>(credit, Arc::new(AtomicWaker::new()));
    for _ in 0..20 {
        while tx
            .try_send(Event::Batch(Batch::Owned(vec![0; 100])))
            .is_ok()
        {}
        rx.try_recv();
    }
    while rx.try_recv().is_some() {}
    // 5 s per batch of 1024 would be over 4.8 ms per record.
    assert!(tx.batch_limit() >= 1024, "limit {}", tx.batch_limit());
    let mut out = NetOutput::new(vec![tx], OneTarget, cfg(1024));
    let records: Vec<u32> = (0..1024).collect();
    out.push(&mut records.clone()).unwrap();
    assert_eq!(drain(&mut out, &rx), vec![records]);
}

/// The table and the mask give the same owner as the key group arithmetic, for a
/// power-of-two number of key groups and for another.
#[test]
fn by_key_routes_each_key_to_its_key_groups_owner() {
    for max in [128usize, 100, 1] {
        for n in 1..=max.min(7) {
            let owners = crate::key_group::Owners::by_count(max, n);
            let mut router = ByKey::new(|x: &u64| *x, &owners, None);
            for key in 0..5_000u64 {
                let want = crate::key_group::subtask_for_key_group(key_group_of(&key, max), max, n);
                assert_eq!(Router::route(&mut router, &key), want, "{key} {max} {n}");
            }
        }
    }
}
