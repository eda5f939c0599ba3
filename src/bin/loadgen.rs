//! `nac-loadgen`: a bounded load generator for nac's HTTPS webhook endpoints, loopback only.
//!
//! Opens `--concurrency` kept-alive connections (HTTP/1.1, or HTTP/2 with `--h2`), each with one request in
//! flight, POSTs the same pre-serialized AdmissionReview until `--duration` or `--requests` is reached, and
//! reports requests/s and latency percentiles. Exit status 1 when any request failed (a status other than 200, a
//! transport error, a timeout, or a first response that does not echo the request's uid) or `--requests` was not
//! reached in time; 2 when the run could not start (bad arguments, no connection).
#![warn(clippy::too_many_lines)]

use anyhow::{bail, Context};
use clap::Parser;
// The tests' HTTPS client, outside the library; the load generator uses part of it.
#[path = "../devtools/https_client.rs"]
#[allow(dead_code)]
mod https_client;

use https_client::{client_config, Conn};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEFAULT_BODY: &[u8] = include_bytes!("../../tests/fixtures/nab-create.json");
/// Longest run `--requests` alone may take; `--duration` is capped at the same value.
const MAX_DURATION_SECS: u64 = 3600;
const MAX_CONCURRENCY: usize = 1024;

#[derive(Parser, Debug)]
#[command(
    name = "nac-loadgen",
    version,
    about = "Load generator for nac's webhook endpoints (loopback only)"
)]
struct Args {
    /// Webhook listener address; must be a loopback address.
    #[arg(long, default_value = "127.0.0.1:9443")]
    addr: SocketAddr,
    /// PEM CA that signed the server certificate (`nac certs` writes ca.crt).
    #[arg(long)]
    ca_file: PathBuf,
    /// Endpoint to POST to.
    #[arg(long, default_value = "/validate/nonadminbackups")]
    path: String,
    /// AdmissionReview JSON to send (default: the nab-create fixture).
    #[arg(long)]
    body: Option<PathBuf>,
    #[arg(long, default_value = "application/json")]
    content_type: String,
    /// Connections, each kept alive with one request in flight.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Stop after this many seconds (default 10 unless --requests is given).
    #[arg(long)]
    duration: Option<u64>,
    /// Stop after this many requests in total.
    #[arg(long)]
    requests: Option<u64>,
    /// Unmeasured warm-up before the run, in seconds.
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Offer only h2 by ALPN (default: only http/1.1).
    #[arg(long)]
    h2: bool,
    /// Client runtime worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Per-request timeout in milliseconds; a timed-out request is an error.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Print the result as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// What one connection measured.
#[derive(Default)]
struct WorkerResult {
    /// Latencies of successful requests, in nanoseconds.
    latencies: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

struct Shared {
    cfg: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    path: String,
    content_type: String,
    body: Vec<u8>,
    /// The request uid, which the first response on every connection must echo.
    uid: Option<String>,
    timeout: Duration,
    /// Requests started so far, and the limit (u64::MAX: none).
    started: AtomicU64,
    limit: AtomicU64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("nac-loadgen: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> anyhow::Result<bool> {
    if !args.addr.ip().is_loopback() {
        bail!(
            "--addr {} is not a loopback address; nac-loadgen only targets this machine",
            args.addr
        );
    }
    if args.concurrency == 0 || args.concurrency > MAX_CONCURRENCY {
        bail!("--concurrency must be between 1 and {MAX_CONCURRENCY}");
    }
    if args.threads == 0 || args.threads > 64 {
        bail!("--threads must be between 1 and 64");
    }
    if args.requests == Some(0) {
        bail!("--requests must be at least 1");
    }
    let duration = match (args.duration, args.requests) {
        (Some(d), _) => d,
        (None, Some(_)) => MAX_DURATION_SECS,
        (None, None) => 10,
    };
    if duration == 0 || duration > MAX_DURATION_SECS || args.warmup > MAX_DURATION_SECS {
        bail!("--duration and --warmup must be at most {MAX_DURATION_SECS} seconds (and --duration at least 1)");
    }
    let ca = std::fs::read(&args.ca_file).with_context(|| format!("reading {}", args.ca_file.display()))?;
    let body = match &args.body {
        Some(p) => std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        None => DEFAULT_BODY.to_vec(),
    };
    let uid = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["request"]["uid"].as_str().map(str::to_string));
    let alpn: &[&[u8]] = if args.h2 { &[b"h2"] } else { &[b"http/1.1"] };
    let cfg = Arc::new(client_config(&ca, alpn, false)?);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let shared = Arc::new(Shared {
            cfg,
            addr: args.addr,
            path: args.path.clone(),
            content_type: args.content_type.clone(),
            body,
            uid,
            timeout: Duration::from_millis(args.timeout_ms),
            started: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
        });
        let mut conns = connect_all(&shared, args.concurrency, args.h2).await?;
        let mut warmup_errors = 0;
        if args.warmup > 0 {
            let (c, warm) = drive(&shared, conns, Duration::from_secs(args.warmup)).await;
            conns = c;
            warmup_errors = warm.iter().map(|r| r.errors).sum();
        }
        shared.started.store(0, Ordering::Relaxed);
        shared.limit.store(args.requests.unwrap_or(u64::MAX), Ordering::Relaxed);
        let start = Instant::now();
        let (_, results) = drive(&shared, conns, Duration::from_secs(duration)).await;
        let elapsed = start.elapsed();
        let report = Report::new(results, elapsed, warmup_errors);
        report.print(&args);
        if let Some(n) = args.requests {
            if report.requests + report.errors < n {
                eprintln!(
                    "nac-loadgen: stopped by the {duration}s limit after {} of {n} requests",
                    report.requests + report.errors
                );
                return Ok(false);
            }
        }
        Ok(report.errors == 0 && report.warmup_errors == 0)
    })
}

