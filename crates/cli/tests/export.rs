//! `palimpsest export` end to end: Markdown snapshots of both views for
//! every valid fixture (the CLI's, core-session's and the rich export
//! session), the JSON shape, and an HTML file that is self-contained and
//! escapes hostile text. (`export_html.rs` renders it in Chromium.)

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use palimpsest_core_session::payload::{Block, Message, Role, Source, TurnStart, UserMessage};
use palimpsest_core_session::{jsonl, Session, SessionHeader, SurfaceIntent};
use serde_json::{json, Value};

use support::*;

fn data(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)
}

/// Both Markdown views of one fixture, as one snapshot.
fn snapshot_markdown(dir: &Path, file: &str, name: &str) {
    let mut text = String::new();
    for view in ["transcript", "model"] {
        let run = ok(palimpsest(dir, &["export", file, "--format", "markdown", "--view", view]));
        text.push_str(&format!("$ palimpsest export {file} --format markdown --view {view}\n"));
        text.push_str(&run.stderr);
        text.push_str(&run.stdout);
        text.push('\n');
    }
    insta::assert_snapshot!(name, text);
}

#[test]
fn markdown_of_the_cli_fixtures() {
    for file in [
        "compaction-and-prune.jsonl",
        "crash-open.jsonl",
        "forked.jsonl",
        "header-only.jsonl",
        "settings.jsonl",
    ] {
        snapshot_markdown(
            &data("test_data/ok"),
            file,
            &format!("md_cli_{}", file.trim_end_matches(".jsonl")),
        );
    }
}

#[test]
fn markdown_of_the_core_session_fixtures() {
    for file in [
        "crash-open.jsonl",
        "multi-step-tools.jsonl",
        "plain-chat.jsonl",
        "tool-result-pruning.jsonl",
        "two-compactions.jsonl",
    ] {
        let name = format!("md_core_{}", file.trim_end_matches(".jsonl"));
        snapshot_markdown(&data("../core-session/test_data/ok"), file, &name);
    }
}

#[test]
fn markdown_of_the_rich_session() {
    snapshot_markdown(&data("test_data/export"), "rich.jsonl", "md_rich");
}

