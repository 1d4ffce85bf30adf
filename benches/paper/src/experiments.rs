//! The experiments: each one runs a harness binary (`etl`, `recovery`, `criticality`) as a
//! sampled child process per configuration, then turns its JSON and the samples into
//! [`Results`].

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use crate::analysis::{
    column_medians, cpu_intervals, cumulative, median, merge_windows, pct_change, peak_rss,
    steady_rss, weighted_cpu,
};
use crate::charts::{self, Panel, Series};
use crate::proc::{self, ChildRun, Machine};
use crate::results::*;

/// The harness binaries.
#[derive(Debug, Clone)]
pub struct Bins {
    /// `etl`.
    pub etl: PathBuf,
    /// `recovery`.
    pub recovery: PathBuf,
    /// `criticality`.
    pub criticality: PathBuf,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `--quick`.
    pub quick: bool,
    /// Latency: input sizes.
    pub sizes: Vec<u64>,
    /// Latency: runs per size and mode.
    pub latency_repeats: usize,
    /// Latency: checkpoint intervals, ms (the paper's 30 s, and 1 s).
    pub latency_checkpoints_ms: Vec<u64>,
    /// Recovery: generated records.
    pub recovery_records: u64,
    /// Recovery: runs per mode.
    pub recovery_repeats: usize,
    /// Recovery: faults per run.
    pub failures: usize,
    /// Recovery: checkpoint interval of both modes.
    pub checkpoint_interval_ms: u64,
    /// Criticality: faults per operator.
    pub crit_faults: usize,
    /// Criticality: operators (empty: the tool's default, all of them).
    pub crit_operators: Vec<String>,
    /// Criticality: records per run (`None`: the tool's default).
    pub crit_records: Option<u64>,
}

impl Plan {
    /// The full run: the paper's sizes and 50 faults per operator.
    pub fn full() -> Self {
        Plan {
            quick: false,
            sizes: vec![100_000, 500_000, 1_000_000],
            latency_repeats: 5,
            latency_checkpoints_ms: vec![30_000, 1_000],
            recovery_records: 1_000_000,
            recovery_repeats: 3,
            failures: 4,
            checkpoint_interval_ms: 1000,
            crit_faults: 50,
            crit_operators: Vec::new(),
            crit_records: None,
        }
    }

    /// `--quick`: small sizes, few repetitions and faults.
    pub fn quick() -> Self {
        Plan {
            quick: true,
            sizes: vec![100_000],
            latency_repeats: 2,
            latency_checkpoints_ms: vec![30_000, 1_000],
            recovery_records: 200_000,
            recovery_repeats: 1,
            failures: 4,
            checkpoint_interval_ms: 1000,
            crit_faults: 3,
            crit_operators: vec!["flat_map".into(), "filter".into()],
            crit_records: Some(100_000),
        }
    }

    fn child_runs(&self) -> u64 {
        (self.sizes.len() * (1 + 2 * self.latency_repeats * self.latency_checkpoints_ms.len())
            + 2 * self.recovery_repeats
            + 1) as u64
    }
}

/// Where and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// Output directory.
    pub out: PathBuf,
    /// The workspace (commands are shown relative to it; git is asked there).
    pub workspace: PathBuf,
    /// The binaries.
    pub bins: Bins,
    /// The experiments.
    pub plan: Plan,
    /// Sampling interval of the children.
    pub sample_interval: Duration,
    /// How `paper` was invoked (for the report).
    pub invocation: String,
    /// Keep the generated inputs in `<out>/work`.
    pub keep_inputs: bool,
}

/// Progress bars (indicatif) on a terminal; plain lines on stderr otherwise.
struct Progress {
    mp: MultiProgress,
    overall: ProgressBar,
    tty: bool,
}

impl Progress {
    fn new(total: u64) -> Self {
        let tty = std::io::stderr().is_terminal();
        let mp = if tty {
            MultiProgress::new()
        } else {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        };
        let overall = mp.add(ProgressBar::new(total));
        overall.set_style(Self::style());
        overall.set_prefix("overall");
        overall.enable_steady_tick(Duration::from_millis(250));
        Progress { mp, overall, tty }
    }

    fn style() -> ProgressStyle {
        ProgressStyle::with_template(
            "{prefix:>12} [{bar:28}] {pos:>3}/{len:3} {elapsed_precise} {wide_msg}",
        )
        .expect("a valid template")
        .progress_chars("=> ")
    }

