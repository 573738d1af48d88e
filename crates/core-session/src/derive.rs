//! Derived messages and the derived request (contract section 3): the next
//! model request, built by walking the surface, with the settings it is sent
//! with. The surface is the only derivation path for messages; the settings
//! are those of the last `session/settings` event (section 1.3).

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::event::{Event, EventType};
use crate::payload::{Message, Settings};
use crate::resident::find;

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
/// `events` is the log, or any slice of its events sorted by seq that holds
/// the surface's (a resumed session's resident events).
///
/// Every event on a surface was checked when it was appended, so its message
/// parses; an event that somehow does not is reported through `tracing` and
/// left out.
pub fn derive_messages<'a>(events: &'a [Event], surface: &[u64]) -> Vec<DerivedMessage<'a>> {
    let mut out = Vec::with_capacity(surface.len());
    for &seq in surface {
        let Some(event) = find(events, seq) else {
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

/// The derived request of contract section 3: `{"settings": S, "messages": M}`.
///
/// Serialized (with serde or [`DerivedRequest::to_json`]), both parts are
/// the JSON exactly as logged, unknown keys and key order included, so every
/// replay of a log gives the same bytes.
#[derive(Debug, Clone)]
pub struct DerivedRequest<'a> {
    /// Seq of the `session/settings` event in effect; `None` before the first.
    pub settings_seq: Option<u64>,
    /// The effective settings, typed (empty before the first `session/settings`).
    pub settings: Settings,
    /// The effective settings' JSON exactly as logged; `None` before the
    /// first `session/settings`, serialized as `{}`.
    pub settings_raw: Option<&'a RawValue>,
    /// The derived messages (see [`derive_messages`]).
    pub messages: Vec<DerivedMessage<'a>>,
}

impl DerivedRequest<'_> {
    /// The request's compact JSON text.
    pub fn to_json(&self) -> String {
        // Only raw JSON texts and two fixed keys: this cannot fail (and an
        // empty request body would hide a bug if it did).
        serde_json::to_string(self).expect("a DerivedRequest always serializes")
    }
}

impl Serialize for DerivedRequest<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Messages<'m, 'a>(&'m [DerivedMessage<'a>]);
        impl Serialize for Messages<'_, '_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.len()))?;
                for m in self.0 {
                    seq.serialize_element(m.raw)?;
                }
                seq.end()
            }
        }
        let mut st = s.serialize_struct("DerivedRequest", 2)?;
        match self.settings_raw {
            Some(raw) => st.serialize_field("settings", raw)?,
            None => st.serialize_field("settings", &serde_json::Map::new())?,
        }
        st.serialize_field("messages", &Messages(&self.messages))?;
        st.end()
    }
}

#[derive(Deserialize)]
struct SettingsOnly<'a> {
    #[serde(borrow)]
    settings: &'a RawValue,
}

/// The settings of the `session/settings` event at `settings_seq` (the one
/// in effect), raw and typed; `(None, {})` when there is none. Every such
/// event was checked when it was appended, so it parses; one that somehow
/// does not is reported through `tracing` and read as `{}`. `events` is the
/// log, or any slice of its events sorted by seq that holds that event.
pub fn effective_settings(events: &[Event], settings_seq: Option<u64>) -> (Option<&RawValue>, Settings) {
    let Some(seq) = settings_seq else { return (None, Settings::default()) };
    let event = find(events, seq);
    let parsed = event.filter(|e| *e.event_type() == EventType::SessionSettings).map(|e| {
        e.data_as::<SettingsOnly<'_>>()
            .and_then(|d| serde_json::from_str::<Settings>(d.settings.get()).map(|typed| (d.settings, typed)))
    });
    match parsed {
        Some(Ok((raw, typed))) => (Some(raw), typed),
        Some(Err(error)) => {
            tracing::error!(seq, %error, "session/settings event without settings");
            (None, Settings::default())
        }
        None => {
            tracing::error!(seq, "settings seq is not a session/settings event of the log");
            (None, Settings::default())
        }
    }
}

/// The derived request: the settings of the event at `settings_seq` (the
/// last `session/settings` of the log, `None` before the first) and the
/// messages derived from `surface`. O(surface length + settings size).
pub fn derive_request<'a>(
    events: &'a [Event],
    surface: &[u64],
    settings_seq: Option<u64>,
) -> DerivedRequest<'a> {
    let (settings_raw, settings) = effective_settings(events, settings_seq);
    DerivedRequest { settings_seq, settings, settings_raw, messages: derive_messages(events, surface) }
}
