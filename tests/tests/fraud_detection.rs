//! The fraud-detection tutorial job (`weir_examples::fraud`) under its drill: per-card keyed
//! state with a TTL, thresholds changed live, a panic, a hang and a lost arbiter each
//! injected once a checkpoint completed; the alerts must equal the sequential reference at
//! parallelism 1, 2 and 4, and the checkpointed state stays far below one entry per card.
//! (The example runs the same drill on 10M transactions in release builds.)

mod common;

use std::time::Duration;

use common::{within_timeout, TempDir};
use weir_examples::fraud::drill::{run, Drill};
use weir_examples::fraud::Thresholds;
use weir_testing::{quiet_injected_panics, quiet_released_hangs, FaultKind};

fn drill(name: &str, parallelism: usize) {
    quiet_injected_panics();
    quiet_released_hangs();
    let dir = TempDir::new(name);
    let d = Drill {
        transactions: 120_000,
        cards: 20_000,
        seed: 7 + parallelism as u64,
        parallelism,
        faults: vec![FaultKind::Panic, FaultKind::Hang, FaultKind::StopArbiter],
        change_to: Some(Thresholds {
            large_cents: 30_000,
            ..Thresholds::default()
        }),
        checkpoint_interval: Duration::from_millis(20),
        checkpoint_dir: dir.path().to_owned(),
    };
    let report = within_timeout(move || run(&d)).expect("the drill runs");
    assert_eq!(report.faults_fired, 3, "{report:?}");
    assert!(report.promotions + report.restarts >= 3, "{report:?}");
    assert!(report.changed_at.is_some(), "{report:?}");
    assert!(report.alerts > 0, "{report:?}");
    assert!(report.matches_reference(), "{report:?}");
    // Only cards whose last transaction was small hold a flag (3 %): the whole checkpoint
    // (flags, the sink's staged alerts, positions) stays under 8 bytes per card, where one
    // entry per card would take more than 10 (a CBOR key and a slot) on its own.
    assert!(report.last_checkpoint_size > 0, "{report:?}");
    assert!(
        report.last_checkpoint_size < 20_000 * 8,
        "state of {} bytes for 20,000 cards: {report:?}",
        report.last_checkpoint_size
    );
}

#[test]
fn alerts_equal_the_reference_at_parallelism_1_under_faults_and_a_live_change() {
    drill("fraud-p1", 1);
}

#[test]
fn alerts_equal_the_reference_at_parallelism_2_under_faults_and_a_live_change() {
    drill("fraud-p2", 2);
}

#[test]
fn alerts_equal_the_reference_at_parallelism_4_under_faults_and_a_live_change() {
    drill("fraud-p4", 4);
}