    fn experiment(&self, name: &'static str, len: u64) -> ProgressBar {
        let bar = self.mp.insert_before(&self.overall, ProgressBar::new(len));
        bar.set_style(Self::style());
        bar.set_prefix(name);
        bar.enable_steady_tick(Duration::from_millis(250));
        self.log(&format!("paper: {name}: {len} step(s)"));
        bar
    }

    fn log(&self, msg: &str) {
        if self.tty {
            let _ = self.mp.println(msg);
        } else {
            eprintln!("{msg}");
        }
    }
}

/// Runs children and remembers their commands.
struct Runner<'a> {
    opts: &'a Options,
    progress: Progress,
    commands: Vec<String>,
    clk_tck: u64,
}

fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl Runner<'_> {
    fn show(&self, program: &Path, args: &[String]) -> String {
        // Paths under the workspace are shown relative to it (the commands run there).
        let ws = &self.opts.workspace;
        let rel = |a: &str| {
            Path::new(a)
                .strip_prefix(ws)
                .map_or_else(|_| a.to_owned(), |p| p.display().to_string())
        };
        std::iter::once(rel(&program.display().to_string()))
            .chain(args.iter().map(|a| rel(a)))
            .map(|a| shell_word(&a))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs one child to completion; an error if it fails or prints no JSON.
    fn run(
        &mut self,
        bar: &ProgressBar,
        label: &str,
        program: &Path,
        args: &[String],
        timeout: Duration,
        mut on_line: impl FnMut(&str),
    ) -> Result<(ChildRun, Value, String), String> {
        let shown = self.show(program, args);
        self.commands.push(shown.clone());
        self.progress.log(&format!("paper: $ {shown}"));
        bar.set_message(label.to_owned());
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(&self.opts.workspace);
        let run = proc::run_sampled(&mut cmd, self.opts.sample_interval, timeout, |t, line| {
            if let Some(l) = line {
                on_line(l);
            }
            bar.set_message(format!("{label} ({t:.1} s)"));
        })
        .map_err(|e| format!("{shown}: {e}"))?;
        if run.timed_out {
            return Err(format!(
                "{shown}: killed after {} s without finishing; its last stderr lines:\n{}",
                timeout.as_secs(),
                run.stderr_tail(20)
            ));
        }
        if !run.success {
            return Err(format!(
                "{shown}: failed ({}); its last stderr lines:\n{}",
                run.status,
                run.stderr_tail(20)
            ));
        }
        let json = run.json().map_err(|e| format!("{shown}: {e}"))?;
        bar.inc(1);
        self.progress.overall.inc(1);
        Ok((run, json, shown))
    }
}

fn f64_field(v: &Value, key: &str, who: &str) -> Result<f64, String> {
    v.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("{who}: its JSON has no number `{key}`: {v}"))
}

fn u64_field(v: &Value, key: &str, who: &str) -> Result<u64, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{who}: its JSON has no count `{key}`: {v}"))
}

fn med(xs: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.into_iter().collect();
    median(&v).unwrap_or(f64::NAN)
}

fn med_u64(xs: impl IntoIterator<Item = u64>) -> u64 {
    med(xs.into_iter().map(|x| x as f64)) as u64
}

fn med_opt(xs: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = xs.into_iter().flatten().collect();
    median(&v)
}

