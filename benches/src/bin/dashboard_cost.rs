//! `dashboard_cost`: what an open dashboard costs a job, printed as one JSON line.
//!
//! - `--mode toggle` (the default): one answer-cleaning job runs the whole time with its REST
//!   server on, and a headless Chromium beside it opens the dashboard in a tab for some
//!   windows and closes it for others (off, on, on, off, ...: a slow drift of the machine's
//!   load cancels out). Each window's throughput comes from the job's own record counts; each
//!   pair of neighbouring windows gives one drop, and the median drop is the figure. The
//!   browser may be pinned to other CPUs (`--browser-cpus`), as on a user's own machine;
//!   without it, it shares the job's.
//! - `--mode pairs`: whole runs over `--records` answers in pairs, nobody watching and the
//!   dashboard open, in alternating order (noisier: each run starts and warms up afresh).
//!
//! The watcher is either a real headless Chromium showing the page (`--client browser`, the
//! default; Debian's `chromium`), or a client that sends what the page sends — its four panel
//! requests once a second — without a browser (`--client requests`): the first counts the
//! browser's own CPU too when it runs on the job's machine, the second only what the job's
//! server serves. Throughput on a shared machine is noisy, so it also prints the share of the
//! job process's CPU time that its REST server threads took (Linux `schedstat`), which the
//! machine's other load does not change.
//!
//! `cargo run --release -p weir-benches --bin dashboard_cost -- --browser-cpus 0` (toggle mode);
//! `... -- --mode pairs --records 4000000 --pairs 3`

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use weir::rest::{RestConfig, RestServer};
use weir::{Env, EnvConfig};
use weir_benches::median;
use weir_examples::answers::{build_answer_cleaning, prepare_output_dir, Input, DEFAULT_SEED};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Client {
    /// Headless Chromium with the page open.
    Browser,
    /// The page's requests, without a browser.
    Requests,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// One job; the dashboard's tab opened and closed in windows.
    Toggle,
    /// Whole runs in pairs.
    Pairs,
}

#[derive(Parser)]
struct Args {
    /// How the two cases are compared.
    #[arg(long, value_enum, default_value_t = Mode::Toggle)]
    mode: Mode,
    /// Toggle mode: measured windows (a multiple of 4: off, on, on, off).
    #[arg(long, default_value_t = 24)]
    windows: usize,
    /// Toggle mode: seconds per window.
    #[arg(long, default_value_t = 5.0)]
    window_secs: f64,
    /// Toggle mode: seconds the job runs before the first window.
    #[arg(long, default_value_t = 5.0)]
    warmup_secs: f64,
    /// Pin the browser to these CPUs (`taskset -c` syntax, e.g. `0`).
    #[arg(long)]
    browser_cpus: Option<String>,
    /// Toggle mode: a control run; the "open" windows open an empty tab instead of the
    /// dashboard, so the drops show the measurement's own noise.
    #[arg(long)]
    control: bool,
    /// Answers per run.
    #[arg(long, default_value_t = 4_000_000)]
    records: u64,
    /// Pairs of runs (nobody watching, dashboard open), interleaved.
    #[arg(long, default_value_t = 3)]
    pairs: usize,
    /// Who watches.
    #[arg(long, value_enum, default_value_t = Client::Browser)]
    client: Client,
    /// The Chromium binary.
    #[arg(long, default_value = "/usr/bin/chromium")]
    chromium: String,
}

/// A blocking HTTP client that hands back non-2xx answers instead of failing.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

fn get_text(agent: &ureq::Agent, url: &str) -> Option<String> {
    agent.get(url).call().ok()?.body_mut().read_to_string().ok()
}

/// Headless Chromium on the dashboard, killed (with its profile removed) when dropped.
struct Browser {
    child: Child,
    profile: std::path::PathBuf,
    debug_port: u16,
}

impl Browser {
    /// Opens `url` and returns once the page has loaded (its title is the dashboard's).
    fn open(binary: &str, url: &str) -> Result<Browser, String> {
        Self::start(binary, None, url, |t| t.contains("Weir"))
    }

