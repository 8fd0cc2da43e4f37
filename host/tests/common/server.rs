//! A running `cordon serve` seen from outside: its operator's log read line by line, signals,
//! and raw HTTP requests to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a test waits for a log line or an answer.
pub const WAIT: Duration = Duration::from_secs(20);

/// How long a reload may take before a test fails (see [`Process::reload_finished`]).
const RELOAD_WAIT: Duration = Duration::from_secs(90);

/// A running `cordon serve`, its stderr (the operator's log) read line by line; killed when
/// dropped.
pub struct Process {
    pub child: Child,
    log: mpsc::Receiver<String>,
    /// Every log line read so far.
    pub seen: Vec<String>,
}

impl Process {
    /// Start `command` with `CORDON_LOG` set to `log_filter`.
    pub fn spawn_logging(mut command: Command, log_filter: &str) -> Self {
        let mut child = command.env("CORDON_LOG", log_filter).stderr(Stdio::piped()).spawn().unwrap();
        let log = super::wire::line_channel(child.stderr.take().unwrap());
        Self { child, log, seen: Vec::new() }
    }

    /// Start `command`, logging at `info`.
    pub fn spawn(command: Command) -> Self {
        Self::spawn_logging(command, "info")
    }

    /// Wait for a log line holding `needle`, after those already seen.
    pub fn wait_log(&mut self, needle: &str) -> String {
        self.wait_log_within(needle, WAIT)
    }

    /// Wait up to `wait` for a log line holding `needle`, after those already seen.
    pub fn wait_log_within(&mut self, needle: &str, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.log.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "no log line with {needle:?} within {wait:?}; the log so far:\n{}",
                    self.seen.join("\n")
                )
            });
            self.seen.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, signal) }, 0);
    }

    /// SIGHUP, and wait for the reload it causes to finish.
    pub fn reload(&mut self) -> String {
        self.signal(libc::SIGHUP);
        self.wait_log("SIGHUP");
        self.reload_finished()
    }

    /// Wait for a reload's summary line. A reload compiles at the lowest priority
    /// (`CompilePriority::Background`), so on a machine other processes keep busy (CI's,
    /// running the other tests and their builds) it gets little CPU: 90 s, where 20 s once
    /// ran out.
    pub fn reload_finished(&mut self) -> String {
        self.wait_log_within("reload:", RELOAD_WAIT)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Send one HTTP/1.1 request to `/mcp` on `port` (the connection closes after it) and
/// return the stream, its response head read (names lower-cased).
pub fn open_request(
    port: u16,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (BufReader<TcpStream>, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut head = format!("{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            return (reader, head);
        }
        head.push_str(&line.to_ascii_lowercase());
    }
}

/// The next SSE event of a chunked stream: `Some(data)` for a message, `None` at its end;
/// comment keep-alives are counted in `comments`.
pub fn next_event(reader: &mut BufReader<TcpStream>, comments: &mut usize) -> Option<serde_json::Value> {
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).ok()?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return None;
        }
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).unwrap();
        let chunk = String::from_utf8(chunk).unwrap();
        if chunk.starts_with(':') {
            *comments += 1;
            continue;
        }
        let data = chunk.trim().strip_prefix("data: ").unwrap_or_else(|| panic!("not an event: {chunk:?}"));
        return Some(serde_json::from_str(data).unwrap());
    }
}
