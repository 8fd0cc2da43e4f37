//! # Where a request's messages go, and what they hold meanwhile
//!
//! An [`Outbox`] takes a request's messages in the order its tasks send them: stdio writes
//! each in place as a line; HTTP hands each to its response's task as [`Framed`] bytes.
//!
//! **An HTTP message is made into bytes and charged as it is sent**, not when the
//! response's task comes to write it: a call's answer leaves its call slot and its
//! request's charge behind as it goes into the channel, and may then wait there behind
//! a queue of log lines for as long as a slow client takes to read them. Charged only
//! when written, such answers (up to the result limit each, one per connection) were held
//! by nothing the admission bound saw. Every notification, and every answer of
//! [`CHARGED_MESSAGE_BYTES`] or more, is charged to the bound, and to the tenant's and the
//! client's shares ([`AnswerCharger`]), until the transport drops their bytes, written. (A
//! small answer is the one message its request leaves, after its request's charge: it
//! goes uncharged, off every call's path.)

use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::Server;
use super::admission::{Charge, ClientShare, Whose};
use crate::auth::Tenant;
use crate::protocol::jsonrpc::{self, Outgoing, RpcError};

/// Where a request's outgoing messages go, in the order each task sends them. Cheap to
/// clone: a stdio connection shares one; HTTP gives each request its own.
#[derive(Clone)]
pub enum Outbox {
    /// A channel, drained by the transport (e.g. into an HTTP response stream), of
    /// messages made into bytes and charged as they are sent.
    Channel(mpsc::Sender<Framed>, Arc<AnswerCharger>),
    /// A byte stream written in place, one message per line (stdio): no hand-off to
    /// another task, which saves a thread wake-up per message.
    Lines(Arc<tokio::sync::Mutex<LineWriter>>),
}

impl Outbox {
    pub fn lines(writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        let writer = LineWriter { writer: Box::new(writer), line: Vec::new(), written: 0 };
        Self::Lines(Arc::new(tokio::sync::Mutex::new(writer)))
    }

    /// A channel of `capacity` messages charged to `server`'s bound alone (no tenant's
    /// or client's share), and its receiving end.
    pub fn channel(server: &Arc<Server>, capacity: usize) -> (Self, mpsc::Receiver<Framed>) {
        let (sender, receiver) = mpsc::channel(capacity);
        (Self::Channel(sender, Arc::new(AnswerCharger::new(server.clone(), None, None))), receiver)
    }

    /// Deliver `message`. A closed channel or stream means the client is gone: there is no
    /// one left to tell, so the failure is only logged.
    pub async fn send(&self, message: Outgoing) {
        match self {
            Self::Channel(sender, charger) => {
                let _ = sender.send(charger.framed(&message)).await;
            }
            Self::Lines(writer) => {
                // serde_json never writes a raw newline: one message is one line.
                let mut bytes = serde_json::to_vec(&message).expect("a message always serializes");
                bytes.push(b'\n');
                if let Err(error) = writer.lock().await.write_line(bytes).await {
                    tracing::debug!("dropping a message: the client's stream is closed ({error})");
                }
            }
        }
    }
}

/// The stream of [`Outbox::Lines`], and the line being written to it. A send is a future
/// its request may drop at any await (a cancel, a deadline, shutdown), and a pipe takes a
/// large line in several writes: what a dropped send left of its line is kept here, and
/// the next send writes it out before its own, so no line is ever cut into by another.
/// (A line of which nothing went out is dropped with its send.)
pub struct LineWriter {
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    line: Vec<u8>,
    /// How much of `line` is out.
    written: usize,
}

impl LineWriter {
    async fn write_line(&mut self, line: Vec<u8>) -> std::io::Result<()> {
        if self.written > 0 {
            self.finish_line().await?;
        }
        self.line = line;
        self.written = 0;
        self.finish_line().await?;
        self.writer.flush().await
    }

