//! The recovery experiment (the paper's Table 7, and the runs the CPU and memory of Table 8
//! come from): `recovery` with panics in `flat_map`, restart-all against BQBS, each run placed
//! on the sampler's clock so its failure windows can be cut out of the samples.

use std::time::Duration;

use serde_json::Value;

use super::{f64_field, med, med_opt, med_u64, u64_field, Runner};
use crate::analysis::{
    column_medians, cpu_intervals, cumulative, merge_windows, peak_rss, steady_rss, weighted_cpu,
};
use crate::proc::ChildRun;
use crate::results::{Recovery, RecoveryRow, RecoveryRun};

/// The stderr line `recovery` prints just before it builds and starts the job.
const JOB_START_LINE: &str = "to compute the expected output";
/// The stderr line `recovery`'s fault hook prints when a fault fires.
const FAULT_LINE: &str = "injected fault";

/// The modes compared, in the order of the summary.
const MODES: [&str; 2] = ["restart-all", "bqbs"];

pub(super) fn recovery(runner: &mut Runner) -> Result<Recovery, String> {
    let plan = runner.opts.plan.clone();
    let bar = runner
        .progress
        .experiment("recovery", (2 * plan.recovery_repeats) as u64);
    let bin = runner.opts.bins.recovery.clone();
    let min_window_s = 2.0 * runner.opts.sample_interval.as_secs_f64();
    let mut runs = Vec::new();
    for rep in 0..plan.recovery_repeats {
        for mode in MODES {
            let args: Vec<String> = [
                "--mode",
                mode,
                "--records",
                &plan.recovery_records.to_string(),
                "--failures",
                &plan.failures.to_string(),
                "--kind",
                "panic",
                "--checkpoint-interval-ms",
                &plan.checkpoint_interval_ms.to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let label = format!("{mode} #{}", rep + 1);
            let (run, j, cmd) =
                runner.run(&bar, &label, &bin, &args, Duration::from_secs(600), |_| {})?;
            runs.push(recovery_run(
                mode,
                rep,
                &run,
                j,
                cmd,
                plan.failures,
                min_window_s,
                runner.clk_tck,
            )?);
        }
    }
    bar.finish_with_message("done");
    let summary = summarize(&runs);
    let ratio = |f: &dyn Fn(&RecoveryRow) -> Option<f64>| match (f(&summary[0]), f(&summary[1])) {
        (Some(ra), Some(bq)) => bq / ra,
        _ => f64::NAN,
    };
    let first = ratio(&|r| r.recovery_ms_each.first().copied());
    let cum = ratio(&|r| r.cumulative_ms.last().copied());
    Ok(Recovery {
        records: plan.recovery_records,
        failures: plan.failures,
        kind: "panic".into(),
        checkpoint_interval_ms: plan.checkpoint_interval_ms,
        repeats: plan.recovery_repeats,
        failure_window: failure_window_text(min_window_s, runner.clk_tck),
        failure_window_min_ms: min_window_s * 1e3,
        runs,
        summary,
        bqbs_over_restart_all_first: first,
        bqbs_over_restart_all_cumulative: cum,
    })
}

/// The medians of each mode's runs.
fn summarize(runs: &[RecoveryRun]) -> Vec<RecoveryRow> {
    let mut summary = Vec::new();
    for mode in MODES {
        let rs: Vec<&RecoveryRun> = runs.iter().filter(|r| r.mode == mode).collect();
        let each: Vec<f64> = column_medians(
            &rs.iter()
                .map(|r| r.recovery_ms_each.clone())
                .collect::<Vec<_>>(),
        )
        .into_iter()
        .map(|x| x.unwrap_or(f64::NAN))
        .collect();
        summary.push(RecoveryRow {
            mode: mode.into(),
            runs: rs.len(),
            cumulative_ms: cumulative(&each),
            recovery_ms_each: each,
            duplicates: rs.iter().map(|r| r.duplicates).sum(),
            missing: rs.iter().map(|r| r.missing).sum(),
            cpu_normal_pct_core: med(rs.iter().map(|r| r.cpu_normal_pct_core)),
            cpu_failure_pct_core: med(rs.iter().map(|r| r.cpu_failure_pct_core)),
            peak_rss_bytes: med_u64(rs.iter().map(|r| r.peak_rss_bytes)),
            steady_rss_bytes: med_u64(rs.iter().map(|r| r.steady_rss_bytes)),
            last_failover_ms: med_opt(rs.iter().map(|r| r.last_failover_ms)),
            redeploy_ms: med_opt(rs.iter().map(|r| r.redeploy_ms)),
        });
    }
    summary
}

/// How the failure window is chosen, for the report.
fn failure_window_text(min_window_s: f64, clk_tck: u64) -> String {
    format!(
        "`recovery` reports each fault's time after the job's start \
         (`faults[j].fault_after_start_ms`, taken in the failing thread) and its recovery \
         (`recovery_ms_each[j]`). The job's start is placed on the sampler's clock at the \
         moment `paper` reads the stderr line `recovery` prints just before it builds and \
         starts the job (\"... {JOB_START_LINE}\"; it is on stderr, unbuffered, so it is read \
         within about a millisecond; the job is built in a few more), and checked against \
         the times the \"{FAULT_LINE}\" lines are read (`fault_line_skew_ms`). The failure \
         window of fault j is [fault, fault + recovery], widened to at least {:.0} ms (two \
         sampling intervals: CPU time is counted in {} ms ticks, so a shorter window would \
         be one tick's worth of noise); overlapping windows are merged. η_f is the \
         time-weighted mean CPU over the windows, η_n over the rest of the job (from its \
         start to start + `total_seconds`); the harness's setup before the job (computing \
         the expected output) and its check after it are left out of both.",
        min_window_s * 1e3,
        1000 / clk_tck.max(1)
    )
}

/// Where a run's job starts on the sampler's clock, and how that was found: at the stderr
/// line printed just before the job starts, else at the first fault's line less its time
/// after the start.
fn job_start(
    run: &ChildRun,
    after_start: &[Option<f64>],
    fault_lines: &[f64],
    who: &str,
) -> Result<(f64, String), String> {
    if let Some(l) = run.stderr.iter().find(|l| l.line.contains(JOB_START_LINE)) {
        return Ok((
            l.t_s,
            format!(
                "stderr line \"... {JOB_START_LINE}\", read at {:.3} s",
                l.t_s
            ),
        ));
    }
    match (fault_lines.first(), after_start.first().copied().flatten()) {
        (Some(&t), Some(a)) => Ok((
            t - a / 1e3,
            "the first \"injected fault\" stderr line minus its fault_after_start_ms".into(),
        )),
        _ => Err(format!(
            "{who}: cannot place the job on the clock: no \"{JOB_START_LINE}\" or \
             \"{FAULT_LINE}\" line on its stderr"
        )),
    }
}

/// The largest distance in ms between a fault's stderr line and its reported time, when
/// every fault has a line.
fn fault_line_skew(fault_lines: &[f64], fault_times_s: &[f64]) -> Option<f64> {
    (fault_lines.len() == fault_times_s.len() && !fault_lines.is_empty()).then(|| {
        fault_lines
            .iter()
            .zip(fault_times_s)
            .map(|(l, f)| (l - f).abs() * 1e3)
            .fold(0.0, f64::max)
    })
}

/// The failure window of each fault, [fault, fault + recovery] widened to at least
/// `min_window_s`, overlapping ones merged.
fn failure_windows(fault_times_s: &[f64], each: &[f64], min_window_s: f64) -> Vec<(f64, f64)> {
    merge_windows(
        fault_times_s
            .iter()
            .zip(each)
            .filter(|(f, r)| f.is_finite() && r.is_finite())
            .map(|(&f, &r)| (f, f + (r / 1e3).max(min_window_s)))
            .collect(),
    )
}

/// One run of `recovery` from its JSON line `j` and its samples and stderr.
#[allow(clippy::too_many_arguments)]
fn recovery_run(
    mode: &str,
    rep: usize,
    run: &ChildRun,
    j: Value,
    cmd: String,
    failures: usize,
    min_window_s: f64,
    clk_tck: u64,
) -> Result<RecoveryRun, String> {
    let who = cmd.as_str();
    let each: Vec<f64> = j["recovery_ms_each"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
        .ok_or_else(|| format!("{who}: no `recovery_ms_each` in its JSON"))?;
    let after_start: Vec<Option<f64>> = j["faults"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["fault_after_start_ms"].as_f64())
                .collect()
        })
        .unwrap_or_default();
    let fault_lines: Vec<f64> = run
        .stderr
        .iter()
        .filter(|l| l.line.contains(FAULT_LINE))
        .map(|l| l.t_s)
        .collect();
    let (job_start_s, anchor) = job_start(run, &after_start, &fault_lines, who)?;
    let fault_times_s: Vec<f64> = after_start
        .iter()
        .map(|a| a.map_or(f64::NAN, |a| job_start_s + a / 1e3))
        .collect();
    let skew = fault_line_skew(&fault_lines, &fault_times_s);
    let total_seconds = f64_field(&j, "total_seconds", who)?;
    let job_end_s = job_start_s + total_seconds;
    let windows = failure_windows(&fault_times_s, &each, min_window_s);
    let series = cpu_intervals(&run.samples, clk_tck);
    let range = (job_start_s, job_end_s);
    let steady = steady_rss(&run.samples, range, &windows)
        .or_else(|| steady_rss(&run.samples, range, &[]))
        .unwrap_or(0);
    if each.len() != failures {
        return Err(format!(
            "{who}: {} recovery times for {failures} failures",
            each.len()
        ));
    }
    Ok(RecoveryRun {
        mode: mode.into(),
        rep,
        cumulative_ms: cumulative(&each),
        recovery_ms_each: each,
        duplicates: u64_field(&j, "duplicates", who)?,
        missing: u64_field(&j, "missing", who)?,
        unexpected: u64_field(&j, "unexpected", who)?,
        wrong_lines: u64_field(&j, "wrong_lines", who)?,
        faults_fired: u64_field(&j, "faults_fired", who)?,
        promotions: j["promotions"].as_u64().unwrap_or(0),
        restarts: j["restarts"].as_u64().unwrap_or(0),
        last_failover_ms: j["last_failover_ms"].as_f64(),
        redeploy_ms: j["redeploy_ms"].as_f64(),
        total_seconds,
        job_start_s,
        job_end_s,
        anchor,
        fault_times_s,
        fault_line_skew_ms: skew,
        cpu_normal_pct_core: weighted_cpu(&series, range, &windows, false).unwrap_or(f64::NAN),
        cpu_failure_pct_core: weighted_cpu(&series, range, &windows, true).unwrap_or(f64::NAN),
        failure_windows_s: windows,
        peak_rss_bytes: peak_rss(&run.samples),
        steady_rss_bytes: steady,
        wall_s: run.wall_s,
        command: cmd,
        samples: run.samples.clone(),
        raw: j,
    })
}
