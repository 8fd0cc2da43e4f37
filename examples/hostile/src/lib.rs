//! A component that attacks its host. Each tool makes the host hold something outside the
//! guest's linear memory, or reaches for what it was not granted, and says how far it got:
//!
//! - `hold_files(count, hold_ms)` opens one file `count` times and keeps every descriptor
//!   (a host file descriptor each) for `hold_ms`.
//! - `open_streams(count, hold_ms)` opens one file once and starts a read on `count`
//!   streams over it, each of which has the host fill a read buffer.
//! - `list_dir(times, hold_ms)` lists `/data` `times` times and reads none of the listings,
//!   which the host holds whole.
//! - `make_files(count)` creates `count` empty files in `/data/many`, to list.
//! - `symlink(target, link, dir)` makes `<dir>/<link>` (`dir`: a preopen, `/data` by
//!   default) a symbolic link to `target`.
//! - `read_text(path)` / `write_text(path, text)` read and write a file (`std::fs`).
//! - `read_at(dir, path)` / `write_at(dir, path, text)` open `path` relative to the preopen
//!   `dir` itself (no libc path resolution in between, so `..` reaches the host as is) and
//!   read it, or write `text` at its start with `descriptor.write`.
//! - `stream_write(dir, path, bytes)` writes `bytes` bytes to `path` under the preopen `dir`
//!   in one `output-stream.write`, asking `check-write` nothing first.
//! - `remove(path)` removes a file; `rename(from, to)` renames one (`hard_link(from, to)`
//!   names it twice); `set_size(path, size)`
//!   sets a file's length (creating it if missing); `hold_unlinked(dir, count, kib,
//!   by_rename, hold_ms)` fills `count` files of `kib` KiB, each held open once its name is
//!   removed (unlinked, or renamed over), and holds them all `hold_ms` more.
//! - `swap_loop(dir, name, target, ms)` keeps turning `name` under the preopen `dir` from
//!   a regular file into a symlink to `target` and back, for `ms`; `open_loop(dir, name,
//!   ms)` keeps opening `name` (following links) meanwhile: between the host's look at
//!   what a name is and its open, the name must not change.
//! - `park(ms)` waits in a host call (a WASI sleep) and never checks for cancellation.
//! - `poll_many(count, ms)` waits `ms` in one `poll` of a list naming one pollable `count`
//!   times.
//! - `alloc_mb(mb)` allocates and touches `mb` MiB of linear memory.
//! - `log_flood(count, bytes, then_create?)` writes `count` warning lines of `bytes` bytes
//!   each to its log as fast as it can (which a client that asked for logs would receive),
//!   then creates the file `then_create`, if named.
//! - `env_names()` lists the environment variables it sees; `env_var(name)` reads one.
//! - `http_get(url, times)` GETs `url` `times` times over `wasi:http` and says, a line per
//!   request, the status and body size or the error code; `http_hang(url)` sends one
//!   request and waits for its answer, never checking for cancellation;
//!   `http_left_open(url, cleanup_url)` sends one request, never drops it, leaves the
//!   cleanup note `fetch <cleanup_url>` (its cleanup then GETs `cleanup_url`) and returns as
//!   soon as it is asked to stop, the request still in flight.
//! - `http_post(url, kib, times, declare_length)` POSTs a body of `kib` KiB to `url` `times`
//!   times, chunked unless `declare_length`, writing until the host stops taking it, and
//!   says, a line per request, the status and the bytes written, or the error code.
//! - `http_keep(url, count, untaken, fields_only)` GETs `url` `count` times, one after
//!   another, and keeps every response (its head; the body never read); with `untaken`,
//!   takes none (`future-incoming-response.get`) until all have come; with `fields_only`,
//!   keeps each response's header fields (with `cloned`, a clone of them; with
//!   `into_requests`, an outgoing request made of them) and drops the response; with
//!   `trailers`, reads each body to its end and keeps its trailers.
//! - `http_hoard(count, fields_only)` builds `count` outgoing requests, each with a body
//!   written to until it takes no more, and sends none (with `fields_only`, only header
//!   fields; with `request_fields`, each request's `headers()`, the request dropped; with
//!   `cloned_fields`, `count` clones of one fields set of a 4 KiB name given 100 values); the
//!   host holds every one of them until the call ends. Says how many bodies
//!   it made and the bytes they buffer.
//! - `http_target(part, bytes)` builds a request and sets its `part` (`method`,
//!   `authority` or `path`) to a valid value `bytes` long; says `set` or `refused`.
//!
//! - `ask_forever()` asks the client for input in every round, whatever it answers.
//! - `ask(count, key_len, state_bytes)` asks `count` roots requests with keys of
//!   `key_len` characters and hands out `state_bytes` of state: over the host's bounds
//!   when told.
//! - `note_then_ask(note, note_bytes?, log_lines?, then_spin?)` leaves the cleanup note `note`
//!   (`note_bytes` of `n` instead, if given; `reserved 42` when absent; a cleanup given `sleep <ms>` takes that long, within its `cleanup_ms`),
//!   logs `log_lines` lines of 4,000 bytes (then creates `/data/asking`) and asks once
//!   (`roots/list`); answered, it returns `done` (with `then_spin`, it creates
//!   `/data/answered` and spins instead): a later round, or the cleanup of a call stopped
//!   between rounds, must still see the note.
//! - `ask_as_told(sample?, elicit?)` asks for the sampling (`sample`: its params) or the
//!   form (`elicit`: its schema) it is given, unchecked by itself; answered, returns
//!   `answered`.
//! - `ask_then_spin()` asks once, then spins forever (never checking for a stop) in the
//!   round that brings the answer, leaving the note `asked`.
//! - `progress_then_ask()` reports progress 0.5 of 1, asks for roots, and in the round
//!   that brings the answer counts again from nothing (0.25 of 1), each report left
//!   300 ms to be sent: a host that forwards each round's progress would send it falling.
//!
//! - `relist(extra, times)` makes its tool list carry one more tool, `extra`, and its
//!   resource list the resource `hostile://extra/<extra>` (neither when empty; `!panic`:
//!   the listing panics), through the file `/data/extra`, and says `lists-changed` `times`
//!   times.
//!
//! - `HOSTILE_PREFIX` (an environment variable) goes before the names of what
//!   `HOSTILE_RENAMED` lists of `tools`, `resources`, `templates` and `prompts`
//!   (comma-separated; `tools` when unset): tools become `<prefix><name>`, resources
//!   `hostile://<prefix>item/<n>`, the template `hostile://<prefix>spin/{label}`, the prompt
//!   `<prefix>spin`. A second copy of the component, given a prefix, offers its own names
//!   for those and the first's for the rest. `HOSTILE_TEMPLATE`, when set, is the
//!   template's URI template in place of that.
//!
//! - the resource template `hostile://spin/{label}` spins forever when read (it leaves the
//!   cleanup note `reading <label>` and, granted `/data`, the file `/data/reading-<label>`
//!   first), so only a hard stop ends the read.
//! - the prompt `spin(label)` spins forever when got, as the template does when read
//!   (note `prompting <label>`, file `/data/prompting-<label>`). With a label starting
//!   `panic`, either panics with `reading <label>` or `prompting <label>` instead.
//! - 150 resources `hostile://item/<n>`, more than one page of `resources/list`.
//!
//! Every tool answers with what it managed before the host refused, so a test sees where
//! the host drew the line; none of them cooperates with cancellation.