    async fn finish_line(&mut self) -> std::io::Result<()> {
        while self.written < self.line.len() {
            match self.writer.write(&self.line[self.written..]).await? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                written => self.written += written,
            }
        }
        // Not `clear`: a large answer's buffer is not kept for the stream's life.
        self.line = Vec::new();
        self.written = 0;
        Ok(())
    }
}

/// Answers at least this large are charged to the admission bound until written (every
/// notification is: a stream queues up to some 80 of them, and small ones uncharged let
/// connections that never read hold hundreds of megabytes the bound never saw).
const CHARGED_MESSAGE_BYTES: usize = 4 << 10;

/// A message made into bytes for a channel's transport: as a server-sent event
/// (`data: {json}\n\n`) or as the JSON alone, sharing one buffer and its charge.
pub struct Framed {
    event: Bytes,
    /// Whether it answers a request (the last message of its request).
    answer: bool,
    /// The code of the error it answers with, if it is one.
    error_code: Option<i64>,
}

/// What frames a message as an event: before its JSON, and after it.
const EVENT_PREFIX: &[u8] = b"data: ";
const EVENT_SUFFIX: &[u8] = b"\n\n";

impl Framed {
    /// The message as a server-sent event.
    pub fn event(&self) -> Bytes {
        self.event.clone()
    }

    /// The message as JSON alone.
    pub fn json(&self) -> Bytes {
        self.event.slice(EVENT_PREFIX.len()..self.event.len() - EVENT_SUFFIX.len())
    }

    /// Whether it answers a request: nothing of the request follows it.
    pub fn is_answer(&self) -> bool {
        self.answer
    }

    /// The code of the error it answers with, if it is one.
    pub fn error_code(&self) -> Option<i64> {
        self.error_code
    }

    /// The message, parsed back (for tests and tools that look into what was sent).
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_slice(&self.json()).expect("a framed message is JSON")
    }
}

/// Where a channel's messages are charged: the admission bound requests are let in under,
/// and the tenant's and the client's shares of it. A client that reads slowly, or not at
/// all, keeps its messages in this server's memory until its connection gives up on it;
/// charged, they make new requests wait (503) instead of letting thousands of such
/// clients hold gigabytes the bound never saw.
pub struct AnswerCharger {
    server: Arc<Server>,
    tenant: Option<Arc<Tenant>>,
    client: Option<ClientShare>,
}

impl AnswerCharger {
    pub fn new(server: Arc<Server>, tenant: Option<Arc<Tenant>>, client: Option<ClientShare>) -> Self {
        Self { server, tenant, client }
    }

    /// `message` made into bytes, charged (when large) until the transport has written the
    /// last of them and dropped them.
    ///
    /// An answer that fits neither in its client's (or tenant's) share nor within twice
    /// the server's bound is not kept: the client gets an error for that request instead.
    /// A request is let in at its own size, and a small one may ask for a large answer: a
    /// client with a thousand such requests in flight that reads slowly would otherwise
    /// make the server hold a thousand large answers. What answers no request (a
    /// notification, a request to the client) is held whatever: its own queue bounds it.
    pub fn framed(&self, message: &Outgoing) -> Framed {
        let answer = message.id().is_some();
        let error_code = message.error().map(|error| error.code);
        let event = event_bytes(message);
        if answer && event.len() < CHARGED_MESSAGE_BYTES {
            return Framed { event: Bytes::from(event), answer, error_code };
        }
        let mut charge = self.server.admission().empty_for(self.tenant.as_deref(), self.client.as_ref());
        match message.id() {
            Some(id) if !charge.grow_answer(event.len()) => {
                // The request was handled (a tool may have acted): no retry is suggested.
                let error = RpcError::new(
                    jsonrpc::INTERNAL_ERROR,
                    format!(
                        "Server busy: the request was handled, but its answer ({} bytes) was not kept, as \
                         answers not read yet hold {}; read those before asking for more",
                        event.len(),
                        whose_share(charge.full_share(event.len()))
                    ),
                );
                let refused_code = Some(error.code);
                let refusal = event_bytes(&Outgoing::Error { id: Some(id.clone()), error });
                return Framed { event: Bytes::from(refusal), answer, error_code: refused_code };
            }
            Some(_) => {}
            None => charge.hold(event.len()),
        }
        Framed {
            event: Bytes::from_owner(ChargedBytes { bytes: event, _charge: charge }),
            answer,
            error_code,
        }
    }
}

