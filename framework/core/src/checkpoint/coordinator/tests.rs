use super::*;

fn cfg() -> CheckpointConfig {
    CheckpointConfig {
        interval: Some(Duration::from_millis(100)),
        timeout: Duration::from_millis(500),
        tolerable_failed_checkpoints: 1,
        ..CheckpointConfig::default()
    }
}

#[test]
fn completes_when_every_subtask_acked_once() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(&cfg(), 2, 1);
    let id = c.maybe_trigger(t0).unwrap();
    assert_eq!(c.maybe_trigger(t0), None, "max concurrent 1");
    assert!(c.ack(id, 0, AckPart::files(vec![]), t0).is_none());
    assert!(
        c.ack(id, 0, AckPart::files(vec![]), t0).is_none(),
        "duplicate"
    );
    let done = c
        .ack(
            id,
            1,
            AckPart {
                alignment: Duration::from_millis(3),
                taken: Taken::Aligned,
                ..AckPart::files(vec![])
            },
            t0 + Duration::from_millis(20),
        )
        .unwrap();
    assert_eq!((done.id, done.duration), (1, Duration::from_millis(20)));
    assert_eq!(
        c.stats.number_of_completed_checkpoints, 0,
        "until its metadata"
    );
    c.complete(&done, t0 + Duration::from_millis(20));
    assert_eq!(c.stats.number_of_completed_checkpoints, 1);
    assert_eq!(c.stats.checkpoint_alignment_time_ms, 3);
    assert_eq!(
        c.maybe_trigger(t0 + Duration::from_millis(50)),
        None,
        "interval"
    );
    assert_eq!(c.maybe_trigger(t0 + Duration::from_millis(100)), Some(2));
}

#[test]
fn the_start_delay_is_the_last_checkpoints_not_the_largest_ever() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let mut c = Coordinator::new(&cfg(), 1, 1);
    for (n, delay) in [(0u64, 50u64), (1, 2)] {
        let at = t0 + ms(100 * (n + 1));
        let id = c.maybe_trigger(at).unwrap();
        let part = AckPart {
            start_delay: ms(delay),
            ..AckPart::files(vec![])
        };
        let done = c.ack(id, 0, part, at).unwrap();
        c.complete(&done, at);
        assert_eq!(c.stats.checkpoint_start_delay_nanos, delay * 1_000_000);
    }
}

#[test]
fn a_late_tick_does_not_push_the_next_checkpoint_to_the_tick_after() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let mut c = Coordinator::new(&cfg(), 1, 1);
    let a = c.maybe_trigger(t0).unwrap();
    let done = c.ack(a, 0, AckPart::files(vec![]), t0).unwrap();
    c.complete(&done, t0);
    // Ticks every 100 ms, the second 5 ms late, the third 1 ms late.
    let b = c.maybe_trigger(t0 + ms(105)).unwrap();
    let done = c.ack(b, 0, AckPart::files(vec![]), t0 + ms(110)).unwrap();
    c.complete(&done, t0 + ms(110));
    assert_eq!(c.maybe_trigger(t0 + ms(201)), Some(b + 1));
    c.fail_one(b + 1, "x".into());
    // A tick more than an interval late (a checkpoint held it): the next is an interval on.
    assert_eq!(c.maybe_trigger(t0 + ms(450)), Some(b + 2));
    c.fail_one(b + 2, "x".into());
    assert_eq!(c.maybe_trigger(t0 + ms(500)), None);
    assert_eq!(c.maybe_trigger(t0 + ms(550)), Some(b + 3));
}

#[test]
fn timeouts_fail_checkpoints_and_too_many_fail_the_job() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(&cfg(), 1, 1);
    c.maybe_trigger(t0).unwrap();
    assert_eq!(c.timed_out(t0 + Duration::from_millis(400)), vec![]);
    let expired = c.timed_out(t0 + Duration::from_millis(600));
    assert_eq!(expired, vec![(1, "expired after 500ms".to_string())]);
    assert_eq!(
        c.fail_one(1, expired[0].1.clone()),
        Failed::Tolerated { in_a_row: 1 }
    );
    assert_eq!(c.fail_one(1, "again".into()), Failed::NotPending);
    c.maybe_trigger(t0 + Duration::from_millis(700)).unwrap();
    assert_eq!(
        c.fail_one(2, "expired".into()),
        Failed::TooMany { in_a_row: 2 }
    );
    assert_eq!(c.stats.number_of_failed_checkpoints, 2);
}

#[test]
fn a_checkpoint_whose_metadata_cannot_be_written_fails() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(&cfg(), 1, 1);
    let a = c.maybe_trigger(t0).unwrap();
    let done = c.ack(a, 0, AckPart::files(vec![]), t0).unwrap();
    assert_eq!(
        c.fail_one(done.id, "disk full".into()),
        Failed::Tolerated { in_a_row: 1 }
    );
    assert_eq!(c.stats.number_of_completed_checkpoints, 0);
    assert_eq!(c.stats.number_of_failed_checkpoints, 1);
    assert_eq!(c.stats.history[0].status, CheckpointStatus::Failed);
}

