//! Child processes measured from the outside: a command runs as a child while this process
//! samples its `/proc/<pid>/stat` (CPU time: `utime + stime`, in clock ticks, all threads) and
//! `/proc/<pid>/status` (`VmRSS`, `VmHWM`) at a fixed interval, and timestamps every line it
//! writes to stderr. Also the machine's description (`/proc/cpuinfo`, `/proc/meminfo`,
//! `/etc/os-release`).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One sample of a child process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the child was spawned (this process's monotonic clock).
    pub t_s: f64,
    /// `utime + stime` of the whole process, in clock ticks.
    pub cpu_ticks: u64,
    /// Resident set size (`VmRSS`), bytes.
    pub rss_bytes: u64,
    /// Peak resident set size so far (`VmHWM`), bytes.
    pub hwm_bytes: u64,
}

/// A line the child wrote to stderr, with the time this process read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StderrLine {
    /// Seconds since the child was spawned.
    pub t_s: f64,
    /// The line, without its newline.
    pub line: String,
}

/// A finished child run.
#[derive(Debug, Clone)]
pub struct ChildRun {
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its exit status, as text.
    pub status: String,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Its stderr lines.
    pub stderr: Vec<StderrLine>,
    /// The samples, in time order.
    pub samples: Vec<Sample>,
    /// Spawn to exit, seconds.
    pub wall_s: f64,
    /// Its total CPU time in seconds, from this process's `cutime + cstime` before and after
    /// waiting for it (exact, unlike the last sample); `None` where `/proc/self/stat` is not
    /// readable.
    pub cpu_total_s: Option<f64>,
    /// Whether it was killed for running past the timeout.
    pub timed_out: bool,
}

impl ChildRun {
    /// The last non-empty stdout line parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value, String> {
        let line = self
            .stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .ok_or("it printed nothing on stdout")?;
        serde_json::from_str(line).map_err(|e| format!("its output is not JSON ({e}): {line}"))
    }

    /// The last `n` stderr lines, for error messages.
    pub fn stderr_tail(&self, n: usize) -> String {
        let start = self.stderr.len().saturating_sub(n);
        self.stderr[start..]
            .iter()
            .map(|l| l.line.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `utime + stime` (fields 14 and 15) of a `/proc/<pid>/stat` line, in clock ticks.
///
/// ```
/// let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 30 7 3 20 0 5 0 1 2 3";
/// assert_eq!(weir_paper::proc::stat_cpu_ticks(stat), Some(280));
/// ```
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let f = stat_fields(stat)?;
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// `cutime + cstime` (fields 16 and 17: waited-for children) of a `/proc/<pid>/stat` line.
///
/// ```
/// let stat = "42 (x) S 1 42 42 0 -1 4194560 100 0 0 0 250 30 7 3 20 0 5 0 1 2 3";
/// assert_eq!(weir_paper::proc::stat_children_ticks(stat), Some(10));
/// ```
pub fn stat_children_ticks(stat: &str) -> Option<u64> {
    let f = stat_fields(stat)?;
    Some(f.get(13)?.parse::<u64>().ok()? + f.get(14)?.parse::<u64>().ok()?)
}

/// The fields after the command name (which may hold spaces and parentheses): field 3 on.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().collect())
}

/// A `kB` value of `/proc/<pid>/status` or `/proc/meminfo` (`VmRSS:   1234 kB`), in bytes.
///
/// ```
/// let status = "Name:\tetl\nVmHWM:\t  9000 kB\nVmRSS:\t  8000 kB\n";
/// assert_eq!(weir_paper::proc::kb_field(status, "VmRSS"), Some(8000 * 1024));
/// assert_eq!(weir_paper::proc::kb_field(status, "VmSwap"), None);
/// ```
pub fn kb_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.split(':').next() == Some(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 if that fails, the Linux value).
pub fn clk_tck() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

fn children_ticks_of_self() -> Option<u64> {
    stat_children_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// One sample of process `pid`, or `None` once it has exited (or where `/proc` is missing).
fn sample(pid: u32, t_s: f64) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Sample {
        t_s,
        cpu_ticks: stat_cpu_ticks(&stat)?,
        // A zombie has no VmRSS line any more.
        rss_bytes: kb_field(&status, "VmRSS")?,
        hwm_bytes: kb_field(&status, "VmHWM")?,
    })
}

