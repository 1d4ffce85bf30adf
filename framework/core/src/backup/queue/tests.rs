use super::*;

fn q(stateful: bool) -> BufferQueue<u64> {
    BufferQueue::new(2, 1, stateful, 1 << 20, None)
}

#[test]
fn offer_after_claim_is_filtered_and_before_claim_is_added() {
    let q = q(false);
    assert_eq!(q.claim(0, (0, 0), &10, 1, 8, &[0]), Ok(0));
    assert_eq!(q.offer((0, 0), 10, 1, 8), Offer::Filtered);
    assert_eq!(q.offer((0, 1), 11, 1, 8), Offer::Added);
    assert_eq!(q.claim(0, (0, 1), &11, 1, 8, &[1]), Ok(1));
    // Step 0 is released (its output got through); a late offer is still filtered.
    assert_eq!(q.stats().entries, 1);
    assert_eq!(q.offer((0, 0), 10, 1, 8), Offer::Filtered);
    assert_eq!(q.stats().entries, 1);
}

#[test]
fn stateless_replay_starts_at_the_first_step_not_through() {
    let q = q(false);
    q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
    q.claim(0, (1, 0), &20, 1, 8, &[2]).unwrap();
    q.claim(0, (0, 1), &11, 1, 8, &[3]).unwrap();
    q.offer((1, 1), 21, 1, 8);
    q.fence();
    // Step 2 emitted from position 3; the downstream has 3 records: replay step 2, then
    // the batch only the backup had.
    let plan = q.replay_plan(&[3]).unwrap();
    let ids: Vec<BatchId> = plan.batches().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![(0, 1), (1, 1)]);
    assert_eq!(&*plan.positions, &[3]);
    assert_eq!(plan.reprocessed, 1);
    assert!(plan.restore.is_none());
}

#[test]
fn stateful_replay_starts_at_the_checkpoint() {
    let q = q(true);
    q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
    q.claim(0, (0, 1), &11, 1, 8, &[1]).unwrap();
    let step = q.next_step();
    q.settle(0, &[2]);
    q.checkpoint_complete(0, restart(1, step, 2, 7)).unwrap();
    assert_eq!(
        q.stats().entries,
        0,
        "steps before the checkpoint are released"
    );
    q.claim(0, (0, 2), &12, 1, 8, &[2]).unwrap();
    q.claim(0, (0, 3), &13, 1, 8, &[3]).unwrap();
    q.settle(0, &[4]);
    assert_eq!(q.stats().entries, 2, "steps after the checkpoint are kept");
    q.fence();
    let plan = q.replay_plan(&[4]).unwrap();
    assert_eq!(plan.restore, Some((1, Restored::Payload(vec![7]))));
    assert_eq!(&*plan.positions, &[2]);
    let ids: Vec<BatchId> = plan.batches().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![(0, 2), (0, 3)]);
}

#[test]
fn a_failure_during_a_replay_replays_the_rest_in_order() {
    let q = q(true);
    for (k, id) in [(0, 0), (0, 1), (1, 0), (0, 2)].into_iter().enumerate() {
        q.claim(0, id, &(k as u64), 1, 8, &[k as u64]).unwrap();
    }
    q.offer((1, 1), 9, 1, 8);
    q.fence();
    let first = q.replay_plan(&[3]).unwrap();
    let ids = |p: &ReplayPlan<u64>| p.batches().map(|(id, _)| *id).collect::<Vec<_>>();
    assert_eq!(ids(&first), vec![(0, 0), (0, 1), (1, 0), (0, 2), (1, 1)]);
    assert!(q.is_replaying());
    // The promoted primary processes two of them again, then fails too.
    q.claim(1, (0, 0), &0, 1, 8, &[0]).unwrap();
    q.claim(1, (0, 1), &1, 1, 8, &[1]).unwrap();
    q.fence();
    let second = q.replay_plan(&[2]).unwrap();
    assert_eq!(ids(&second), ids(&first), "nothing dropped, same order");
    assert_eq!(second.reprocessed, 2);
    // The third primary gets through them all.
    for (k, (id, _)) in second.batches().enumerate() {
        q.claim(2, *id, &0, 1, 8, &[k as u64]).unwrap();
    }
    assert!(!q.is_replaying());
}

