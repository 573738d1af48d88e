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
//! A reader that finds a line over its cap reads no more of it than it
//! must: it counts the rest of the line, for the error's length, up to
//! [`MAX_COUNTED_LINE_BYTES`], and stops there. An endless stream
//! (`/dev/zero`, a pipe that never sends a `\n`) is then refused like any
//! over-long line, in a bounded time, where counting to its end never
//! returned; the error says the line is *at least* that long.
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

/// How much of an over-long line a reader counts before it stops: 256 MiB,
/// four times the largest event. The length an `event-too-large` or
/// over-long header error gives is exact below this, and this value (said
/// as "at least") when the line went on, or never ended.
pub const MAX_COUNTED_LINE_BYTES: u64 = 256 << 20;

/// How many more bytes of an over-long line a reader counts, having
/// counted `so_far` of it: what is left of [`MAX_COUNTED_LINE_BYTES`].
pub fn line_count_left(so_far: u64) -> u64 {
    MAX_COUNTED_LINE_BYTES.saturating_sub(so_far)
}

/// How an over-long line's counted length is said: exactly, or "at least"
/// when the count stopped at [`MAX_COUNTED_LINE_BYTES`].
pub(crate) fn counted_len(len: u64) -> String {
    if len >= MAX_COUNTED_LINE_BYTES {
        format!("at least {len}")
    } else {
        len.to_string()
    }
}
