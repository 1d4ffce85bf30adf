//! The report and the checks of `results.json` on made-up results (the experiments
//! themselves are run by `.ci/run`'s `paper --quick`).

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::proc::{Machine, Sample};
use crate::results::*;
use crate::{report, validate::validate};

fn sample(t_s: f64) -> Sample {
    Sample {
        t_s,
        cpu_ticks: (t_s * 100.0) as u64,
        rss_bytes: 10 << 20,
        hwm_bytes: 12 << 20,
    }
}

fn latency_run(records: u64, backup: bool) -> LatencyRun {
    LatencyRun {
        records,
        backup,
        checkpoint_interval_ms: 1_000,
        checkpoints_completed: 0,
        rep: 0,
        seconds: 0.5,
        records_per_sec: records as f64 / 0.5,
        latency_p50_ms: if backup { 4.4 } else { 2.4 },
        latency_p95_ms: Some(5.0),
        latency_p99_ms: 6.0,
        latency_max_ms: 7.0,
        reported_peak_rss_bytes: 9 << 20,
        peak_rss_bytes: 12 << 20,
        steady_rss_bytes: 10 << 20,
        cpu_mean_pct_core: 110.0,
        wall_s: 0.6,
        command: "target/release/etl --input x".into(),
        samples: vec![sample(0.0), sample(0.05)],
    }
}

fn latency_row(records: u64, backup: bool) -> LatencyRow {
    let r = latency_run(records, backup);
    LatencyRow {
        records,
        backup,
        checkpoint_interval_ms: 1_000,
        runs: 1,
        latency_p50_ms: r.latency_p50_ms,
        latency_p95_ms: r.latency_p95_ms,
        latency_p99_ms: r.latency_p99_ms,
        latency_max_ms: r.latency_max_ms,
        records_per_sec: r.records_per_sec,
        seconds: r.seconds,
        peak_rss_bytes: r.peak_rss_bytes,
        steady_rss_bytes: r.steady_rss_bytes,
        cpu_mean_pct_core: r.cpu_mean_pct_core,
    }
}

fn recovery_run(mode: &str) -> RecoveryRun {
    let each = vec![400.0, 420.0, 380.0, 410.0];
    RecoveryRun {
        mode: mode.into(),
        rep: 0,
        cumulative_ms: crate::analysis::cumulative(&each),
        recovery_ms_each: each,
        duplicates: 0,
        missing: 0,
        unexpected: 0,
        wrong_lines: 0,
        faults_fired: 4,
        promotions: if mode == "bqbs" { 4 } else { 0 },
        restarts: if mode == "bqbs" { 0 } else { 4 },
        last_failover_ms: (mode == "bqbs").then_some(2.0),
        redeploy_ms: (mode != "bqbs").then_some(20.0),
        total_seconds: 3.0,
        job_start_s: 0.7,
        job_end_s: 3.7,
        anchor: "test".into(),
        fault_times_s: vec![1.0, 1.5, 2.0, 2.5],
        fault_line_skew_ms: Some(1.0),
        failure_windows_s: vec![(1.0, 1.4)],
        cpu_normal_pct_core: 120.0,
        cpu_failure_pct_core: 130.0,
        peak_rss_bytes: 100 << 20,
        steady_rss_bytes: 90 << 20,
        wall_s: 4.5,
        command: format!("target/release/recovery --mode {mode}"),
        samples: vec![sample(0.0), sample(0.05)],
        raw: json!({}),
    }
}

fn recovery_row(mode: &str) -> RecoveryRow {
    let r = recovery_run(mode);
    RecoveryRow {
        mode: mode.into(),
        runs: 1,
        recovery_ms_each: r.recovery_ms_each,
        cumulative_ms: r.cumulative_ms,
        duplicates: 0,
        missing: 0,
        cpu_normal_pct_core: 120.0,
        cpu_failure_pct_core: 130.0,
        peak_rss_bytes: r.peak_rss_bytes,
        steady_rss_bytes: r.steady_rss_bytes,
        last_failover_ms: r.last_failover_ms,
        redeploy_ms: r.redeploy_ms,
    }
}