#[test]
fn a_replay_takes_the_watermarks_where_the_primary_took_them() {
    use crate::time::Watermark::{At, Idle};
    let q = q(true);
    q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
    q.log(0, Input::Mark(0, At(5)), &[1]).unwrap();
    // The processing time the primary was told: replayed in its place too.
    q.log(0, Input::Time(77), &[1]).unwrap();
    q.claim(0, (1, 0), &20, 1, 8, &[1]).unwrap();
    q.log(0, Input::Mark(1, Idle), &[2]).unwrap();
    q.log(0, Input::End(1), &[2]).unwrap();
    // Only the backup saw these: a watermark of channel 0 before its batch 2, which
    // comes before batch 1 (also only the backup's) in position order... per channel.
    q.offer((0, 1), 11, 1, 8);
    q.offer_mark(0, 2, At(9));
    q.offer((0, 2), 12, 1, 8);
    q.fence();
    let plan = q.replay_plan(&[2]).unwrap();
    let order: Vec<String> = plan
        .items
        .iter()
        .map(|i| match i {
            Item::Batch(id, _) => format!("b{}.{}", id.0, id.1),
            Item::Mark(c, At(t)) => format!("m{c}@{t}"),
            Item::Mark(c, Idle) => format!("m{c}idle"),
            Item::End(c) => format!("e{c}"),
            Item::Time(t) => format!("t{t}"),
        })
        .collect();
    assert_eq!(
        order,
        ["b0.0", "m0@5", "t77", "b1.0", "m1idle", "e1", "b0.1", "m0@9", "b0.2"],
        "the primary's steps in its order, then the backup's per channel"
    );
    assert_eq!(plan.reprocessed, 2);
    // The new primary takes them again, in order: the replay is done.
    let epoch = 1;
    q.claim(epoch, (0, 0), &10, 1, 8, &[0]).unwrap();
    q.log(epoch, Input::Mark(0, At(5)), &[1]).unwrap();
    q.log(epoch, Input::Time(77), &[1]).unwrap();
    q.claim(epoch, (1, 0), &20, 1, 8, &[1]).unwrap();
    q.log(epoch, Input::Mark(1, Idle), &[2]).unwrap();
    q.log(epoch, Input::End(1), &[2]).unwrap();
    q.claim(epoch, (0, 1), &11, 1, 8, &[2]).unwrap();
    assert!(q.is_replaying());
    q.log(epoch, Input::Mark(0, At(9)), &[3]).unwrap();
    q.claim(epoch, (0, 2), &12, 1, 8, &[3]).unwrap();
    assert!(!q.is_replaying());
}

#[test]
fn a_watermark_before_a_claimed_batch_is_not_replayed_from_the_backup() {
    use crate::time::Watermark::At;
    let q = q(false);
    q.offer_mark(0, 0, At(1));
    q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
    // The primary took the watermark before batch 0; the next offer drops it.
    q.offer_mark(0, 1, At(2));
    assert_eq!(lock(&q.marks).len(), 1);
    q.fence();
    let plan = q.replay_plan(&[0]).unwrap();
    assert!(matches!(
        plan.items.as_slice(),
        [Item::Batch((0, 0), _), Item::Mark(0, At(2))]
    ));
}

fn restart(checkpoint: u64, step: u64, position: u64, state: u8) -> Restart {
    Restart {
        checkpoint,
        step,
        positions: vec![position].into(),
        state: Some(StateCopy::Encoded(vec![state])),
        marks: None,
    }
}

#[test]
fn a_fenced_primary_cannot_hand_its_state() {
    let q = q(true);
    q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
    q.settle(0, &[1]);
    q.checkpoint_complete(0, restart(1, q.next_step(), 1, 7))
        .unwrap();
    // The old primary claims and processes (0, 1); then it is fenced and the new one
    // restarts from checkpoint 1, replaying (0, 1).
    q.claim(0, (0, 1), &11, 1, 8, &[1]).unwrap();
    q.fence();
    let plan = q.replay_plan(&[1]).unwrap();
    assert_eq!(plan.restore, Some((1, Restored::Payload(vec![7]))));
    // The old primary, woken, hands over its state (which has (0, 1) in it) at the
    // new log's next step: refused.
    let zombie = restart(0, q.next_step(), 2, 9);
    assert_eq!(q.checkpoint_complete(0, zombie), Err(Fenced { epoch: 1 }));
    q.claim(1, (0, 1), &11, 1, 8, &[1]).unwrap();
    q.settle(1, &[2]);
    // A second promotion still restarts from checkpoint 1 and replays (0, 1) once.
    q.fence();
    let plan = q.replay_plan(&[2]).unwrap();
    assert_eq!(plan.restore, Some((1, Restored::Payload(vec![7]))));
    let ids: Vec<BatchId> = plan.batches().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![(0, 1)]);
    // The current primary's handoff is taken.
    q.claim(2, (0, 1), &11, 1, 8, &[1]).unwrap();
    q.settle(2, &[2]);
    q.checkpoint_complete(2, restart(0, q.next_step(), 2, 8))
        .unwrap();
    q.fence();
    let plan = q.replay_plan(&[2]).unwrap();
    assert_eq!(plan.restore, Some((0, Restored::Payload(vec![8]))));
    assert_eq!(plan.batches().count(), 0);
}

#[test]
fn a_fenced_primary_cannot_claim() {
    let q = q(false);
    q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
    assert_eq!(q.fence(), 1);
    assert_eq!(
        q.claim(0, (0, 1), &11, 1, 8, &[1]),
        Err(Fenced { epoch: 1 })
    );
    assert_eq!(q.claim(1, (0, 1), &11, 1, 8, &[1]), Ok(1));
}

#[test]
fn full_queue_degrades_and_keeps_nothing() {
    let q: BufferQueue<u64> = BufferQueue::new(1, 1, true, 20, None);
    assert_eq!(q.offer((0, 0), 1, 1, 8), Offer::Added);
    assert_eq!(q.offer((0, 1), 1, 1, 8), Offer::Added);
    assert!(!q.is_degraded());
    q.offer((0, 2), 1, 1, 8);
    assert!(q.is_degraded());
    assert_eq!(q.stats().entries, 0);
    assert_eq!(q.offer((0, 3), 1, 1, 8), Offer::Dropped);
    q.fence();
    assert!(
        q.replay_plan(&[0]).is_none(),
        "a degraded queue cannot promote"
    );
}