/// Runs every experiment, writes the charts, and returns what was measured (not yet written).
pub fn run(opts: &Options) -> Result<Results, String> {
    let started = Instant::now();
    let date_utc = proc::utc_now();
    let machine = proc::machine();
    let plan = &opts.plan;
    let work = opts.out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let mut runner = Runner {
        opts,
        progress: Progress::new(plan.child_runs()),
        commands: Vec::new(),
        clk_tck: machine.clk_tck,
    };

    let latency = latency(&mut runner, &work)?;
    let recovery = recovery(&mut runner)?;
    let criticality = criticality(&mut runner)?;
    runner.progress.overall.finish_with_message("done");
    if !opts.keep_inputs {
        let _ = std::fs::remove_dir_all(&work);
    }

    let (cpu, memory) = cpu_and_memory(&machine, &latency, &recovery);
    let unavailable = vec![Unavailable {
        what: "recovery at the paper's 30 s checkpoint interval".into(),
        reason: format!(
            "both modes use {} ms checkpoints: a run lasts a few seconds, so with 30 s no \
                 checkpoint would complete and every restart would start over.",
            plan.checkpoint_interval_ms
        ),
    }];
    let git_commit = proc::command_line("git", &["rev-parse", "HEAD"], Some(&opts.workspace));
    let git_dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&opts.workspace)
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    let mut results = Results {
        schema: SCHEMA,
        quick: plan.quick,
        date_utc,
        wall_seconds: 0.0,
        git_commit: if git_commit.is_empty() {
            "unknown (not a git work tree)".into()
        } else {
            git_commit
        },
        git_dirty,
        machine,
        invocation: opts.invocation.clone(),
        sampling_interval_ms: opts.sample_interval.as_millis() as u64,
        latency,
        recovery,
        cpu,
        memory,
        criticality,
        unavailable,
        charts: Vec::new(),
        commands: runner.commands,
    };
    results.charts = draw_charts(&results, &opts.out)?;
    results.wall_seconds = started.elapsed().as_secs_f64();
    Ok(results)
}

fn latency(runner: &mut Runner, work: &Path) -> Result<Latency, String> {
    let plan = &runner.opts.plan;
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
                let who = "etl";
                if j.get("records").and_then(Value::as_u64) != Some(n) {
                    return Err(format!("{cmd}: it read {} records, not {n}", j["records"]));
                }
                let wall = run.wall_s;
                let cpu = run.cpu_total_s.unwrap_or_else(|| {
                    let t = &run.samples;
                    t.last().map_or(0, |s| s.cpu_ticks) as f64 / runner.clk_tck as f64
                });
                runs.push(LatencyRun {
                    records: n,
                    backup,
                    checkpoint_interval_ms: interval,
                    checkpoints_completed: j["checkpoints_completed"].as_u64().unwrap_or(0),
                    rep,
                    seconds: f64_field(&j, "seconds", who)?,
                    records_per_sec: f64_field(&j, "records_per_sec", who)?,
                    latency_p50_ms: f64_field(&j, "latency_p50_ms", who)?,
                    latency_p95_ms: j.get("latency_p95_ms").and_then(Value::as_f64),
                    latency_p99_ms: f64_field(&j, "latency_p99_ms", who)?,
                    latency_max_ms: f64_field(&j, "latency_max_ms", who)?,
                    reported_peak_rss_bytes: j["peak_rss_bytes"].as_u64().unwrap_or(0),
                    peak_rss_bytes: peak_rss(&run.samples)
                        .max(j["peak_rss_bytes"].as_u64().unwrap_or(0)),
                    steady_rss_bytes: steady_rss(&run.samples, (0.0, wall), &[]).unwrap_or(0),
                    cpu_mean_pct_core: 100.0 * cpu / wall,
                    wall_s: wall,
                    command: cmd,
                    samples: run.samples,
                });
            }
        }
    }
    bar.finish_with_message("done");
    let mut summary = Vec::new();
    let mut overhead = Vec::new();
    for (&n, &interval) in plan
        .sizes
        .iter()
        .flat_map(|n| plan.latency_checkpoints_ms.iter().map(move |i| (n, i)))
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

/// The stderr line `recovery` prints just before it builds and starts the job.
const JOB_START_LINE: &str = "to compute the expected output";
/// The stderr line `recovery`'s fault hook prints when a fault fires.
const FAULT_LINE: &str = "injected fault";

