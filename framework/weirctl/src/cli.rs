//! `weirctl`: the command line over a job's REST API (Weir's or a Flink cluster's, for the
//! calls both have). Human tables by default, the server's JSON with `--json`; clear errors
//! when the server cannot be reached or refuses. The binary (`src/main.rs`) only calls
//! [`run`]; this module owns parsing, the HTTP calls and the printing.
//!
//! ```text
//! weirctl --url http://127.0.0.1:8081 jobs
//! weirctl checkpoints <job-id>
//! weirctl metrics <job-id> lastCheckpointDuration checkpointStartDelay
//! weirctl --token-file /tmp/weir-rest-….token savepoint <job-id> --dir /tmp/sp
//! weirctl --token-file /tmp/weir-rest-….token agent --rules rules.toml --job-name fraud
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::Value;
use weir::api_types::{
    CheckpointingStatistics, JobDetails, JobsOverview, Metric, ParallelismRequest, ReplaceReport,
    ReplaceRequest, RescaleReport, SettingsChanges, SettingsHistory, VertexBackpressure,
};

use crate::agent::{Agent, AgentConfig, JobSelector};
use crate::client::{parse, to_json, ClientError, RestClient};

/// Watch and steer running jobs over their REST API.
#[derive(Parser, Debug)]
#[command(name = "weirctl", version)]
struct Args {
    /// The REST server.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8081")]
    url: String,
    /// The bearer token for calls that change a job (default: `WEIR_REST_TOKEN`).
    #[arg(long, global = true)]
    token: Option<String>,
    /// A file holding the bearer token (the REST server prints its path at start).
    #[arg(long, global = true, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The jobs, with their state and how long they have run.
    Jobs,
    /// A job's vertices: parallelism, status, records in and out.
    Job { id: String },
    /// A job's checkpoint counts and its latest completed checkpoint.
    Checkpoints { id: String },
    /// The backpressure of every vertex of a job, per subtask.
    Backpressure { id: String },
    /// Job metrics by name (e.g. lastCheckpointDuration checkpointStartDelay).
    Metrics {
        id: String,
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Takes a savepoint and waits for it; the job keeps running.
    Savepoint {
        id: String,
        /// Where the savepoint goes.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Takes a savepoint, then stops the job; waits for the savepoint.
    Stop {
        id: String,
        /// Where the savepoint goes.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Cancels a job.
    Cancel { id: String },
    /// Shows a job's live settings, or changes them (`NAME=VALUE` pairs, all or none; Flink's
    /// option names, `operator.<uid>.<key>` for operator fields). `--dry-run` says how each
    /// change would apply; `--history` lists every change; `--rollback` returns to the
    /// settings of the last completed checkpoint.
    Config {
        id: String,
        /// Changes, `NAME=VALUE`.
        changes: Vec<String>,
        /// Say how each change would apply (live or fast restart, and why); change nothing.
        #[arg(long)]
        dry_run: bool,
        /// List every settings change made to the job.
        #[arg(long, conflicts_with_all = ["dry_run", "rollback"])]
        history: bool,
        /// Return to the settings of the last completed checkpoint.
        #[arg(long, conflicts_with = "dry_run")]
        rollback: bool,
    },
    /// Replaces a running job's graph by a version the app registered (a fast restart);
    /// waits until the new graph completed its first checkpoint, or was rolled back.
    Replace {
        id: String,
        /// The registered graph version.
        graph: String,
        /// Drop the state of operators the new graph does not have.
        #[arg(long)]
        allow_dropping_state: bool,
        /// How long the new graph has for its first checkpoint, ms.
        #[arg(long)]
        grace_ms: Option<u64>,
    },
    /// Watches a job and alerts or acts by rules (seed 002's control agent): one JSON line per
    /// decision, alert and action on stdout, with the values that caused it.
    Agent {
        /// The rules file (TOML; the book's "Automating operations with the agent"). Without
        /// it: the seed's rule (checkpoints over 60 s three times in a row while backpressure
        /// is above 80 %), alert only.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
        /// The job to watch (default: the one running job).
        #[arg(long, conflicts_with = "job_name")]
        job: Option<String>,
        /// Watch the running job of this name (followed when it gets a new id).
        #[arg(long)]
        job_name: Option<String>,
        /// Decide and alert, but take no action.
        #[arg(long)]
        dry_run: bool,
        /// Check the rules file, print the rules, and exit.
        #[arg(long)]
        check: bool,
        /// Look this many times, then exit (default: until stopped).
        #[arg(long, value_name = "N")]
        looks: Option<u64>,
        /// Time between two status lines (e.g. 30s, 5min).
        #[arg(long, default_value = "60s", value_parser = weir::settings::parse_duration)]
        status_every: Duration,
    },
    /// Changes the parallelism of a vertex (`--vertex`, its id as `job` lists it) or of
    /// every operator that follows the job's default parallelism, while the job runs; waits
    /// until it runs at the new parallelism.
    Rescale {
        id: String,
        /// The new parallelism.
        parallelism: usize,
        /// The vertex to rescale (default: the whole job).
        #[arg(long)]
        vertex: Option<String>,
    },
}

/// Why a `weirctl` command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The arguments are wrong (the message is clap's, with usage); also `--help`.
    #[error("{0}")]
    Usage(String),
    /// The server could not be reached.
    #[error("cannot reach the REST server at {url}: {message}")]
    Unreachable {
        /// The URL tried.
        url: String,
        /// Why.
        message: String,
    },
    /// The server answered with an error.
    #[error("the server refused {what}: {status} {message}")]
    Refused {
        /// The request.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The server's `errors`.
        message: String,
    },
    /// No token was given for a call that needs one, or its file cannot be read.
    #[error("{0}")]
    Token(String),
    /// The server's answer is not what a REST API of Weir or Flink answers.
    #[error("unexpected answer from {what}: {message}")]
    Unexpected {
        /// The request.
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// A savepoint failed.
    #[error("the savepoint failed: {0}")]
    Savepoint(String),
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    /// The agent's rules file is not valid.
    #[error("{0}")]
    Rules(#[from] crate::agent::RulesError),
}

impl CliError {
    /// Whether this is `--help` or `--version` (printed, not an error).
    pub fn is_help(&self) -> bool {
        matches!(self, CliError::Usage(m) if !m.starts_with("error:"))
    }
}

/// Runs `weirctl` with `args` (the first is the program name), printing to `out`.
pub fn run<I, T>(args: I, out: &mut dyn Write) -> Result<(), CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = Args::try_parse_from(args).map_err(|e| CliError::Usage(e.to_string()))?;
    let client = client_of(&args)?;
    match &args.command {
        Command::Jobs => jobs(&client, &args, out),
        Command::Job { id } => job(&client, &args, id, out),
        Command::Checkpoints { id } => checkpoints(&client, &args, id, out),
        Command::Backpressure { id } => backpressure(&client, &args, id, out),
        Command::Metrics { id, names } => metrics(&client, &args, id, names, out),
        Command::Savepoint { id, dir } => savepoint(&client, &args, id, dir, false, out),
        Command::Stop { id, dir } => savepoint(&client, &args, id, dir, true, out),
        Command::Rescale {
            id,
            parallelism,
            vertex,
        } => rescale(&client, id, *parallelism, vertex.as_deref(), out),
        Command::Config {
            id,
            changes,
            dry_run,
            history,
            rollback,
        } => config(&client, id, changes, *dry_run, *history, *rollback, out),
        Command::Replace {
            id,
            graph,
            allow_dropping_state,
            grace_ms,
        } => {
            let body = ReplaceRequest {
                graph: graph.clone(),
                allow_dropping_state: *allow_dropping_state,
                grace_ms: *grace_ms,
            };
            replace(&client, id, &body, out)
        }
        Command::Agent { .. } => agent(&args, out),
        Command::Cancel { id } => {
            client.send("PATCH", &format!("/jobs/{id}?mode=cancel"), None)?;
            writeln!(out, "cancelling job {id}")?;
            Ok(())
        }
    }
}

/// `weirctl rescale`.
fn rescale(
    client: &RestClient,
    id: &str,
    parallelism: usize,
    vertex: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let path = crate::client::parallelism_path(id, vertex);
    let body = to_json(&ParallelismRequest::new(parallelism));
    let r: RescaleReport = client.send_as("PATCH", &path, Some(body))?;
    for c in &r.changes {
        writeln!(out, "{}: {} -> {}", c.uid, c.from, c.to)?;
    }
    for k in &r.kept {
        writeln!(out, "{} kept: {}", k.uid, k.reason)?;
    }
    writeln!(
        out,
        "rescaled at checkpoint {} in {} ms (input paused {} ms)",
        opt(&r.checkpoint),
        opt(&r.duration_ms),
        opt(&r.pause_ms)
    )?;
    Ok(())
}

/// `weirctl replace`.
fn replace(
    client: &RestClient,
    id: &str,
    body: &ReplaceRequest,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let r: ReplaceReport =
        client.send_as("POST", &format!("/jobs/{id}/replace"), Some(to_json(body)))?;
    writeln!(
        out,
        "replaced by `{}` at savepoint {} in {} ms (input paused {} ms); committed at checkpoint {}",
        body.graph,
        opt(&r.checkpoint),
        opt(&r.duration_ms),
        opt(&r.pause_ms),
        opt(&r.committed_at)
    )?;
    for d in &r.dropped_state {
        writeln!(out, "dropped the state of {d}")?;
    }
    Ok(())
}

/// `weirctl agent`.
fn agent(args: &Args, out: &mut dyn Write) -> Result<(), CliError> {
    let Command::Agent {
        rules,
        job,
        job_name,
        dry_run,
        check,
        looks,
        status_every,
    } = &args.command
    else {
        return Ok(());
    };
    let rules = match rules {
        Some(path) => crate::agent::Rules::from_file(path)?,
        None => crate::agent::Rules::default(),
    };
    if *check {
        writeln!(out, "{rules:#?}")?;
        return Ok(());
    }
    let selector = match (job, job_name) {
        (Some(id), _) => JobSelector::Id(id.clone()),
        (None, Some(name)) => JobSelector::Name(name.clone()),
        (None, None) => JobSelector::Only,
    };
    let token = token_of(args.token.as_deref(), args.token_file.as_deref())?;
    let mut agent = Agent::new(
        AgentConfig::new(&args.url, rules)
            .job(selector)
            .token(token)
            .dry_run(*dry_run)
            .status_every(*status_every),
    );
    match looks {
        None => agent.run(&std::sync::atomic::AtomicBool::new(false), out)?,
        Some(n) => {
            for i in 0..*n {
                let wait = agent.look(out)?;
                if i + 1 < *n {
                    std::thread::sleep(wait);
                }
            }
            agent.write_status(out)?;
        }
    }
    Ok(())
}

/// The REST client of `args`: its URL, and the token from `--token`, `--token-file` or
/// `WEIR_REST_TOKEN`.
fn client_of(args: &Args) -> Result<RestClient, CliError> {
    Ok(RestClient::new(
        &args.url,
        token_of(args.token.as_deref(), args.token_file.as_deref())?,
        Duration::from_secs(30),
    ))
}

/// The bearer token: given, read from a file, or `WEIR_REST_TOKEN`.
fn token_of(
    token: Option<&str>,
    file: Option<&std::path::Path>,
) -> Result<Option<String>, CliError> {
    Ok(match (token, file) {
        (Some(t), _) => Some(t.to_owned()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| {
                    CliError::Token(format!("cannot read the token file {}: {e}", f.display()))
                })?
                .trim()
                .to_owned(),
        ),
        (None, None) => std::env::var("WEIR_REST_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
    })
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Unreachable { url, message } => CliError::Unreachable { url, message },
            ClientError::Refused {
                what,
                status,
                message,
            } => CliError::Refused {
                what,
                status,
                message,
            },
            e @ ClientError::NoToken { .. } => CliError::Token(e.to_string()),
            ClientError::Unexpected { what, message } => CliError::Unexpected { what, message },
        }
    }
}

fn print_json(out: &mut dyn Write, v: &Value) -> Result<(), CliError> {
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_default()
    )?;
    Ok(())
}

