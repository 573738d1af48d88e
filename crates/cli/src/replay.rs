//! Reading a session's events a second time, as a stream: how `inspect`,
//! `export` and `explain` show every event of a log without holding it.
//!
//! Those commands read a session twice. The first read is the check every
//! reading command does ([`Target::check_keeping`] with [`Retain::Surface`]):
//! it keeps the surface, the findings and who shadowed whom
//! ([`Report::shadowing`](crate::check::Report::shadowing), a few words per
//! replace). The second read, here, hands the events over one at a time, in
//! seq order, to a consumer that renders each as it comes and keeps only
//! what it needs. Memory is bounded by what the command holds, not by the
//! log: a JSONL file is read a piece at a time, a SQL store hands its rows
//! over on a thread of its own through a bounded channel.
//!
//! The second read is cut to the events the check accepted (`upto`): what
//! the store holds past a violation of the rules, or past a torn line, is
//! not shown, as it never was.
//!
//! [`Retain::Surface`]: crate::check::Retain::Surface

use std::fs::File;
use std::io::Read;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::mpsc;

use palimpsest_core_session::jsonl::{JsonlDecoder, ReadOptions};
use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::LoadSink;

use crate::error::CliError;
use crate::store_arg::{Store, Target};

/// What a streamed read hands its events to, a piece of the log at a time.
pub(crate) type Consume<'c> = dyn FnMut(&mut dyn Iterator<Item = Event>) + 'c;

/// How a command reads the log again: `read(upto, consume)` hands the first
/// `upto` events to `consume` ([`Target::replay`], or a log in memory in
/// tests).
pub(crate) type Reader<'r, E> = dyn FnMut(u64, &mut Consume<'_>) -> Result<(), E> + 'r;

/// Bytes read from a file at a time.
const PIECE_BYTES: usize = 4 << 20;

/// Events in flight between a SQL store's reading thread and the consumer.
const CHANNEL_EVENTS: usize = 1024;

impl Target {
    /// Hands the first `upto` events of the session, in seq order, to
    /// `consume` as an iterator, and returns what it returns. The consumer
    /// may stop early; the read stops with it.
    pub(crate) fn replay<R>(
        &self,
        upto: u64,
        consume: impl FnOnce(&mut dyn Iterator<Item = Event>) -> R,
    ) -> Result<R, CliError> {
        if upto == 0 {
            // Nothing to read; a row read anyway could be the bad one.
            return Ok(consume(&mut std::iter::empty()));
        }
        match (&self.store, self.id()) {
            (Store::File(path), _) => replay_file(path, upto, consume),
            (Store::Dir(store), Some(id)) => {
                let path = store.path_of(id).map_err(|e| crate::error::from_store(&e, &self.origin()))?;
                replay_file(&path, upto, consume)
            }
            (store, Some(id)) => {
                let Some(backend) = store.backend() else { return Err(CliError::usage("no session named")) };
                let (send, receive) = mpsc::sync_channel::<Event>(CHANNEL_EVENTS);
                std::thread::scope(|scope| {
                    let reader = scope.spawn(move || {
                        let mut sink = ChannelSink { send, left: upto };
                        let loaded = backend.load_into(id, &mut sink);
                        (loaded, sink.left)
                    });
                    let mut events = receive.into_iter();
                    let result = consume(&mut events);
                    // The reader stops at its next send once this is gone.
                    drop(events);
                    match reader.join() {
                        Ok((Ok(_), _)) => Ok(result),
                        // Every wanted event was handed over: the row that
                        // failed is past them (the one the check stopped
                        // at, read while the last ones were decoded).
                        Ok((Err(_), 0)) => Ok(result),
                        Ok((Err(e), _)) => Err(store.load_error(&e, id, &self.origin())),
                        Err(_) => Err(CliError::io(self.origin(), "the store's reading thread failed")),
                    }
                })
            }
            (_, None) => Err(CliError::usage("no session named")),
        }
    }
}

/// A store's events, sent on to the consumer until it hangs up or `left`
/// runs out.
struct ChannelSink {
    send: mpsc::SyncSender<Event>,
    left: u64,
}

