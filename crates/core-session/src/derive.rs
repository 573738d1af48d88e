//! Derived messages (contract section 3): the next model request, built by
//! walking the surface. The surface is the only derivation path.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::event::{Event, EventType};
use crate::payload::Message;

/// One message of the derived history, with its provenance.
#[derive(Debug, Clone)]
pub struct DerivedMessage<'a> {
    /// Seq of the event the message comes from.
    pub seq: u64,
    /// That event's type.
    pub event_type: &'a EventType,
    /// The message, typed.
    pub message: Message,
    /// The message's JSON exactly as logged (keeps keys unknown to [`Message`]).
    pub raw: &'a RawValue,
    /// The event's `sourceEventSeqs`: what the message was built from.
    pub source_event_seqs: Option<&'a [u64]>,
}

#[derive(Deserialize)]
struct MessageOnly<'a> {
    #[serde(borrow)]
    message: &'a RawValue,
}

/// Walks `surface` over `events` and maps each event to its `data.message`.
/// An `assistant/message` with empty content maps to nothing (it only carries
/// usage). O(surface length).
///
/// Every event on a surface was checked when it was appended, so its message
/// parses; an event that somehow does not is reported through `tracing` and
/// left out.
pub fn derive_messages<'a>(events: &'a [Event], surface: &[u64]) -> Vec<DerivedMessage<'a>> {
    let mut out = Vec::with_capacity(surface.len());
    for &seq in surface {
        let Some(event) = usize::try_from(seq).ok().and_then(|i| events.get(i)) else {
            tracing::error!(seq, "surface entry is not in the log");
            continue;
        };
        let parsed = event
            .data_as::<MessageOnly<'_>>()
            .and_then(|m| serde_json::from_str::<Message>(m.message.get()).map(|typed| (m.message, typed)));
        match parsed {
            Ok((raw, message)) => {
                if *event.event_type() == EventType::AssistantMessage && message.content.is_empty() {
                    continue;
                }
                out.push(DerivedMessage {
                    seq,
                    event_type: event.event_type(),
                    message,
                    raw,
                    source_event_seqs: event.source_event_seqs(),
                });
            }
            Err(error) => tracing::error!(seq, %error, "surface event without a message"),
        }
    }
    out
}