/// A table with a header row; columns padded to their widest cell.
fn table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> Result<(), CliError> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for r in rows {
        writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

/// A JSON value as a table shows it: a string without quotes, `-` for null.
fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// An optional value as a table shows it: `-` for none.
fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_owned(), T::to_string)
}

/// The answer to `GET path`: printed as the server's JSON with `--json` (`None`), else read
/// as `T`.
fn get_or_print<T: serde::de::DeserializeOwned>(
    c: &RestClient,
    a: &Args,
    path: &str,
    out: &mut dyn Write,
) -> Result<Option<T>, CliError> {
    let v = c.get(path)?;
    if a.json {
        print_json(out, &v)?;
        return Ok(None);
    }
    Ok(Some(parse(&format!("GET {path}"), v)?))
}

fn jobs(c: &RestClient, a: &Args, out: &mut dyn Write) -> Result<(), CliError> {
    let Some(v) = get_or_print::<JobsOverview>(c, a, "/jobs/overview", out)? else {
        return Ok(());
    };
    let rows: Vec<Vec<String>> = v
        .jobs
        .iter()
        .map(|j| {
            let secs = j.duration as f64 / 1000.0;
            vec![
                j.jid.clone(),
                j.name.clone(),
                j.state.clone(),
                format!("{secs:.1}s"),
            ]
        })
        .collect();
    table(out, &["ID", "NAME", "STATE", "DURATION"], &rows)
}