impl LoadSink for ChannelSink {
    fn header(&mut self, _: SessionHeader) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn event(&mut self, event: Event) -> ControlFlow<()> {
        if self.left == 0 || self.send.send(event).is_err() {
            return ControlFlow::Break(());
        }
        self.left -= 1;
        // Stop as the last wanted event goes: the row after it may be the
        // one the check stopped at, and must not be decoded.
        if self.left == 0 {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// [`Target::replay`] of a JSONL file, a piece at a time.
fn replay_file<R>(
    path: &Path,
    upto: u64,
    consume: impl FnOnce(&mut dyn Iterator<Item = Event>) -> R,
) -> Result<R, CliError> {
    let origin = path.display().to_string();
    // A pipe or FIFO gave its bytes to the check: a second open would read
    // nothing, or wait for a writer that is gone.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(CliError::usage(format!(
            "{origin}: this command reads the session twice, and a pipe can be read once; save it to a file first"
        )));
    }
    let file = File::open(path).map_err(|e| CliError::io(origin.clone(), format!("cannot read: {e}")))?;
    let mut events = FileEvents {
        file,
        origin,
        decoder: Some(JsonlDecoder::new(ReadOptions::default())),
        pending: Vec::new(),
        ready: Vec::new().into_iter(),
        left: upto,
        error: None,
    };
    let result = consume(&mut events);
    match events.error {
        Some(e) => Err(e),
        None => Ok(result),
    }
}

/// The events of a JSONL file, decoded a piece at a time.
struct FileEvents {
    file: File,
    origin: String,
    /// `None` once the file is read to its end or its first bad line.
    decoder: Option<JsonlDecoder>,
    /// Bytes read and not yet decoded (the start of a line).
    pending: Vec<u8>,
    /// Events decoded and not yet handed over.
    ready: std::vec::IntoIter<Event>,
    left: u64,
    /// A read that failed: the iteration ends and the replay reports it.
    error: Option<CliError>,
}

impl FileEvents {
    /// Decodes the next piece into `ready`; `false` at the end.
    fn refill(&mut self) -> bool {
        let Some(decoder) = self.decoder.as_mut() else { return false };
        let read = (&mut self.file).take(PIECE_BYTES as u64).read_to_end(&mut self.pending);
        match read {
            Err(e) => {
                self.error = Some(CliError::io(self.origin.clone(), format!("cannot read: {e}")));
                self.decoder = None;
                false
            }
            Ok(0) => {
                // The end: a last line without its `\n`, if it is whole.
                let Some(decoder) = self.decoder.take() else { return false };
                let events = decoder.finish_prefix(&self.pending).map(|p| p.events).unwrap_or_default();
                self.pending.clear();
                self.ready = events.into_iter();
                true
            }
            Ok(_) => match decoder.feed(&self.pending) {
                Ok(used) if self.pending.len() - used > decoder.next_line_cap() => {
                    // The check read this line whole, under the cap: the
                    // file changed since. Nothing more of it is held.
                    self.error = Some(CliError::io(
                        self.origin.clone(),
                        "changed while it was read: a line is now over the size limit".to_owned(),
                    ));
                    self.decoder = None;
                    false
                }
                Ok(used) => {
                    self.pending.drain(..used);
                    self.ready = decoder.take_events().into_iter();
                    true
                }
                Err(error) => {
                    // The check stopped at this line too: what came before it
                    // is what is shown.
                    let Some(decoder) = self.decoder.take() else { return false };
                    let events = decoder.stopped_at(error).map(|p| p.events).unwrap_or_default();
                    self.ready = events.into_iter();
                    true
                }
            },
        }
    }
}

impl Iterator for FileEvents {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        while self.left > 0 {
            if let Some(event) = self.ready.next() {
                self.left -= 1;
                return Some(event);
            }
            if !self.refill() {
                return None;
            }
        }
        None
    }
}

/// What the streamed commands' unit tests stand on: a whole log in memory
/// standing in for a store.
#[cfg(test)]
pub(crate) mod in_memory {
    use palimpsest_core_session::Session;

    /// `log` as a streamed check leaves it: trimmed to what an append needs.
    pub(crate) fn trimmed(log: &Session) -> Session {
        let mut trimmed = Session::create(log.header().clone());
        for e in log.events() {
            trimmed.append(e.clone()).unwrap_or_else(|e| panic!("the log was accepted once: {e}"));
        }
        trimmed.trim();
        trimmed
    }

    /// A reader of `log` as [`Target::replay`](crate::store_arg::Target::replay)
    /// reads a store: the first `upto` events to `consume`.
    pub(crate) fn reader<E>(log: &Session) -> impl FnMut(u64, &mut super::Consume<'_>) -> Result<(), E> + '_ {
        move |upto, consume: &mut super::Consume<'_>| {
            consume(&mut log.events().iter().take(upto as usize).cloned());
            Ok(())
        }
    }
}