fn recovery(runner: &mut Runner) -> Result<Recovery, String> {
    let plan = runner.opts.plan.clone();
    let bar = runner
        .progress
        .experiment("recovery", (2 * plan.recovery_repeats) as u64);
    let bin = runner.opts.bins.recovery.clone();
    let min_window_s = 2.0 * runner.opts.sample_interval.as_secs_f64();
    let mut runs = Vec::new();
    for rep in 0..plan.recovery_repeats {
        for mode in ["restart-all", "bqbs"] {
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
    let mut summary = Vec::new();
    for mode in ["restart-all", "bqbs"] {
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
        failure_window: format!(
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
            1000 / runner.clk_tck.max(1)
        ),
        failure_window_min_ms: min_window_s * 1e3,
        runs,
        summary,
        bqbs_over_restart_all_first: first,
        bqbs_over_restart_all_cumulative: cum,
    })
}

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
    let (job_start_s, anchor) = match run.stderr.iter().find(|l| l.line.contains(JOB_START_LINE)) {
        Some(l) => (
            l.t_s,
            format!(
                "stderr line \"... {JOB_START_LINE}\", read at {:.3} s",
                l.t_s
            ),
        ),
        None => match (fault_lines.first(), after_start.first().copied().flatten()) {
            (Some(&t), Some(a)) => (
                t - a / 1e3,
                "the first \"injected fault\" stderr line minus its fault_after_start_ms".into(),
            ),
            _ => {
                return Err(format!(
                    "{who}: cannot place the job on the clock: no \"{JOB_START_LINE}\" or \
                     \"{FAULT_LINE}\" line on its stderr"
                ))
            }
        },
    };
    let fault_times_s: Vec<f64> = after_start
        .iter()
        .map(|a| a.map_or(f64::NAN, |a| job_start_s + a / 1e3))
        .collect();
    let skew = (fault_lines.len() == fault_times_s.len() && !fault_lines.is_empty()).then(|| {
        fault_lines
            .iter()
            .zip(&fault_times_s)
            .map(|(l, f)| (l - f).abs() * 1e3)
            .fold(0.0, f64::max)
    });
    let total_seconds = f64_field(&j, "total_seconds", who)?;
    let job_end_s = job_start_s + total_seconds;
    let windows = merge_windows(
        fault_times_s
            .iter()
            .zip(&each)
            .filter(|(f, r)| f.is_finite() && r.is_finite())
            .map(|(&f, &r)| (f, f + (r / 1e3).max(min_window_s)))
            .collect(),
    );
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

fn criticality(runner: &mut Runner) -> Result<Criticality, String> {
    let plan = runner.opts.plan.clone();
    let ops = if plan.crit_operators.is_empty() {
        7
    } else {
        plan.crit_operators.len()
    };
    let bar = runner.progress.experiment("criticality", 1);
    bar.set_length(ops as u64 + 1);
    let mut args = vec!["--faults".to_owned(), plan.crit_faults.to_string()];
    if !plan.crit_operators.is_empty() {
        args.push("--operators".into());
        args.push(plan.crit_operators.join(","));
    }
    if let Some(n) = plan.crit_records {
        args.push("--records".into());
        args.push(n.to_string());
    }
    let bin = runner.opts.bins.criticality.clone();
    let b2 = bar.clone();
    let (_run, j, cmd) = runner.run(
        &bar,
        "ranking operators",
        &bin,
        &args,
        Duration::from_secs(1800),
        move |line| {
            // One line per operator measured: "criticality: <uid>: N faults, ...".
            if line.starts_with("criticality: ") && line.contains(" faults, ") {
                b2.inc(1);
            }
        },
    )?;
    bar.finish_with_message("done");
    let who = cmd.as_str();
    let mut ranking = Vec::new();
    for o in j["operators"]
        .as_array()
        .ok_or_else(|| format!("{who}: no `operators` in its JSON"))?
    {
        ranking.push(CritRow {
            rank: u64_field(o, "rank", who)?,
            uid: o["uid"].as_str().unwrap_or_default().to_owned(),
            faults: u64_field(o, "faults", who)?,
            mean_recovery_ms: f64_field(o, "mean_recovery_ms", who)?,
            p50_recovery_ms: f64_field(o, "p50_recovery_ms", who)?,
            max_recovery_ms: f64_field(o, "max_recovery_ms", who)?,
            duplicates: u64_field(o, "duplicates", who)?,
            missing: u64_field(o, "missing", who)?,
        });
    }
    Ok(Criticality {
        faults: plan.crit_faults,
        records: j["records"].as_u64().unwrap_or(0),
        checkpoint_interval_ms: j["checkpoint_interval_ms"].as_u64().unwrap_or(0),
        ranking,
        skipped: j["skipped"].as_array().cloned().unwrap_or_default(),
        total_seconds: j["total_seconds"].as_f64().unwrap_or(f64::NAN),
        command: cmd,
        raw: j,
    })
}

fn cpu_and_memory(m: &Machine, l: &Latency, r: &Recovery) -> (Cpu, Memory) {
    let cpus = m.logical_cpus.max(1) as f64;
    let mem = m.mem_total_bytes.max(1) as f64;
    let mut cpu_rows = Vec::new();
    let mut mem_rows = Vec::new();
    for s in &r.summary {
        let what = format!("recovery, {} records, {} faults", r.records, r.failures);
        cpu_rows.push(CpuRow {
            what: what.clone(),
            mode: s.mode.clone(),
            normal_pct_core: s.cpu_normal_pct_core,
            failure_pct_core: Some(s.cpu_failure_pct_core),
            normal_pct_machine: s.cpu_normal_pct_core / cpus,
            failure_pct_machine: Some(s.cpu_failure_pct_core / cpus),
        });
        mem_rows.push(MemRow {
            what,
            mode: s.mode.clone(),
            peak_rss_bytes: s.peak_rss_bytes,
            steady_rss_bytes: s.steady_rss_bytes,
            peak_pct_mem: 100.0 * s.peak_rss_bytes as f64 / mem,
            steady_pct_mem: 100.0 * s.steady_rss_bytes as f64 / mem,
        });
    }
    let largest = l.sizes.iter().copied().max().unwrap_or(0);
    let ckpt = l.checkpoint_intervals_ms.iter().copied().max().unwrap_or(0);
    for s in l
        .summary
        .iter()
        .filter(|s| s.records == largest && s.checkpoint_interval_ms == ckpt)
    {
        let what = format!("etl, {largest} records, fault-free");
        let mode = if s.backup { "bqbs" } else { "restart-all" };
        cpu_rows.push(CpuRow {
            what: what.clone(),
            mode: mode.into(),
            normal_pct_core: s.cpu_mean_pct_core,
            failure_pct_core: None,
            normal_pct_machine: s.cpu_mean_pct_core / cpus,
            failure_pct_machine: None,
        });
        mem_rows.push(MemRow {
            what,
            mode: mode.into(),
            peak_rss_bytes: s.peak_rss_bytes,
            steady_rss_bytes: s.steady_rss_bytes,
            peak_pct_mem: 100.0 * s.peak_rss_bytes as f64 / mem,
            steady_pct_mem: 100.0 * s.steady_rss_bytes as f64 / mem,
        });
    }
    (
        Cpu {
            logical_cpus: m.logical_cpus,
            definition: format!(
                "CPU: the process's `utime + stime` (all threads, `/proc/<pid>/stat`, in \
                 1/{} s ticks) sampled while it runs, per second of wall time: 100% = one core \
                 busy, {}% = the whole machine. `recovery` rows: η_n over the job outside the \
                 failure windows, η_f inside them (see \"How the failure window is chosen\"); \
                 medians over the runs. `etl` rows: total CPU time over wall time of fault-free \
                 runs (process start to exit). \"restart-all\" = no backup, \"bqbs\" = \
                 `flat_map` backed up.",
                m.clk_tck,
                100 * m.logical_cpus.max(1)
            ),
            rows: cpu_rows,
        },
        Memory {
            mem_total_bytes: m.mem_total_bytes,
            definition: "Memory: peak = the largest `VmHWM` sampled from `/proc/<pid>/status` \
                         (for `etl` also its own end-of-run `VmHWM`); steady = the median \
                         `VmRSS` sample (`recovery`: within the job and outside failure windows; \
                         `etl`: the whole run); medians over the runs; % of `MemTotal`."
                .into(),
            rows: mem_rows,
        },
    )
}

fn draw_charts(r: &Results, out: &Path) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut chart = |name: &str, res: Result<(), Box<dyn std::error::Error>>| {
        res.map_err(|e| format!("cannot draw {name}: {e}"))?;
        names.push(name.to_owned());
        Ok::<(), String>(())
    };
    let rc = &r.recovery;
    let mut series = Vec::new();
    for (i, s) in rc.summary.iter().enumerate() {
        let pts = |v: &[f64]| -> Vec<(f64, f64)> {
            v.iter()
                .enumerate()
                .filter(|(_, y)| y.is_finite())
                .map(|(j, &y)| (j as f64 + 1.0, y))
                .collect()
        };
        series.push(Series {
            label: format!("{}: recovery of failure n", s.mode),
            points: pts(&s.recovery_ms_each),
            colour: i,
            thin: false,
            annotate: true,
        });
        series.push(Series {
            label: format!("{}: cumulative", s.mode),
            points: pts(&s.cumulative_ms),
            colour: i,
            thin: true,
            annotate: false,
        });
    }
    chart(
        "recovery.svg",
        charts::line_chart(
            &out.join("recovery.svg"),
            &Panel {
                title: format!(
                    "Recovery per failure: {} records, {} panics in flat_map (median of {} run(s))",
                    rc.records, rc.failures, rc.repeats
                ),
                x_desc: "failure".into(),
                y_desc: "ms (fault -> the sink gets the first lost record)".into(),
                series,
                integer_x: true,
                ..Panel::default()
            },
        ),
    )?;

    let l = &r.latency;
    let mut series = Vec::new();
    for (backup, q) in [(false, 50), (true, 50), (false, 99), (true, 99)] {
        let points = l
            .summary
            .iter()
            .filter(|s| s.backup == backup)
            .map(|s| {
                (
                    s.records as f64 / 1e3,
                    if q == 50 {
                        s.latency_p50_ms
                    } else {
                        s.latency_p99_ms
                    },
                )
            })
            .collect();
        series.push(Series {
            label: format!("p{q}, {}", if backup { "BQBS" } else { "no backup" }),
            points,
            colour: usize::from(backup) + if q == 99 { 2 } else { 0 },
            thin: false,
            annotate: false,
        });
    }
    chart(
        "latency.svg",
        charts::line_chart(
            &out.join("latency.svg"),
            &Panel {
                title: format!(
                    "etl per-record latency, median of {} run(s) per point",
                    l.repeats
                ),
                x_desc: "records (thousands)".into(),
                y_desc: "latency ms".into(),
                series,
                ..Panel::default()
            },
        ),
    )?;

    // CPU and memory over time: the first run of each mode, 0 = the job's start.
    let firsts: Vec<&RecoveryRun> = ["restart-all", "bqbs"]
        .iter()
        .filter_map(|m| rc.runs.iter().find(|x| &x.mode == m))
        .collect();
    let mut cpu_panels = Vec::new();
    let mut mem_series = Vec::new();
    for (i, run) in firsts.iter().enumerate() {
        let t0 = run.job_start_s;
        let windows: Vec<(f64, f64)> = run
            .failure_windows_s
            .iter()
            .map(|&(a, b)| (a - t0, b - t0))
            .collect();
        cpu_panels.push(Panel {
            title: format!(
                "recovery, {}: process CPU (eta_n {:.0}%, eta_f {:.0}% of a core)",
                run.mode, run.cpu_normal_pct_core, run.cpu_failure_pct_core
            ),
            x_desc: "seconds since the job's start (before 0: the harness computes the \
                     expected output)"
                .into(),
            y_desc: "% of one core".into(),
            series: vec![Series {
                label: format!("{}: CPU", run.mode),
                points: cpu_intervals(&run.samples, r.machine.clk_tck)
                    .iter()
                    .map(|iv| ((iv.start_s + iv.end_s) / 2.0 - t0, iv.pct_core))
                    .collect(),
                colour: i,
                thin: false,
                annotate: false,
            }],
            shaded: windows,
            shaded_label: "failure windows".into(),
            integer_x: false,
        });
        mem_series.push(Series {
            label: format!("{}: RSS", run.mode),
            points: run
                .samples
                .iter()
                .map(|s| (s.t_s - t0, s.rss_bytes as f64 / (1024.0 * 1024.0)))
                .collect(),
            colour: i,
            thin: false,
            annotate: false,
        });
    }
    chart(
        "cpu.svg",
        charts::panels_chart(&out.join("cpu.svg"), &cpu_panels),
    )?;
    chart(
        "memory.svg",
        charts::line_chart(
            &out.join("memory.svg"),
            &Panel {
                title: "recovery runs: resident memory (first run of each mode)".into(),
                x_desc: "seconds since the job's start".into(),
                y_desc: "RSS MiB".into(),
                series: mem_series,
                ..Panel::default()
            },
        ),
    )?;

    let c = &r.criticality;
    chart(
        "criticality.svg",
        charts::bar_chart(
            &out.join("criticality.svg"),
            &format!(
                "Criticality: mean recovery after {} faults per operator (restart-all)",
                c.faults
            ),
            "mean recovery ms",
            &c.ranking.iter().map(|x| x.uid.clone()).collect::<Vec<_>>(),
            &c.ranking
                .iter()
                .map(|x| x.mean_recovery_ms)
                .collect::<Vec<_>>(),
        ),
    )?;
    Ok(names)
}
