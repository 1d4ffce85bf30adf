//! The latency experiment (the paper's Table 6): `etl` at each size, with and without a
//! backup of `flat_map`, at each checkpoint interval, alternating which goes first; a
//! warm-up run per size writes its input.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{f64_field, med, med_opt, med_u64, Runner};
use crate::analysis::{pct_change, peak_rss, steady_rss};
use crate::proc::ChildRun;
use crate::results::{Latency, LatencyOverhead, LatencyRow, LatencyRun};

/// One configuration of a measured `etl` run.
struct Config {
    records: u64,
    backup: bool,
    checkpoint_interval_ms: u64,
    rep: usize,
}

pub(super) fn latency(runner: &mut Runner, work: &Path) -> Result<Latency, String> {
    let plan = runner.opts.plan.clone();
    let bar = runner.progress.experiment(
        "latency",
        (plan.sizes.len() * (1 + 2 * plan.latency_repeats)) as u64,
    );
    let etl = runner.opts.bins.etl.clone();
    let etl_out = work.join("etl-out");
    let timeout = Duration::from_secs(300);
    let mut runs = Vec::new();
    for &n in &plan.sizes {
        let input = work.join(format!("answers-{n}.jsonl"));
        let base = vec![
            "--input".to_owned(),
            input.display().to_string(),
            "--output".to_owned(),
            etl_out.display().to_string(),
        ];
        // Writes the input, then runs once: a warm-up (page cache, allocator), not counted.
        let mut gen = vec!["--generate".to_owned(), n.to_string()];
        gen.extend(base.iter().cloned());
        runner.run(
            &bar,
            &format!("{n}: write input + warm-up"),
            &etl,
            &gen,
            timeout,
            |_| {},
        )?;
        for (rep, &interval) in (0..plan.latency_repeats)
            .flat_map(|rep| plan.latency_checkpoints_ms.iter().map(move |i| (rep, i)))
        {
            // Alternate which mode goes first.
            let order = if rep % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for backup in order {
                let mut args = base.clone();
                if backup {
                    args.push("--backup".into());
                }
                args.push("--checkpoint-interval-ms".into());
                args.push(interval.to_string());
                let label = format!(
                    "{n} {} ckpt {} s #{}",
                    if backup { "bqbs" } else { "none" },
                    interval as f64 / 1000.0,
                    rep + 1
                );
                let (run, j, cmd) = runner.run(&bar, &label, &etl, &args, timeout, |_| {})?;
                let config = Config {
                    records: n,
                    backup,
                    checkpoint_interval_ms: interval,
                    rep,
                };
                runs.push(latency_run(&config, run, &j, cmd, runner.clk_tck)?);
            }
        }
    }
    bar.finish_with_message("done");
    let (summary, overhead) = summarize(&plan.sizes, &plan.latency_checkpoints_ms, &runs);
    Ok(Latency {
        sizes: plan.sizes.clone(),
        repeats: plan.latency_repeats,
        checkpointing: format!(
            "every {} (`etl --checkpoint-interval-ms`)",
            plan.latency_checkpoints_ms
                .iter()
                .map(|i| format!("{} s", *i as f64 / 1000.0))
                .collect::<Vec<_>>()
                .join(" and every ")
        ),
        checkpoint_intervals_ms: plan.latency_checkpoints_ms.clone(),
        runs,
        summary,
        overhead,
    })
}

/// One measured run from `etl`'s JSON line `j` and its samples.
fn latency_run(
    c: &Config,
    run: ChildRun,
    j: &Value,
    cmd: String,
    clk_tck: u64,
) -> Result<LatencyRun, String> {
    let who = "etl";
    let n = c.records;
    if j.get("records").and_then(Value::as_u64) != Some(n) {
        return Err(format!("{cmd}: it read {} records, not {n}", j["records"]));
    }
    let wall = run.wall_s;
    let cpu = run.cpu_total_s.unwrap_or_else(|| {
        let t = &run.samples;
        t.last().map_or(0, |s| s.cpu_ticks) as f64 / clk_tck as f64
    });
    Ok(LatencyRun {
        records: n,
        backup: c.backup,
        checkpoint_interval_ms: c.checkpoint_interval_ms,
        checkpoints_completed: j["checkpoints_completed"].as_u64().unwrap_or(0),
        rep: c.rep,
        seconds: f64_field(j, "seconds", who)?,
        records_per_sec: f64_field(j, "records_per_sec", who)?,
        latency_p50_ms: f64_field(j, "latency_p50_ms", who)?,
        latency_p95_ms: j.get("latency_p95_ms").and_then(Value::as_f64),
        latency_p99_ms: f64_field(j, "latency_p99_ms", who)?,
        latency_max_ms: f64_field(j, "latency_max_ms", who)?,
        reported_peak_rss_bytes: j["peak_rss_bytes"].as_u64().unwrap_or(0),
        peak_rss_bytes: peak_rss(&run.samples).max(j["peak_rss_bytes"].as_u64().unwrap_or(0)),
        steady_rss_bytes: steady_rss(&run.samples, (0.0, wall), &[]).unwrap_or(0),
        cpu_mean_pct_core: 100.0 * cpu / wall,
        wall_s: wall,
        command: cmd,
        samples: run.samples,
    })
}

/// The medians per configuration, and the backup's overhead per size and interval.
fn summarize(
    sizes: &[u64],
    intervals_ms: &[u64],
    runs: &[LatencyRun],
) -> (Vec<LatencyRow>, Vec<LatencyOverhead>) {
    let mut summary = Vec::new();
    let mut overhead = Vec::new();
    for (&n, &interval) in sizes
        .iter()
        .flat_map(|n| intervals_ms.iter().map(move |i| (n, i)))
    {
        for backup in [false, true] {
            let rs: Vec<&LatencyRun> = runs
                .iter()
                .filter(|r| {
                    r.records == n && r.backup == backup && r.checkpoint_interval_ms == interval
                })
                .collect();
            summary.push(LatencyRow {
                records: n,
                backup,
                checkpoint_interval_ms: interval,
                runs: rs.len(),
                latency_p50_ms: med(rs.iter().map(|r| r.latency_p50_ms)),
                latency_p95_ms: med_opt(rs.iter().map(|r| r.latency_p95_ms)),
                latency_p99_ms: med(rs.iter().map(|r| r.latency_p99_ms)),
                latency_max_ms: med(rs.iter().map(|r| r.latency_max_ms)),
                records_per_sec: med(rs.iter().map(|r| r.records_per_sec)),
                seconds: med(rs.iter().map(|r| r.seconds)),
                peak_rss_bytes: med_u64(rs.iter().map(|r| r.peak_rss_bytes)),
                steady_rss_bytes: med_u64(rs.iter().map(|r| r.steady_rss_bytes)),
                cpu_mean_pct_core: med(rs.iter().map(|r| r.cpu_mean_pct_core)),
            });
        }
        let (a, b) = (&summary[summary.len() - 2], &summary[summary.len() - 1]);
        overhead.push(LatencyOverhead {
            records: n,
            checkpoint_interval_ms: interval,
            p50_pct: pct_change(a.latency_p50_ms, b.latency_p50_ms),
            p99_pct: pct_change(a.latency_p99_ms, b.latency_p99_ms),
            seconds_pct: pct_change(a.seconds, b.seconds),
            throughput_pct: pct_change(a.records_per_sec, b.records_per_sec),
        });
    }
    (summary, overhead)
}