/// `message` as a server-sent event.
fn event_bytes(message: &Outgoing) -> Vec<u8> {
    let mut bytes = EVENT_PREFIX.to_vec();
    serde_json::to_writer(&mut bytes, message).expect("a message always serializes");
    bytes.extend_from_slice(EVENT_SUFFIX);
    bytes
}

/// What a refused client is told holds the bound it met.
pub(crate) fn whose_share(share: Option<Whose>) -> &'static str {
    match share {
        Some(Whose::Tenant) => "this tenant's share of the server's limit",
        Some(Whose::Client) => "this client's share of the server's limit",
        None => "the server's limit",
    }
}

/// A message's bytes and their charge, released together.
struct ChargedBytes {
    bytes: Vec<u8>,
    _charge: Charge,
}

impl AsRef<[u8]> for ChargedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::jsonrpc::RequestId;
    use crate::protocol::mcp;
    use serde_json::Value;

    /// A send dropped mid-line (its request cancelled while a client read slowly) leaves
    /// no torn line: the next send finishes it first. Before, the rest was lost and the
    /// next message glued onto the torn line, so the client lost both.
    #[tokio::test]
    async fn a_line_whose_send_was_dropped_midway_is_finished_before_the_next() {
        use tokio::io::AsyncReadExt;
        let (writer, mut reader) = tokio::io::duplex(1024);
        let out = Outbox::lines(writer);
        let message = |reason: &str| {
            let id = RequestId::parse(&Value::from(7)).unwrap();
            Outgoing::Notification(mcp::listen_cancelled(&id, reason))
        };
        let long = "x".repeat(10_000);
        // Nothing is read: the send writes the pipe's 1 KiB and waits; it is dropped there.
        tokio::select! {
            biased;
            () = out.send(message(&long)) => panic!("10 KB went into a 1 KiB pipe no one reads"),
            () = std::future::ready(()) => {}
        }
        // So is one of which nothing went out: the pipe is full.
        tokio::select! {
            biased;
            () = out.send(message("never started")) => panic!("sent into a full pipe"),
            () = std::future::ready(()) => {}
        }
        let reading = tokio::spawn(async move {
            let mut text = String::new();
            reader.read_to_string(&mut text).await.map(|_| text)
        });
        out.send(message("after")).await;
        drop(out);
        let text = reading.await.unwrap().unwrap();
        let reasons: Vec<String> = text
            .lines()
            .map(|line| {
                let message: Value =
                    serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line:.80}"));
                message["params"]["reason"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(reasons, [long, "after".to_owned()]);
    }

    /// Small notifications waiting for a client that does not read are charged as large
    /// ones are: 64 of 3.9 KB held before, charged to nothing.
    #[tokio::test]
    async fn notifications_waiting_to_be_read_are_charged_whatever_their_size() {
        let server = Server::with_no_components();
        let (out, unread) = Outbox::channel(&server, 64);
        let reason = "x".repeat(3_900);
        let id = RequestId::parse(&Value::from(7)).unwrap();
        for _ in 0..64 {
            out.send(Outgoing::Notification(mcp::listen_cancelled(&id, &reason))).await;
        }
        let used = server.admission().used();
        assert!(used >= 64 * 3_900, "64 notifications unread hold {used} bytes of the bound");
        drop(unread);
        assert_eq!(server.admission().used(), 0, "given back once dropped");
    }
}