async fn connect_all(shared: &Shared, n: usize, h2: bool) -> anyhow::Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let c = Conn::connect(shared.addr, shared.cfg.clone())
            .await
            .with_context(|| format!("connecting to {} (connection {})", shared.addr, i + 1))?;
        let want: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
        if c.alpn.as_deref().unwrap_or(b"http/1.1") != want {
            bail!(
                "server negotiated {:?}, wanted {}",
                c.alpn.as_deref().map(String::from_utf8_lossy),
                String::from_utf8_lossy(want)
            );
        }
        conns.push(c);
    }
    Ok(conns)
}

/// Runs one task per connection until `duration` has passed or the request limit is reached.
async fn drive(shared: &Arc<Shared>, conns: Vec<Conn>, duration: Duration) -> (Vec<Conn>, Vec<WorkerResult>) {
    let deadline = tokio::time::Instant::now() + duration;
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|c| tokio::spawn(worker(shared.clone(), c, deadline)))
        .collect();
    let mut conns = Vec::with_capacity(tasks.len());
    let mut results = Vec::with_capacity(tasks.len());
    for t in tasks {
        match t.await {
            Ok((c, r)) => {
                conns.extend(c);
                results.push(r);
            }
            Err(e) => results.push(WorkerResult {
                errors: 1,
                first_error: Some(format!("worker failed: {e}")),
                ..WorkerResult::default()
            }),
        }
    }
    (conns, results)
}

