//! The checkpoint sidecar of a JSONL store: where it lives, that a listing
//! never takes it for a session, that a resume reads only the lines after
//! it (torn and unterminated tails as a whole read has them), and that any
//! damage to it or to the file makes a resume read the whole file.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use palimpsest_core_session::{Checkpoint, Event, Session, SessionHeader};
use palimpsest_persistence::testkit::sample_events;
use palimpsest_persistence::{Durability, DurableSession, SessionStore, StoreError};
use palimpsest_persistence_jsonl::JsonlStore;

const CUT: usize = 20;

fn ok<T>(r: Result<T, StoreError>) -> T {
    r.unwrap_or_else(|e| panic!("[{}] {e}", e.code()))
}

fn checkpoint_of(h: &SessionHeader, events: &[Event]) -> Checkpoint {
    Session::from_log(h.clone(), events.to_vec()).unwrap_or_else(|e| panic!("{e}")).checkpoint()
}

fn sidecar(store: &JsonlStore, id: &str) -> PathBuf {
    let path = ok(store.path_of(id));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(name.replace(".jsonl", ".checkpoint.json"))
}

/// A store holding session `s`, the whole sample, with a checkpoint after
/// `CUT` events.
fn store_with_checkpoint(dir: &Path) -> (JsonlStore, SessionHeader, Checkpoint) {
    let store = ok(JsonlStore::open(dir));
    let h = SessionHeader::new("s/1", 7);
    let sample = sample_events();
    ok(store.create_with_events(&h, &sample[..CUT]));
    let c = checkpoint_of(&h, &sample[..CUT]);
    assert!(ok(store.save_checkpoint(&h.id, &c)));
    ok(store.append(&h.id, &sample[CUT..]));
    (store, h, c)
}

#[test]
fn the_sidecar_sits_beside_the_file_and_is_never_listed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, h, _) = store_with_checkpoint(dir.path());
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["s%2F1.checkpoint.json", "s%2F1.jsonl"], "no temporary file is left");
    let ids: Vec<String> = ok(store.list()).into_iter().map(|h| h.id).collect();
    assert_eq!(ids, ["s/1"]);
    assert_eq!(ok(store.summaries()).len(), 1);
    ok(store.delete(&h.id));
    assert_eq!(fs::read_dir(dir.path()).expect("read_dir").count(), 0, "delete removes the sidecar");
}

#[test]
fn a_resume_reads_the_lines_after_the_checkpoint_and_reports_a_torn_tail_where_a_load_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, h, c) = store_with_checkpoint(dir.path());
    let sample = sample_events();
    let path = ok(store.path_of(&h.id));
    drop(store);
    let mut file = fs::OpenOptions::new().append(true).open(&path).expect("open");
    file.write_all(br#"{"seq":99,"ti"#).expect("tear");
    drop(file);

    let store = ok(JsonlStore::open(dir.path()));
    let whole = ok(store.load(&h.id));
    let r = ok(store.load_resumable(&h.id));
    assert_eq!(r.checkpoint.as_ref(), Some(&c));
    assert_eq!(r.tail, sample[CUT..]);
    assert!(whole.report.torn_tail.is_some());
    assert_eq!(r.report, whole.report, "the torn tail, with the whole file's line and offset");

    let store: Arc<dyn SessionStore> = Arc::new(store);
    let (opened, report) = DurableSession::resume(store.clone(), &h.id, Durability::default()).expect("open");
    assert_eq!(report, whole.report);
    assert!(!opened.session().is_complete(), "resumed, not loaded whole");
    assert_eq!(opened.session().surface(), palimpsest_persistence::testkit::SAMPLE_SURFACE);
}

#[test]
fn an_unterminated_last_line_is_kept_as_a_whole_read_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, h, _) = store_with_checkpoint(dir.path());
    let path = ok(store.path_of(&h.id));
    drop(store);
    let mut bytes = fs::read(&path).expect("read");
    assert_eq!(bytes.pop(), Some(b'\n'));
    fs::write(&path, &bytes).expect("write");
    let store = ok(JsonlStore::open(dir.path()));
    let r = ok(store.load_resumable(&h.id));
    assert!(r.checkpoint.is_some());
    assert_eq!(r.tail, sample_events()[CUT..]);
    assert_eq!(r.report, ok(store.load(&h.id)).report);
}