fn fixture() -> Results {
    Results {
        schema: SCHEMA,
        quick: true,
        date_utc: "2026-01-01 00:00:00 UTC".into(),
        wall_seconds: 30.0,
        git_commit: "abc".into(),
        git_dirty: false,
        machine: Machine {
            cpu_model: "Test CPU".into(),
            logical_cpus: 2,
            available_parallelism: 2,
            mem_total_bytes: 24 << 30,
            os: "Test OS".into(),
            kernel: "6".into(),
            rustc: "rustc".into(),
            clk_tck: 100,
        },
        invocation: "cargo run --release -p weir-paper --bin paper -- --quick".into(),
        sampling_interval_ms: 50,
        latency: Latency {
            sizes: vec![100_000],
            repeats: 1,
            checkpointing: "every 1 s".into(),
            checkpoint_intervals_ms: vec![1_000],
            runs: vec![latency_run(100_000, false), latency_run(100_000, true)],
            summary: vec![latency_row(100_000, false), latency_row(100_000, true)],
            overhead: vec![LatencyOverhead {
                records: 100_000,
                checkpoint_interval_ms: 1_000,
                p50_pct: 83.0,
                p99_pct: 0.0,
                seconds_pct: 1.0,
                throughput_pct: -1.0,
            }],
        },
        recovery: Recovery {
            records: 200_000,
            failures: 4,
            kind: "panic".into(),
            checkpoint_interval_ms: 1000,
            repeats: 1,
            failure_window: "test".into(),
            failure_window_min_ms: 100.0,
            runs: vec![recovery_run("restart-all"), recovery_run("bqbs")],
            summary: vec![recovery_row("restart-all"), recovery_row("bqbs")],
            bqbs_over_restart_all_first: 1.0,
            bqbs_over_restart_all_cumulative: 1.0,
        },
        cpu: Cpu {
            logical_cpus: 2,
            definition: "cpu".into(),
            rows: vec![CpuRow {
                what: "recovery, 200000 records, 4 faults".into(),
                mode: "bqbs".into(),
                normal_pct_core: 120.0,
                failure_pct_core: Some(130.0),
                normal_pct_machine: 60.0,
                failure_pct_machine: Some(65.0),
            }],
        },
        memory: Memory {
            mem_total_bytes: 24 << 30,
            definition: "mem".into(),
            rows: vec![MemRow {
                what: "recovery".into(),
                mode: "bqbs".into(),
                peak_rss_bytes: 100 << 20,
                steady_rss_bytes: 90 << 20,
                peak_pct_mem: 0.4,
                steady_pct_mem: 0.36,
            }],
        },
        criticality: Criticality {
            faults: 3,
            records: 100_000,
            checkpoint_interval_ms: 100,
            ranking: vec![CritRow {
                rank: 1,
                uid: "flat_map".into(),
                faults: 3,
                mean_recovery_ms: 26.0,
                p50_recovery_ms: 25.0,
                max_recovery_ms: 30.0,
                duplicates: 0,
                missing: 0,
            }],
            skipped: vec![json!({"uid": "source", "reason": "no fault probe"})],
            total_seconds: 1.0,
            command: "target/release/criticality --faults 3".into(),
            raw: json!({}),
        },
        unavailable: vec![Unavailable {
            what: "recovery at the paper's 30 s checkpoint interval".into(),
            reason: "runs last a few seconds".into(),
        }],
        charts: vec!["recovery.svg".into()],
        commands: vec!["target/release/etl".into()],
    }
}

fn out_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "weir-paper-validate-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("recovery.svg"), "<svg></svg>").unwrap();
    d
}

fn check(f: impl FnOnce(&mut Value)) -> Result<(), Vec<String>> {
    let mut v = serde_json::to_value(fixture()).unwrap();
    f(&mut v);
    // Through text, as the binary checks the written file (NaN becomes null there).
    let v: Value = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
    let dir = out_dir();
    let r = validate(&v, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    r
}

fn problems(f: impl FnOnce(&mut Value)) -> String {
    check(f).expect_err("the check passed").join("\n")
}

#[test]
fn complete_results_pass() {
    check(|_| {}).unwrap();
}

#[test]
fn a_missing_or_non_finite_field_fails() {
    let p = problems(|v| {
        v["latency"]["summary"][1]
            .as_object_mut()
            .unwrap()
            .remove("latency_p99_ms");
    });
    assert!(
        p.contains("latency.summary[1].latency_p99_ms: missing"),
        "{p}"
    );
    // NaN is written as null.
    let mut r = fixture();
    r.recovery.runs[0].cpu_failure_pct_core = f64::NAN;
    let v: Value = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    let dir = out_dir();
    let p = validate(&v, &dir).unwrap_err().join("\n");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        p.contains("recovery.runs[0].cpu_failure_pct_core: not a number"),
        "{p}"
    );
    let p = problems(|v| v["recovery"]["runs"][0]["recovery_ms_each"][2] = Value::Null);
    assert!(p.contains("recovery.runs[0].recovery_ms_each[2]"), "{p}");
}

#[test]
fn p95_may_be_null_only_when_listed_as_unavailable() {
    let p = problems(|v| v["latency"]["summary"][0]["latency_p95_ms"] = Value::Null);
    assert!(p.contains("latency_p95_ms: missing, and not listed"), "{p}");
}

#[test]
fn duplicates_or_missing_in_bqbs_fail() {
    let p = problems(|v| v["recovery"]["runs"][1]["duplicates"] = json!(3));
    assert!(
        p.contains("recovery.runs[1].duplicates: 3 in BQBS mode"),
        "{p}"
    );
    let p = problems(|v| v["recovery"]["runs"][1]["missing"] = json!(1));
    assert!(
        p.contains("recovery.runs[1].missing: 1 in BQBS mode"),
        "{p}"
    );
    // Restart-all's are reported, not failed on.
    check(|v| v["recovery"]["runs"][0]["duplicates"] = json!(2)).unwrap();
}

#[test]
fn a_mode_without_runs_or_faults_that_did_not_fire_fail() {
    let p = problems(|v| {
        v["recovery"]["runs"].as_array_mut().unwrap().remove(1);
    });
    assert!(p.contains("no run in mode bqbs"), "{p}");
    let p = problems(|v| v["recovery"]["runs"][0]["faults_fired"] = json!(3));
    assert!(p.contains("3 of 4 faults fired"), "{p}");
}

#[test]
fn missing_charts_and_empty_rankings_fail() {
    let p = problems(|v| v["charts"] = json!(["nope.svg"]));
    assert!(p.contains("nope.svg is missing"), "{p}");
    let p = problems(|v| v["criticality"]["ranking"] = json!([]));
    assert!(p.contains("criticality.ranking: empty"), "{p}");
}

#[test]
fn the_report_has_every_table_and_labels_the_papers_figures() {
    let md = report::render(&fixture());
    for t in [
        "## Machine",
        "Test CPU",
        "## Table 5",
        "| 1 | flat_map | 3 |",
        "## Table 6",
        "## Table 7",
        "paper: restart-all",
        "≈70 s",
        "## Table 8",
        "40.01%",
        "42.70%",
        "## Not measured",
        "30 s checkpoint interval",
        "## Commands",
        "target/release/etl",
        "(recovery.svg)",
    ] {
        assert!(md.contains(t), "no `{t}` in the report:\n{md}");
    }
}