    /// Starts the browser (pinned to `cpus` if given) on `url`, and returns once a page's
    /// title passes `loaded`.
    fn start(
        binary: &str,
        cpus: Option<&str>,
        url: &str,
        loaded: impl Fn(&str) -> bool,
    ) -> Result<Browser, String> {
        let debug_port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let profile = std::env::temp_dir().join(format!(
            "weir-dashboard-cost-{}-{debug_port}",
            std::process::id()
        ));
        let mut command = match cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus, binary]);
                c
            }
            None => Command::new(binary),
        };
        // Its own process group: the renderer and GPU processes end with the browser.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1280,800",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--remote-debugging-port={debug_port}"))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {binary}: {e}"))?;
        let browser = Browser {
            child,
            profile,
            debug_port,
        };
        browser.wait_title(loaded)?;
        Ok(browser)
    }

    /// Opens `url` in a new tab (DevTools' `/json/new`); returns the tab's id.
    fn open_tab(&self, url: &str) -> Result<String, String> {
        let new = format!("http://127.0.0.1:{}/json/new?{url}", self.debug_port);
        let text = agent()
            .put(&new)
            .send_empty()
            .map_err(|e| format!("cannot open a tab: {e}"))?
            .body_mut()
            .read_to_string()
            .map_err(|e| format!("cannot read the new tab: {e}"))?;
        serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_owned))
            .ok_or_else(|| format!("no tab id in {text}"))
    }

    /// Closes tab `id` (DevTools' `/json/close`).
    fn close_tab(&self, id: &str) {
        let close = format!("http://127.0.0.1:{}/json/close/{id}", self.debug_port);
        let _ = get_text(&agent(), &close);
    }

    /// Waits until the page's title passes `ok` (read from the DevTools page list).
    fn wait_title(&self, ok: impl Fn(&str) -> bool) -> Result<(), String> {
        let agent = agent();
        let list = format!("http://127.0.0.1:{}/json/list", self.debug_port);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let titles: Vec<String> = get_text(&agent, &list)
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p["title"].as_str().map(str::to_owned))
                .collect();
            if titles.iter().any(|t| ok(t)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the page did not show the dashboard: {titles:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Browser {
    /// Ends the browser's process group (the browser and the processes it started) and waits
    /// until it is gone, so the next run does not share the CPU with a browser shutting down.
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.child.wait();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let alive = Command::new("kill")
                .args(["-0", "--", &group])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !alive {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The ids of this process's threads now (Linux); empty elsewhere.
fn thread_ids() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|t| t.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// CPU time of the threads `ids` that are still alive, in ns (Linux `schedstat`).
fn threads_cpu_ns(ids: &[String]) -> u64 {
    ids.iter()
        .filter_map(|id| std::fs::read_to_string(format!("/proc/self/task/{id}/schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// CPU time of the whole process, exited threads included, in ns (`/proc/self/stat`).
fn process_cpu_ns() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // After the command name in parentheses: utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    let hz = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse::<u64>().ok())
        .unwrap_or(100);
    ticks * 1_000_000_000 / hz.max(1)
}

/// The page's polling without a browser: its four panel requests once a second.
fn poll_like_the_page(base: String, id: String, running: Arc<AtomicBool>) -> u64 {
    let agent = agent();
    let paths = [
        format!("/jobs/{id}"),
        format!("/jobs/{id}/backups"),
        format!("/jobs/{id}/checkpoints"),
        format!("/jobs/{id}/exceptions?maxExceptions=50"),
    ];
    let mut sent = 0;
    while running.load(Ordering::Relaxed) {
        let t = Instant::now();
        for p in &paths {
            if get_text(&agent, &format!("{base}{p}")).is_some() {
                sent += 1;
            }
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
    }
    sent
}

/// An answer-cleaning job over `records` generated answers (not started), and a REST server
/// for it with the threads it started (its own and actix's workers).
struct Served {
    env: Env,
    out: std::path::PathBuf,
    server: RestServer,
    server_threads: Vec<String>,
    base: String,
}

impl Served {
    fn new(cfg: EnvConfig, records: u64) -> Result<Served, String> {
        let out = std::env::temp_dir().join(format!("weir-dashboard-cost-{}", std::process::id()));
        prepare_output_dir(&out).map_err(|e| e.to_string())?;
        let env = Env::with_config(cfg);
        build_answer_cleaning(&env, &Input::generated(records, DEFAULT_SEED), &out, 1);
        let before = thread_ids();
        let server = RestServer::start(RestConfig::default()).map_err(|e| e.to_string())?;
        let server_threads = thread_ids()
            .into_iter()
            .filter(|t| !before.contains(t))
            .collect();
        let base = format!("http://{}", server.addr());
        Ok(Served {
            env,
            out,
            server,
            server_threads,
            base,
        })
    }
}

/// One run: records per second, and the share of the process's CPU time its REST server
/// took (%), with the dashboard open or not.
fn run(args: &Args, watched: bool) -> Result<(f64, f64), String> {
    let Served {
        env,
        out,
        server,
        server_threads,
        base,
    } = Served::new(EnvConfig::default(), args.records)?;
    let browser = match (watched, args.client) {
        (true, Client::Browser) => Some(Browser::open(&args.chromium, &format!("{base}/"))?),
        _ => None,
    };
    let (cpu0, server0) = (process_cpu_ns(), threads_cpu_ns(&server_threads));
    let started = Instant::now();
    let job = env.start("dashboard-cost").map_err(|e| e.to_string())?;
    server.register(job.monitor());
    if let Some(b) = &browser {
        // The page found the job: it is watching it (its title is the job's name).
        b.wait_title(|t| t.starts_with("dashboard-cost"))?;
    }
    let running = Arc::new(AtomicBool::new(true));
    let poller = (watched && args.client == Client::Requests).then(|| {
        let (base, id, running) = (base.clone(), job.id().to_owned(), running.clone());
        std::thread::spawn(move || poll_like_the_page(base, id, running))
    });
    let result = job.wait().map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let server_cpu = threads_cpu_ns(&server_threads).saturating_sub(server0) as f64;
    let cpu = process_cpu_ns().saturating_sub(cpu0).max(1) as f64;
    running.store(false, Ordering::Relaxed);
    if let Some(p) = poller {
        let _ = p.join();
    }
    drop(browser);
    let _ = std::fs::remove_dir_all(&out);
    let read = result
        .operator("source")
        .map_or(args.records, |o| o.records_out);
    Ok((read as f64 / took.as_secs_f64(), server_cpu / cpu * 100.0))
}

/// The source's records so far and the job's clock when they were counted, from a metrics
/// sample newer than `after` (the job samples every 20 ms here).
fn count(job: &weir::JobHandle, after: Duration) -> Result<(u64, Duration), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(m) = job.metrics().filter(|m| m.at > after) {
            let read = m
                .operator("source")
                .ok_or("the job has no operator `source`")?
                .num_records_out;
            return Ok((read, m.at));
        }
        if Instant::now() > deadline {
            return Err("the job published no metrics for 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Opens the tab of a watched window: the dashboard, once it shows the job; with `--control`
/// a blank page.
fn watch(browser: &Browser, args: &Args, base: &str) -> Result<String, String> {
    if args.control {
        return browser.open_tab("about:blank");
    }
    let tab = browser.open_tab(&format!("{base}/"))?;
    // The page found the job and shows it (its title is the job's name).
    browser.wait_title(|t| t.starts_with("dashboard-cost"))?;
    Ok(tab)
}

/// Toggle mode (see the module doc): one job, the dashboard's tab opened and closed.
fn toggle(args: &Args) -> Result<serde_json::Value, String> {
    if args.windows == 0 || !args.windows.is_multiple_of(4) {
        return Err(format!(
            "--windows must be a positive multiple of 4 (off, on, on, off), got {}",
            args.windows
        ));
    }
    let mut cfg = EnvConfig::default();
    cfg.metrics_interval = Duration::from_millis(20);
    let Served {
        env,
        out,
        server,
        server_threads,
        base,
    } = Served::new(cfg, u64::MAX)?;
    let browser = Browser::start(
        &args.chromium,
        args.browser_cpus.as_deref(),
        "about:blank",
        |t| t == "about:blank",
    )?;
    let job = env.start("dashboard-cost").map_err(|e| e.to_string())?;
    server.register(job.monitor());
    std::thread::sleep(Duration::from_secs_f64(args.warmup_secs));
    let window = Duration::from_secs_f64(args.window_secs);
    let (mut off, mut on, mut drops) = (vec![], vec![], vec![]);
    let (mut server_off, mut server_on) = (vec![], vec![]);
    let mut last = Duration::ZERO;
    for w in 0..args.windows {
        let watched = matches!(w % 4, 1 | 2);
        let tab = if watched {
            Some(watch(&browser, args, &base)?)
        } else {
            None
        };
        let (r0, t0) = count(&job, last)?;
        let s0 = threads_cpu_ns(&server_threads);
        std::thread::sleep(window);
        let (r1, t1) = count(&job, t0)?;
        let server_ms = threads_cpu_ns(&server_threads).saturating_sub(s0) as f64 / 1e6;
        last = t1;
        if let Some(tab) = tab {
            browser.close_tab(&tab);
        }
        let rate = r1.saturating_sub(r0) as f64 / (t1 - t0).as_secs_f64().max(1e-9);
        let server_ms_per_s = server_ms / (t1 - t0).as_secs_f64().max(1e-9);
        if watched {
            on.push(rate);
            server_on.push(server_ms_per_s);
        } else {
            off.push(rate);
            server_off.push(server_ms_per_s);
        }
        // Windows 0+1 and 2+3 of each four are pairs.
        if w % 2 == 1 {
            let (a, b) = (off[off.len() - 1], on[on.len() - 1]);
            drops.push((a - b) / a * 100.0);
        }
    }
    job.cancel();
    let _ = job.wait();
    drop(browser);
    let _ = std::fs::remove_dir_all(&out);
    Ok(serde_json::json!({
        "bench": "dashboard_cost",
        "mode": "toggle",
        "control": args.control,
        "browser_cpus": args.browser_cpus,
        "windows": args.windows,
        "window_secs": args.window_secs,
        "records_per_sec_nobody_watching": off,
        "records_per_sec_dashboard_open": on,
        "throughput_drop_pct": drops,
        "throughput_drop_pct_median": median(&drops),
        "server_cpu_ms_per_sec_nobody_watching": server_off,
        "server_cpu_ms_per_sec_dashboard_open": server_on,
        "server_cpu_ms_per_sec_dashboard_open_median": median(&server_on),
    }))
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    if args.mode == Mode::Toggle {
        println!("{}", toggle(&args)?);
        return Ok(());
    }
    let (mut alone, mut watched, mut drops) = (vec![], vec![], vec![]);
    let (mut server_alone, mut server_watched) = (vec![], vec![]);
    for i in 0..args.pairs {
        // Alternate which run of a pair goes first, so neither always follows the other.
        let (a, b) = if i % 2 == 0 {
            let a = run(&args, false)?;
            (a, run(&args, true)?)
        } else {
            let b = run(&args, true)?;
            (run(&args, false)?, b)
        };
        let ((a, sa), (b, sb)) = (a, b);
        alone.push(a);
        watched.push(b);
        drops.push((a - b) / a * 100.0);
        server_alone.push(sa);
        server_watched.push(sb);
    }
    let line = serde_json::json!({
        "bench": "dashboard_cost",
        "mode": "pairs",
        "client": format!("{:?}", args.client).to_lowercase(),
        "records": args.records,
        "pairs": args.pairs,
        "records_per_sec_nobody_watching": alone,
        "records_per_sec_dashboard_open": watched,
        "throughput_drop_pct": drops,
        "throughput_drop_pct_median": median(&drops),
        "server_cpu_pct_nobody_watching": server_alone,
        "server_cpu_pct_dashboard_open": server_watched,
        "server_cpu_pct_dashboard_open_median": median(&server_watched),
    });
    println!("{line}");
    Ok(())
}
