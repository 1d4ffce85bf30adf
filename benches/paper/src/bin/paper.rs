//! `paper`: runs the BQBS paper's experiments (its Tables 5 to 8) on Weir and writes a report:
//!
//! ```text
//! cargo run --release -p weir-paper --bin paper -- --out target/paper-report
//! cargo run --release -p weir-paper --bin paper -- --quick --out target/paper-quick
//! ```
//!
//! It first builds the harness binaries it runs (`cargo build --release -p weir-benches
//! --bins`, with the `cargo` that runs it), then runs, each as a sampled child process:
//!
//! 1. latency (Table 6): `etl` at 100k, 500k and 1M records, with and without `--backup`;
//! 2. recovery (Table 7): `recovery --failures 4 --kind panic` in `restart-all` and `bqbs`
//!    mode, checkpoints every 1000 ms;
//! 3. CPU (Table 8) and memory: from sampling those children's `/proc/<pid>/stat` and
//!    `/proc/<pid>/status`, normal running against the windows around the failures;
//! 4. criticality (Table 5): `criticality --faults 50`.
//!
//! and writes `report.md`, `results.json` and SVG charts to `--out`. `--quick` runs 100k
//! records, one recovery run per mode at 200k records and 3 faults on 2 operators (well under
//! 2 minutes on 2 cores, after the build). It then checks `results.json` (every field present
//! and finite, exactly-once output in BQBS mode) and exits non-zero if a check fails. See
//! `weir_paper`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use weir_paper::experiments::{self, Bins, Options, Plan};
use weir_paper::{report, validate};

#[derive(Parser, Debug)]
#[command(
    name = "paper",
    about = "Runs the BQBS paper's experiments (Tables 5 to 8) on Weir through the etl, \
             recovery and criticality harnesses and writes report.md, results.json and SVG \
             charts."
)]
struct Args {
    /// Output directory.
    #[arg(long, value_name = "DIR", default_value = "target/paper-report")]
    out: PathBuf,
    /// Small sizes and few repetitions (under 2 minutes on 2 cores, after the build).
    #[arg(long)]
    quick: bool,
    /// Do not build the harness binaries: use the ones beside this executable.
    #[arg(long)]
    skip_build: bool,
    /// How often a child process is sampled.
    #[arg(long, default_value_t = 50, value_name = "MS")]
    sample_ms: u64,
    /// Runs per configuration of the latency and recovery experiments (default: 5 and 3; with
    /// --quick 2 and 1).
    #[arg(long, value_name = "N")]
    repeats: Option<usize>,
    /// Keep the generated inputs (`<out>/work`).
    #[arg(long)]
    keep_inputs: bool,
}

const HARNESSES: [&str; 3] = ["etl", "recovery", "criticality"];

/// Builds the harness binaries with the cargo that runs this one and returns their paths.
fn build(workspace: &Path) -> Result<Bins, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let args = [
        "build",
        "--release",
        "-p",
        "weir-benches",
        "--bins",
        "--message-format=json-render-diagnostics",
    ];
    eprintln!(
        "paper: building the harness binaries: {} {}",
        Path::new(&cargo).display(),
        args[..5].join(" ")
    );
    let t = Instant::now();
    let out = Command::new(&cargo)
        .args(args)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !out.status.success() {
        return Err(format!(
            "building the harness binaries failed ({}): `cargo build --release -p weir-benches \
             --bins` in {} (its errors are above)",
            out.status,
            workspace.display()
        ));
    }
    let mut found = std::collections::HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(name), Some(exe)) = (v["target"]["name"].as_str(), v["executable"].as_str()) {
            found.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    eprintln!("paper: built in {:.1} s", t.elapsed().as_secs_f64());
    let get = |name: &str| {
        found
            .get(name)
            .cloned()
            .ok_or_else(|| format!("cargo built no `{name}` binary (is it still in weir-benches?)"))
    };
    Ok(Bins {
        etl: get(HARNESSES[0])?,
        recovery: get(HARNESSES[1])?,
        criticality: get(HARNESSES[2])?,
    })
}

/// The harness binaries beside this executable.
fn beside_self() -> Result<Bins, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let get = |name: &str| {
        let p = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
        if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "--skip-build: no {} (build it with `cargo build --release -p weir-benches --bins`)",
                p.display()
            ))
        }
    };
    Ok(Bins {
        etl: get(HARNESSES[0])?,
        recovery: get(HARNESSES[1])?,
        criticality: get(HARNESSES[2])?,
    })
}

fn invocation() -> String {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", a.replace('\'', r"'\''"))
            } else {
                a
            }
        })
        .collect();
    format!(
        "cargo run --release -p weir-paper --bin paper -- {}",
        args.join(" ")
    )
}

fn run(args: Args) -> Result<(), String> {
    if args.sample_ms < 10 {
        return Err("--sample-ms must be at least 10".into());
    }
    if args.repeats == Some(0) {
        return Err("--repeats must be at least 1".into());
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("benches/paper/ is in the workspace")
        .to_path_buf();
    let cwd = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
    let out = cwd.join(&args.out);
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let bins = if args.skip_build {
        beside_self()?
    } else {
        build(&workspace)?
    };
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if let Some(n) = args.repeats {
        plan.latency_repeats = n;
        plan.recovery_repeats = n;
    }
    let opts = Options {
        out: out.clone(),
        workspace,
        bins,
        plan,
        sample_interval: Duration::from_millis(args.sample_ms),
        invocation: invocation(),
        keep_inputs: args.keep_inputs,
    };
    let results = experiments::run(&opts)?;

    let json_path = out.join("results.json");
    let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, json + "\n")
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    let md_path = out.join("report.md");
    std::fs::write(&md_path, report::render(&results))
        .map_err(|e| format!("cannot write {}: {e}", md_path.display()))?;
    eprintln!(
        "paper: wrote {}, {} and {} chart(s) in {:.1} s",
        md_path.display(),
        json_path.display(),
        results.charts.len(),
        results.wall_seconds
    );

    // Check what was written, as a reader of results.json would see it.
    let text = std::fs::read_to_string(&json_path)
        .map_err(|e| format!("cannot read {}: {e}", json_path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json_path.display()))?;
    if let Err(problems) = validate::validate(&value, &out) {
        return Err(format!(
            "{} failed its checks ({} problem(s)):\n  {}",
            json_path.display(),
            problems.len(),
            problems.join("\n  ")
        ));
    }
    eprintln!("paper: results.json checked: every field present and finite, BQBS exactly once");
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("paper: error: {e}");
            ExitCode::FAILURE
        }
    }
}