/// Runs `cmd` as a child (stdin closed, stdout and stderr captured), sampling it every
/// `interval` until it exits; kills it after `timeout`. `tick` is called after every sample
/// with the seconds since the spawn (for a progress bar) and with each stderr line.
pub fn run_sampled(
    cmd: &mut Command,
    interval: Duration,
    timeout: Duration,
    mut tick: impl FnMut(f64, Option<&str>),
) -> Result<ChildRun, String> {
    let before = children_ticks_of_self();
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let pid = child.id();
    let mut out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let (line_tx, line_rx) = std::sync::mpsc::channel::<StderrLine>();
    let err_thread = std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            let t_s = started.elapsed().as_secs_f64();
            if line_tx.send(StderrLine { t_s, line }).is_err() {
                break;
            }
        }
    });
    let mut samples = Vec::new();
    let mut stderr = Vec::new();
    let mut timed_out = false;
    let status = loop {
        let t_s = started.elapsed().as_secs_f64();
        if let Some(s) = sample(pid, t_s) {
            samples.push(s);
        }
        for l in line_rx.try_iter() {
            tick(l.t_s, Some(&l.line));
            stderr.push(l);
        }
        tick(t_s, None);
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(format!("cannot wait for the child: {e}")),
        }
        if started.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            break child
                .wait()
                .map_err(|e| format!("cannot wait for the child: {e}"))?;
        }
        // Sleep to the next multiple of the interval (no drift).
        let next = interval
            .mul_f64((started.elapsed().as_secs_f64() / interval.as_secs_f64()).floor() + 1.0);
        std::thread::sleep(next.saturating_sub(started.elapsed()));
    };
    let wall_s = started.elapsed().as_secs_f64();
    let after = children_ticks_of_self();
    let stdout = out_thread.join().unwrap_or_default();
    let _ = err_thread.join();
    for l in line_rx.try_iter() {
        tick(l.t_s, Some(&l.line));
        stderr.push(l);
    }
    let tck = clk_tck() as f64;
    Ok(ChildRun {
        success: status.success() && !timed_out,
        status: status.to_string(),
        stdout,
        stderr,
        samples,
        wall_s,
        cpu_total_s: before
            .zip(after)
            .map(|(b, a)| a.saturating_sub(b) as f64 / tck),
        timed_out,
    })
}

/// The machine a report was made on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` of `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Logical CPUs (`processor` entries of `/proc/cpuinfo`).
    pub logical_cpus: usize,
    /// Cores this process may run on (`std::thread::available_parallelism`).
    pub available_parallelism: usize,
    /// `MemTotal`, bytes.
    pub mem_total_bytes: u64,
    /// `PRETTY_NAME` of `/etc/os-release`.
    pub os: String,
    /// `uname -r`.
    pub kernel: String,
    /// `rustc --version`.
    pub rustc: String,
    /// Clock ticks per second (`getconf CLK_TCK`).
    pub clk_tck: u64,
}

/// Reads the machine's description; fields that cannot be read are left empty or 0.
pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    let logical_cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let os = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| std::env::consts::OS.to_owned());
    Machine {
        cpu_model,
        logical_cpus,
        available_parallelism: std::thread::available_parallelism().map_or(0, |n| n.get()),
        mem_total_bytes: kb_field(&meminfo, "MemTotal").unwrap_or(0),
        os,
        kernel: command_line("uname", &["-r"], None),
        rustc: command_line("rustc", &["--version"], None),
        clk_tck: clk_tck(),
    }
}

/// The first line a command prints on stdout, or `""`.
pub fn command_line(program: &str, args: &[&str], dir: Option<&Path>) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    cmd.output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

/// The current UTC date and time as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_string(secs)
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC` (proleptic Gregorian calendar).
///
/// ```
/// assert_eq!(weir_paper::proc::utc_string(0), "1970-01-01 00:00:00 UTC");
/// assert_eq!(weir_paper::proc::utc_string(951_827_696), "2000-02-29 12:34:56 UTC");
/// ```
pub fn utc_string(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_a_busy_child() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        // A fixed amount of work (CPU time on any machine, however loaded), at least 0.3 s
        // of wall time (samples every 20 ms), then a line on stderr and one on stdout.
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; sleep 0.3; \
             echo done >&2; echo '{\"ok\":1}'",
        ]);
        let mut lines = 0;
        let run = run_sampled(
            &mut cmd,
            Duration::from_millis(20),
            Duration::from_secs(30),
            |_, l| lines += usize::from(l.is_some()),
        )
        .unwrap();
        assert!(run.success, "{}", run.status);
        assert_eq!(run.json().unwrap()["ok"], 1);
        assert_eq!(lines, 1);
        assert_eq!(run.stderr[0].line, "done");
        assert!(run.samples.len() >= 3, "{} samples", run.samples.len());
        assert!(run.samples.windows(2).all(|w| w[0].t_s < w[1].t_s));
        assert!(run.samples.iter().all(|s| s.rss_bytes > 0));
        let cpu = run.cpu_total_s.unwrap();
        // A busy machine stretches the wall time, not the work: the CPU time is the work's.
        assert!(
            cpu > 0.01 && cpu <= run.wall_s + 0.05,
            "cpu {cpu} s, wall {}",
            run.wall_s
        );
    }

    #[test]
    fn kills_a_child_past_its_timeout() {
        let run = run_sampled(
            Command::new("sleep").arg("30"),
            Duration::from_millis(20),
            Duration::from_millis(200),
            |_, _| {},
        )
        .unwrap();
        assert!(run.timed_out && !run.success);
        assert!(run.wall_s < 10.0);
    }

    #[test]
    fn machine_is_described() {
        let m = machine();
        assert!(m.clk_tck > 0);
        if Path::new("/proc/cpuinfo").exists() {
            assert!(m.logical_cpus > 0 && m.mem_total_bytes > 0);
        }
    }
}
