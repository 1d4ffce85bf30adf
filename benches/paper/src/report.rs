//! `report.md`: the measured figures in tables beside what the paper states.

use std::fmt::Write as _;

use crate::reference::{self, Quote};
use crate::results::{Recovery, RecoveryRow, Results};

fn ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn opt_ms(x: Option<f64>) -> String {
    x.map_or("not measured".into(), ms)
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1024.0 * 1024.0))
}

fn pct(x: f64) -> String {
    format!("{x:+.1}%")
}

fn records(n: u64) -> String {
    if n >= 1_000_000 && n / 1_000_000 * 1_000_000 == n {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n / 1000 * 1000 == n {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

fn mode_label(mode: &str) -> &str {
    match mode {
        "restart-all" => "restart-all (no backup)",
        "bqbs" => "BQBS (flat_map backed up)",
        m => m,
    }
}

fn quote(out: &mut String, q: &Quote) {
    let _ = writeln!(
        out,
        "> **Paper:** {}\n>\n> 原文: {}\n",
        q.english, q.original
    );
}

/// The report as Markdown.
pub fn render(r: &Results) -> String {
    let mut o = String::new();
    header(&mut o, r);
    table5(&mut o, r);
    table6(&mut o, r);
    table7(&mut o, r);
    table8(&mut o, r);
    the_rest(&mut o, r);
    o
}

/// The title, the run and the machine.
fn header(o: &mut String, r: &Results) {
    let m = &r.machine;
    let _ = writeln!(o, "# Weir and the BQBS paper: measured report\n");
    let _ = writeln!(
        o,
        "Made by `paper` on {} at commit `{}`{} in {:.0} s{}. Every Weir figure below was \
         measured in this run; the columns and notes marked **paper** quote the paper's text \
         (seed 000), whose tables' cells are not in the text: only what its prose states is \
         quoted, and a `—` marks a cell it does not state.\n",
        r.date_utc,
        r.git_commit,
        if r.git_dirty {
            " (with uncommitted changes)"
        } else {
            ""
        },
        r.wall_seconds,
        if r.quick {
            " with `--quick` (small sizes, few repetitions: indicative only)"
        } else {
            ""
        }
    );
    let _ = writeln!(o, "## Machine\n");
    let _ = writeln!(o, "| CPU | logical CPUs | memory | OS | kernel | rustc |");
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    let _ = writeln!(
        o,
        "| {} | {} | {:.1} GiB | {} | {} | {} |\n",
        m.cpu_model,
        m.logical_cpus,
        m.mem_total_bytes as f64 / (1u64 << 30) as f64,
        m.os,
        m.kernel,
        m.rustc
    );
    let _ = writeln!(
        o,
        "The paper ran Flink on a cluster (Kafka, Redis, HDFS) at parallelism 8; Weir runs the \
         same operator chain in one process at parallelism 1 on this machine, so absolute times \
         differ by orders of magnitude: compare the shapes (which operator is most critical, \
         how the modes compare), not the seconds.\n"
    );
    quote(o, &reference::SETUP);
}

/// Table 5: operator criticality.
fn table5(o: &mut String, r: &Results) {
    let c = &r.criticality;
    let _ = writeln!(o, "## Table 5: operator criticality\n");
    let _ = writeln!(
        o,
        "Restart-all, one injected panic per run, {} faults per operator, {} records per run, \
         checkpoints every {} ms; recovery = fault → the restarted job's sink receives the \
         first record the failure kept from it. Ran in {:.0} s.\n",
        c.faults, c.records, c.checkpoint_interval_ms, c.total_seconds
    );
    let _ = writeln!(
        o,
        "| rank | operator | faults | mean recovery ms | p50 ms | max ms | duplicates | missing |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    for row in &c.ranking {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            row.rank,
            row.uid,
            row.faults,
            ms(row.mean_recovery_ms),
            ms(row.p50_recovery_ms),
            ms(row.max_recovery_ms),
            row.duplicates,
            row.missing
        );
    }
    for s in &c.skipped {
        let _ = writeln!(
            o,
            "| — | {} | skipped: {} | | | | | |",
            s["uid"].as_str().unwrap_or("?"),
            s["reason"].as_str().unwrap_or("")
        );
    }
    let top = c.ranking.first().map_or("?", |r| r.uid.as_str());
    let _ = writeln!(
        o,
        "\nMost critical in Weir: **{top}** (paper: **FlatMap**). The mean recovery times of \
         operators chained in one actor are close: a fault anywhere in the chain restarts the \
         same job from the same checkpoint, and what separates them is mostly where the fault's \
         record falls relative to the last checkpoint.\n"
    );
    quote(o, &reference::TABLE5);
    if r.charts.iter().any(|c| c == "criticality.svg") {
        let _ = writeln!(o, "![criticality](criticality.svg)\n");
    }
}

/// Table 6: latency and throughput.
fn table6(o: &mut String, r: &Results) {
    let l = &r.latency;
    let _ = writeln!(o, "## Table 6: latency and throughput\n");
    let _ = writeln!(
        o,
        "The fault-free answer-cleaning job (`etl`), per-record latency from the source's read \
         to the sink's write, {} runs per row (medians), after one warm-up run per size. \
         Checkpointing: {}\n",
        l.repeats, l.checkpointing
    );
    let _ = writeln!(
        o,
        "| records | checkpoints | flat_map backup | p50 ms | p95 ms | p99 ms | max ms | throughput (records/s) | job s | mean CPU (% of a core) |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
    for row in &l.summary {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.3} | {:.0} |",
            records(row.records),
            interval(row.checkpoint_interval_ms),
            if row.backup { "BQBS" } else { "none" },
            ms(row.latency_p50_ms),
            opt_ms(row.latency_p95_ms),
            ms(row.latency_p99_ms),
            ms(row.latency_max_ms),
            row.records_per_sec,
            row.seconds,
            row.cpu_mean_pct_core
        );
    }
    let _ = writeln!(o, "\nBQBS against none (change of the medians):\n");
    let _ = writeln!(
        o,
        "| records | checkpoints | p50 | p99 | job time | throughput | paper |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    for ov in &l.overhead {
        let paper = if ov.records >= 1_000_000 {
            format!("≈+{}% latency", reference::TABLE6_OVERHEAD_PCT_AT_1M)
        } else {
            "\"no great difference\"".to_owned()
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            records(ov.records),
            interval(ov.checkpoint_interval_ms),
            pct(ov.p50_pct),
            pct(ov.p99_pct),
            pct(ov.seconds_pct),
            pct(ov.throughput_pct),
            paper
        );
    }
    let _ = writeln!(
        o,
        "\nThe paper's latency is a processing time (data in → processing done); Weir's is per \
         record, queueing included. With a backup, `flat_map` runs as its own actor (a backed-up \
         operator is not chained) and its input goes to the primary and the backup: that hop and \
         the second delivery are what the overhead measures.\n"
    );
    quote(o, &reference::TABLE6);
    let _ = writeln!(o, "![latency percentiles by size](latency.svg)\n");
}

/// Table 7: recovery from successive failures.
fn table7(o: &mut String, r: &Results) {
    let rc = &r.recovery;
    let _ = writeln!(o, "## Table 7: recovery from successive failures\n");
    let _ = writeln!(
        o,
        "`recovery`: {} {} faults in `flat_map` per run ({} records, the first at half the \
         input, the others spread over the rest), checkpoints every {} ms in both modes, {} \
         run(s) per mode (medians). Recovery of a failure = the fault → the sink receives the \
         first record the failure kept from it.\n",
        rc.failures, rc.kind, rc.records, rc.checkpoint_interval_ms, rc.repeats
    );
    let ra = rc.summary.iter().find(|s| s.mode == "restart-all");
    let bq = rc.summary.iter().find(|s| s.mode == "bqbs");
    per_failure(o, rc, ra, bq);
    per_mode(o, rc);
    let _ = writeln!(
        o,
        "\nBQBS's first recovery is **{:.2}×** restart-all's (paper: 31 s / ≈70 s ≈ 0.44, \
         \"56.3% better\"); after the last failure the cumulative ratio is **{:.2}×**.",
        rc.bqbs_over_restart_all_first, rc.bqbs_over_restart_all_cumulative
    );
    if let (Some(f), Some(d)) = (
        bq.and_then(|b| b.last_failover_ms),
        ra.and_then(|a| a.redeploy_ms),
    ) {
        let _ = writeln!(
            o,
            "The \"restart\" part alone: a BQBS promotion (detection → the promoted backup \
             running, `last_failover_ms`) takes {} ms; restart-all's redeploy (fault → the \
             restarted job's sink exists, `redeploy_ms`) takes {} ms: {:.2}× (paper: 1/6 ≈ \
             0.17).",
            ms(f),
            ms(d),
            f / d
        );
    }
    let _ = writeln!(
        o,
        "\nA BQBS recovery is mostly the promoted backup's replay of `flat_map`'s input since \
         the last state it has of the primary (`flat_map`'s counters are operator state; the \
         buffer-queue backup chapter of the book says where that state comes from). The \
         paper's later failures were slower for a like reason (\"each later failure spends \
         about 30 s on replay\").\n"
    );
    quote(o, &reference::TABLE7);
    quote(o, &reference::RESTART_RATIO);
    let _ = writeln!(o, "![recovery time per failure](recovery.svg)\n");
}

/// Table 7's rows: each failure's recovery and the cumulative, per mode, beside the paper's.
fn per_failure(o: &mut String, rc: &Recovery, ra: Option<&RecoveryRow>, bq: Option<&RecoveryRow>) {
    let _ = writeln!(
        o,
        "| failure | restart-all ms | BQBS ms | restart-all cumulative ms | BQBS cumulative ms | paper: restart-all | paper: BQBS | paper: BQBS cumulative |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    for j in 0..rc.failures {
        let get = |row: Option<&RecoveryRow>, cum: bool| {
            row.and_then(|r| {
                if cum {
                    r.cumulative_ms.get(j)
                } else {
                    r.recovery_ms_each.get(j)
                }
            })
            .map_or("—".into(), |&x| ms(x))
        };
        let paper = reference::TABLE7_ROWS.get(j);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            j + 1,
            get(ra, false),
            get(bq, false),
            get(ra, true),
            get(bq, true),
            paper.map_or("—", |p| p.1),
            paper.map_or("—", |p| p.2),
            paper.map_or("—", |p| p.3)
        );
    }
}

