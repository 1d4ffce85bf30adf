//! The dashboard in a real browser: headless Chromium, driven over WebDriver (chromedriver),
//! against a running job with a slow sink and a backed-up operator. The page must show every
//! vertex with its parallelism (laid out left to right in topological order), the slow sink's
//! upstream with high backpressure, a checkpoint chart whose points equal
//! `/jobs/{id}/checkpoints`, a panic injected into the backed-up operator on its failover
//! timeline with the recovery time, and an action sent without the token refused with the
//! API's own message; the browser's console must have no error and the page must request
//! nothing outside the server; the token, typed once, unlocks a live setting change and a
//! savepoint (each: plan, then result). Screenshots go to `target/tmp/dashboard/`; with `WEIR_UPDATE_SCREENSHOT=1` the
//! last one also replaces `book/src/img/dashboard.png` (the README's and the book's).
//!
//! Every wait polls the page until a condition holds (with a generous deadline), never an
//! assumed time. Without chromedriver (Debian's `chromium-driver`) the test is skipped with a
//! message, unless `CI=true`, where it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use weir::rest::RestConfig;
use weir::{Env, EnvConfig};
use weir_testing::{Fault, FaultKind, FaultPlan, PacedSink};

/// The longest any one condition may take to show on the page.
const DEADLINE: Duration = Duration::from_secs(90);
/// Records per second the slow sink takes.
const SINK_CAPACITY: f64 = 4_000.0;
/// The injected panic fires once this many checkpoints completed (after the page is up).
const PANIC_AFTER_CHECKPOINTS: u64 = 6;

/// Where chromedriver is: `WEIR_CHROMEDRIVER`, else `chromedriver` on the `PATH`.
fn chromedriver() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEIR_CHROMEDRIVER") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromedriver"))
            .find(|p| p.is_file())
    })
}