async fn worker(shared: Arc<Shared>, conn: Conn, deadline: tokio::time::Instant) -> (Option<Conn>, WorkerResult) {
    let mut res = WorkerResult {
        latencies: Vec::with_capacity(4096),
        ..WorkerResult::default()
    };
    let mut conn = Some(conn);
    let mut check_uid = shared.uid.is_some();
    let fail = |res: &mut WorkerResult, msg: String| {
        res.errors += 1;
        if res.first_error.is_none() {
            res.first_error = Some(msg);
        }
    };
    while tokio::time::Instant::now() < deadline {
        if shared.started.fetch_add(1, Ordering::Relaxed) >= shared.limit.load(Ordering::Relaxed) {
            break;
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match tokio::time::timeout_at(deadline, Conn::connect(shared.addr, shared.cfg.clone())).await {
                Ok(Ok(c)) => {
                    check_uid = shared.uid.is_some();
                    conn.insert(c)
                }
                Ok(Err(e)) => {
                    fail(&mut res, format!("reconnect: {e:#}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(_) => break,
            },
        };
        let t0 = Instant::now();
        let sent = tokio::time::timeout(
            shared.timeout,
            c.post(&shared.path, &shared.content_type, shared.body.clone()),
        )
        .await;
        let nanos = t0.elapsed().as_nanos() as u64;
        match sent {
            Ok(Ok((200, body))) => {
                if check_uid {
                    check_uid = false;
                    let uid = shared.uid.as_deref().unwrap_or_default();
                    let echoed = serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .is_some_and(|v| v["response"]["uid"].as_str() == Some(uid));
                    if !echoed {
                        fail(
                            &mut res,
                            format!("response does not echo uid {uid}: {}", String::from_utf8_lossy(&body)),
                        );
                        continue;
                    }
                }
                res.latencies.push(nanos);
            }
            Ok(Ok((status, body))) => fail(
                &mut res,
                format!("HTTP {status}: {}", String::from_utf8_lossy(&body).trim()),
            ),
            Ok(Err(e)) => {
                fail(&mut res, format!("transport: {e:#}"));
                conn = None;
            }
            Err(_) => {
                fail(&mut res, format!("timed out after {:?}", shared.timeout));
                conn = None;
            }
        }
    }
    (conn, res)
}

struct Report {
    requests: u64,
    errors: u64,
    warmup_errors: u64,
    first_error: Option<String>,
    secs: f64,
    rps: f64,
    /// p50, p90, p99, max, mean in microseconds.
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

impl Report {
    fn new(results: Vec<WorkerResult>, elapsed: Duration, warmup_errors: u64) -> Report {
        let errors = results.iter().map(|r| r.errors).sum();
        let first_error = results.iter().find_map(|r| r.first_error.clone());
        let mut all: Vec<u64> = Vec::with_capacity(results.iter().map(|r| r.latencies.len()).sum());
        for r in results {
            all.extend(r.latencies);
        }
        all.sort_unstable();
        let pct = |p: f64| -> f64 {
            if all.is_empty() {
                return 0.0;
            }
            // Nearest rank.
            let rank = ((p / 100.0) * all.len() as f64).ceil().max(1.0) as usize;
            all[rank.min(all.len()) - 1] as f64 / 1000.0
        };
        let secs = elapsed.as_secs_f64();
        let mean = if all.is_empty() {
            0.0
        } else {
            all.iter().sum::<u64>() as f64 / all.len() as f64 / 1000.0
        };
        Report {
            requests: all.len() as u64,
            errors,
            warmup_errors,
            first_error,
            secs,
            rps: all.len() as f64 / secs,
            p50: pct(50.0),
            p90: pct(90.0),
            p99: pct(99.0),
            max: all.last().map_or(0.0, |m| *m as f64 / 1000.0),
            mean,
        }
    }

    fn print(&self, args: &Args) {
        let proto = if args.h2 { "h2" } else { "http/1.1" };
        if args.json {
            let v = serde_json::json!({
                "path": args.path,
                "protocol": proto,
                "concurrency": args.concurrency,
                "threads": args.threads,
                "seconds": self.secs,
                "requests": self.requests,
                "errors": self.errors,
                "warmup_errors": self.warmup_errors,
                "rps": self.rps,
                "p50_us": self.p50,
                "p90_us": self.p90,
                "p99_us": self.p99,
                "max_us": self.max,
                "mean_us": self.mean,
                "first_error": self.first_error,
            });
            println!("{v}");
            return;
        }
        println!(
            "{} {} {proto} concurrency {} ({} client threads), {:.1}s",
            args.addr, args.path, args.concurrency, args.threads, self.secs
        );
        println!(
            "  requests {}  errors {}  warm-up errors {}",
            self.requests, self.errors, self.warmup_errors
        );
        println!("  throughput {:.0} req/s", self.rps);
        println!(
            "  latency µs: p50 {:.0}  p90 {:.0}  p99 {:.0}  max {:.0}  mean {:.0}",
            self.p50, self.p90, self.p99, self.max, self.mean
        );
        if let Some(e) = &self.first_error {
            println!("  first error: {e}");
        }
    }
}
