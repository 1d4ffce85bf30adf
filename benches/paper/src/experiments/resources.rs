//! The CPU and memory tables (the paper's Table 8 and its memory figures), from the
//! recovery runs' failure windows and the largest fault-free latency runs.

use crate::proc::Machine;
use crate::results::{Cpu, CpuRow, Latency, MemRow, Memory, Recovery};

pub(super) fn cpu_and_memory(m: &Machine, l: &Latency, r: &Recovery) -> (Cpu, Memory) {
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