/// The Chromium binary: `WEIR_CHROMIUM`, else Debian's.
fn chromium() -> Option<PathBuf> {
    let p = std::env::var_os("WEIR_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    p.is_file().then_some(p)
}

/// A chromedriver process, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start(path: &Path) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut command = Command::new(path);
        // Its own process group, so that the browsers it starts end with it even when an
        // assertion fails before the WebDriver session is closed.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
        let driver = Driver { child, port };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let deadline = Instant::now() + DEADLINE;
        loop {
            let ready = agent
                .get(format!("http://127.0.0.1:{port}/status"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                return driver;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Driver {
    /// Ends chromedriver's process group (chromedriver and the browser it started).
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser's console log (chromedriver's `se/log`, which fantoccini has no method for).
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}

/// The job: a fast source, a backed-up `enrich` map at parallelism 2 that panics once (in
/// subtask 0, after [`PANIC_AFTER_CHECKPOINTS`] checkpoints), and a slow sink.
fn start_job(dir: &Path, faults: FaultPlan) -> weir::JobHandle {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.channel_capacity = 4;
    cfg.metrics_interval = Duration::from_millis(250);
    cfg.checkpoint.interval = Some(Duration::from_millis(400));
    cfg.checkpoint.directory = dir.to_owned();
    cfg.faults = faults;
    let env = Env::with_config(cfg);
    env.serve_rest(RestConfig::default());
    env.generate(u64::MAX, |i| i)
        .uid("numbers")
        .rebalance()
        .map(|x: u64| x.wrapping_mul(31))
        .uid("enrich")
        .set_parallelism(2)
        .with_backup()
        .rebalance()
        .add_sink("slow", |_| Ok(PacedSink::new(SINK_CAPACITY)))
        .uid("slow");
    env.start("dashboard-e2e").expect("the job starts")
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn get_json(base: &str, path: &str) -> Value {
    agent()
        .get(format!("{base}{path}"))
        .call()
        .expect("the server answers")
        .body_mut()
        .read_json()
        .expect("JSON")
}

/// Runs `script` in the page until it returns something other than `null` or `false`.
async fn until(client: &Client, what: &str, script: &str) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let v = client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("{what}: the script failed: {e}"));
        if !v.is_null() && v != Value::Bool(false) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not seen on the page within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn click(client: &Client, id: &str) {
    client
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("#{id} on the page: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click #{id}: {e}"));
}

async fn screenshot(client: &Client, dir: &Path, name: &str) -> PathBuf {
    let png = client.screenshot().await.expect("a screenshot");
    let path = dir.join(name);
    std::fs::write(&path, png).expect("write the screenshot");
    path
}

#[test]
#[cfg_attr(
    not(feature = "browser"),
    ignore = "needs Chromium and chromedriver: tests/run installs them where it can (feature browser)"
)]
fn the_dashboard_shows_a_running_job_in_headless_chromium() {
    let (Some(driver), Some(browser)) = (chromedriver(), chromium()) else {
        panic!(
            "the dashboard test needs chromedriver and Chromium (Debian: apt-get install \
             chromium chromium-driver; tests/run installs them where it can)"
        );
    };
    weir_testing::quiet_injected_panics();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&out).expect("the output folder");
    let dir = TempDir::new("dashboard");
    let profile = TempDir::new("dashboard-chromium");
    let faults = FaultPlan::new(vec![Fault::new("enrich", FaultKind::Panic, 0)
        .after_checkpoints(PANIC_AFTER_CHECKPOINTS)
        .in_subtask(0)]);
    let job = start_job(dir.path(), faults.clone());
    let base = format!("http://{}", job.rest().expect("served").addr());
    let driver = Driver::start(&driver);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1280,800",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
            "goog:loggingPrefs": { "browser": "ALL" },
        });
        let caps = caps.as_object().expect("an object").clone();
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .expect("a WebDriver session");
        // A viewport of 1280x800, whatever the window's frame takes.
        let inner = client
            .execute("return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight];", vec![])
            .await
            .expect("the window's frame");
        let frame = |i: usize| inner[i].as_u64().unwrap_or(0) as u32;
        client
            .set_window_size(1280 + frame(0), 800 + frame(1))
            .await
            .expect("a 1280x800 viewport");
        let checked = check_page(&client, &job, &base, &faults, &out).await;
        let log = client.issue_cmd(BrowserLog).await.expect("the console log");
        let _ = client.close().await;
        let refused_url = checked;
        let errors: Vec<&Value> = log
            .as_array()
            .expect("a list of log entries")
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            // The refused action's 401 is logged by the browser as a failed resource: it is
            // the refusal the test asked for, not an error of the page.
            .filter(|e| {
                let m = e["message"].as_str().unwrap_or_default();
                !(m.contains(&refused_url) && m.contains("401"))
            })
            .collect();
        assert!(errors.is_empty(), "the console has errors: {errors:#?}");
    });
    job.cancel();
    let _ = job.wait();
}

