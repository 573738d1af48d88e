//! Where an event's payload text lives: in its own allocation, or as a
//! range of a [`SharedText`] that holds the payloads of many events.
//!
//! A session loaded whole from a database holds millions of events, most
//! of them a few dozen to a few hundred bytes. One allocation per payload
//! cost the load a `malloc` per event, and the session's drop as many
//! `free`s, which glibc keeps unmerged until the next large allocation of
//! that thread's arena, where it merges them all at once: on the
//! benchmark's 1M-event load that was ~50 ms, a tenth of the load, paid by
//! the next load (docs/performance.md, sixteenth session). Events decoded
//! a batch at a time share one text per batch instead.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// The payload texts of many events in one allocation, which the events
/// built on it share ([`Event::from_shared_parts`](crate::Event::from_shared_parts)):
/// the allocation is freed when the last of them is.
///
/// Any event built on it keeps the whole text alive, so a caller that
/// keeps a few events of many should build them with their own text
/// ([`Event::from_parts`](crate::Event::from_parts)). A session lets go of
/// the shared texts of the events it [trims](crate::Session::trim) away,
/// and gives the events it keeps their own.
///
/// ```
/// use palimpsest_core_session::event::SharedText;
///
/// let text = SharedText::new(String::from("{\"turn\":1}{\"turn\":1}"));
/// assert_eq!(&text.as_str()[..10], "{\"turn\":1}");
/// ```
#[derive(Clone)]
pub struct SharedText(Arc<Box<str>>);

impl SharedText {
    /// The text, shared from now on. Its capacity is let go of: size the
    /// `String` to what it will hold.
    pub fn new(text: String) -> SharedText {
        SharedText(Arc::new(text.into_boxed_str()))
    }

    /// The whole text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedText").field("len", &self.0.len()).finish_non_exhaustive()
    }
}

/// An event's payload text.
#[derive(Clone)]
pub(crate) enum PayloadText {
    /// In its own allocation.
    Own(Box<str>),
    /// `start..end` of a text shared with other events: a range at
    /// character boundaries, checked when it was made.
    Shared { text: SharedText, start: u32, end: u32 },
}

impl PayloadText {
    /// `range` of `text`, if it is one at character boundaries and short
    /// enough to be held.
    pub(crate) fn shared(text: &SharedText, range: Range<usize>) -> Option<PayloadText> {
        text.as_str().get(range.clone())?;
        let (start, end) = (u32::try_from(range.start).ok()?, u32::try_from(range.end).ok()?);
        Some(PayloadText::Shared { text: text.clone(), start, end })
    }

    /// The text in its own allocation: a shared one copied out, so that
    /// it keeps no other event's text alive.
    pub(crate) fn into_own(self) -> Box<str> {
        match self {
            PayloadText::Own(text) => text,
            PayloadText::Shared { .. } => Box::from(&*self),
        }
    }

    /// Whether this text keeps a [`SharedText`] alive.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, PayloadText::Shared { .. })
    }
}

impl Deref for PayloadText {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            PayloadText::Own(text) => text,
            // Checked at construction: never the empty fallback.
            PayloadText::Shared { text, start, end } => {
                text.as_str().get(*start as usize..*end as usize).unwrap_or_default()
            }
        }
    }
}

impl From<Box<str>> for PayloadText {
    fn from(text: Box<str>) -> PayloadText {
        PayloadText::Own(text)
    }
}

impl fmt::Debug for PayloadText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_range_reads_its_part_of_the_text_and_outlives_the_handle() {
        let text = SharedText::new("{\"a\":1}{\"b\":2}".to_owned());
        let second = PayloadText::shared(&text, 7..14).unwrap();
        drop(text);
        assert_eq!(&*second, "{\"b\":2}");
        assert!(second.is_shared());
        let own = second.into_own();
        assert_eq!(&*own, "{\"b\":2}");
    }

    #[test]
    fn a_range_outside_the_text_or_inside_a_character_is_refused() {
        let text = SharedText::new("{\"é\":1}".to_owned());
        assert!(PayloadText::shared(&text, 0..99).is_none());
        // `é` is two bytes, at 2..4: 3 falls inside it.
        assert!(PayloadText::shared(&text, 0..3).is_none());
        assert!(PayloadText::shared(&text, 0..8).is_some());
    }
}