#[test]
fn markdown_never_lets_message_text_become_html() {
    for view in ["transcript", "model"] {
        let run = ok(palimpsest(
            &data("test_data/export"),
            &["export", "rich.jsonl", "--format", "markdown", "--view", view],
        ));
        // Rendered by a CommonMark implementation, with and without GFM.
        for options in [pulldown_cmark::Options::empty(), pulldown_cmark::Options::all()] {
            for event in pulldown_cmark::Parser::new_ext(&run.stdout, options) {
                assert!(
                    !matches!(event, pulldown_cmark::Event::Html(_) | pulldown_cmark::Event::InlineHtml(_)),
                    "{event:?} in\n{}",
                    run.stdout
                );
            }
        }
        if view == "transcript" {
            assert!(run.stdout.contains(r#"\<script\>alert("pwned")\</script\>"#), "{}", run.stdout);
        }
        assert!(run.stdout.contains("`product.html.bak`"), "code spans are kept as they are");
    }
}

#[test]
fn every_export_shows_the_settings_and_their_changes() {
    let dir = data("test_data/ok");
    let run = ok(palimpsest(&dir, &["export", "settings.jsonl", "--format", "json"]));
    let doc: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(doc["session"]["settingsSeq"], json!(8));
    assert_eq!(doc["session"]["settings"]["model"], json!("m-2"));
    let settings: Vec<&Value> =
        doc["items"].as_array().into_iter().flatten().filter(|i| i["kind"] == "settings").collect();
    assert_eq!(settings.len(), 2);
    assert_eq!(settings[1]["seq"], json!(8));
    assert_eq!(settings[1]["changes"], json!(["systemPrompt", "model", "params", "seed"]));
    assert_eq!(settings[1]["settings"]["params"], json!({"temperature": 0.2}));
    // The model view has no settings items: it is the surface.
    let model = ok(palimpsest(&dir, &["export", "settings.jsonl", "--format", "json", "--view", "model"]));
    assert!(!model.stdout.contains(r#""kind": "settings""#));

    let html = ok(palimpsest(&dir, &["export", "settings.jsonl", "--format", "html"])).stdout;
    assert!(html.contains("<dt>Settings</dt><dd>model m-2 · "), "the header states the settings in effect");
    assert!(
        html.contains("<p class=\"ended settings\" id=\"seq-8\">Settings (seq 8, +0.080s; changes systemPrompt, model, params, seed): model m-2"),
        "{html}"
    );
}

#[test]
fn json_has_the_documented_shape() {
    let dir = data("test_data/ok");
    let run = ok(palimpsest(
        &dir,
        &["export", "compaction-and-prune.jsonl", "--format", "json", "--view", "model"],
    ));
    insta::assert_snapshot!("json_model_compaction_and_prune", run.stdout);

    let run = ok(palimpsest(&dir, &["export", "compaction-and-prune.jsonl", "--format", "json"]));
    let doc: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(
        (doc["format"].clone(), doc["version"].clone(), doc["view"].clone()),
        (json!("palimpsest-export"), json!(1), json!("transcript"))
    );
    assert_eq!(
        doc["session"],
        json!({"id": "example-1", "createdAt": 1767225600000_u64, "cwd": null, "parentSession": null,
               "seedLength": null, "events": 27, "turns": 2, "surface": [20, 15, 17, 24],
               "settings": {}, "settingsSeq": null})
    );
    let items = doc["items"].as_array().expect("items");
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap_or("?")).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "message").count(), 9);
    assert_eq!(kinds.iter().filter(|k| **k == "turn-start").count(), 2);
    assert_eq!(kinds.iter().filter(|k| **k == "turn-end").count(), 2);
    let keys = [
        "kind",
        "seq",
        "time",
        "type",
        "turn",
        "step",
        "surfacePosition",
        "surfaceOp",
        "sourceEventSeqs",
        "shadowedBy",
        "replaces",
        "usage",
        "toolError",
        "interrupted",
        "message",
    ];
    for item in items.iter().filter(|i| i["kind"] == "message") {
        let mut found: Vec<&str> = item.as_object().expect("object").keys().map(String::as_str).collect();
        found.sort_unstable();
        let mut expected = keys.to_vec();
        expected.sort_unstable();
        assert_eq!(found, expected, "every key is always present: {item}");
    }
    let compaction = items.iter().find(|i| i["seq"] == 20).expect("seq 20");
    assert_eq!(compaction["replaces"], json!({"kind": "compaction", "shadowed": [1, 6, 18, 12]}));
    let prune = items.iter().find(|i| i["seq"] == 18).expect("seq 18");
    assert_eq!(prune["replaces"], json!({"kind": "prune", "shadowed": [8]}));
    assert_eq!(prune["shadowedBy"], json!(20));
    let original = items.iter().find(|i| i["seq"] == 8).expect("seq 8");
    let logged: Value = serde_json::from_str(
        fs::read_to_string(dir.join("compaction-and-prune.jsonl"))
            .expect("read")
            .lines()
            .nth(9)
            .expect("line 10"),
    )
    .expect("JSON");
    assert_eq!(original["message"], logged["data"]["message"], "the message exactly as logged");
}

/// Every `src` and `href` attribute value in `html`.
fn attribute_values<'a>(html: &'a str, attribute: &str) -> Vec<&'a str> {
    let needle = format!(" {attribute}=\"");
    html.match_indices(&needle)
        .map(|(i, _)| {
            let rest = &html[i + needle.len()..];
            &rest[..rest.find('"').unwrap_or(rest.len())]
        })
        .collect()
}

fn assert_self_contained(html: &str) {
    let lower = html.to_ascii_lowercase();
    assert!(!lower.contains("http://") && !lower.contains("https://"), "the file names a URL");
    assert!(!lower.contains("<script"), "the file has a script");
    assert!(!lower.contains("<link"), "the file links a resource");
    assert!(!lower.contains("@import") && !lower.contains("url("), "the CSS loads something");
    for src in attribute_values(html, "src") {
        assert!(src.starts_with("data:image/"), "external src: {src}");
    }
    for href in attribute_values(html, "href") {
        assert!(href.starts_with('#'), "external href: {href}");
    }
}

#[test]
fn html_is_self_contained_and_escapes_hostile_text() {
    let dir = data("test_data/export");
    for view in ["transcript", "model"] {
        let html = ok(palimpsest(&dir, &["export", "rich.jsonl", "--format", "html", "--view", view])).stdout;
        assert!(html.starts_with("<!DOCTYPE html>"), "{view}");
        assert_self_contained(&html);
        assert!(html.contains("default-src 'none'"), "{view}: a CSP forbids loading anything");
        assert!(html.contains("data:image/png;base64,iVBORw0KGgo"), "{view}: the image is inline");
        assert!(html.contains("<details class=\"tool-call\""), "{view}: tool calls fold");
        assert!(html.contains("<details class=\"tool-result\""), "{view}: tool results fold");
    }
    let html = ok(palimpsest(&dir, &["export", "rich.jsonl", "--format", "html"])).stdout;
    assert!(
        html.contains("&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;"),
        "the hostile text shows as text"
    );
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!html.contains("onerror=alert(1)>"), "no live attribute");
    assert!(html.contains("— compacted 6 messages into a summary (seq 45) —"));
    assert!(html.contains("— pruned the result of call_read (seq 9) into seq 43 —"));
    assert!(html.contains("Turn 3 ended: interrupted (closed by crash repair)"));
}

