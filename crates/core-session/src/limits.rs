//! The size limits of the format: one per thing, the same for every reader
//! and every writer of every backend.
//!
//! * An **event** is at most [`MAX_EVENT_LINE_BYTES`] bytes written as its
//!   JSONL line (its canonical JSON text, without the `\n`). The limit is a
//!   rule of [`Event`](crate::Event) itself: no constructor builds a larger
//!   event, so nothing can append, store or write one, and a reader refuses a
//!   longer line before parsing it. Both say `event-too-large`
//!   ([`AppendError::EventTooLarge`](crate::AppendError::EventTooLarge)),
//!   with the line number when reading a file.
//! * A **header** is at most [`MAX_HEADER_LINE_BYTES`] bytes written as its
//!   line. A longer header is `header-malformed`, whether a reader finds it
//!   or a writer is asked to store it ([`SessionHeader::check_size`](crate::SessionHeader::check_size)).
//!
//! Because the limits are checked on what Palimpsest writes, everything
//! Palimpsest writes, Palimpsest reads back: a session stored by any backend
//! converts to a JSONL file that validates, and back.
//!
//! A reader may choose a *smaller* line cap
//! ([`ReadOptions`](crate::jsonl::ReadOptions)) to bound the memory a file
//! from elsewhere can cost; it can never read a larger event.

/// The longest event line, in bytes, without its `\n`: 64 MiB.
pub const MAX_EVENT_LINE_BYTES: usize = 64 << 20;

/// The longest header line, in bytes, without its `\n`: 64 KiB. A header is
/// an id, a time, a working directory and a parent id; this leaves room for
/// the longest paths and ids any store accepts, escaped.
pub const MAX_HEADER_LINE_BYTES: usize = 64 << 10;