#[test]
fn failures_in_a_row_are_counted_per_deployment() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(&cfg(), 1, 1);
    let a = c.maybe_trigger(t0).unwrap();
    assert_eq!(
        c.fail_one(a, "disk".into()),
        Failed::Tolerated { in_a_row: 1 }
    );
    c.reset(1, a + 1, t0 + Duration::from_millis(200));
    let b = c.maybe_trigger(t0 + Duration::from_millis(300)).unwrap();
    assert_eq!(
        c.fail_one(b, "disk".into()),
        Failed::Tolerated { in_a_row: 1 },
        "a restart starts the count over"
    );
}

#[test]
fn the_history_keeps_the_last_checkpoints_with_their_outcome_and_the_summary_all() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let mut c = Coordinator::new(&cfg(), 1, 1);
    // 1 completes in 20 ms, 2 expires, 3 completes in 40 ms, then a savepoint (4).
    let a = c.maybe_trigger(t0).unwrap();
    let done = c
        .ack(
            a,
            0,
            AckPart {
                alignment: ms(2),
                taken: Taken::Aligned,
                ..AckPart::files(vec![])
            },
            t0 + ms(20),
        )
        .unwrap();
    c.complete(&done, t0 + ms(20));
    let b = c.maybe_trigger(t0 + ms(100)).unwrap();
    let expired = c.timed_out(t0 + ms(700));
    assert_eq!(expired.iter().map(|e| e.0).collect::<Vec<_>>(), vec![b]);
    assert_eq!(
        c.fail_one(b, expired[0].1.clone()),
        Failed::Tolerated { in_a_row: 1 }
    );
    let d = c.maybe_trigger(t0 + ms(800)).unwrap();
    let unaligned = AckPart {
        taken: Taken::Unaligned { persisted: 4_000 },
        vertex: "count".into(),
        subtask: 3,
        ..AckPart::files(vec![])
    };
    let done = c.ack(d, 0, unaligned, t0 + ms(840)).unwrap();
    c.complete(&done, t0 + ms(840));
    let sp = c.trigger_savepoint(t0 + ms(900));
    let h = &c.stats.history;
    let outcomes: Vec<(u64, CheckpointStatus, bool)> =
        h.iter().map(|r| (r.id, r.status, r.is_savepoint)).collect();
    assert_eq!(
        outcomes,
        [
            (a, CheckpointStatus::Completed, false),
            (b, CheckpointStatus::Failed, false),
            (d, CheckpointStatus::Completed, false),
            (sp, CheckpointStatus::InProgress, true),
        ]
    );
    assert_eq!(h[0].end_to_end_duration_ms, 20);
    assert_eq!(h[0].alignment_ms, 2);
    assert_eq!(h[0].num_acknowledged_subtasks, 1);
    assert!(h[1].failure_message.as_deref().unwrap().contains("expired"));
    let summary = c.stats.completed_summary.unwrap();
    assert_eq!(summary.count, 2);
    assert_eq!(
        summary.end_to_end_duration_ms,
        MinMaxAvg {
            min: 20,
            max: 40,
            avg: 30.0
        }
    );
    assert!(h[2].is_unaligned && h[2].persisted_data == 4_000);
    // Per subtask: who acknowledged, unaligned, with what in flight, 40 ms after the trigger.
    let part = &h[2].subtasks[..];
    assert_eq!(part.len(), 1);
    assert_eq!(
        (
            part[0].vertex.as_str(),
            part[0].subtask,
            part[0].unaligned,
            part[0].persisted_data,
            part[0].end_to_end_duration_ms
        ),
        ("count", 3, true, 4_000, 40)
    );
    assert_eq!(
        summary.persisted_data,
        MinMaxAvg {
            min: 0,
            max: 4_000,
            avg: 2_000.0
        }
    );
    for i in 0..(2 * HISTORY as u64) {
        c.trigger_savepoint(t0 + ms(1_000 + i));
    }
    assert_eq!(
        c.stats.history.len(),
        HISTORY,
        "only the last ones are kept"
    );
    assert_eq!(c.stats.history.last().unwrap().id, sp + 2 * HISTORY as u64);
}

/// A checkpoint that completes subsumes the older ones in progress, and says which: what
/// waits for them (a savepoint, a rescale) learns they will not complete.
#[test]
fn a_completed_checkpoint_names_the_older_ones_it_subsumes() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(&cfg(), 1, 1);
    let change = c.trigger_savepoint(t0);
    let savepoint = c.trigger_savepoint(t0);
    let done = c
        .ack(savepoint, 0, AckPart::files(vec![]), t0)
        .expect("its only subtask acked");
    assert_eq!(c.complete(&done, t0), vec![change]);
    // Nothing is left to subsume, nor to complete.
    assert!(c.ack(change, 0, AckPart::files(vec![]), t0).is_none());
}
