//! Checks a written `results.json`: every expected field present and finite, and exactly-once
//! output in BQBS mode (0 duplicates, 0 missing, 0 unexpected, 0 wrong lines in every run).

use std::path::Path;

use serde_json::Value;

use crate::results::SCHEMA;

/// Collects the problems found.
struct Check<'a> {
    root: &'a Value,
    problems: Vec<String>,
}

impl<'a> Check<'a> {
    fn get(&self, path: &str) -> Option<&'a Value> {
        let mut v = self.root;
        for part in path.split('.') {
            let (name, index) = match part.split_once('[') {
                Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
                None => (part, None),
            };
            if !name.is_empty() {
                v = v.get(name)?;
            }
            if let Some(i) = index {
                v = v.get(i)?;
            }
        }
        Some(v)
    }

    fn fail(&mut self, msg: String) {
        self.problems.push(msg);
    }

    /// A finite number at least `min`.
    fn num(&mut self, path: &str, min: f64) -> Option<f64> {
        match self.get(path) {
            None => self.fail(format!("{path}: missing")),
            Some(v) => match v.as_f64() {
                None => self.fail(format!("{path}: not a number ({v})")),
                Some(x) if !x.is_finite() => self.fail(format!("{path}: not finite ({x})")),
                Some(x) if x < min => self.fail(format!("{path}: {x} is below {min}")),
                Some(x) => return Some(x),
            },
        }
        None
    }

    fn nonempty_str(&mut self, path: &str) {
        match self.get(path).and_then(Value::as_str) {
            Some(s) if !s.trim().is_empty() => {}
            _ => self.fail(format!("{path}: missing or empty")),
        }
    }

    fn array(&mut self, path: &str) -> usize {
        match self.get(path).and_then(Value::as_array) {
            Some(a) if !a.is_empty() => a.len(),
            Some(_) => {
                self.fail(format!("{path}: empty"));
                0
            }
            None => {
                self.fail(format!("{path}: missing or not an array"));
                0
            }
        }
    }

    fn str_at(&self, path: &str) -> String {
        self.get(path)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    fn unavailable(&self, what: &str) -> bool {
        self.get("unavailable")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|u| u["what"] == what))
    }
}

/// The run: the schema, where and when it ran, and the sampling.
fn run(c: &mut Check) {
    if c.get("schema").and_then(Value::as_u64) != Some(u64::from(SCHEMA)) {
        c.fail(format!("schema: expected {SCHEMA}"));
    }
    for p in [
        "date_utc",
        "git_commit",
        "machine.cpu_model",
        "machine.os",
        "invocation",
    ] {
        c.nonempty_str(p);
    }
    c.num("wall_seconds", 0.0);
    c.num("machine.logical_cpus", 1.0);
    c.num("machine.mem_total_bytes", 1.0);
    c.num("machine.clk_tck", 1.0);
    c.num("sampling_interval_ms", 1.0);
}

/// Table 6: every latency row, run and overhead.
fn latency(c: &mut Check) {
    let sizes = c.array("latency.sizes");
    let intervals = c.array("latency.checkpoint_intervals_ms");
    let rows = c.array("latency.summary");
    if intervals == 0 || rows != 2 * sizes * intervals {
        c.fail(format!(
            "latency.summary: {rows} rows for {sizes} sizes and {intervals} checkpoint intervals \
             (expected one with and one without backup each)"
        ));
    }
    let p95_ok = c.unavailable("latency_p95_ms");
    for i in 0..rows {
        let r = format!("latency.summary[{i}]");
        for f in [
            "latency_p50_ms",
            "latency_p99_ms",
            "latency_max_ms",
            "seconds",
            "cpu_mean_pct_core",
        ] {
            c.num(&format!("{r}.{f}"), 0.0);
        }
        for f in [
            "records",
            "runs",
            "records_per_sec",
            "peak_rss_bytes",
            "steady_rss_bytes",
            "checkpoint_interval_ms",
        ] {
            c.num(&format!("{r}.{f}"), 1.0);
        }
        let p95 = c.get(&format!("{r}.latency_p95_ms")).cloned();
        match p95 {
            Some(Value::Null) if p95_ok => {}
            Some(Value::Null) | None => c.fail(format!(
                "{r}.latency_p95_ms: missing, and not listed in `unavailable`"
            )),
            Some(_) => {
                c.num(&format!("{r}.latency_p95_ms"), 0.0);
            }
        }
    }
    let runs = c.array("latency.runs");
    for i in 0..runs {
        let r = format!("latency.runs[{i}]");
        for f in [
            "latency_p50_ms",
            "latency_p99_ms",
            "latency_max_ms",
            "seconds",
            "wall_s",
        ] {
            c.num(&format!("{r}.{f}"), 0.0);
        }
        c.num(&format!("{r}.records_per_sec"), 1.0);
        c.num(&format!("{r}.peak_rss_bytes"), 1.0);
    }
    let over = c.array("latency.overhead");
    if over != sizes * intervals {
        c.fail(format!(
            "latency.overhead: {over} rows for {sizes} sizes and {intervals} intervals"
        ));
    }
    for i in 0..over {
        for f in ["p50_pct", "p99_pct", "seconds_pct", "throughput_pct"] {
            c.num(&format!("latency.overhead[{i}].{f}"), f64::NEG_INFINITY);
        }
    }
}

