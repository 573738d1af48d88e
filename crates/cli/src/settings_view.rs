//! How the commands show a session's settings (contract section 1.3): one
//! line for a `session/settings` event, and what changed since the
//! previous one. `inspect`, `explain` and the exports all use these, so
//! they describe settings the same way.

use palimpsest_core_session::payload::{SessionSettings, Settings};
use palimpsest_core_session::{Event, EventType};

/// Longest system-prompt snippet, in characters.
const PROMPT_SNIPPET: usize = 50;

/// The settings of a `session/settings` event (`None` for any other event).
pub(crate) fn of_event(event: &Event) -> Option<Settings> {
    if *event.event_type() != EventType::SessionSettings {
        return None;
    }
    event.data_as::<SessionSettings>().ok().map(|s| s.settings)
}

/// One line: `model m · provider URL · system “…” · tools a, b · budget N ·
/// params {…}`, keys in that order, then unknown keys by name; `no
/// settings` when empty.
pub(crate) fn line(s: &Settings) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(model) = &s.model {
        parts.push(format!("model {model}"));
    }
    if let Some(provider) = &s.provider {
        parts.push(format!("provider {provider}"));
    }
    if let Some(prompt) = &s.system_prompt {
        parts.push(format!("system “{}”", crate::output::one_line(prompt, PROMPT_SNIPPET)));
    }
    if let Some(tools) = &s.tools {
        if tools.is_empty() {
            parts.push("no tools".to_owned());
        } else {
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            parts.push(format!("tools {}", names.join(", ")));
        }
    }
    if let Some(budget) = s.context_budget {
        parts.push(format!("budget {budget}"));
    }
    if let Some(params) = &s.params {
        parts.push(format!("params {}", serde_json::Value::Object(params.clone())));
    }
    for key in s.extra.keys() {
        parts.push(format!("+{key}"));
    }
    if parts.is_empty() {
        "no settings".to_owned()
    } else {
        // Logged text (a prompt, tool names): no control character of it
        // reaches the terminal.
        crate::output::printable_line(&parts.join(" · "))
    }
}

/// The keys whose values differ between `before` and `after` (contract
/// names, in the contract's order, then unknown keys by name).
pub(crate) fn changes(before: &Settings, after: &Settings) -> Vec<String> {
    let value = |s: &Settings| serde_json::to_value(s).unwrap_or_default();
    let (b, a) = (value(before), value(after));
    let known = ["systemPrompt", "model", "provider", "tools", "contextBudget", "params"];
    let mut keys: Vec<String> = known.iter().map(|k| (*k).to_owned()).collect();
    for s in [before, after] {
        for k in s.extra.keys() {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }
    keys.into_iter().filter(|k| b.get(k) != a.get(k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use palimpsest_core_session::payload::OfferedTool;

    #[test]
    fn a_line_names_each_setting_and_changes_name_each_key() {
        let mut s = Settings {
            system_prompt: Some("You are\na pirate.".into()),
            model: Some("m".into()),
            tools: Some(vec![OfferedTool { name: "read_file".into(), ..OfferedTool::default() }]),
            context_budget: Some(100),
            ..Settings::default()
        };
        s.extra.insert("seed".into(), serde_json::json!(1));
        assert_eq!(line(&s), "model m · system “You are a pirate.” · tools read_file · budget 100 · +seed");
        assert_eq!(line(&Settings::default()), "no settings");
        let other = Settings { model: Some("n".into()), ..s.clone() };
        assert_eq!(changes(&s, &other), ["model"]);
        assert_eq!(changes(&Settings::default(), &other).len(), 5);
        assert!(changes(&s, &s).is_empty());
    }
}