/// Every check on the page; returns the URL of the action refused for want of a token.
async fn check_page(
    client: &Client,
    job: &weir::JobHandle,
    base: &str,
    faults: &FaultPlan,
    out: &Path,
) -> String {
    let id = job.id().to_owned();
    client
        .goto(&format!("{base}/?job={id}"))
        .await
        .expect("the page loads");
    until(
        client,
        "the job's name in the title",
        "return document.title === 'dashboard-e2e · Weir';",
    )
    .await;

    // Every vertex with its parallelism, in columns that follow the edges.
    let vertices = job.vertices();
    let drawn = until(
        client,
        "every vertex",
        &format!(
            "const gs = [...document.querySelectorAll('#graph g.vertex')];
             if (gs.length < {}) return null;
             return gs.map(g => ({{ id: g.dataset.id, p: Number(g.dataset.parallelism),
                 col: Number(g.dataset.col), text: g.textContent }}));",
            vertices.len()
        ),
    )
    .await;
    let drawn = drawn.as_array().expect("a list");
    let col = |vid: &str| -> i64 {
        drawn
            .iter()
            .find(|g| g["id"] == vid)
            .and_then(|g| g["col"].as_i64())
            .unwrap_or_else(|| panic!("vertex {vid} is on the page: {drawn:?}"))
    };
    for v in &vertices {
        let g = drawn
            .iter()
            .find(|g| g["id"] == v.id.as_str())
            .unwrap_or_else(|| panic!("vertex {} is on the page: {drawn:?}", v.id));
        assert_eq!(g["p"], v.parallelism, "{}: {g}", v.id);
        let text = g["text"].as_str().unwrap_or_default();
        assert!(
            text.contains(&format!("parallelism {}", v.parallelism)),
            "{}: {text}",
            v.id
        );
        for i in &v.inputs {
            assert!(col(&i.id) < col(&v.id), "{} is left of {}", i.id, v.id);
        }
    }
    assert_eq!(vertices.len(), 3, "source, enrich, slow sink: {vertices:?}");

    // The slow sink's upstream is backpressured (Flink's HIGH).
    until(
        client,
        "enrich with high backpressure",
        "const g = document.querySelector('#graph g.vertex[data-id=\"enrich\"]');
         return g && g.dataset.backpressure === 'high' && g.classList.contains('high');",
    )
    .await;

    // At least three checkpoints in the chart, each point equal to the API's history.
    let fields = [
        ("duration", "end_to_end_duration"),
        ("alignment", "alignment_duration"),
        ("start_delay", "start_delay"),
        ("size", "state_size"),
    ];
    let mut matched = 0;
    let deadline = Instant::now() + DEADLINE;
    while matched < 3 {
        assert!(Instant::now() < deadline, "three checkpoints in the chart");
        let points = client
            .execute(
                "return [...document.querySelectorAll('circle.cp-point')].map(c =>
                    ({ series: c.dataset.series, id: Number(c.dataset.x), value: Number(c.dataset.value) }));",
                vec![],
            )
            .await
            .expect("the chart's points");
        let api = get_json(base, &format!("/jobs/{id}/checkpoints"));
        let history = api["history"].as_array().expect("a history").clone();
        let points = points.as_array().expect("a list").clone();
        let ids: std::collections::BTreeSet<u64> =
            points.iter().filter_map(|p| p["id"].as_u64()).collect();
        matched = 0;
        for cid in ids {
            let Some(record) = history
                .iter()
                .find(|r| r["id"] == cid && r["status"] == "COMPLETED")
            else {
                continue;
            };
            for (series, field) in fields {
                let shown = points
                    .iter()
                    .find(|p| p["series"] == series && p["id"] == cid)
                    .unwrap_or_else(|| panic!("checkpoint {cid} has a {series} point"));
                assert_eq!(
                    shown["value"].as_f64(),
                    record[field].as_f64(),
                    "checkpoint {cid}: {series} on the page vs `{field}` of the API: {record}"
                );
            }
            matched += 1;
        }
        if matched < 3 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    screenshot(client, out, "checkpoints.png").await;

    // No chart's legend overlaps its title, nor another legend entry (the records/s chart has
    // a series per vertex).
    let overlaps = client
        .execute(
            r#"const hit = [];
            const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
            for (const svg of document.querySelectorAll('svg')) {
              const title = svg.querySelector('.chart-title');
              const items = [...svg.querySelectorAll('.legend-text')].map((t) => t.getBoundingClientRect());
              const boxes = title ? [title.getBoundingClientRect(), ...items] : items;
              for (let i = 0; i < boxes.length; i += 1)
                for (let j = i + 1; j < boxes.length; j += 1)
                  if (boxes[i].width > 0 && boxes[j].width > 0 && meet(boxes[i], boxes[j]))
                    hit.push((svg.id || 'a chart') + ': ' + i + '/' + j);
            }
            return hit;"#,
            vec![],
        )
        .await
        .expect("the legend check runs");
    assert_eq!(overlaps, json!([]), "legend text overlaps");

    // The injected panic: promoted, on the timeline within a refresh of the API showing it.
    let deadline = Instant::now() + DEADLINE;
    let refreshes_then = loop {
        let ex = get_json(base, &format!("/jobs/{id}/exceptions"));
        let promoted = ex["exceptionHistory"]["entries"]
            .as_array()
            .is_some_and(|es| {
                es.iter().any(|e| {
                    e["failover"] == "promotion"
                        && e["stacktrace"]
                            .as_str()
                            .is_some_and(|t| t.contains("injected"))
                })
            });
        if promoted {
            break client
                .execute(
                    "return Number(document.body.dataset.refreshes || 0);",
                    vec![],
                )
                .await
                .expect("the refresh count")
                .as_u64()
                .unwrap_or(0);
        }
        assert!(
            Instant::now() < deadline,
            "the injected panic promoted a backup"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(faults.fired(), 1, "the injected panic fired");
    let shown = until(
        client,
        "the promotion on the failover timeline",
        "const li = [...document.querySelectorAll('#failovers li[data-kind=\"promotion\"]')]
             .find(li => li.textContent.includes('injected'));
         return li && li.dataset.recoveryMs !== undefined
            ? { recovery: Number(li.dataset.recoveryMs), text: li.textContent,
                timestamp: Number(li.dataset.timestamp),
                refreshes: Number(li.dataset.shownAtRefresh) }
            : null;",
    )
    .await;
    let text = shown["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("recovered in") && text.contains("enrich") && text.contains("injected"),
        "the timeline names the operator, the cause and the recovery time: {text}"
    );
    let recovery = shown["recovery"].as_f64().expect("a recovery time");
    // The injected one (a loaded machine may also see a primary miss its heartbeats).
    let promotions = job.monitor().promotions();
    let promotion = promotions
        .iter()
        .find(|p| Some(p.time_ms) == shown["timestamp"].as_u64())
        .unwrap_or_else(|| panic!("the page's promotion is the job's: {shown} {promotions:?}"));
    if promotions.len() > 1 {
        eprintln!("more promotions than the injected one: {promotions:#?}");
    }
    assert!(
        (recovery - promotion.recovery.as_secs_f64() * 1000.0).abs() < 1e-3,
        "the page's recovery time {recovery} ms is the job's {:?}",
        promotion.recovery
    );
    // The page counts its refreshes and notes the one that first drew each failover: the
    // refresh in flight when the API first showed it may have missed it, the next one not.
    let refreshes = shown["refreshes"].as_u64().unwrap_or(u64::MAX);
    assert!(
        refreshes <= refreshes_then + 2,
        "shown within one refresh: the API showed it after refresh {refreshes_then}, the page drew it at refresh {refreshes}"
    );
    screenshot(client, out, "failover.png").await;

    // An action without a token: the plan first, then the API's refusal on the page.
    let (status, refusal) = {
        let mut r = agent()
            .post(format!("{base}/jobs/{id}/savepoints"))
            .header("Content-Type", "application/json")
            .send(r#"{"target-directory": "/tmp/weir-savepoints"}"#)
            .expect("the server answers");
        let status = r.status().as_u16();
        let body: Value = r.body_mut().read_json().expect("JSON");
        (
            status,
            body["errors"][0].as_str().expect("a message").to_owned(),
        )
    };
    assert_eq!(status, 401);
    click(client, "sp-plan").await;
    let plan = until(
        client,
        "the savepoint's plan",
        "const b = document.getElementById('action-box');
         return !b.hidden && document.getElementById('action-plan').textContent;",
    )
    .await;
    assert!(
        plan.as_str().unwrap_or_default().starts_with("Live"),
        "a savepoint applies live: {plan}"
    );
    // Keyboard: the plan puts the focus on Apply, and Enter presses it.
    let focused = client
        .execute("return document.activeElement.id;", vec![])
        .await
        .expect("the focus");
    assert_eq!(focused, "action-apply");
    client
        .active_element()
        .await
        .expect("the focused element")
        .send_keys(fantoccini::key::Key::Enter.to_string().as_str())
        .await
        .expect("Enter");
    let result = until(
        client,
        "the refusal",
        "const r = document.getElementById('action-result');
         return r.classList.contains('error') && r.textContent;",
    )
    .await;
    let result = result.as_str().unwrap_or_default();
    assert!(
        result.contains(&refusal) && result.contains("401"),
        "the page shows the API's message `{refusal}`: {result}"
    );
    screenshot(client, out, "refused.png").await;

    // The token, typed once into the header's form (keyboard only), is kept in this tab's
    // sessionStorage only; with it a live setting changes: the plan says live, then applied.
    let token = job.rest().expect("served").token().to_owned();
    click(client, "token-set").await;
    let input = client
        .active_element()
        .await
        .expect("the focused token field");
    assert_eq!(
        input.attr("id").await.expect("an id").as_deref(),
        Some("token-input")
    );
    input
        .send_keys(&format!("{token}{}", fantoccini::key::Key::Enter))
        .await
        .expect("type the token");
    let kept = until(
        client,
        "the token kept",
        "return sessionStorage.getItem('weir-token') !== null
            && [localStorage.length, document.cookie];",
    )
    .await;
    assert_eq!(kept, json!([0, ""]), "the token is in sessionStorage only");
    client
        .find(Locator::Id("set-name"))
        .await
        .expect("the setting list")
        .select_by_value(weir::settings::INTERVAL)
        .await
        .expect("choose the checkpoint interval");
    let value = client
        .find(Locator::Id("set-value"))
        .await
        .expect("the value field");
    value.clear().await.expect("clear");
    value.send_keys("300ms").await.expect("type");
    click(client, "set-plan").await;
    let plan = until(
        client,
        "the setting's plan",
        "const b = document.getElementById('action-box');
         return !b.hidden && document.getElementById('action-plan').textContent;",
    )
    .await;
    let plan = plan.as_str().unwrap_or_default();
    assert!(
        plan.contains(weir::settings::INTERVAL) && plan.contains("applies live"),
        "{plan}"
    );
    click(client, "action-apply").await;
    let done = until(
        client,
        "the setting applied",
        "const r = document.getElementById('action-result');
         return r.classList.contains('done') && r.textContent;",
    )
    .await;
    assert!(
        done.as_str().unwrap_or_default().starts_with("Applied"),
        "{done}"
    );
    let config = get_json(base, &format!("/jobs/{id}/config"));
    assert_eq!(
        job.monitor().checkpoint_config().interval,
        Some(Duration::from_millis(300)),
        "{config}"
    );
    let shot = screenshot(client, out, "dashboard.png").await;
    if std::env::var("WEIR_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        let book = Path::new(env!("CARGO_MANIFEST_DIR")).join("../book/src/img/dashboard.png");
        std::fs::copy(&shot, &book).expect("update the book's screenshot");
    }

    // With the token a savepoint is taken: the page follows its trigger to the location.
    let savepoints = TempDir::new("dashboard-savepoints");
    let dir_field = client
        .find(Locator::Id("sp-dir"))
        .await
        .expect("the directory field");
    dir_field.clear().await.expect("clear");
    dir_field
        .send_keys(&savepoints.path().display().to_string())
        .await
        .expect("type the directory");
    click(client, "sp-plan").await;
    until(
        client,
        "the savepoint's plan",
        "return !document.getElementById('action-box').hidden;",
    )
    .await;
    click(client, "action-apply").await;
    let written = until(
        client,
        "the savepoint written",
        "const r = document.getElementById('action-result');
         return r.classList.contains('done') && r.textContent;",
    )
    .await;
    let written = written.as_str().unwrap_or_default();
    assert!(
        written.contains(&savepoints.path().display().to_string()),
        "the page shows where the savepoint is: {written}"
    );
    screenshot(client, out, "savepoint.png").await;

    // Every button can be reached with the keyboard; nothing left the server.
    let unreachable = client
        .execute(
            "return [...document.querySelectorAll('button')].filter(b => b.tabIndex < 0).map(b => b.id);",
            vec![],
        )
        .await
        .expect("the buttons");
    assert_eq!(unreachable, json!([]), "buttons out of the tab order");
    let outside = client
        .execute(
            "return performance.getEntriesByType('resource').map(e => e.name)
                .filter(n => !n.startsWith(location.origin + '/'));",
            vec![],
        )
        .await
        .expect("the network log");
    assert_eq!(outside, json!([]), "requests outside the server");
    let fit = client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            vec![],
        )
        .await
        .expect("the width");
    assert_eq!(fit, json!(true), "no horizontal scrolling at 1280x800");
    format!("/jobs/{id}/savepoints")
}
