//! The experiments: each one runs a harness binary (`etl`, `recovery`, `criticality`) as a
//! sampled child process per configuration, then turns its JSON and the samples into
//! [`Results`]. This module has the plan, the child runner and the whole run; each experiment
//! is a module of its own (`latency`, `recovery`, `criticality`), and so are the CPU and
//! memory tables (`resources`) and the charts (`figures`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use crate::analysis::median;
use crate::proc::{self, ChildRun};
use crate::results::{Results, Unavailable, SCHEMA};

mod criticality;
mod figures;
mod latency;
mod recovery;
mod resources;

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

    let latency = latency::latency(&mut runner, &work)?;
    let recovery = recovery::recovery(&mut runner)?;
    let criticality = criticality::criticality(&mut runner)?;
    runner.progress.overall.finish_with_message("done");
    if !opts.keep_inputs {
        let _ = std::fs::remove_dir_all(&work);
    }

    let (cpu, memory) = resources::cpu_and_memory(&machine, &latency, &recovery);
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
    results.charts = figures::draw_charts(&results, &opts.out)?;
    results.wall_seconds = started.elapsed().as_secs_f64();
    Ok(results)
}
