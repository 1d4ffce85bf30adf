//! An S3-compatible server for tests, with faults: [`S3Server`] starts moto's server
//! (`moto_server`, from the PyPI package `moto[server]`) on a free loopback port, behind a
//! fault proxy the test steers ([`S3Fault`]): answers of 503, a server that is down
//! (connections cut and refused), slow answers.
//!
//! Where `moto_server` is: `WEIR_S3_SERVER` (a path), else `moto_server` on `PATH`. `tests/run`
//! installs it (the version pinned in `.ci/s3-server.txt`) and sets `WEIR_S3_SERVER`; a test
//! that needs it is marked ignored when it is not there, and fails (never passes) if it
//! cannot start it.
//!
//! ```no_run
//! use weir_testing::s3::{S3Fault, S3Server};
//! let s3 = S3Server::start().expect("moto_server");
//! s3.create_bucket("checkpoints").unwrap();
//! let mut cfg = weir::EnvConfig::default();
//! cfg.checkpoint.directory = "s3://checkpoints/jobs".into();
//! cfg.checkpoint.storage_options = s3.options();
//! s3.set_fault(S3Fault::Unavailable); // every request answered 503 from now on
//! ```

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the proxy in front of the server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Fault {
    /// Requests go through.
    Healthy,
    /// Every request is answered `503 Service Unavailable` (the server is overloaded).
    Unavailable,
    /// Requests whose request line contains this (say `_metadata`) are answered 503; the
    /// others go through.
    UnavailableFor(&'static str),
    /// The server is down: open connections are cut, new ones closed at once.
    Down,
    /// Every chunk of every answer is held this long.
    Slow(Duration),
}

struct Proxy {
    fault: Mutex<S3Fault>,
    /// Bumped at each change of fault: connections of an earlier one are cut (unless healthy
    /// now).
    generation: AtomicU64,
    stop: AtomicBool,
    upstream: u16,
}

/// A moto S3 server on loopback behind a fault proxy; stopped when dropped.
pub struct S3Server {
    child: Child,
    proxy: Arc<Proxy>,
    port: u16,
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl S3Server {
    /// Starts the server and its proxy; fails naming what is missing when `moto_server`
    /// cannot be found or does not answer within 30 s.
    pub fn start() -> Result<S3Server, String> {
        let program = std::env::var("WEIR_S3_SERVER").unwrap_or_else(|_| "moto_server".into());
        let mut last = String::new();
        // A port found free may be taken before moto binds it (tests start servers in
        // parallel): moto then says nothing of running on it, and another one is tried.
        for _ in 0..5 {
            match Self::start_on(&program) {
                Ok(server) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_on(program: &str) -> Result<S3Server, String> {
        let upstream = free_port().map_err(|e| format!("no free port: {e}"))?;
        let mut child = Command::new(program)
            .args(["-H", "127.0.0.1", "-p", &upstream.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run the S3 test server `{program}` ({e}): install it with \
                     `pip install 'moto[server]==5.2.5'` and set WEIR_S3_SERVER to its \
                     moto_server (tests/run does)"
                )
            })?;
        // moto (werkzeug) says `Running on http://127.0.0.1:<port>` once it listens: this
        // process's server, not another test's on a reused port.
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                use std::io::BufRead;
                let mut told = false;
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    if !told && line.contains(&format!("127.0.0.1:{upstream}")) {
                        told = true;
                        let _ = tx.send(());
                    }
                }
            });
        }
        let listening = rx.recv_timeout(Duration::from_secs(30)).is_ok();
        if !listening {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(format!(
                "the S3 test server `{program}` did not listen on 127.0.0.1:{upstream} within 30 s ({status})"
            ));
        }
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot bind the proxy: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("proxy address: {e}"))?
            .port();
        let proxy = Arc::new(Proxy {
            fault: Mutex::new(S3Fault::Healthy),
            generation: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            upstream,
        });
        let p = proxy.clone();
        std::thread::Builder::new()
            .name("s3-fault-proxy".into())
            .spawn(move || accept(listener, p))
            .map_err(|e| format!("cannot start the proxy: {e}"))?;
        let server = S3Server { child, proxy, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.request("GET", "/", b"").is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "the S3 test server `{program}` did not answer within 30 s"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    /// `http://127.0.0.1:<port>` of the proxy: the endpoint clients use.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The object-store options that reach this server
    /// ([`weir::CheckpointConfig::storage_options`]).
    pub fn options(&self) -> Vec<(String, String)> {
        self.env()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect()
    }

    /// The same as environment variables (`AWS_ENDPOINT_URL`, ...), for a child process.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT".into(), self.endpoint()),
            ("AWS_ALLOW_HTTP".into(), "true".into()),
            ("AWS_ACCESS_KEY_ID".into(), "weir-test".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "weir-test".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
        ]
    }

    /// Creates bucket `name`.
    pub fn create_bucket(&self, name: &str) -> Result<(), String> {
        let status = self.request("PUT", &format!("/{name}"), b"")?;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(format!("creating bucket {name}: HTTP {status}"))
        }
    }

    /// The keys of the objects in `bucket` under `prefix`, through the proxy.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Result<Vec<String>, String> {
        let (status, body) = self.exchange(
            "GET",
            &format!("/{bucket}?list-type=2&prefix={prefix}&max-keys=100000"),
            b"",
        )?;
        if status != 200 {
            return Err(format!("listing {bucket}/{prefix}: HTTP {status}"));
        }
        let body = String::from_utf8_lossy(&body);
        Ok(body
            .split("<Key>")
            .skip(1)
            .filter_map(|s| s.split("</Key>").next())
            .map(str::to_owned)
            .collect())
    }

    /// From now on, the proxy does `fault`.
    pub fn set_fault(&self, fault: S3Fault) {
        let mut f = self.proxy.fault.lock().unwrap_or_else(|p| p.into_inner());
        *f = fault;
        self.proxy.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Object `key` of `bucket` and its ETag.
    pub fn get_object(&self, bucket: &str, key: &str) -> Result<(Vec<u8>, String), String> {
        let (status, head, body) =
            self.exchange_with("GET", &format!("/{bucket}/{key}"), "", b"")?;
        if status != 200 {
            return Err(format!("reading {bucket}/{key}: HTTP {status}"));
        }
        let etag = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("etag")
                    .then(|| value.trim().to_owned())
            })
            .ok_or_else(|| format!("reading {bucket}/{key}: no ETag in the answer"))?;
        Ok((body, etag))
    }

    /// Writes object `key` of `bucket` if its ETag is still `etag` (a conditional write,
    /// `If-Match`): `Ok(false)` if it changed since (HTTP 412), to read it again.
    pub fn put_object_if_match(
        &self,
        bucket: &str,
        key: &str,
        body: &[u8],
        etag: &str,
    ) -> Result<bool, String> {
        let (status, _, _) = self.exchange_with(
            "PUT",
            &format!("/{bucket}/{key}"),
            &format!("If-Match: {etag}\r\n"),
            body,
        )?;
        match status {
            200..=299 => Ok(true),
            412 => Ok(false),
            _ => Err(format!("writing {bucket}/{key}: HTTP {status}")),
        }
    }

    fn request(&self, method: &str, path: &str, body: &[u8]) -> Result<u16, String> {
        self.exchange(method, path, body).map(|(s, _)| s)
    }

    /// One HTTP/1.0 request to the server through the proxy: status and body.
    fn exchange(&self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
        self.exchange_with(method, path, "", body)
            .map(|(status, _, body)| (status, body))
    }

    /// [`exchange`](Self::exchange) with more header lines (each ending in CRLF); the
    /// answer's status, head and body.
    fn exchange_with(
        &self,
        method: &str,
        path: &str,
        headers: &str,
        body: &[u8],
    ) -> Result<(u16, String, Vec<u8>), String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        // moto checks no signature, but an object's private ACL keeps an anonymous
        // request out: the request names the test's access key.
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{headers}\
             Authorization: AWS4-HMAC-SHA256 Credential=weir-test/20260101/us-east-1/s3/aws4_request, \
             SignedHeaders=host, Signature=0\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
        s.write_all(body).map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&answer);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("not an HTTP answer: {:.80}", text))?;
        let at = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(answer.len(), |p| p + 4);
        let head = String::from_utf8_lossy(&answer[..at]).into_owned();
        Ok((status, head, answer[at..].to_vec()))
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.proxy.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn accept(listener: TcpListener, proxy: Arc<Proxy>) {
    for conn in listener.incoming() {
        if proxy.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = conn else { continue };
        let p = proxy.clone();
        let _ = std::thread::Builder::new()
            .name("s3-fault-conn".into())
            .spawn(move || serve(client, p));
    }
}