/// Table 7: every recovery run and row; exactly once in BQBS mode.
fn recovery(c: &mut Check) {
    let failures = c.num("recovery.failures", 1.0).unwrap_or(0.0) as usize;
    c.num("recovery.records", 1.0);
    let runs = c.array("recovery.runs");
    let mut modes = Vec::new();
    for i in 0..runs {
        let r = format!("recovery.runs[{i}]");
        let mode = c.str_at(&format!("{r}.mode"));
        if mode != "restart-all" && mode != "bqbs" {
            c.fail(format!("{r}.mode: `{mode}` (expected restart-all or bqbs)"));
        }
        modes.push(mode.clone());
        for f in ["recovery_ms_each", "cumulative_ms"] {
            let n = c.array(&format!("{r}.{f}"));
            if n != failures {
                c.fail(format!("{r}.{f}: {n} values for {failures} failures"));
            }
            for j in 0..n {
                c.num(&format!("{r}.{f}[{j}]"), 0.0);
            }
        }
        let fired = c.num(&format!("{r}.faults_fired"), 0.0);
        if fired.is_some_and(|f| f as usize != failures) {
            c.fail(format!(
                "{r}.faults_fired: {} of {failures} faults fired",
                fired.unwrap_or(0.0)
            ));
        }
        for f in [
            "total_seconds",
            "job_start_s",
            "job_end_s",
            "cpu_normal_pct_core",
            "cpu_failure_pct_core",
            "wall_s",
        ] {
            c.num(&format!("{r}.{f}"), 0.0);
        }
        c.num(&format!("{r}.peak_rss_bytes"), 1.0);
        c.num(&format!("{r}.steady_rss_bytes"), 1.0);
        for f in ["duplicates", "missing", "unexpected", "wrong_lines"] {
            let v = c.num(&format!("{r}.{f}"), 0.0);
            if mode == "bqbs" && v.is_some_and(|v| v != 0.0) {
                c.fail(format!(
                    "{r}.{f}: {} in BQBS mode (run {}): the output is not exactly once",
                    v.unwrap_or(0.0),
                    i
                ));
            }
        }
    }
    for m in ["restart-all", "bqbs"] {
        if !modes.iter().any(|x| x == m) {
            c.fail(format!("recovery.runs: no run in mode {m}"));
        }
    }
    let rows = c.array("recovery.summary");
    for i in 0..rows {
        let r = format!("recovery.summary[{i}]");
        let n = c.array(&format!("{r}.recovery_ms_each"));
        for j in 0..n {
            c.num(&format!("{r}.recovery_ms_each[{j}]"), 0.0);
            c.num(&format!("{r}.cumulative_ms[{j}]"), 0.0);
        }
        for f in ["cpu_normal_pct_core", "cpu_failure_pct_core"] {
            c.num(&format!("{r}.{f}"), 0.0);
        }
        if c.str_at(&format!("{r}.mode")) == "bqbs" {
            for f in ["duplicates", "missing"] {
                if c.num(&format!("{r}.{f}"), 0.0).is_some_and(|v| v != 0.0) {
                    c.fail(format!("{r}.{f}: not 0 in BQBS mode"));
                }
            }
        }
    }
    c.num("recovery.bqbs_over_restart_all_first", 0.0);
    c.num("recovery.bqbs_over_restart_all_cumulative", 0.0);
}

/// Table 8: the CPU and memory rows.
fn cpu_and_memory(c: &mut Check) {
    let rows = c.array("cpu.rows");
    for i in 0..rows {
        let r = format!("cpu.rows[{i}]");
        c.num(&format!("{r}.normal_pct_core"), 0.0);
        c.num(&format!("{r}.normal_pct_machine"), 0.0);
        if c.str_at(&format!("{r}.what")).starts_with("recovery") {
            c.num(&format!("{r}.failure_pct_core"), 0.0);
            c.num(&format!("{r}.failure_pct_machine"), 0.0);
        }
    }
    let rows = c.array("memory.rows");
    for i in 0..rows {
        for f in [
            "peak_rss_bytes",
            "steady_rss_bytes",
            "peak_pct_mem",
            "steady_pct_mem",
        ] {
            c.num(&format!("memory.rows[{i}].{f}"), f64::MIN_POSITIVE);
        }
    }
}

/// Table 5: the ranking.
fn criticality(c: &mut Check) {
    c.num("criticality.faults", 1.0);
    let rows = c.array("criticality.ranking");
    for i in 0..rows {
        let r = format!("criticality.ranking[{i}]");
        c.nonempty_str(&format!("{r}.uid"));
        if c.num(&format!("{r}.rank"), 1.0) != Some(i as f64 + 1.0) {
            c.fail(format!("{r}.rank: expected {}", i + 1));
        }
        for f in [
            "mean_recovery_ms",
            "p50_recovery_ms",
            "max_recovery_ms",
            "duplicates",
            "missing",
        ] {
            c.num(&format!("{r}.{f}"), 0.0);
        }
        c.num(&format!("{r}.faults"), 1.0);
    }
}

/// Every chart named is an SVG file in `out`.
fn charts(c: &mut Check, out: &Path) {
    let n = c.array("charts");
    for i in 0..n {
        let name = c.str_at(&format!("charts[{i}]"));
        let ok = std::fs::read_to_string(out.join(&name))
            .is_ok_and(|s| s.contains("<svg") && s.contains("</svg>"));
        if !ok {
            c.fail(format!("charts[{i}]: {name} is missing or not an SVG"));
        }
    }
}

/// Checks `results` (the parsed `results.json`); `out` is the directory its charts are in.
/// Returns every problem found.
pub fn validate(results: &Value, out: &Path) -> Result<(), Vec<String>> {
    let mut c = Check {
        root: results,
        problems: Vec::new(),
    };
    run(&mut c);
    latency(&mut c);
    recovery(&mut c);
    cpu_and_memory(&mut c);
    criticality(&mut c);
    charts(&mut c, out);

    if c.problems.is_empty() {
        Ok(())
    } else {
        Err(c.problems)
    }
}