/// The exactly-once check of each mode's runs, and their promotions and restarts.
fn per_mode(o: &mut String, rc: &Recovery) {
    let _ = writeln!(
        o,
        "\n| mode | runs | duplicates | missing | promotions | restarts |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    for mode in ["restart-all", "bqbs"] {
        let runs: Vec<_> = rc.runs.iter().filter(|x| x.mode == mode).collect();
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} |",
            mode,
            runs.len(),
            runs.iter().map(|x| x.duplicates).sum::<u64>(),
            runs.iter().map(|x| x.missing).sum::<u64>(),
            runs.iter().map(|x| x.promotions).sum::<u64>(),
            runs.iter().map(|x| x.restarts).sum::<u64>()
        );
    }
}

/// Table 8: CPU and memory.
fn table8(o: &mut String, r: &Results) {
    let cpu = &r.cpu;
    let _ = writeln!(o, "## Table 8: CPU and memory\n");
    let _ = writeln!(o, "{}\n", cpu.definition);
    let _ = writeln!(
        o,
        "| run | mode | η_n (% of a core) | η_f (% of a core) | η_n (% of the machine) | η_f (% of the machine) | η_f − η_n (points of the machine) |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    for row in &cpu.rows {
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} | {} | {:.1} | {} | {} |",
            row.what,
            mode_label(&row.mode),
            row.normal_pct_core,
            row.failure_pct_core
                .map_or("— (no failure)".into(), |x| format!("{x:.0}")),
            row.normal_pct_machine,
            row.failure_pct_machine
                .map_or("—".into(), |x| format!("{x:.1}")),
            row.failure_pct_machine.map_or("—".into(), |f| format!(
                "{:+.1}",
                f - row.normal_pct_machine
            )),
        );
    }
    let _ = writeln!(
        o,
        "\nPaper: η_n about the same in both modes; η_f about 8% more CPU with BQBS. The \
         paper's percentages are of its cluster's CPU; these are of this process on a {}-CPU \
         machine.\n",
        cpu.logical_cpus
    );
    let mem = &r.memory;
    let _ = writeln!(o, "{}\n", mem.definition);
    let _ = writeln!(
        o,
        "| run | mode | peak RSS MiB | steady RSS MiB | steady, % of RAM | paper δ |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    let (pr, pb) = reference::TABLE8_MEMORY_PCT;
    for row in &mem.rows {
        let paper = if row.mode == "bqbs" { pb } else { pr };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {:.3}% | {:.2}% |",
            row.what,
            mode_label(&row.mode),
            mib(row.peak_rss_bytes),
            mib(row.steady_rss_bytes),
            row.steady_pct_mem,
            paper
        );
    }
    let _ = writeln!(
        o,
        "\nThe paper's δ is the memory use of its machines (JVMs, Kafka, Redis...); Weir's is \
         one process's RSS as a share of this machine's RAM: compare the difference between the \
         modes, not the levels. The `recovery` runs also hold the expected output in memory for \
         the exactly-once check.\n"
    );
    quote(o, &reference::TABLE8);
    let _ = writeln!(o, "![CPU over time](cpu.svg)\n");
    let _ = writeln!(o, "![RSS over time](memory.svg)\n");
}

/// What was not measured, how the failure window is chosen, and the commands.
fn the_rest(o: &mut String, r: &Results) {
    let rc = &r.recovery;
    let _ = writeln!(o, "## Not measured\n");
    for u in &r.unavailable {
        let _ = writeln!(o, "- `{}`: {}", u.what, u.reason);
    }
    let _ = writeln!(o, "\n## How the failure window is chosen\n");
    let _ = writeln!(o, "{}\n", rc.failure_window);
    let _ = writeln!(o, "## Commands\n");
    let _ = writeln!(o, "```text\n{}\n```\n", r.invocation);
    let _ = writeln!(
        o,
        "Child processes (sampled every {} ms), in order:\n",
        r.sampling_interval_ms
    );
    let _ = writeln!(o, "```text");
    for c in &r.commands {
        let _ = writeln!(o, "{c}");
    }
    let _ = writeln!(o, "```");
}

/// A checkpoint interval, as the report shows it.
fn interval(ms: u64) -> String {
    if ms == 0 {
        "none".to_owned()
    } else if ms.is_multiple_of(1000) {
        format!("every {} s", ms / 1000)
    } else {
        format!("every {ms} ms")
    }
}