fn fault_of(proxy: &Proxy) -> S3Fault {
    *proxy.fault.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads one request's head and body (by its Content-Length) from `client`.
fn read_request(client: &mut TcpStream) -> Option<Vec<u8>> {
    let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
    let mut req = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let head_end = loop {
        if let Some(p) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        match client.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&req[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while req.len() < head_end + length {
        match client.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    Some(req)
}

fn answer_503(client: &mut TcpStream) {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>\
                <Message>injected by the test's fault proxy</Message></Error>";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(answer.as_bytes());
    let _ = client.shutdown(Shutdown::Both);
}

/// One client connection: refused, answered 503, or joined to the server.
fn serve(mut client: TcpStream, proxy: Arc<Proxy>) {
    let generation = proxy.generation.load(Ordering::SeqCst);
    match fault_of(&proxy) {
        S3Fault::Down => {
            let _ = client.shutdown(Shutdown::Both);
        }
        S3Fault::Unavailable => {
            // The whole request is read first: the client sees the 503, not a reset.
            let _ = read_request(&mut client);
            answer_503(&mut client);
        }
        S3Fault::UnavailableFor(pattern) => {
            // One request per connection (`Connection: close` to the server), so that each
            // one is looked at.
            let Some(req) = read_request(&mut client) else {
                return;
            };
            let line_end = req.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
            if String::from_utf8_lossy(&req[..line_end]).contains(pattern) {
                return answer_503(&mut client);
            }
            let Ok(mut server) = TcpStream::connect(("127.0.0.1", proxy.upstream)) else {
                let _ = client.shutdown(Shutdown::Both);
                return;
            };
            let mut forwarded = req[..line_end + 2].to_vec();
            forwarded.extend_from_slice(b"Connection: close\r\n");
            forwarded.extend_from_slice(&req[line_end + 2..]);
            if server.write_all(&forwarded).is_err() {
                return;
            }
            let mut answer = Vec::new();
            let _ = server.read_to_end(&mut answer);
            let _ = client.write_all(&answer);
            let _ = client.shutdown(Shutdown::Both);
        }
        S3Fault::Healthy | S3Fault::Slow(_) => {
            let Ok(server) = TcpStream::connect(("127.0.0.1", proxy.upstream)) else {
                let _ = client.shutdown(Shutdown::Both);
                return;
            };
            let (c2, s2) = match (client.try_clone(), server.try_clone()) {
                (Ok(c), Ok(s)) => (c, s),
                _ => return,
            };
            let p = proxy.clone();
            let up = std::thread::spawn(move || pump(client, server, &p, generation, false));
            pump(s2, c2, &proxy, generation, true);
            let _ = up.join();
        }
    }
}

/// Copies `from` to `to` until either closes, or the fault changes to one that cuts
/// connections. Answers (`answers`) are held per chunk when the fault is `Slow`.
fn pump(mut from: TcpStream, mut to: TcpStream, proxy: &Proxy, generation: u64, answers: bool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if proxy.stop.load(Ordering::SeqCst) {
            break;
        }
        let fault = fault_of(proxy);
        if proxy.generation.load(Ordering::SeqCst) != generation
            && !matches!(fault, S3Fault::Healthy | S3Fault::Slow(_))
        {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let (true, S3Fault::Slow(d)) = (answers, fault) {
                    std::thread::sleep(d);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