#[test]
fn html_refuses_a_hostile_image_and_escapes_ids_and_names() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut s = Session::create(SessionHeader::new("<b>id</b>\"", 0));
    let evil = "\" onerror=\"alert(1)";
    let message = Message {
        id: "u1".into(),
        role: Role::User,
        content: vec![
            Block::text("</div></article><script>alert(2)</script>"),
            Block::Image { media_type: format!("image/png{evil}"), data: "AAAA".into() },
            // Data that is not base64 is refused by the log itself
            // (contract note 25); a media type that is no image is left out.
            Block::Image { media_type: "text/html".into(), data: "PHNjcmlwdD4=".into() },
        ],
        source: Source::Plugin { plugin: "<i>plugin</i>".into() },
    };
    let built = s
        .append_log(0, TurnStart { turn: 1 })
        .and_then(|_| s.append_surface(1, UserMessage { turn: Some(1), message }, SurfaceIntent::append()));
    built.expect("a valid session");
    fs::write(dir.path().join("evil.jsonl"), jsonl::to_bytes(s.header(), s.events())).expect("write");
    let html = ok(palimpsest(dir.path(), &["export", "evil.jsonl", "--format", "html"])).stdout;
    assert_self_contained(&html);
    assert!(!html.contains("onerror=\"alert"), "no attribute escaped its quotes");
    assert!(!html.contains("<script>alert(2)"));
    assert!(html.contains("&lt;/div&gt;&lt;/article&gt;&lt;script&gt;alert(2)&lt;/script&gt;"));
    assert!(html.contains("<title>&lt;b&gt;id&lt;/b&gt;&quot; — transcript</title>"));
    assert!(html.contains("plugin &lt;i&gt;plugin&lt;/i&gt;"));
    assert_eq!(html.matches("that is not shown").count(), 2, "both hostile images are left out");
    let md = ok(palimpsest(dir.path(), &["export", "evil.jsonl", "--format", "markdown"])).stdout;
    assert!(!md.contains("](data:"), "no hostile image reaches the Markdown either");
}

#[test]
fn export_writes_a_file_with_o_and_reports_bad_paths() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let src = data("test_data/ok/compaction-and-prune.jsonl").display().to_string();
    let run = ok(palimpsest(dir.path(), &["export", &src, "--format", "html", "-o", "out.html"]));
    assert_eq!(run.stdout, "", "nothing on stdout when writing a file");
    assert!(run.stderr.contains("wrote the transcript view as HTML to out.html"), "{:?}", run.stderr);
    assert!(fs::read_to_string(dir.path().join("out.html")).expect("read").ends_with("</html>\n"));
    let run = palimpsest(dir.path(), &["export", &src, "--format", "json", "-o", "missing/dir/out.json"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.starts_with("error[io]: missing/dir/out.json: cannot write the export: "), "{run:?}");
    let run = palimpsest(dir.path(), &["export", &src]);
    assert_eq!(run.code, 2, "--format is required: {run:?}");
    assert!(run.stderr.starts_with("error[usage]: "), "{run:?}");
}

/// `-o` naming a FIFO (or a device) writes to it, as the shell's `>`
/// would; it used to replace it with a regular file (an outside probe:
/// `-o /dev/null`, as root, left a world-writable file there).
#[cfg(unix)]
#[test]
fn export_to_a_fifo_writes_into_it_and_leaves_it_a_fifo() {
    use std::os::unix::fs::FileTypeExt;

    let dir = tempfile::tempdir().expect("a temp dir");
    let fifo = dir.path().join("out.html");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read_to_string(fifo).expect("read the FIFO"))
    };
    let src = data("test_data/ok/compaction-and-prune.jsonl").display().to_string();
    let run = ok(palimpsest(dir.path(), &["export", &src, "--format", "html", "-o", "out.html"]));
    assert!(run.stderr.contains("wrote the transcript view as HTML to out.html"), "{:?}", run.stderr);
    let html = reader.join().expect("the reader");
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>\n"),
        "{}",
        &html[..80.min(html.len())]
    );
    assert!(fs::symlink_metadata(&fifo).expect("stat").file_type().is_fifo(), "still a FIFO");
}