/// Damages the session file, the sidecar, or both.
type Damage = fn(&Path, &Path);

#[test]
fn damage_to_the_sidecar_or_the_file_means_a_whole_read() {
    let damages: [(&str, Damage); 7] = [
        ("sidecar cut short", |_, side| {
            let t = fs::read(side).expect("read");
            fs::write(side, &t[..t.len() - 3]).expect("write");
        }),
        ("offset moved one byte", |_, side| {
            let t = fs::read_to_string(side).expect("read");
            let at = t.find("\"offset\":").expect("offset") + 9;
            let end = at + t[at..].find(',').expect("comma");
            let n: u64 = t[at..end].parse().expect("number");
            fs::write(side, format!("{}{}{}", &t[..at], n + 1, &t[end..])).expect("write");
        }),
        ("offset named twice, the second one past the end", |_, side| {
            let t = fs::read_to_string(side).expect("read");
            fs::write(side, t.replacen("\"offset\":", &format!("\"offset\":{},\"offset\":", u64::MAX), 1))
                .expect("write");
        }),
        ("offset past the end", |_, side| {
            let t = fs::read_to_string(side).expect("read");
            let at = t.find("\"offset\":").expect("offset") + 9;
            let end = at + t[at..].find(',').expect("comma");
            fs::write(side, format!("{}{}{}", &t[..at], u64::MAX, &t[end..])).expect("write");
        }),
        ("the file rewritten under it", |file, _| {
            let t = fs::read_to_string(file).expect("read");
            fs::write(file, t.replacen("\"time\":", "\"time\":1", 3)).expect("write");
        }),
        ("a cached event edited (what a resume would send the model)", |_, side| {
            let t = fs::read_to_string(side).expect("read");
            let events = t.find("\"events\":[").expect("events");
            let edited = t[events..].replacen("\"time\":", "\"time\":1", 1);
            fs::write(side, format!("{}{edited}", &t[..events])).expect("write");
        }),
        ("the header changed", |file, _| {
            let t = fs::read_to_string(file).expect("read");
            fs::write(file, t.replacen("\"createdAt\":7", "\"createdAt\":8", 1)).expect("write");
        }),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, h, _) = store_with_checkpoint(dir.path());
        let path = ok(store.path_of(&h.id));
        let side = sidecar(&store, &h.id);
        drop(store);
        damage(&path, &side);
        let store = ok(JsonlStore::open(dir.path()));
        let whole = store.load(&h.id);
        let r = store.load_resumable(&h.id);
        match (whole, r) {
            (Ok(whole), Ok(r)) => {
                assert!(r.checkpoint.is_none(), "{what}: the sidecar was used");
                assert_eq!(r.header, whole.header, "{what}");
                assert_eq!(r.tail, whole.events, "{what}: every event, as a load");
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{what}: a load's error"),
            (a, b) => panic!("{what}: load {:?} but load_resumable {:?}", a.map(|_| ()), b.map(|_| ())),
        }
    }
}

#[test]
fn a_checkpoint_beyond_the_file_is_refused_and_successive_saves_find_their_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ok(JsonlStore::open(dir.path()));
    let h = SessionHeader::new("s", 0);
    let sample = sample_events();
    ok(store.create_with_events(&h, &sample[..CUT]));
    let err = store.save_checkpoint(&h.id, &checkpoint_of(&h, &sample)).expect_err("ahead of the file");
    assert!(matches!(err, StoreError::Conflict { expected, .. } if expected == CUT as u64), "{err}");
    assert!(!sidecar(&store, &h.id).exists(), "nothing written");
    // Saved at every length, each save starting from the last one's line.
    for n in 0..=CUT {
        let c = checkpoint_of(&h, &sample[..n]);
        assert!(ok(store.save_checkpoint(&h.id, &c)));
        let r = ok(store.load_resumable(&h.id));
        assert_eq!(r.tail, sample[n..CUT], "tail after a checkpoint of {n} events");
        assert_eq!(r.checkpoint.is_some(), n > 0, "a checkpoint of {n} events");
    }
    assert!(matches!(
        store.save_checkpoint("nobody", &checkpoint_of(&h, &[])),
        Err(StoreError::NotFound { .. })
    ));
}

