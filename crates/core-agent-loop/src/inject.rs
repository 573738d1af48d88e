//! Injecting messages into a running loop: steering and context.
//!
//! A [`SteeringHandle`] is a cheap, cloneable sender that another task (a
//! UI, a file watcher) uses while a turn runs. Injected messages land in the
//! log *before the next step's request*: right after that step's
//! `step/start`, as `steering/message` or `context/message` events, so the
//! model sees them in its next request. Messages sent between turns land in
//! the first step of the next turn.
//!
//! When the model finishes a turn while steering is waiting, the loop runs
//! one more step so the model answers it; waiting context does not extend a
//! turn (it is seen by the next request, whenever that is).

use palimpsest_core_session::payload::{Block, Source};
use tokio::sync::mpsc;

/// Which event an [`Injection`] becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InjectionKind {
    /// A `steering/message`: the user redirecting the agent mid-turn.
    Steering,
    /// A `context/message`: a file notice, an instruction.
    Context,
}

/// A message to inject: its kind, content and source.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    /// Which event it becomes.
    pub kind: InjectionKind,
    /// The message content.
    pub content: Vec<Block>,
    /// The message source (`user` unless set).
    pub source: Source,
}

impl Injection {
    /// Steering from the user.
    pub fn steering(content: Vec<Block>) -> Injection {
        Injection { kind: InjectionKind::Steering, content, source: Source::User }
    }

    /// Context from the user.
    pub fn context(content: Vec<Block>) -> Injection {
        Injection { kind: InjectionKind::Context, content, source: Source::User }
    }

    /// Sets the source (e.g. `{"kind":"plugin","plugin":"file-watcher"}`).
    pub fn with_source(mut self, source: Source) -> Injection {
        self.source = source;
        self
    }
}

/// The loop this handle belonged to is gone; the message was not delivered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("loop-gone: the agent loop was dropped; the injection was not delivered")]
#[non_exhaustive]
pub struct LoopGone {
    /// The undelivered message.
    pub injection: Injection,
}

/// Sends [`Injection`]s to an [`AgentLoop`](crate::AgentLoop), from any task.
#[derive(Debug, Clone)]
pub struct SteeringHandle {
    pub(crate) tx: mpsc::UnboundedSender<Injection>,
}

impl SteeringHandle {
    /// Queues `injection` for the next step's request.
    pub fn send(&self, injection: Injection) -> Result<(), LoopGone> {
        self.tx.send(injection).map_err(|e| LoopGone { injection: e.0 })
    }

    /// Queues a text steering message.
    pub fn steer(&self, text: impl Into<String>) -> Result<(), LoopGone> {
        self.send(Injection::steering(vec![Block::text(text)]))
    }

    /// Queues a text context message.
    pub fn add_context(&self, text: impl Into<String>) -> Result<(), LoopGone> {
        self.send(Injection::context(vec![Block::text(text)]))
    }
}
