//! Nexmark queries whose main stateful operator has a buffer-queue backup, promoted
//! mid-window: each query's results equal its reference, with the reference's late count, and
//! the job never restarts.
//!
//! The backup is set by uid in the config (`EnvConfig::backups`), so the queries run as they
//! are. The faults are events, not times. The sources hold all their events until
//! checkpoint 1 (the backup's restart point) completed, then send half; checkpoint 2 comes
//! after that half, and the operator's primary panics at its snapshot. The backup restores
//! checkpoint 1 and replays the whole first half, watermarks included, with windows, joins
//! and timers open; then the sources send the rest.

mod common;
#[path = "common/shuffled.rs"]
mod shuffled;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::source::{Source, SourceContext, SourceStatus, SourceWaker};
use weir::{Env, EnvConfig, SourceError};
use weir_nexmark::queries::{self, Query, QueryVisitor, SOURCE_UID};
use weir_nexmark::reference::Timeline;
use weir_nexmark::{Event, GeneratorConfig, NexmarkSource};
use weir_testing::{Fault, FaultKind, FaultPlan};

/// A Nexmark source that holds (idle) as its stage says: 0, before its first event; 1, with
/// half its share out; 2, not at all.
struct HalfHeld {
    inner: NexmarkSource,
    share: u64,
    stage: Arc<AtomicU8>,
    wakers: Arc<Mutex<Vec<SourceWaker>>>,
}

/// Sets the sources' stage and wakes them.
fn set_stage(stage: &AtomicU8, wakers: &Mutex<Vec<SourceWaker>>, to: u8) {
    stage.store(to, Ordering::SeqCst);
    for w in wakers.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        w.wake();
    }
}

impl Source<Event> for HalfHeld {
    fn set_waker(&mut self, waker: SourceWaker) {
        self.wakers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(waker);
    }
    fn poll_batch(
        &mut self,
        out: &mut Vec<Event>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        let hold_at = match self.stage.load(Ordering::SeqCst) {
            0 => self.share,
            1 => self.share / 2,
            _ => 0,
        };
        let remaining = self.inner.remaining();
        if remaining > hold_at {
            let n = (remaining - hold_at).min(max as u64) as usize;
            return self.inner.poll_batch(out, n);
        }
        if remaining == 0 {
            return self.inner.poll_batch(out, max);
        }
        Ok(SourceStatus::Idle {
            until: Some(Duration::from_millis(50)),
        })
    }
    fn position(&self) -> Option<Vec<u8>> {
        self.inner.position()
    }
    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        self.inner.seek(position)
    }
}

struct Promoted {
    config: GeneratorConfig,
    parallelism: usize,
}

impl QueryVisitor for Promoted {
    type Output = ();

    fn visit<Q: Query>(self, query: Q) {
        let Promoted {
            config,
            parallelism,
        } = self;
        let uid = query.operator_uids()[0];
        let what = format!(
            "{} at parallelism {parallelism} over {config:?}, `{uid}` backed up",
            query.name()
        );
        let dir = common::TempDir::new("nexmark-backup");
        let mut cfg = EnvConfig::default();
        cfg.default_parallelism = parallelism;
        cfg.batch_size = 64;
        common::promote_only(&mut cfg);
        cfg.checkpoint.directory = dir.path().to_owned();
        cfg.backups
            .insert(uid.to_owned(), common::replaying_backup());
        let plan = FaultPlan::new(vec![Fault::new(uid, FaultKind::Panic, 0)
            .after_checkpoints(1)
            .at_snapshot()]);
        cfg.faults = plan.clone();
        cfg.metrics_interval = Duration::from_millis(10);
        weir_testing::quiet_injected_panics();
        let env = Env::with_config(cfg);
        let stage = Arc::new(AtomicU8::new(0));
        let wakers: Arc<Mutex<Vec<SourceWaker>>> = Arc::default();
        let (c, st, w) = (config.clone(), stage.clone(), wakers.clone());
        let events = env
            .add_source_with_watermarks(
                "nexmark",
                move |cx: SourceContext| {
                    let inner = c.source(cx).map_err(|e| SourceError::Setup {
                        source: Box::new(e),
                    })?;
                    let share = inner.remaining();
                    Ok(HalfHeld {
                        inner,
                        share,
                        stage: st.clone(),
                        wakers: w.clone(),
                    })
                },
                weir_nexmark::watermarks(),
            )
            .uid(SOURCE_UID);
        let collected = weir::CollectSink::default();
        query.build(events).collect_into(&collected).uid("collect");
        let job = env.start(query.name()).expect("the job starts");
        common::trigger_checkpoints(&job, 1);
        set_stage(&stage, &wakers, 1);
        // Checkpoint 2's barrier follows the first half; the operator fails at its snapshot.
        let half = config.events / 2 - parallelism as u64;
        common::wait_until(&format!("{what}: half the events out"), || {
            job.metrics()
                .and_then(|m| m.operator(SOURCE_UID).map(|o| o.num_records_out))
                .unwrap_or(0)
                >= half
        });
        job.monitor()
            .trigger_checkpoint()
            .unwrap_or_else(|e| panic!("{what}: no checkpoint 2: {e}"));
        common::wait_until(&format!("{what}: the fault fired"), || plan.fired() > 0);
        set_stage(&stage, &wakers, 2);
        let result = common::within_timeout(move || job.wait())
            .unwrap_or_else(|e| panic!("{what}: the job failed: {e}"));

        assert_eq!(plan.fired(), 1, "{what}: the fault fired");
        assert!(common::promotions(&result) >= 1, "{what}: promoted");
        // A stateful operator's replay went back to checkpoint 1, before the first half (a
        // stateless one's, q0 to q2, starts where its downstream's input ends).
        let reprocessed: u64 = result.backups.iter().map(|b| b.last_reprocessed).sum();
        eprintln!("{what}: {reprocessed} batches reprocessed");
        if !["q0", "q1", "q2"].contains(&query.name()) {
            assert!(
                reprocessed >= 1,
                "{what}: the backup reprocessed the first half"
            );
        }
        let expected = query.reference(&Timeline::new(config.events()));
        shuffled::assert_equals_reference(&what, &query, collected.take(), &expected, &result);
    }
}

#[test]
fn every_query_equals_its_reference_after_a_promotion_mid_window() {
    let configs = [
        GeneratorConfig::new(6_000),
        // Events spread over seconds: windows open and close through the run.
        GeneratorConfig::new(4_999)
            .with_first_event_rate(1_000)
            .with_base_time(1_500_000_000_123),
    ];
    for (k, name) in shuffled::implemented().into_iter().enumerate() {
        for parallelism in [1, 2] {
            let config = configs[(k + parallelism) % configs.len()].clone();
            queries::visit(
                name,
                Promoted {
                    config,
                    parallelism,
                },
            )
            .expect("an implemented query");
        }
    }
}
