//! `answer_cleaning --window`: the windowed job's output lines (per level per event-time
//! window, read back from its exactly-once part files) against the sequential reference
//! (`reference_level_counts`), nothing missing or twice; its late answers equal the
//! reference's late set; at parallelism 1, 2 and 4; with a panic after two checkpoints
//! (restart from the checkpoint) and with a stop-with-savepoint and a restore, both while
//! windows are open (a window holds answers of both parts); and over 100 seeds of small
//! inputs with a random window, parallelism and fault (`WEIR_SEEDS`, `WEIR_SEED`).
//!
//! Determinism by construction: a record is late relative to the watermark at the window
//! operator, the minimum over its channels, which depends on timing. So the input comes in
//! two parts. Part 1 has only answers within the 5 s bound of every answer before them (on
//! time whatever the timing) and ends with answers at its highest time on every source
//! subtask. The source holds after part 1 until every window subtask's input watermark
//! (`current_input_watermark` in the job's metrics) has reached T1 = that time − 5 s. Part 2
//! has answers within the bound again, and answers far behind: in windows that end before T1,
//! late whatever the timing. The reference takes T1 as a known watermark and fails on any
//! answer whose fate the bounds do not decide. Faults fire on events (checkpoints the test
//! triggered once part 1 is in), never on the clock.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir::{Env, EnvConfig, JobHandle, Line, RestartStrategy};
use weir_examples::answers::{
    answer_json, cleaning_streams_of_lines, default_levels, read_part_files,
    reference_level_counts, uid, windowed_level_counts, KnownWatermark, LevelWindowCount, Levels,
    WindowReference, LATE_DIR, OUT_OF_ORDERNESS,
};
use weir_examples::rng::SplitMix64;
use weir_testing::{
    quiet_injected_panics, wait_for_checkpoint, Fault, FaultKind, FaultPlan, HeldIds, Hold,
};

/// Answers in all (a multiple of 8: every source subtask at parallelism 1, 2 or 4 holds after
/// the same line); part 2 starts at line `N / 2`. The seeded runs take fewer.
const N: usize = 8_000;
const T0: i64 = 1_700_000_000_000;
/// Event time advances this much per line (400 s a part).
const STEP_MS: i64 = 100;
/// Answers within the bound are up to this much behind their line's time.
const JITTER_MS: u64 = 3_000;

/// The input lines (`n` of them, a multiple of 8) and T1.
fn input(seed: u64, n: usize, window_ms: i64) -> (Vec<String>, i64) {
    assert_eq!(n % 8, 0);
    let part2 = n / 2;
    let bound = OUT_OF_ORDERNESS.as_millis() as i64;
    // The last four lines of part 1 are at its highest time, M1.
    let m1 = T0 + part2 as i64 * STEP_MS + 1_000;
    let t1 = m1 - bound;
    assert!(t1 - window_ms > T0, "room for far-behind answers");
    let lines = (0..n)
        .map(|i| {
            let mut r = SplitMix64::for_item(seed ^ 0x5eed, i as u64);
            let moves_watermark = (part2 - 4..part2).contains(&i);
            if i % 487 == 100 && !moves_watermark {
                return format!("{{not an answer {i}");
            }
            let mut a: Value = serde_json::from_str(&answer_json(seed, i as u64)).unwrap();
            let base = T0 + i as i64 * STEP_MS;
            let ts = if moves_watermark {
                a["content"] = Value::from("the answer that moves the watermark");
                m1
            } else if i >= part2 && i % 37 == 5 {
                // Far behind: a window that ended before T1.
                T0 + r.below((t1 - window_ms - T0) as u64) as i64
            } else {
                base - r.below(JITTER_MS) as i64
            };
            a["ts_ms"] = Value::from(ts as u64);
            a.to_string()
        })
        .collect();
    (lines, t1)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// No fault.
    Plain,
    /// The window operator panics at its first batch after two checkpoints (taken once part 1
    /// is in); the job restarts from the second.
    Panic,
    /// Stop with a savepoint once part 1 is in; a second job restores it and reads part 2.
    Savepoint,
    /// The window operator has a buffer-queue backup. Once part 1 is in, its primary panics
    /// at the snapshot of the first checkpoint; the backup restores the state the job
    /// started from and replays all of part 1 (watermarks included) with no restart.
    Promote,
}