fn job(c: &RestClient, a: &Args, id: &str, out: &mut dyn Write) -> Result<(), CliError> {
    let Some(v) = get_or_print::<JobDetails>(c, a, &format!("/jobs/{id}"), out)? else {
        return Ok(());
    };
    writeln!(out, "{} ({}) {}", v.name, v.jid, v.state)?;
    let rows: Vec<Vec<String>> = v
        .vertices
        .iter()
        .map(|x| {
            vec![
                x.id.clone(),
                x.parallelism.to_string(),
                x.status.clone(),
                x.metrics.read_records.to_string(),
                x.metrics.write_records.to_string(),
                x.name.clone(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "VERTEX",
            "PARALLELISM",
            "STATUS",
            "RECORDS IN",
            "RECORDS OUT",
            "OPERATORS",
        ],
        &rows,
    )
}

fn checkpoints(c: &RestClient, a: &Args, id: &str, out: &mut dyn Write) -> Result<(), CliError> {
    let path = format!("/jobs/{id}/checkpoints");
    let Some(v) = get_or_print::<CheckpointingStatistics>(c, a, &path, out)? else {
        return Ok(());
    };
    let n = &v.counts;
    writeln!(
        out,
        "completed {}  failed {}  in progress {}  restored {}",
        n.completed, n.failed, n.in_progress, n.restored
    )?;
    match &v.latest.completed {
        Some(l) => writeln!(
            out,
            "latest completed: #{}  {} ms end to end  {} bytes",
            l.id, l.end_to_end_duration, l.state_size
        )?,
        None => writeln!(out, "latest completed: none yet")?,
    }
    Ok(())
}

fn backpressure(c: &RestClient, a: &Args, id: &str, out: &mut dyn Write) -> Result<(), CliError> {
    let j: JobDetails = c.get_as(&format!("/jobs/{id}"))?;
    let mut all = Vec::new();
    let mut rows = Vec::new();
    for vtx in &j.vertices {
        let vid = &vtx.id;
        let path = format!("/jobs/{id}/vertices/{vid}/backpressure");
        let raw = c.get(&path)?;
        let b: VertexBackpressure = parse(&format!("GET {path}"), raw.clone())?;
        for st in &b.subtasks {
            let pct = |r: f64| format!("{:.0}%", r * 100.0);
            rows.push(vec![
                vid.clone(),
                st.subtask.to_string(),
                st.backpressure_level.clone(),
                pct(st.ratio),
                pct(st.busy_ratio),
                pct(st.idle_ratio),
            ]);
        }
        all.push(serde_json::json!({ "vertex": vid, "backpressure": raw }));
    }
    if a.json {
        return print_json(out, &Value::Array(all));
    }
    table(
        out,
        &[
            "VERTEX",
            "SUBTASK",
            "LEVEL",
            "BACKPRESSURED",
            "BUSY",
            "IDLE",
        ],
        &rows,
    )
}

fn metrics(
    c: &RestClient,
    a: &Args,
    id: &str,
    names: &[String],
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let path = format!("/jobs/{id}/metrics?get={}", names.join(","));
    let Some(got) = get_or_print::<Vec<Metric>>(c, a, &path, out)? else {
        return Ok(());
    };
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|n| {
            let value = got
                .iter()
                .find(|m| m.id == *n)
                .map_or("(unknown)".to_owned(), |m| opt(&m.value));
            vec![n.clone(), value]
        })
        .collect();
    table(out, &["METRIC", "VALUE"], &rows)
}

fn savepoint(
    c: &RestClient,
    a: &Args,
    id: &str,
    dir: &std::path::Path,
    stop: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    use crate::client::SavepointError as E;
    let st = c
        .savepoint(
            id,
            &dir.display().to_string(),
            stop,
            Duration::from_secs(600),
        )
        .map_err(|e| match e {
            E::Rest(e) => e.into(),
            E::Failed(why) => CliError::Savepoint(
                why.strip_prefix("the savepoint failed: ")
                    .unwrap_or(&why)
                    .to_owned(),
            ),
            E::Unexpected { what, message } => CliError::Unexpected { what, message },
        })?;
    if a.json {
        return print_json(out, &to_json(&st));
    }
    let location = st.operation.and_then(|o| o.location);
    writeln!(out, "savepoint: {}", opt(&location))?;
    if stop {
        writeln!(out, "job {id} stopped")?;
    }
    Ok(())
}

/// `weirctl config`.
fn config(
    client: &RestClient,
    id: &str,
    changes: &[String],
    dry_run: bool,
    history: bool,
    rollback: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let path = format!("/jobs/{id}/config");
    if history {
        let h: SettingsHistory = client.get_as(&format!("{path}/history"))?;
        for e in &h.history {
            let what: Vec<String> = e
                .changes
                .iter()
                .map(|c| format!("{}: {} -> {}", c.name, opt(&c.old), c.new))
                .collect();
            writeln!(
                out,
                "{} {} {} [{}]",
                e.timestamp,
                e.caller,
                what.join(", "),
                e.outcome
            )?;
        }
        return Ok(());
    }
    if rollback {
        let r: SettingsChanges = client.send_as("POST", &format!("{path}/rollback"), None)?;
        print_changes(&r, out)?;
        for k in r.kept.iter().flatten() {
            writeln!(out, "{k} kept (no earlier value known)")?;
        }
        return Ok(());
    }
    if changes.is_empty() {
        let current = client.get(&path)?;
        for (name, value) in current.as_object().into_iter().flatten() {
            writeln!(out, "{name} = {}", s(value))?;
        }
        return Ok(());
    }
    let mut body = serde_json::Map::new();
    for c in changes {
        let Some((name, value)) = c.split_once('=') else {
            return Err(CliError::Usage(format!(
                "error: `{c}` is not NAME=VALUE (e.g. execution.checkpointing.interval=100ms)"
            )));
        };
        body.insert(
            name.trim().to_owned(),
            Value::String(value.trim().to_owned()),
        );
    }
    let r: SettingsChanges = if dry_run {
        client.send_as("POST", &format!("{path}/plan"), Some(Value::Object(body)))?
    } else {
        client.send_as("PATCH", &path, Some(Value::Object(body)))?
    };
    print_changes(&r, out)
}

fn print_changes(r: &SettingsChanges, out: &mut dyn Write) -> Result<(), CliError> {
    for c in &r.changes {
        writeln!(
            out,
            "{}: {} -> {} ({}: {})",
            c.name,
            opt(&c.old),
            c.new,
            c.applies,
            c.why
        )?;
    }
    Ok(())
}