use std::time::Duration;

use cordon_guest::input::{Ask, Reply, Round};
use cordon_guest::{
    CleanupContext, Plugin, Prompt, Resource, ResourceBody, ResourceTemplate, Tool, ToolError,
};
use schemars::JsonSchema;
use serde::Deserialize;
use wasi::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags, PathFlags};

const DATA: &str = "/data";

/// The preopened `/data` directory.
fn data_dir() -> Result<Descriptor, ToolError> {
    preopen(DATA)
}

/// The directory preopened at `guest`.
fn preopen(guest: &str) -> Result<Descriptor, ToolError> {
    wasi::filesystem::preopens::get_directories()
        .into_iter()
        .find_map(|(dir, path)| (path == guest).then_some(dir))
        .ok_or_else(|| ToolError::new(format!("no {guest} directory was granted")))
}

fn data() -> String {
    DATA.to_owned()
}

/// `/data/hostile.bin`, 64 KiB long, created if missing.
fn victim_file(dir: &Descriptor) -> Result<Descriptor, ToolError> {
    let file = dir
        .open_at(
            PathFlags::empty(),
            "hostile.bin",
            OpenFlags::CREATE,
            DescriptorFlags::READ | DescriptorFlags::WRITE,
        )
        .map_err(|code| ToolError::new(format!("open hostile.bin: {code:?}")))?;
    if file.stat().map(|stat| stat.size).unwrap_or(0) < 65536 {
        file.write(&[7u8; 65536], 0).map_err(|code| ToolError::new(format!("write: {code:?}")))?;
    }
    Ok(file)
}