/// What the job wrote: counts per (start, end, level), late ids (sorted), malformed lines
/// (sorted).
#[derive(Debug, PartialEq, Eq)]
struct Written {
    counts: BTreeMap<(i64, i64, String), u64>,
    late: Vec<u64>,
    malformed: Vec<String>,
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "weir-test-answer-windows-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The job: a held source of `lines` (subtask `i` of `p` reads lines `i, i + p, ...`, part 1
/// before its hold), then the windowed job's own operators.
fn build(env: &Env, lines: &Arc<Vec<String>>, p: usize, hold: &Hold, out: &Path, window: Duration) {
    let n = lines.len() as u64;
    let per = n / p as u64;
    let lines = lines.clone();
    let path: Arc<str> = Arc::from("<test answers>");
    let h = hold.clone();
    let source = env
        .add_source("answers", move |cx| Ok(HeldIds::new(cx, n, 0.5, h.clone())))
        .uid("held-answers")
        .set_parallelism(p)
        .map(move |id: u64| {
            // Subtask i has the ids [i * per, (i + 1) * per): its j-th is line j * p + i.
            let (i, j) = (id / per, id % per);
            let index = (j * p as u64 + i) as usize;
            Line {
                path: path.clone(),
                line: index as u64 + 1,
                byte_offset: 0,
                text: lines[index].clone().into(),
            }
        })
        .uid(uid::SOURCE)
        .set_parallelism(p);
    let (kept, malformed) = cleaning_streams_of_lines(env, source, &Levels::Builtin, p);
    windowed_level_counts(kept, malformed, out, p, window);
}

/// Waits until every window subtask's input watermark is at least `t1` (an event; the
/// deadline only keeps a broken job from hanging the test).
fn wait_for_watermark(job: &JobHandle, p: usize, t1: i64) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(m) = job.monitor().metrics() {
            let marks: Vec<Option<i64>> = m
                .subtasks
                .iter()
                .filter(|s| s.head_uid == uid::WINDOW)
                .map(|s| s.current_input_watermark)
                .collect();
            if marks.len() == p && marks.iter().all(|w| w.is_some_and(|w| w >= t1)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the window's watermark never reached {t1}: {marks:?}"
            );
        }
        assert!(
            !job.is_finished(),
            "the job ended while its source was held"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn config(dir: &Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.metrics_interval = Duration::from_millis(10);
    cfg.checkpoint.directory = dir.join("checkpoints");
    cfg
}

fn run(lines: &[String], t1: i64, p: usize, window: Duration, mode: Mode, name: &str) -> Written {
    let dir = fresh_dir(name);
    let out = dir.join("out");
    let lines = Arc::new(lines.to_vec());
    let mut cfg = config(&dir);
    let plan = FaultPlan::new(vec![
        Fault::new(uid::WINDOW, FaultKind::Panic, 0).after_checkpoints(2)
    ]);
    let snapshot_plan = FaultPlan::new(vec![Fault::new(uid::WINDOW, FaultKind::Panic, 0)
        .after_checkpoints(0)
        .at_snapshot()]);
    if mode == Mode::Promote {
        cfg.faults = snapshot_plan.clone();
        common::promote_only(&mut cfg);
        cfg.backups
            .insert(uid::WINDOW.to_owned(), common::replaying_backup());
    }
    if mode == Mode::Panic {
        cfg.faults = plan.clone();
        cfg.restart = Some(RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::ZERO,
        });
    }
    let env = Env::with_config(cfg);
    let hold = Hold::new();
    build(&env, &lines, p, &hold, &out, window);
    let job = env.start("answer-windows").expect("the job starts");
    wait_for_watermark(&job, p, t1);
    match mode {
        Mode::Plain => {
            hold.release();
            job.wait().expect("the job runs");
        }
        Mode::Panic => {
            // Part 1 is in and nothing more comes: both checkpoints hold the window's
            // watermark at T1 or above, and the fault fires on part 2.
            for k in 1..=2 {
                job.monitor().trigger_checkpoint().expect("a checkpoint");
                wait_for_checkpoint(&job, k, Duration::from_secs(120)).expect("it completes");
            }
            hold.release();
            job.wait().expect("the job recovers and ends");
            assert_eq!(plan.fired(), 1, "the fault fired");
        }
        Mode::Promote => {
            job.monitor().trigger_checkpoint().expect("a checkpoint");
            common::wait_until("the fault fired", || snapshot_plan.fired() > 0);
            hold.release();
            let result = job.wait().expect("the job ends without a restart");
            assert!(
                common::promotions(&result) >= 1,
                "the window operator's backup was promoted"
            );
        }
        Mode::Savepoint => {
            let (savepoint, _) = job
                .stop_with_savepoint(dir.join("savepoint"))
                .expect("a savepoint");
            let mut cfg = config(&dir);
            cfg.checkpoint.restore_from = Some(savepoint);
            let env = Env::with_config(cfg);
            let hold = Hold::new();
            hold.release();
            build(&env, &lines, p, &hold, &out, window);
            env.execute("answer-windows-restored")
                .expect("the restored job runs");
        }
    }
    let written = read_written(&out);
    let _ = std::fs::remove_dir_all(&dir);
    written
}

fn read_written(out: &Path) -> Written {
    let mut counts = BTreeMap::new();
    for line in read_part_files(out, uid::WINDOW_SINK).unwrap() {
        let c: LevelWindowCount = line.parse().unwrap();
        let key = (c.window_start_ms, c.window_end_ms, c.level.to_string());
        assert!(
            counts.insert(key.clone(), c.count).is_none(),
            "window {key:?} written twice"
        );
    }
    let late_dir = out.join(LATE_DIR);
    let mut late: Vec<u64> = if late_dir.is_dir() {
        read_part_files(&late_dir, uid::LATE)
            .unwrap()
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    } else {
        Vec::new()
    };
    late.sort_unstable();
    let mut malformed: Vec<String> = read_part_files(out, uid::MALFORMED)
        .unwrap()
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["line"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    malformed.sort();
    Written {
        counts,
        late,
        malformed,
    }
}

fn reference(lines: &[String], t1: i64, window: Duration) -> WindowReference {
    let known = [KnownWatermark {
        before_line: lines.len() / 2,
        at_least: t1,
    }];
    reference_level_counts(lines, &default_levels(), window, &known)
        .expect("the input decides every answer's lateness")
}

/// Whether a window the reference counts has answers from both parts: it was open when
/// part 1 was in (where the faults come).
fn open_across_the_parts(lines: &[String], window: Duration) -> bool {
    let size = window.as_millis() as i64;
    let windows = |part: &[String]| {
        part.iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|a| a["ts_ms"].as_i64())
            .map(|t| t - t.rem_euclid(size))
            .collect::<std::collections::BTreeSet<i64>>()
    };
    let (first, second) = lines.split_at(lines.len() / 2);
    !windows(first).is_disjoint(&windows(second))
}

fn check(seed: u64, p: usize, window: Duration, mode: Mode) {
    let (lines, t1) = input(seed, N, window.as_millis() as i64);
    let want = reference(&lines, t1, window);
    assert!(want.late.len() > 50, "the input has late answers");
    assert!(want.malformed.len() > 10, "the input has malformed lines");
    assert!(want.counts.len() > 5, "several windows");
    check_run(&lines, t1, &want, seed, p, window, mode);
}

fn check_run(
    lines: &[String],
    t1: i64,
    want: &WindowReference,
    seed: u64,
    p: usize,
    window: Duration,
    mode: Mode,
) {
    assert!(
        open_across_the_parts(lines, window),
        "a window is open when part 1 is in"
    );
    let name = format!("{seed}-{p}-{}-{mode:?}-{}", window.as_millis(), lines.len());
    let got = run(lines, t1, p, window, mode, &name);
    let what = format!("seed {seed}, p={p}, window {window:?}, {mode:?}");
    assert_eq!(got.late, want.late, "{what}: the late set");
    assert_eq!(got.malformed, want.malformed, "{what}: malformed lines");
    if got.counts != want.counts {
        let missing: Vec<_> = want
            .counts
            .iter()
            .filter(|(w, n)| got.counts.get(*w) != Some(n))
            .take(5)
            .collect();
        let extra: Vec<_> = got
            .counts
            .iter()
            .filter(|(w, n)| want.counts.get(*w) != Some(n))
            .take(5)
            .collect();
        panic!("{what}: want {missing:?}, got {extra:?}");
    }
}

#[test]
fn windowed_counts_equal_the_reference_at_parallelism_one_two_and_four() {
    for p in [1, 2, 4] {
        for seed in [1, 2] {
            check(seed, p, Duration::from_secs(60), Mode::Plain);
        }
    }
    check(3, 2, Duration::from_secs(7), Mode::Plain);
}

#[test]
fn windowed_counts_survive_a_panic_after_two_checkpoints() {
    quiet_injected_panics();
    for p in [1, 2, 4] {
        check(11, p, Duration::from_secs(60), Mode::Panic);
    }
}

#[test]
fn windowed_counts_survive_a_promotion_of_the_window_operator_s_backup() {
    quiet_injected_panics();
    for p in [1, 2, 4] {
        check(31, p, Duration::from_secs(60), Mode::Promote);
    }
}

#[test]
fn windowed_counts_survive_a_stop_with_savepoint_and_a_restore() {
    for p in [1, 2, 4] {
        check(21, p, Duration::from_secs(60), Mode::Savepoint);
    }
    check(22, 2, Duration::from_secs(7), Mode::Savepoint);
}

/// 100 seeds (`WEIR_SEEDS=1000` for more, `WEIR_SEED=17` for one): a small input (400 to
/// 1,200 answers), a window of 5, 7 or 10 s, parallelism 1, 2 or 4, and no fault, a panic
/// after two checkpoints, or a stop with a savepoint and a restore, each at random.
#[test]
fn windowed_counts_equal_the_reference_over_many_seeds() {
    quiet_injected_panics();
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.parse::<u64>().expect(name))
    };
    let seeds: Vec<u64> = match var("WEIR_SEED") {
        Some(s) => vec![s],
        None => (0..var("WEIR_SEEDS").unwrap_or(100)).collect(),
    };
    let mut late = 0;
    for &seed in &seeds {
        let mut r = SplitMix64::new(seed ^ 0xa115_3ed5);
        let n = 8 * r.range(50, 150) as usize;
        let window = Duration::from_secs([5, 7, 10][r.below(3) as usize]);
        let p = [1, 2, 4][r.below(3) as usize];
        let mode = [Mode::Plain, Mode::Panic, Mode::Savepoint][r.below(3) as usize];
        let (lines, t1) = input(seed, n, window.as_millis() as i64);
        let want = reference(&lines, t1, window);
        late += want.late.len();
        eprintln!(
            "seed {seed} (WEIR_SEED={seed}): {n} answers, p={p}, window {window:?}, {mode:?}"
        );
        check_run(&lines, t1, &want, seed, p, window, mode);
    }
    assert!(
        seeds.len() < 20 || late > 100,
        "the inputs have late answers: {late}"
    );
}
