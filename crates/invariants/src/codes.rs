//! The stable codes of contract section 2a, one constant per invariant.
//!
//! Match on these rather than on message text: codes are part of the
//! contract, messages are for people and may change.

/// `turn/start` while a turn is open.
pub const TURN_ALREADY_OPEN: &str = "turn-already-open";
/// `turn/start` whose number is not the previous turn's + 1 (the first is 1).
pub const TURN_OUT_OF_ORDER: &str = "turn-out-of-order";
/// `turn/end` that does not name the open turn, or comes while none is open.
pub const TURN_END_MISMATCH: &str = "turn-end-mismatch";
/// `turn/end` while a step is open.
pub const TURN_END_STEP_OPEN: &str = "turn-end-step-open";
/// `step/start` that does not name the open turn.
pub const STEP_OUTSIDE_TURN: &str = "step-outside-turn";
/// `step/start` while a step is open.
pub const STEP_ALREADY_OPEN: &str = "step-already-open";
/// `step/start` whose number is not the previous step's + 1 in its turn (the first is 1).
pub const STEP_OUT_OF_ORDER: &str = "step-out-of-order";
/// `step/end`, `assistant/chunk`, `assistant/message`, `tool/call` or an
/// appended `tool/result` naming a turn/step that is not the open one.
pub const STEP_EVENT_OUTSIDE_STEP: &str = "step-event-outside-step";
/// An appended `tool/result` whose call has no `tool/call` in the open step
/// (a `TOOL_NOT_STARTED` repair closer is exempt).
pub const TOOL_RESULT_WITHOUT_CALL: &str = "tool-result-without-call";
/// An appended `assistant/message` citing anything but `assistant/chunk`
/// events of its own turn and step.
pub const ASSISTANT_SOURCES_NOT_CHUNKS: &str = "assistant-sources-not-chunks";
/// An appended `tool/result` whose `sourceEventSeqs`, when present, are not
/// exactly `[seq of its tool/call]` (for a `TOOL_NOT_STARTED` closer: the
/// requesting `assistant/message`).
pub const TOOL_RESULT_SOURCE_MISMATCH: &str = "tool-result-source-mismatch";
/// A `session/settings` while a step is open: settings change between
/// model requests, never during one.
pub const SETTINGS_INSIDE_STEP: &str = "settings-inside-step";
/// A replace that takes one side of a tool exchange (the requesting
/// `assistant/message` or the `tool/result`) off the surface and leaves the
/// other on it.
pub const TOOL_EXCHANGE_SPLIT: &str = "tool-exchange-split";

/// Every code of contract section 2a, in the contract's order.
pub const CODES: &[&str] = &[
    TURN_ALREADY_OPEN,
    TURN_OUT_OF_ORDER,
    TURN_END_MISMATCH,
    TURN_END_STEP_OPEN,
    STEP_OUTSIDE_TURN,
    STEP_ALREADY_OPEN,
    STEP_OUT_OF_ORDER,
    STEP_EVENT_OUTSIDE_STEP,
    TOOL_RESULT_WITHOUT_CALL,
    ASSISTANT_SOURCES_NOT_CHUNKS,
    TOOL_RESULT_SOURCE_MISMATCH,
    SETTINGS_INSIDE_STEP,
    TOOL_EXCHANGE_SPLIT,
];