/// One plugin event at `seq`: what any log may take next.
fn plugin_event(seq: u64) -> Event {
    use palimpsest_core_session::payload::PluginEvent;
    let data = serde_json::json!({"n": seq});
    Event::log(seq, 9, PluginEvent { event_type: "probe/mark".into(), data }).expect("a plugin event")
}

/// The event lines of a session file, parsed (not its header).
fn event_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = fs::read_to_string(path).expect("read");
    text.lines().skip(1).map(|l| serde_json::from_str(l).unwrap_or(serde_json::Value::Null)).collect()
}

#[test]
fn the_first_append_after_a_held_resume_does_not_read_the_file_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, h, _) = store_with_checkpoint(dir.path());
    let path = ok(store.path_of(&h.id));
    drop(store);
    // A line before the checkpoint's offset made unreadable, the file's
    // length kept: a read of the whole file would refuse the append.
    let text = fs::read_to_string(&path).expect("read");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[3] = "x".repeat(lines[3].len());
    fs::write(&path, lines.join("\n") + "\n").expect("write");

    let store = ok(JsonlStore::open(dir.path()));
    ok(store.hold(&h.id, "me", std::time::Duration::from_secs(60)));
    let r = ok(store.load_resumable(&h.id));
    assert!(r.checkpoint.is_some(), "resumed from the sidecar");
    let next = (r.checkpoint.as_ref().map_or(0, Checkpoint::log_len) + r.tail.len() as u64, r.tail.len());
    ok(store.append(&h.id, &[plugin_event(next.0)]));
    ok(store.sync(&h.id));
    let events = event_lines(&path);
    assert_eq!(events.last().map(|e| e["seq"].clone()), Some(serde_json::json!(next.0)));
    assert_eq!(events.len() as u64, next.0 + 1);

    // Without a hold there is no writer whose end the read could tell: the
    // append reads the file, and finds the damage.
    drop(store);
    let store = ok(JsonlStore::open(dir.path()));
    ok(store.load_resumable(&h.id));
    let refused = store.append(&h.id, &[plugin_event(next.0 + 1)]).expect_err("the whole file is read");
    assert_eq!(refused.code(), "corrupt", "{refused}");
}

#[test]
fn an_append_after_a_held_resume_cuts_a_torn_tail_and_ends_an_unterminated_line() {
    for tear in [&br#"{"seq":99,"ti"#[..], b""] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, h, _) = store_with_checkpoint(dir.path());
        let path = ok(store.path_of(&h.id));
        drop(store);
        let mut bytes = fs::read(&path).expect("read");
        if tear.is_empty() {
            assert_eq!(bytes.pop(), Some(b'\n'), "the last line, unterminated");
        } else {
            bytes.extend_from_slice(tear);
        }
        fs::write(&path, &bytes).expect("write");

        let store = ok(JsonlStore::open(dir.path()));
        ok(store.hold(&h.id, "me", std::time::Duration::from_secs(60)));
        let r = ok(store.load_resumable(&h.id));
        assert!(r.checkpoint.is_some());
        let next = r.checkpoint.as_ref().map_or(0, Checkpoint::log_len) + r.tail.len() as u64;
        ok(store.append(&h.id, &[plugin_event(next)]));
        ok(store.sync(&h.id));
        drop(store);
        let whole = ok(ok(JsonlStore::open(dir.path())).load(&h.id));
        assert_eq!(whole.report.torn_tail, None, "the torn line was cut off");
        assert_eq!(whole.events.len() as u64, next + 1);
        assert_eq!(whole.events.last(), Some(&plugin_event(next)));
    }
}