fn hold(ms: u64) {
    if ms > 0 {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

#[derive(Deserialize, JsonSchema)]
struct Count {
    /// How many.
    count: u32,
    /// How long to keep them before returning, in milliseconds.
    #[serde(default)]
    hold_ms: u64,
}

fn hold_files(args: Count) -> Result<String, ToolError> {
    let dir = data_dir()?;
    drop(victim_file(&dir)?);
    let mut files = Vec::new();
    let mut refusal = String::new();
    for _ in 0..args.count {
        match dir.open_at(PathFlags::empty(), "hostile.bin", OpenFlags::empty(), DescriptorFlags::READ) {
            Ok(file) => files.push(file),
            Err(code) => {
                refusal = format!(": {code:?}");
                break;
            }
        }
    }
    // The operator's log tells a test when the files are held.
    cordon_guest::log(cordon_guest::LogLevel::Info, &format!("holding {} files", files.len()));
    hold(args.hold_ms);
    Ok(format!("opened {} of {}{refusal}", files.len(), args.count))
}

fn open_streams(args: Count) -> Result<String, ToolError> {
    let dir = data_dir()?;
    let file = victim_file(&dir)?;
    let mut streams = Vec::new();
    let mut refusal = String::new();
    for _ in 0..args.count {
        match file.read_via_stream(0) {
            Ok(stream) => {
                // A non-blocking read starts a background read of up to 64 KiB into a
                // host buffer, which stays until the guest reads it.
                let _ = stream.read(65536);
                streams.push(stream);
            }
            Err(code) => {
                refusal = format!(": {code:?}");
                break;
            }
        }
    }
    // Wait until each buffer is filled, so the host holds them all.
    for stream in &streams {
        stream.subscribe().block();
    }
    hold(args.hold_ms);
    Ok(format!("opened {} of {} streams{refusal}", streams.len(), args.count))
}

#[derive(Deserialize, JsonSchema)]
struct Times {
    /// How many listings to take.
    times: u32,
    /// How long to keep them before returning, in milliseconds.
    #[serde(default)]
    hold_ms: u64,
}

fn list_dir(args: Times) -> Result<String, ToolError> {
    let dir = data_dir()?;
    let many = dir
        .open_at(PathFlags::empty(), "many", OpenFlags::DIRECTORY, DescriptorFlags::READ)
        .map_err(|code| ToolError::new(format!("open /data/many: {code:?}")))?;
    let mut listings = Vec::new();
    let mut refusal = String::new();
    for _ in 0..args.times {
        match many.read_directory() {
            Ok(listing) => listings.push(listing),
            Err(code) => {
                refusal = format!(": {code:?}");
                break;
            }
        }
    }
    hold(args.hold_ms);
    Ok(format!("took {} of {} listings{refusal}", listings.len(), args.times))
}

#[derive(Deserialize, JsonSchema)]
struct MakeFiles {
    /// How many empty files to create in `/data/many`.
    count: u32,
}

fn make_files(args: MakeFiles) -> Result<String, ToolError> {
    std::fs::create_dir_all("/data/many")?;
    for index in 0..args.count {
        std::fs::File::create(format!("/data/many/entry-with-a-long-name-{index:08}"))?;
    }
    Ok(format!("made {}", args.count))
}

#[derive(Deserialize, JsonSchema)]
struct Symlink {
    /// What the link points to, as written into it.
    target: String,
    /// The link's path under `dir`.
    link: String,
    /// The preopen to make it in.
    #[serde(default = "data")]
    dir: String,
}

fn symlink(args: Symlink) -> Result<String, ToolError> {
    let dir = preopen(&args.dir)?;
    match dir.symlink_at(&args.target, &args.link) {
        Ok(()) => Ok(format!("linked {} -> {}", args.link, args.target)),
        Err(code) => Err(ToolError::new(format!("symlink refused: {code:?}"))),
    }
}

#[derive(Deserialize, JsonSchema)]
struct ReadText {
    /// An absolute path in the guest.
    path: String,
}

fn read_text(args: ReadText) -> Result<String, ToolError> {
    Ok(std::fs::read_to_string(&args.path)?)
}

#[derive(Deserialize, JsonSchema)]
struct WriteText {
    /// An absolute path in the guest.
    path: String,
    text: String,
}

fn write_text(args: WriteText) -> Result<String, ToolError> {
    std::fs::write(&args.path, &args.text)?;
    Ok(format!("wrote {} bytes to {}", args.text.len(), args.path))
}

#[derive(Deserialize, JsonSchema)]
struct AtPath {
    /// A preopen's guest path.
    dir: String,
    /// A path relative to it, passed to the host as is.
    path: String,
}

fn read_at(args: AtPath) -> Result<String, ToolError> {
    let dir = preopen(&args.dir)?;
    let file = dir
        .open_at(PathFlags::SYMLINK_FOLLOW, &args.path, OpenFlags::empty(), DescriptorFlags::READ)
        .map_err(|code| ToolError::new(format!("open refused: {code:?}")))?;
    let mut text = Vec::new();
    loop {
        let (chunk, end) =
            file.read(65536, text.len() as u64).map_err(|code| ToolError::new(format!("read: {code:?}")))?;
        text.extend_from_slice(&chunk);
        if end || chunk.is_empty() {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

#[derive(Deserialize, JsonSchema)]
struct ReadThrough {
    /// A preopen's guest path.
    dir: String,
    /// A path relative to it.
    path: String,
    /// `stream` (an input stream's blocking reads) or `read` (the descriptor's `read`).
    via: String,
}

/// Read a whole file in 64 KiB reads, one way or the other, and answer only how many
/// bytes came: what file reads through the sandbox cost (`cargo bench --bench runtime
/// -- files`), with nothing else of the call's.
fn read_through(args: ReadThrough) -> Result<String, ToolError> {
    let dir = preopen(&args.dir)?;
    let file = dir
        .open_at(PathFlags::empty(), &args.path, OpenFlags::empty(), DescriptorFlags::READ)
        .map_err(|code| ToolError::new(format!("open refused: {code:?}")))?;
    let mut total = 0u64;
    match args.via.as_str() {
        "stream" => {
            let stream =
                file.read_via_stream(0).map_err(|code| ToolError::new(format!("no stream: {code:?}")))?;
            loop {
                match stream.blocking_read(65536) {
                    Ok(chunk) => total += chunk.len() as u64,
                    Err(wasi::io::streams::StreamError::Closed) => break,
                    Err(error) => return Err(ToolError::new(format!("read: {error:?}"))),
                }
            }
        }
        "read" => loop {
            let (chunk, end) =
                file.read(65536, total).map_err(|code| ToolError::new(format!("read: {code:?}")))?;
            total += chunk.len() as u64;
            if end || chunk.is_empty() {
                break;
            }
        },
        other => return Err(ToolError::new(format!("via {other:?}: `stream` or `read`"))),
    }
    Ok(format!("read {total} bytes"))
}

#[derive(Deserialize, JsonSchema)]
struct WriteAt {
    /// A preopen's guest path.
    dir: String,
    /// A path relative to it, passed to the host as is.
    path: String,
    text: String,
}

fn write_at(args: WriteAt) -> Result<String, ToolError> {
    let dir = preopen(&args.dir)?;
    let file = dir
        .open_at(PathFlags::SYMLINK_FOLLOW, &args.path, OpenFlags::CREATE, DescriptorFlags::WRITE)
        .map_err(|code| ToolError::new(format!("open refused: {code:?}")))?;
    let written = file
        .write(args.text.as_bytes(), 0)
        .map_err(|code| ToolError::new(format!("write refused: {code:?}")))?;
    Ok(format!("wrote {written} bytes"))
}

#[derive(Deserialize, JsonSchema)]
struct HoldUnlinked {
    /// A preopen's guest path, e.g. `/data`.
    dir: String,
    /// How many files to fill, hold open and remove.
    count: u32,
    /// KiB to write into each.
    kib: u32,
    /// Whether to remove each by renaming another file over it, not by unlinking it.
    #[serde(default)]
    by_rename: bool,
    /// How long to keep holding them all once done, in milliseconds.
    #[serde(default)]
    hold_ms: u64,
}

/// Fill a file, keep it open, remove its name, and again: each file's blocks stay on disk
/// while it is held. Says how many were filled whole, and the first refusal.
fn hold_unlinked(args: HoldUnlinked) -> Result<String, ToolError> {
    let dir = preopen(&args.dir)?;
    let chunk = vec![b'u'; 64 << 10];
    let mut held = Vec::new();
    for index in 0..args.count {
        let name = format!("unlinked-{index}");
        let file = dir
            .open_at(
                PathFlags::empty(),
                &name,
                OpenFlags::CREATE,
                DescriptorFlags::READ | DescriptorFlags::WRITE,
            )
            .map_err(|code| ToolError::new(format!("open refused: {code:?}")))?;
        let (mut written, size) = (0u64, u64::from(args.kib) << 10);
        while written < size {
            let part = &chunk[..chunk.len().min((size - written) as usize)];
            match file.write(part, written) {
                Ok(count) => written += count,
                Err(code) => return Ok(format!("filled {index}, then {code:?}")),
            }
        }
        let removed = if args.by_rename {
            drop(dir.open_at(PathFlags::empty(), "over", OpenFlags::CREATE, DescriptorFlags::WRITE));
            dir.rename_at("over", &dir, &name)
        } else {
            dir.unlink_file_at(&name)
        };
        removed.map_err(|code| ToolError::new(format!("remove refused: {code:?}")))?;
        held.push(file);
    }
    hold(args.hold_ms);
    Ok(format!("filled {}", held.len()))
}

#[derive(Deserialize, JsonSchema)]
struct StreamWrite {
    /// A preopen's guest path, e.g. `/data`.
    dir: String,
    /// A path relative to it.
    path: String,
    /// How many bytes to write at once.
    bytes: u32,
}

fn stream_write(args: StreamWrite) -> Result<String, ToolError> {
    let dir = preopen(&args.dir)?;
    let file = dir
        .open_at(PathFlags::empty(), &args.path, OpenFlags::CREATE, DescriptorFlags::WRITE)
        .map_err(|code| ToolError::new(format!("open refused: {code:?}")))?;
    let stream = file.write_via_stream(0).map_err(|code| ToolError::new(format!("no stream: {code:?}")))?;
    stream
        .write(&vec![b'w'; args.bytes as usize])
        .map_err(|error| ToolError::new(format!("write refused: {error:?}")))?;
    stream.blocking_flush().map_err(|error| ToolError::new(format!("flush failed: {error:?}")))?;
    Ok(format!("wrote {} bytes", args.bytes))
}

#[derive(Deserialize, JsonSchema)]
struct Remove {
    /// An absolute path in the guest.
    path: String,
}

fn remove(args: Remove) -> Result<String, ToolError> {
    std::fs::remove_file(&args.path)?;
    Ok(format!("removed {}", args.path))
}

#[derive(Deserialize, JsonSchema)]
struct Rename {
    /// An absolute path in the guest.
    from: String,
    /// An absolute path in the guest.
    to: String,
}

fn rename(args: Rename) -> Result<String, ToolError> {
    std::fs::rename(&args.from, &args.to)?;
    Ok(format!("renamed {} to {}", args.from, args.to))
}

/// A second name for what `from` names (a symlink itself, not its target).
fn hard_link(args: Rename) -> Result<String, ToolError> {
    std::fs::hard_link(&args.from, &args.to)?;
    Ok(format!("linked {} as {}", args.from, args.to))
}

#[derive(Deserialize, JsonSchema)]
struct SwapLoop {
    /// The preopen to work in.
    dir: String,
    /// The name that keeps changing.
    name: String,
    /// What it points to while it is a symlink.
    target: String,
    /// How long to keep at it, in milliseconds.
    ms: u64,
}

fn swap_loop(args: SwapLoop) -> Result<String, ToolError> {
    let dir = preopen(&args.dir)?;
    let link = format!("{}.link", args.name);
    let deadline = std::time::Instant::now() + Duration::from_millis(args.ms);
    let mut swaps = 0;
    while std::time::Instant::now() < deadline {
        let _ = dir.unlink_file_at(&args.name);
        let _ = dir.open_at(PathFlags::empty(), &args.name, OpenFlags::CREATE, DescriptorFlags::WRITE);
        let _ = dir.symlink_at(&args.target, &link);
        // Atomically: a regular file one moment, a symlink the next.
        if dir.rename_at(&link, &dir, &args.name).is_ok() {
            swaps += 1;
        }
    }
    Ok(format!("{swaps} swaps"))
}

#[derive(Deserialize, JsonSchema)]
struct OpenLoop {
    /// The preopen to work in.
    dir: String,
    /// The name to open.
    name: String,
    /// How long to keep at it, in milliseconds.
    ms: u64,
}

fn open_loop(args: OpenLoop) -> Result<String, ToolError> {
    let dir = preopen(&args.dir)?;
    let deadline = std::time::Instant::now() + Duration::from_millis(args.ms);
    let (mut opened, mut refused) = (0, 0);
    while std::time::Instant::now() < deadline {
        match dir.open_at(PathFlags::SYMLINK_FOLLOW, &args.name, OpenFlags::empty(), DescriptorFlags::READ) {
            Ok(_) => opened += 1,
            Err(_) => refused += 1,
        }
    }
    Ok(format!("{opened} opened, {refused} refused"))
}

#[derive(Deserialize, JsonSchema)]
struct SetSize {
    /// An absolute path in the guest.
    path: String,
    /// The new length in bytes.
    size: u64,
}

fn set_size(args: SetSize) -> Result<String, ToolError> {
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&args.path)?;
    file.set_len(args.size)?;
    Ok(format!("{} is {} bytes long", args.path, args.size))
}

#[derive(Deserialize, JsonSchema)]
struct Park {
    /// How long to wait in the host, in milliseconds.
    ms: u64,
    /// KiB of linear memory to write before waiting.
    #[serde(default)]
    touch_kb: usize,
}

fn park(args: Park) -> Result<String, ToolError> {
    let touched = vec![1u8; args.touch_kb << 10];
    hold(args.ms);
    std::hint::black_box(&touched);
    Ok(format!("parked {} ms", args.ms))
}

#[derive(Deserialize, JsonSchema)]
struct PollMany {
    /// How many times the one pollable appears in the list.
    count: u32,
    /// When it is ready, in milliseconds.
    ms: u64,
}

fn poll_many(args: PollMany) -> Result<String, ToolError> {
    let pollable = wasi::clocks::monotonic_clock::subscribe_duration(args.ms * 1_000_000);
    let list = vec![&pollable; args.count as usize];
    let ready = wasi::io::poll::poll(&list);
    Ok(format!("ready {}", ready.len()))
}

#[derive(Deserialize, JsonSchema)]
struct Alloc {
    /// MiB of linear memory to allocate and touch.
    mb: u32,
}

fn alloc_mb(args: Alloc) -> Result<String, ToolError> {
    let mut blocks = Vec::new();
    for _ in 0..args.mb {
        blocks.push(vec![1u8; 1 << 20]);
    }
    Ok(format!("allocated {} MiB", blocks.len()))
}

#[derive(Deserialize, JsonSchema)]
struct LogFlood {
    /// Lines to write.
    count: u32,
    /// Bytes per line.
    bytes: u32,
    /// A file to create once every line is written: a test's sign that the tool returns.
    #[serde(default)]
    then_create: Option<String>,
}

fn log_flood(args: LogFlood) -> Result<String, ToolError> {
    let line = "x".repeat(args.bytes as usize);
    for _ in 0..args.count {
        cordon_guest::log(cordon_guest::LogLevel::Warn, &line);
    }
    if let Some(path) = &args.then_create {
        std::fs::write(path, b"").map_err(|error| ToolError::new(format!("{path}: {error}")))?;
    }
    Ok(format!("logged {} lines", args.count))
}

fn env_names(_: Empty) -> Result<String, ToolError> {
    let mut names: Vec<String> = std::env::vars().map(|(name, _)| name).collect();
    names.sort();
    Ok(names.join(","))
}

#[derive(Deserialize, JsonSchema)]
struct Empty {}

#[derive(Deserialize, JsonSchema)]
struct EnvVar {
    /// The variable's name.
    name: String,
}

fn env_var(args: EnvVar) -> Result<String, ToolError> {
    Ok(std::env::var(&args.name).unwrap_or_else(|_| "(unset)".into()))
}

#[derive(Deserialize, JsonSchema)]
struct Relist {
    /// The extra tool's name ("": none; "!panic": the listing panics).
    extra: String,
    /// How many times to say `lists-changed`.
    times: u32,
}

fn relist(args: Relist) -> Result<String, ToolError> {
    let path = format!("{DATA}/extra");
    if args.extra.is_empty() {
        let _ = std::fs::remove_file(&path);
    } else {
        std::fs::write(&path, &args.extra)?;
    }
    for _ in 0..args.times {
        cordon_guest::lists_changed();
    }
    Ok(format!("said lists-changed {} times", args.times))
}

fn extra(_: Nothing) -> Result<String, ToolError> {
    Ok("the extra tool".into())
}

struct Hostile;

impl Plugin for Hostile {
    fn tools() -> Vec<Tool> {
        let extra_tool = std::fs::read_to_string(format!("{DATA}/extra")).unwrap_or_default();
        if extra_tool == "!panic" {
            panic!("the tool list cannot be built");
        }
        // A listing that takes its time (and succeeds): an extra tool named `slow_...`.
        if extra_tool.starts_with("slow_") {
            std::thread::sleep(Duration::from_millis(400));
        }
        let named = |tool: &str| format!("{}{tool}", prefix_of("tools"));
        let mut tools = vec![
            Tool::new(
                &named("hold_files"),
                "Opens one file many times and keeps every descriptor.",
                hold_files,
            ),
            Tool::new(&named("open_streams"), "Starts a read on many streams over one file.", open_streams),
            Tool::new(
                &named("list_dir"),
                "Lists /data/many many times, reading none of the listings.",
                list_dir,
            ),
            Tool::new(&named("make_files"), "Creates empty files in /data/many.", make_files),
            Tool::new(&named("symlink"), "Makes a symbolic link under /data.", symlink),
            Tool::new(&named("read_text"), "Reads a file.", read_text),
            Tool::new(&named("write_text"), "Writes a file.", write_text),
            Tool::new(&named("read_at"), "Reads a file relative to a preopen.", read_at),
            Tool::new(&named("write_at"), "Writes a file relative to a preopen.", write_at),
            Tool::new(&named("read_through"), "Reads a whole file, answering only its size.", read_through),
            Tool::new(&named("stream_write"), "Writes a file in one stream write, unasked.", stream_write),
            Tool::new(&named("remove"), "Removes a file.", remove),
            Tool::new(
                &named("hold_unlinked"),
                "Fills files, holds them open and removes their names.",
                hold_unlinked,
            ),
            Tool::new(&named("rename"), "Renames a file.", rename),
            Tool::new(&named("hard_link"), "Gives a file a second name.", hard_link),
            Tool::new(&named("swap_loop"), "Keeps turning a file into a symlink and back.", swap_loop),
            Tool::new(&named("open_loop"), "Keeps opening a name.", open_loop),
            Tool::new(&named("set_size"), "Sets a file's length.", set_size),
            Tool::new(&named("park"), "Waits in a host call, never checking for cancellation.", park),
            Tool::new(&named("poll_many"), "Waits on one pollable listed many times.", poll_many),
            Tool::new(&named("alloc_mb"), "Allocates and touches linear memory.", alloc_mb),
            Tool::new(&named("log_flood"), "Writes many lines to its log as fast as it can.", log_flood),
            Tool::new(&named("env_names"), "Lists the environment variables the component sees.", env_names),
            Tool::new(&named("env_var"), "Reads an environment variable.", env_var),
            Tool::new(&named("http_get"), "GETs a URL many times and says how each went.", http_get),
            Tool::new(
                &named("http_hoard"),
                "Builds HTTP requests with full bodies and sends none.",
                http_hoard,
            ),
            Tool::new(&named("http_keep"), "GETs a URL many times and keeps every response.", http_keep),
            Tool::new(&named("http_post"), "POSTs large bodies and says how each went.", http_post),
            Tool::new(
                &named("http_target"),
                "Sets a request's method, authority or path, as long as told.",
                http_target,
            ),
            Tool::new(
                &named("http_hang"),
                "Waits for an HTTP answer, never checking for cancellation.",
                http_hang,
            ),
            Tool::new(
                &named("http_left_open"),
                "Sends a request and returns when asked to stop, leaving it in flight.",
                http_left_open,
            ),
            Tool::new(&named("panic"), "Leaves a note, then panics with the message it is given.", panic),
            Tool::asking(&named("ask_forever"), "Asks for input in every round.", ask_forever),
            Tool::asking(
                &named("ask"),
                "Asks as many inputs, with keys and state as long, as it is told.",
                ask,
            ),
            Tool::asking(&named("ask_then_spin"), "Asks once, then spins forever.", ask_then_spin),
            Tool::asking(
                &named("ask_as_told"),
                "Asks for the sampling or the form it is given, as given; answered, returns `answered`.",
                ask_as_told,
            ),
            Tool::asking(
                &named("note_then_ask"),
                "Leaves the cleanup note `reserved 42`, then asks once; answered, returns `done`.",
                note_then_ask,
            ),
            Tool::asking(
                &named("progress_then_ask"),
                "Reports progress, asks once, and counts again from nothing.",
                progress_then_ask,
            ),
            Tool::new(&named("relist"), "Adds a tool to its list (through /data/extra) and says so.", relist),
        ];
        if !extra_tool.is_empty() {
            tools.push(Tool::new(&named(&extra_tool), "Listed while /data/extra names it.", extra));
        }
        tools
    }

    /// Writes why the call stopped to `/data/cleanup-reason`, for the tests to read.
    fn resources() -> Vec<Resource> {
        // HOSTILE_DESCRIPTION_BYTES: each item described at that length, to make the list large.
        let padding = std::env::var("HOSTILE_DESCRIPTION_BYTES").ok().and_then(|bytes| bytes.parse().ok());
        let mut resources: Vec<Resource> = (0..150)
            .map(|item| {
                let uri = format!("hostile://{}item/{item}", prefix_of("resources"));
                let resource = Resource::new(&uri, &format!("item-{item}"), move || {
                    Ok(ResourceBody::text(format!("item {item}")))
                });
                match padding {
                    Some(bytes) => resource.description(&format!("{item:x}").repeat(bytes).split_at(bytes).0),
                    None => resource,
                }
            })
            .collect();
        let extra = std::fs::read_to_string(format!("{DATA}/extra")).unwrap_or_default();
        if !extra.is_empty() {
            resources.push(Resource::new(&format!("hostile://extra/{extra}"), "extra", || {
                Ok(ResourceBody::text("the extra resource"))
            }));
        }
        resources
    }

    fn resource_templates() -> Vec<ResourceTemplate> {
        vec![
            ResourceTemplate::new(
                &std::env::var("HOSTILE_TEMPLATE")
                    .unwrap_or_else(|_| format!("hostile://{}spin/{{label}}", prefix_of("templates"))),
                "spin",
                |found| spin_leaving("reading", found.get("label").unwrap_or_default()),
            )
            .description("Spins forever when read, never checking for a stop."),
        ]
    }

    fn prompts() -> Vec<Prompt> {
        vec![
            Prompt::new(&format!("{}spin", prefix_of("prompts")), "Spins forever when got.", |arguments| {
                spin_leaving("prompting", arguments.required("label")?)
            })
            .argument("label", "Named in the cleanup note and the file left.", true),
        ]
    }

    fn cleanup(context: CleanupContext) {
        let _ =
            std::fs::write("/data/cleanup-reason", format!("{:?} {:?}", context.reason, context.note_text()));
        // Which request it cleaned up after: a tool's name, or a method (`resources/read`).
        let _ = std::fs::write("/data/cleanup-request", &context.tool);
        if let Some(url) = context.note_text().and_then(|note| note.strip_prefix("fetch ")) {
            let _ = fetch(url);
        }
        // A slow cleanup: `sleep <ms>`, after the files above are written.
        if let Some(ms) = context.note_text().and_then(|note| note.strip_prefix("sleep ")?.parse().ok()) {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
}

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

fn ask_forever(_: Nothing, round: &Round) -> Result<Reply<String>, ToolError> {
    let asked = round.state().map_or(0, |state| state.len());
    Ok(Ask::new().list_roots("again").state(vec![b'x'; asked + 1]).into())
}

#[derive(Deserialize, JsonSchema)]
struct AskArgs {
    count: usize,
    key_len: usize,
    state_bytes: usize,
}

fn ask(args: AskArgs, _: &Round) -> Result<Reply<String>, ToolError> {
    let mut ask = Ask::new();
    for n in 0..args.count {
        let key = format!("{n}{}", "k".repeat(args.key_len.saturating_sub(n.to_string().len())));
        ask = ask.list_roots(&key);
    }
    Ok(ask.state(vec![0; args.state_bytes]).into())
}

fn ask_then_spin(_: Nothing, round: &Round) -> Result<Reply<String>, ToolError> {
    if round.response("roots").is_none() {
        return Ok(Ask::new().list_roots("roots").into());
    }
    cordon_guest::set_cleanup_note(b"asked");
    spin()
}

#[derive(Deserialize, JsonSchema)]
struct AskAsTold {
    /// `sampling/createMessage` params to ask with, as given.
    #[serde(default)]
    sample: Option<serde_json::Value>,
    /// A form's schema to ask to fill in.
    #[serde(default)]
    elicit: Option<serde_json::Value>,
}

fn ask_as_told(args: AskAsTold, round: &Round) -> Result<Reply<String>, ToolError> {
    if round.response("told").is_some() {
        return Ok(Reply::Done("answered".into()));
    }
    let ask = match (args.sample, args.elicit) {
        (Some(params), _) => Ask::new().sample("told", params),
        (None, Some(schema)) => Ask::new().elicit("told", "As told", schema),
        (None, None) => return Err(ToolError::new("tell it `sample` or `elicit`")),
    };
    Ok(ask.into())
}

#[derive(Deserialize, JsonSchema)]
struct NoteThenAsk {
    /// The note to leave (`reserved 42` when absent).
    #[serde(default)]
    note: Option<String>,
    /// Instead, a note of this many bytes.
    #[serde(default)]
    note_bytes: Option<usize>,
    /// Warning lines of 4,000 bytes to log before asking; with any, the file `/data/asking`
    /// is created just before the round returns (a test's sign that it has).
    #[serde(default)]
    log_lines: u32,
    /// Answered, spin (leaving no note of its own, so a cleanup sees the first round's)
    /// after creating `/data/answered`, instead of returning.
    #[serde(default)]
    then_spin: bool,
}

fn note_then_ask(args: NoteThenAsk, round: &Round) -> Result<Reply<String>, ToolError> {
    if round.response("roots").is_none() {
        let note = match args.note_bytes {
            Some(bytes) => "n".repeat(bytes),
            None => args.note.unwrap_or_else(|| "reserved 42".to_owned()),
        };
        cordon_guest::set_cleanup_note(note.as_bytes());
        if args.log_lines > 0 {
            let line = "x".repeat(4000);
            for _ in 0..args.log_lines {
                cordon_guest::log(cordon_guest::LogLevel::Warn, &line);
            }
            let _ = std::fs::write(format!("{DATA}/asking"), "");
        }
        return Ok(Ask::new().list_roots("roots").into());
    }
    if args.then_spin {
        let _ = std::fs::write(format!("{DATA}/answered"), "");
        spin();
    }
    Ok(Reply::Done("done".into()))
}

fn progress_then_ask(_: Nothing, round: &Round) -> Result<Reply<String>, ToolError> {
    // Each report is given time to be sent before the round ends.
    let settle = std::time::Duration::from_millis(300);
    if round.response("roots").is_none() {
        cordon_guest::progress(0.5, Some(1.0), "before asking");
        std::thread::sleep(settle);
        return Ok(Ask::new().list_roots("roots").into());
    }
    cordon_guest::progress(0.25, Some(1.0), "after asking");
    std::thread::sleep(settle);
    Ok(Reply::Done("counted twice".into()))
}

/// Leaves the cleanup note `<what> <label>` and (granted `/data`) the file
/// `/data/<what>-<label>`, then spins.
fn spin_leaving(what: &str, label: &str) -> ! {
    cordon_guest::set_cleanup_note(format!("{what} {label}").as_bytes());
    // The SDK's one-line panic message, in a request that is no tool call.
    if label.starts_with("panic") {
        panic!("{what} {label}");
    }
    let _ = std::fs::write(format!("{DATA}/{what}-{label}"), "");
    spin()
}

/// Spins forever, never checking for a stop.
fn spin() -> ! {
    let mut turns = 0u64;
    loop {
        turns = std::hint::black_box(turns.wrapping_add(1));
    }
}

/// `HOSTILE_PREFIX` where `HOSTILE_RENAMED` lists `kind` (`tools` when it is unset).
fn prefix_of(kind: &str) -> String {
    let renamed = std::env::var("HOSTILE_RENAMED").unwrap_or_else(|_| "tools".into());
    let prefix = std::env::var("HOSTILE_PREFIX").unwrap_or_default();
    if renamed.split(',').any(|listed| listed.trim() == kind) { prefix } else { String::new() }
}

#[derive(Deserialize, JsonSchema)]
struct PanicArgs {
    /// The panic's message.
    message: String,
}

fn panic(args: PanicArgs) -> Result<String, ToolError> {
    cordon_guest::set_cleanup_note(b"before the panic");
    panic!("{}", args.message)
}

#[derive(Deserialize, JsonSchema)]
struct HttpGet {
    /// `http://` or `https://` URL.
    url: String,
    /// How many requests, one after the other.
    #[serde(default = "one")]
    times: u32,
}

fn one() -> u32 {
    1
}

fn http_get(args: HttpGet) -> Result<String, ToolError> {
    let lines: Vec<String> = (0..args.times)
        .map(|_| match fetch(&args.url) {
            Ok((status, size)) => format!("{status} {size}"),
            Err(error) => format!("error {error}"),
        })
        .collect();
    Ok(lines.join("\n"))
}

#[derive(Deserialize, JsonSchema)]
struct HttpPost {
    /// `http://` or `https://` URL.
    url: String,
    /// The body's size in KiB.
    kib: u32,
    /// How many requests, one after the other.
    #[serde(default = "one")]
    times: u32,
    /// Send `content-length` (else the body goes chunked).
    #[serde(default)]
    declare_length: bool,
}

fn http_post(args: HttpPost) -> Result<String, ToolError> {
    let lines: Vec<String> = (0..args.times)
        .map(|_| match post(&args.url, args.kib as usize * 1024, args.declare_length) {
            Ok((status, written)) => format!("{status} {written}"),
            Err(error) => format!("error {error}"),
        })
        .collect();
    Ok(lines.join("\n"))
}

#[derive(Deserialize, JsonSchema)]
struct HttpTarget {
    /// `method`, `authority` or `path`.
    part: String,
    /// The value's length.
    bytes: u32,
}

fn http_target(args: HttpTarget) -> Result<String, ToolError> {
    use wasi::http::types::{Fields, Method, OutgoingRequest};
    let request = OutgoingRequest::new(Fields::new());
    let bytes = args.bytes as usize;
    let set = match args.part.as_str() {
        "method" => request.set_method(&Method::Other("X".repeat(bytes))),
        "authority" => request.set_authority(Some(&"a".repeat(bytes))),
        "path" => request.set_path_with_query(Some(&format!("/{}", "p".repeat(bytes.saturating_sub(1))))),
        other => return Err(ToolError::new(format!("no part {other}"))),
    };
    Ok(if set.is_ok() { "set" } else { "refused" }.to_owned())
}

#[derive(Deserialize, JsonSchema)]
struct HttpHang {
    /// A URL that answers slowly or never.
    url: String,
}

fn http_hang(args: HttpHang) -> Result<String, ToolError> {
    match fetch(&args.url) {
        Ok((status, size)) => Ok(format!("{status} {size}")),
        Err(error) => Ok(format!("error {error}")),
    }
}

#[derive(Deserialize, JsonSchema)]
struct HttpLeftOpen {
    /// A URL that answers slowly or never.
    url: String,
    /// What the cleanup GETs.
    cleanup_url: String,
}

fn http_left_open(args: HttpLeftOpen) -> Result<String, ToolError> {
    use wasi::http::types::{Fields, Method};
    let request = request_to(&args.url, &Method::Get, Fields::new()).map_err(ToolError::new)?;
    let response =
        wasi::http::outgoing_handler::handle(request, None).map_err(|error| ToolError::new(code(error)))?;
    // Never dropped: only the host ends it.
    std::mem::forget(response);
    cordon_guest::set_cleanup_note(format!("fetch {}", args.cleanup_url).as_bytes());
    while cordon_guest::check_cancelled().is_ok() {
        wasi::clocks::monotonic_clock::subscribe_duration(1_000_000).block();
    }
    Err(ToolError::new("asked to stop: returning with the request in flight"))
}

#[derive(Deserialize, JsonSchema)]
struct Hoard {
    /// How many requests (or header field sets).
    count: u32,
    /// Build header field sets only.
    #[serde(default)]
    fields_only: bool,
    /// Build requests and keep only their `headers()`, dropping each request.
    #[serde(default)]
    request_fields: bool,
    /// Keep `count` clones of one fields set whose long name has many values.
    #[serde(default)]
    cloned_fields: bool,
    /// Finish each request's body at once, with a trailer section, and keep the request.
    #[serde(default)]
    trailers: bool,
}

fn http_hoard(args: Hoard) -> Result<String, ToolError> {
    use wasi::http::types::{Fields, OutgoingBody, OutgoingRequest};
    let value = vec![b'v'; 1024];
    let (mut held, mut fields, mut buffered) = (Vec::new(), Vec::new(), 0usize);
    let mut finished = Vec::new();
    if args.cloned_fields {
        let name = format!("x-{}", "n".repeat(4094));
        let entries: Vec<(String, Vec<u8>)> = (0..100).map(|_| (name.clone(), b"v".to_vec())).collect();
        let source = Fields::from_list(&entries).map_err(|error| ToolError::new(format!("{error:?}")))?;
        fields.extend((0..args.count).map(|_| source.clone()));
    }
    for index in 0..args.count * u32::from(!args.cloned_fields) {
        let headers = Fields::from_list(&[("x-hoard".to_owned(), value.clone())])
            .map_err(|error| ToolError::new(format!("{error:?}")))?;
        if args.fields_only {
            fields.push(headers);
            continue;
        }
        let request = OutgoingRequest::new(headers);
        if args.request_fields {
            fields.push(request.headers());
            continue;
        }
        let Ok(body) = request.body() else {
            return Ok(format!("bodies {index} of {} buffering {buffered}", args.count));
        };
        if args.trailers {
            let trailers = Fields::from_list(&[("x-trailer".to_owned(), value.clone())])
                .map_err(|error| ToolError::new(format!("{error:?}")))?;
            OutgoingBody::finish(body, Some(trailers))
                .map_err(|error| ToolError::new(format!("{error:?}")))?;
            finished.push(request);
            continue;
        }
        let stream = body.write().map_err(|()| ToolError::new("no stream"))?;
        // As much as the body takes before it waits for the (never made) connection.
        loop {
            let room = stream.check_write().unwrap_or(0).min(1 << 20) as usize;
            if room == 0 || stream.write(&vec![0u8; room]).is_err() {
                break;
            }
            buffered += room;
        }
        // Children first: the stream, then the body, then the request.
        held.push((stream, body, request));
    }
    let bodies = held.len() + finished.len();
    Ok(format!("bodies {bodies} fields {} of {} buffering {buffered}", fields.len(), args.count))
}

#[derive(Deserialize, JsonSchema)]
struct HttpKeep {
    /// `http://` or `https://` URL.
    url: String,
    /// How many requests, one after the other.
    count: u32,
    /// Take no response until every one has come (each waits in its future).
    #[serde(default)]
    untaken: bool,
    /// Keep each response's header fields, not the response.
    #[serde(default)]
    fields_only: bool,
    /// With `fields_only`, keep a clone of the fields (`fields.clone`), not the fields.
    #[serde(default)]
    cloned: bool,
    /// With `fields_only`, keep an outgoing request made of the fields, not the fields.
    #[serde(default)]
    into_requests: bool,
    /// Read each response's body to its end and keep its trailers, not the response.
    #[serde(default)]
    trailers: bool,
    /// Keep each response's body stream, unread, not the response.
    #[serde(default)]
    streams: bool,
}

fn http_keep(args: HttpKeep) -> Result<String, ToolError> {
    use wasi::http::types::{Fields, Method, OutgoingRequest};
    let (mut kept, mut waiting, mut fields, mut requests) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut streams = Vec::new();
    for _ in 0..args.count {
        let request = request_to(&args.url, &Method::Get, Fields::new()).map_err(ToolError::new)?;
        let future = match wasi::http::outgoing_handler::handle(request, None) {
            Ok(future) => future,
            Err(error) => return Ok(format!("kept {}, then {}", kept.len() + streams.len(), code(error))),
        };
        future.subscribe().block();
        if args.untaken {
            waiting.push(future);
            continue;
        }
        match future.get() {
            Some(Ok(Ok(response))) if args.streams => {
                let body = response.consume().map_err(|()| ToolError::new("no body"))?;
                let stream = body.stream().map_err(|()| ToolError::new("no stream"))?;
                streams.push((stream, body));
            }
            Some(Ok(Ok(response))) if args.trailers => match trailers_of(response) {
                Ok(Some(trailers)) => fields.push(trailers),
                Ok(None) => return Ok(format!("kept {}, then no trailers", fields.len())),
                Err(error) => return Ok(format!("kept {}, then {error}", fields.len())),
            },
            Some(Ok(Ok(response))) if args.fields_only && args.into_requests => {
                requests.push(OutgoingRequest::new(response.headers()))
            }
            Some(Ok(Ok(response))) if args.fields_only && args.cloned => {
                fields.push(response.headers().clone())
            }
            Some(Ok(Ok(response))) if args.fields_only => fields.push(response.headers()),
            Some(Ok(Ok(response))) => kept.push(response),
            Some(Ok(Err(error))) => {
                return Ok(format!(
                    "kept {}, then {}",
                    kept.len() + fields.len() + requests.len() + streams.len(),
                    code(error)
                ));
            }
            _ => return Ok(format!("kept {}, then no response", kept.len() + fields.len() + requests.len())),
        }
    }
    for future in waiting {
        match future.get() {
            Some(Ok(Ok(response))) => kept.push(response),
            Some(Ok(Err(error))) => return Ok(format!("kept {}, then {}", kept.len(), code(error))),
            _ => return Ok(format!("kept {}, then no response", kept.len())),
        }
    }
    Ok(format!("kept {}", kept.len() + fields.len() + requests.len() + streams.len()))
}

/// Read `response`'s body to its end, then take its trailers.
fn trailers_of(
    response: wasi::http::types::IncomingResponse,
) -> Result<Option<wasi::http::types::Fields>, String> {
    use wasi::http::types::IncomingBody;
    let body = response.consume().map_err(|()| "no body")?;
    {
        let stream = body.stream().map_err(|()| "no stream")?;
        while stream.blocking_read(65536).is_ok() {}
    }
    let future = IncomingBody::finish(body);
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(trailers))) => Ok(trailers),
        Some(Ok(Err(error))) => Err(code(error)),
        _ => Err("no trailers to take".to_owned()),
    }
}

/// A request for `url` with `method` and `headers`, over raw `wasi:http`.
fn request_to(
    url: &str,
    method: &wasi::http::types::Method,
    headers: wasi::http::types::Fields,
) -> Result<wasi::http::types::OutgoingRequest, String> {
    use wasi::http::types::{OutgoingRequest, Scheme};
    let (scheme, rest) = url.split_once("://").ok_or("not a URL")?;
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(headers);
    let scheme = if scheme == "https" { Scheme::Https } else { Scheme::Http };
    request.set_scheme(Some(&scheme)).map_err(|()| "bad scheme")?;
    request.set_authority(Some(authority)).map_err(|()| "bad authority")?;
    request.set_path_with_query(Some(path)).map_err(|()| "bad path")?;
    request.set_method(method).map_err(|()| "bad method")?;
    Ok(request)
}

fn code(code: wasi::http::types::ErrorCode) -> String {
    format!("{code:?}")
}

/// POST `bytes` to `url`, writing until done or the host stops taking them, blocking on
/// every wait; the status and the bytes written, or the error code.
fn post(url: &str, bytes: usize, declare_length: bool) -> Result<(u16, usize), String> {
    use wasi::http::types::{Fields, Method, OutgoingBody};
    let headers = if declare_length {
        Fields::from_list(&[("content-length".to_owned(), bytes.to_string().into_bytes())])
            .map_err(|error| format!("{error:?}"))?
    } else {
        Fields::new()
    };
    let request = request_to(url, &Method::Post, headers)?;
    let body = request.body().map_err(|()| "no body")?;
    let response = wasi::http::outgoing_handler::handle(request, None).map_err(code)?;
    let mut written = 0;
    {
        let stream = body.write().map_err(|()| "no stream")?;
        let chunk = vec![b'u'; 4096];
        while written < bytes {
            let size = chunk.len().min(bytes - written);
            if stream.blocking_write_and_flush(&chunk[..size]).is_err() {
                break;
            }
            written += size;
        }
    }
    let _ = OutgoingBody::finish(body, None);
    response.subscribe().block();
    let response = response.get().ok_or("no response")?.map_err(|()| "taken")?.map_err(code)?;
    Ok((response.status(), written))
}

/// GET `url` with raw `wasi:http`, blocking on every wait without ever checking for
/// cancellation; the status and the body's size, or the error code.
fn fetch(url: &str) -> Result<(u16, usize), String> {
    use wasi::http::types::{Fields, Method};
    let request = request_to(url, &Method::Get, Fields::new())?;
    let response = wasi::http::outgoing_handler::handle(request, None).map_err(code)?;
    response.subscribe().block();
    let response = response.get().ok_or("no response")?.map_err(|()| "taken")?.map_err(code)?;
    let status = response.status();
    let body = response.consume().map_err(|()| "no body")?;
    let stream = body.stream().map_err(|()| "no stream")?;
    let mut size = 0;
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(bytes) => size += bytes.len(),
            Err(wasi::io::streams::StreamError::Closed) => break,
            Err(wasi::io::streams::StreamError::LastOperationFailed(error)) => {
                return Err(
                    wasi::http::types::http_error_code(&error).map_or_else(|| error.to_debug_string(), code)
                );
            }
        }
    }
    Ok((status, size))
}

cordon_guest::export_plugin!(Hostile);
