//! The report's charts: which SVG files it has and what each shows, drawn with `crate::charts`.

use std::error::Error;
use std::path::Path;

use crate::analysis::cpu_intervals;
use crate::charts::{self, Panel, Series};
use crate::results::{Criticality, Latency, Recovery, RecoveryRun, Results};

type Drawn = Result<(), Box<dyn Error>>;

/// Draws every chart into `out`; their file names.
pub(super) fn draw_charts(r: &Results, out: &Path) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut chart = |name: &str, res: Drawn| {
        res.map_err(|e| format!("cannot draw {name}: {e}"))?;
        names.push(name.to_owned());
        Ok::<(), String>(())
    };
    chart("recovery.svg", recovery_chart(&r.recovery, out))?;
    chart("latency.svg", latency_chart(&r.latency, out))?;
    let (cpu, memory) = runs_over_time(r);
    chart("cpu.svg", charts::panels_chart(&out.join("cpu.svg"), &cpu))?;
    chart(
        "memory.svg",
        charts::line_chart(&out.join("memory.svg"), &memory),
    )?;
    chart("criticality.svg", criticality_chart(&r.criticality, out))?;
    Ok(names)
}

/// Recovery per failure and cumulative, per mode.
fn recovery_chart(rc: &Recovery, out: &Path) -> Drawn {
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
    )
}

/// p50 and p99 latency by input size, with and without the backup.
fn latency_chart(l: &Latency, out: &Path) -> Drawn {
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
    )
}

/// CPU (a panel per mode, failure windows shaded) and memory over time: the first recovery
/// run of each mode, 0 = the job's start.
fn runs_over_time(r: &Results) -> (Vec<Panel>, Panel) {
    let firsts: Vec<&RecoveryRun> = ["restart-all", "bqbs"]
        .iter()
        .filter_map(|m| r.recovery.runs.iter().find(|x| &x.mode == m))
        .collect();
    let mut cpu_panels = Vec::new();
    let mut mem_series = Vec::new();
    for (i, run) in firsts.iter().enumerate() {
        cpu_panels.push(cpu_panel(run, i, r.machine.clk_tck));
        let t0 = run.job_start_s;
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
    let memory = Panel {
        title: "recovery runs: resident memory (first run of each mode)".into(),
        x_desc: "seconds since the job's start".into(),
        y_desc: "RSS MiB".into(),
        series: mem_series,
        ..Panel::default()
    };
    (cpu_panels, memory)
}

/// One recovery run's process CPU over time, its failure windows shaded.
fn cpu_panel(run: &RecoveryRun, colour: usize, clk_tck: u64) -> Panel {
    let t0 = run.job_start_s;
    let windows: Vec<(f64, f64)> = run
        .failure_windows_s
        .iter()
        .map(|&(a, b)| (a - t0, b - t0))
        .collect();
    Panel {
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
            points: cpu_intervals(&run.samples, clk_tck)
                .iter()
                .map(|iv| ((iv.start_s + iv.end_s) / 2.0 - t0, iv.pct_core))
                .collect(),
            colour,
            thin: false,
            annotate: false,
        }],
        shaded: windows,
        shaded_label: "failure windows".into(),
        integer_x: false,
    }
}

/// Mean recovery per operator.
fn criticality_chart(c: &Criticality, out: &Path) -> Drawn {
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
    )
}
