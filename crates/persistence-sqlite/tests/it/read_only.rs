//! Reading never writes: `SqliteStore::open_read_only` changes no byte and
//! creates no file, refuses what is not a store instead of initialising it,
//! reads a store beside which a writer is at work or crashed, and reads a
//! clean store in a directory it cannot write. Also the whole-store checks
//! of `check_store`, including a foreign `-wal` next to a store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use palimpsest_core_session::SessionHeader;
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_sqlite::{
    ReadMode, SqliteStore, STORE_INTEGRITY, STORE_ORPHAN_EVENTS, STORE_SEQ_GAP,
};
use rusqlite::Connection;

use crate::common::{code, temp_db, ticks};

/// Every file in `dir` with its bytes: what "nothing changed" compares.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let e = e.expect("dir entry");
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).expect("read file"))
        })
        .collect()
}

fn names(dir: &Path) -> Vec<String> {
    snapshot(dir).into_keys().collect()
}

fn side(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A store at `path` with session `id` holding `events` ticks, closed
/// cleanly: the WAL is checkpointed into the file and deleted.
fn clean_store(path: &Path, id: &str, events: u64) {
    let store = SqliteStore::open(path).expect("open");
    store.create(&SessionHeader::new(id, 0)).expect("create");
    store.append(id, &ticks(0, events, "e")).expect("append");
    drop(store);
    assert!(!side(path, "-wal").exists() && !side(path, "-shm").exists(), "closed cleanly");
}

fn mismatch(err: &StoreError) -> (&str, &str) {
    match err {
        StoreError::SchemaMismatch { found, expected } => (found, expected),
        other => panic!("expected schema-mismatch, got {other}"),
    }
}

#[test]
fn reading_a_clean_store_changes_no_byte_and_creates_no_file() {
    let (dir, path) = temp_db();
    clean_store(&path, "s", 50);
    let before = snapshot(dir.path());
    assert_eq!(before.keys().collect::<Vec<_>>(), ["store.db"]);

    let store = SqliteStore::open_read_only(&path).expect("open read-only");
    assert_eq!(store.read_mode(), Some(ReadMode::Immutable), "no -wal: the file alone is the store");
    assert_eq!(store.list().expect("list").len(), 1);
    assert_eq!(store.load("s").expect("load").events, ticks(0, 50, "e"));
    assert_eq!(store.check_store().expect("check"), vec![]);
    assert_eq!(snapshot(dir.path()), before, "nothing changed while the store is open");
    drop(store);
    assert_eq!(snapshot(dir.path()), before, "nothing changed after it closed");
}

#[test]
fn a_store_opened_for_writing_reports_no_read_mode() {
    let (_dir, path) = temp_db();
    assert_eq!(SqliteStore::open(&path).expect("open").read_mode(), None);
}

#[test]
fn a_zero_length_file_is_refused_and_stays_empty() {
    let (dir, path) = temp_db();
    std::fs::write(&path, b"").expect("touch");
    let err = SqliteStore::open_read_only(&path).expect_err("an empty file holds no store");
    let (found, expected) = mismatch(&err);
    assert!(
        found.ends_with(
            "store.db, an empty file (0 bytes): there is no store to read, and reading never initialises one"
        ),
        "{found}"
    );
    assert_eq!(expected, "a Palimpsest SQLite store (application_id 0x50414C49 (\"PALI\"), user_version 4)");
    assert_eq!(snapshot(dir.path()), BTreeMap::from([("store.db".to_owned(), Vec::new())]));
}

#[test]
fn a_database_without_a_schema_is_refused_not_initialised() {
    let (dir, path) = temp_db();
    // A SQLite file with a header and no tables or ids.
    Connection::open(&path).and_then(|c| c.execute_batch("CREATE TABLE x (a); DROP TABLE x;")).expect("db");
    let before = snapshot(dir.path());
    let err = SqliteStore::open_read_only(&path).expect_err("refused");
    assert!(mismatch(&err).0.contains("a SQLite database with no tables and no ids"), "{err}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn foreign_files_are_refused_by_a_reader_as_by_a_writer() {
    let (dir, path) = temp_db();
    std::fs::write(&path, "{\"type\":\"session\"}\n").expect("write");
    let err = SqliteStore::open_read_only(&path).expect_err("text");
    assert!(mismatch(&err).0.ends_with("which is not a SQLite database (it lacks the SQLite header)"));
    let other = dir.path().join("other.db");
    Connection::open(&other).and_then(|c| c.execute_batch("CREATE TABLE t (x)")).expect("foreign db");
    let before = snapshot(dir.path());
    let err = SqliteStore::open_read_only(&other).expect_err("another program's database");
    assert!(mismatch(&err).0.contains("another program's database"), "{err}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_missing_file_is_io_and_is_not_created() {
    let (dir, path) = temp_db();
    assert_eq!(code(SqliteStore::open_read_only(&path)), Err("io"));
    assert_eq!(names(dir.path()), Vec::<String>::new());
}

#[test]
fn writes_on_a_read_only_store_are_refused_and_change_nothing() {
    let (dir, path) = temp_db();
    clean_store(&path, "s", 3);
    let before = snapshot(dir.path());
    let store = SqliteStore::open_read_only(&path).expect("open");
    let err = store.append("s", &ticks(3, 1, "x")).expect_err("append");
    assert_eq!(err.to_string(), format!("io: {} was opened read-only: appending is refused", path.display()));
    assert_eq!(code(store.create(&SessionHeader::new("t", 0))), Err("io"));
    assert_eq!(code(store.delete("s")), Err("io"));
    assert_eq!(code(store.create_with_events(&SessionHeader::new("u", 0), &ticks(0, 1, "u"))), Err("io"));
    assert_eq!(code(store.sync("s")), Ok(()), "nothing was written, so nothing to sync");
    assert_eq!(store.load("s").expect("reads go on").events.len(), 3);
    let checkpoint = palimpsest_core_session::Session::from_log(SessionHeader::new("s", 0), ticks(0, 3, "e"))
        .expect("a valid log")
        .checkpoint();
    assert_eq!(code(store.save_checkpoint("s", &checkpoint)), Err("io"), "a checkpoint is a write");
    drop(store);
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_reader_resumes_from_a_saved_checkpoint_and_changes_no_byte() {
    let (dir, path) = temp_db();
    clean_store(&path, "s", 5);
    let writer = SqliteStore::open(&path).expect("open");
    let checkpoint = palimpsest_core_session::Session::from_log(SessionHeader::new("s", 0), ticks(0, 3, "e"))
        .expect("a valid log")
        .checkpoint();
    assert_eq!(writer.save_checkpoint("s", &checkpoint).map_err(|e| e.code()), Ok(true));
    let ahead = palimpsest_core_session::Session::from_log(SessionHeader::new("s", 0), ticks(0, 6, "e"))
        .expect("a valid log")
        .checkpoint();
    let err = writer.save_checkpoint("s", &ahead).expect_err("a checkpoint ahead of the log");
    assert!(
        matches!(err, StoreError::Conflict { expected: 5, found: 6, .. }),
        "refused as `conflict`, the stored length and the checkpoint's: {err}"
    );
    drop(writer);
    let before = snapshot(dir.path());
    let store = SqliteStore::open_read_only(&path).expect("open read-only");
    let resumable = store.load_resumable("s").expect("load_resumable");
    assert_eq!(resumable.checkpoint, Some(checkpoint), "the first checkpoint stays");
    assert_eq!(resumable.tail, ticks(0, 5, "e")[3..], "only the events after it");
    assert_eq!(store.check_store().expect("check"), vec![], "a checkpoint is no defect of the store");
    drop(store);
    assert_eq!(snapshot(dir.path()), before, "a resume writes nothing");
}

#[test]
fn a_store_with_a_live_writer_is_read_through_its_wal_and_sees_new_commits() {
    let (dir, path) = temp_db();
    let writer = SqliteStore::open(&path).expect("writer");
    writer.create(&SessionHeader::new("s", 0)).expect("create");
    writer.append("s", &ticks(0, 5, "w")).expect("append");
    assert_eq!(names(dir.path()), ["store.db", "store.db-shm", "store.db-wal"]);

    let reader = SqliteStore::open_read_only(&path).expect("reader");
    assert_eq!(reader.read_mode(), Some(ReadMode::Shared));
    assert_eq!(reader.load("s").expect("load").events, ticks(0, 5, "w"));
    writer.append("s", &ticks(5, 2, "w")).expect("append more");
    assert_eq!(reader.load("s").expect("load again").events.len(), 7, "a new snapshot per read");
    assert_eq!(names(dir.path()), ["store.db", "store.db-shm", "store.db-wal"], "no file added");
}

/// Copies the database, its `-wal` and (with `shm`) its `-shm` into `to`
/// while `writer` holds them open: what a crashed writer leaves.
fn copy_live(from: &Path, to: &Path, shm: bool) {
    std::fs::copy(from, to).expect("copy db");
    std::fs::copy(side(from, "-wal"), side(to, "-wal")).expect("copy wal");
    if shm {
        std::fs::copy(side(from, "-shm"), side(to, "-shm")).expect("copy shm");
    }
}

#[test]
fn commits_left_in_the_wal_of_a_crashed_writer_are_read_not_ignored() {
    let (dir, path) = temp_db();
    let writer = SqliteStore::open(&path).expect("writer");
    writer.create(&SessionHeader::new("s", 0)).expect("create");
    writer.append("s", &ticks(0, 4, "w")).expect("append");
    for shm in [true, false] {
        let copy = dir.path().join(format!("crashed-{shm}.db"));
        copy_live(&path, &copy, shm);
        let reader = SqliteStore::open_read_only(&copy).expect("reader");
        assert_eq!(reader.read_mode(), Some(ReadMode::Shared), "the -wal holds commits");
        assert_eq!(reader.load("s").expect("load").events, ticks(0, 4, "w"), "with -shm: {shm}");
    }
}

/// A store in rollback-journal mode whose writer crashed in the middle of
/// a transaction, at `to`: copied, with its `-journal`, while a writer of
/// `from` holds a transaction that spilled changed pages into the file.
fn hot_journal_copy(from: &Path, to: &Path) {
    clean_store(from, "s", 200);
    let conn = Connection::open(from).expect("raw open");
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "delete", |r| r.get(0)).expect("journal_mode");
    assert_eq!(mode, "delete");
    // One page of cache: the update must write pages to the file (and
    // first sync the journal) long before it commits.
    conn.execute_batch("PRAGMA cache_size = 1; BEGIN; UPDATE events SET time = time + 1;").expect("update");
    std::fs::copy(from, to).expect("copy db");
    std::fs::copy(side(from, "-journal"), side(to, "-journal")).expect("copy journal");
    drop(conn);
}

#[test]
fn a_hot_rollback_journal_is_named_as_what_keeps_a_reader_out() {
    let (dir, path) = temp_db();
    let hot = dir.path().join("hot.db");
    hot_journal_copy(&path, &hot);
    let before = snapshot(dir.path());

    let err = SqliteStore::open_read_only(&hot).expect_err("a reader cannot roll the journal back");
    assert_eq!(err.code(), "io", "{err}");
    let detail = err.detail();
    let journal = format!("rollback journal {} is hot", side(&hot, "-journal").display());
    assert!(detail.contains(&journal), "{detail}");
    assert!(!detail.contains("-wal holds commits"), "{detail}");
    assert_eq!(snapshot(dir.path()), before, "the reader changed nothing");

    // A writer rolls it back; then the store reads as it was before.
    drop(SqliteStore::open(&hot).expect("a writer rolls the journal back"));
    assert!(!side(&hot, "-journal").exists());
    let reader = SqliteStore::open_read_only(&hot).expect("now it reads");
    assert_eq!(reader.load("s").expect("load").events, ticks(0, 200, "e"));
}

#[test]
fn a_writer_arriving_while_a_reader_is_immutable_moves_it_to_shared_reads() {
    let (_dir, path) = temp_db();
    clean_store(&path, "s", 3);
    let reader = SqliteStore::open_read_only(&path).expect("reader");
    assert_eq!(reader.read_mode(), Some(ReadMode::Immutable));
    assert_eq!(reader.load("s").expect("load").events.len(), 3, "pages now cached");

    let writer = SqliteStore::open(&path).expect("writer");
    writer.append("s", &ticks(3, 2, "new")).expect("append");
    let expected = [ticks(0, 3, "e"), ticks(3, 2, "new")].concat();
    assert!(reader.load("s").expect("load").events == expected, "the new commit is seen");
    assert_eq!(reader.read_mode(), Some(ReadMode::Shared), "a -wal stands beside the file now");
}

#[test]
fn a_writer_that_came_and_went_between_two_reads_is_noticed() {
    let (_dir, path) = temp_db();
    clean_store(&path, "s", 3);
    let reader = SqliteStore::open_read_only(&path).expect("reader");
    assert_eq!(reader.load("s").expect("load").events.len(), 3, "pages now cached");

    // It commits, checkpoints into the file and deletes its -wal on close.
    let writer = SqliteStore::open(&path).expect("writer");
    writer.append("s", &ticks(3, 200, "new")).expect("append");
    drop(writer);
    assert!(!side(&path, "-wal").exists());
    let expected = [ticks(0, 3, "e"), ticks(3, 200, "new")].concat();
    assert!(reader.load("s").expect("load").events == expected, "not the cached pages");
    assert_eq!(reader.read_mode(), Some(ReadMode::Immutable), "the file alone is the store again");
}

#[cfg(unix)]
#[test]
fn a_clean_store_in_a_directory_that_cannot_be_written_is_read_immutably() {
    use std::os::unix::fs::PermissionsExt as _;
    let (dir, path) = temp_db();
    clean_store(&path, "s", 10);
    let before = snapshot(dir.path());
    let mode = |m| std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(m)).expect("chmod");
    mode(0o555);
    // SQLite's plain read-only mode would need to create a -wal and -shm
    // here (as root it could; as anyone else it fails, the reported bug):
    // the reader must pick the mode that needs neither.
    let result = SqliteStore::open_read_only(&path).and_then(|s| Ok((s.read_mode(), s.load("s")?)));
    mode(0o755);
    let (read_mode, loaded) = result.expect("a clean store is readable without write access");
    assert_eq!(read_mode, Some(ReadMode::Immutable));
    assert_eq!(loaded.events.len(), 10);
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn the_store_check_finds_orphan_events_and_seq_gaps() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    for id in ["gap", "late", "ok", "orphan"] {
        store.create(&SessionHeader::new(id, 0)).expect("create");
        store.append(id, &ticks(0, 5, id)).expect("append");
    }
    assert_eq!(store.check_store().expect("check"), vec![]);
    drop(store);
    let conn = Connection::open(&path).expect("raw");
    conn.execute_batch(
        "DELETE FROM events WHERE session_id = 'gap' AND seq IN (1, 2); \
         DELETE FROM events WHERE session_id = 'late' AND seq = 0; \
         DELETE FROM sessions WHERE id = 'orphan';",
    )
    .expect("tamper");
    drop(conn);

    let store = SqliteStore::open_read_only(&path).expect("open");
    let found: Vec<(&str, Option<String>, String)> =
        store.check_store().expect("check").into_iter().map(|v| (v.code, v.session_id, v.message)).collect();
    assert_eq!(
        found,
        [
            (
                STORE_ORPHAN_EVENTS,
                Some("orphan".to_owned()),
                "5 event rows (seqs 0 to 4) belong to session \"orphan\", which has no sessions row: no command sees them".to_owned()
            ),
            (
                STORE_SEQ_GAP,
                Some("gap".to_owned()),
                "session \"gap\" holds 3 events with seqs 0 to 4: 2 seqs between 0 and 4 are missing".to_owned()
            ),
            (
                STORE_SEQ_GAP,
                Some("late".to_owned()),
                "session \"late\" holds 4 events with seqs 1 to 4: its first stored seq is 1, not 0".to_owned()
            ),
        ]
    );
    assert_eq!(
        (STORE_ORPHAN_EVENTS, STORE_SEQ_GAP, STORE_INTEGRITY),
        ("store-orphan-events", "store-seq-gap", "store-integrity")
    );
}

/// The reported case: store A holds session `s` with 64 events; the `-wal`
/// of another store B, holding only a new session `t`, is copied next to
/// it. SQLite cannot tell the `-wal` is not A's (a WAL header names no
/// database) and applies B's pages over A's: the sessions table now lists
/// `t` alone, while A's 64 event rows of `s` remain.
#[test]
fn a_foreign_wal_next_to_a_store_is_caught_by_the_store_check() {
    let (dir, a) = temp_db();
    clean_store(&a, "s", 64);
    let b = dir.path().join("b.db");
    let writer = SqliteStore::open(&b).expect("b");
    writer.create(&SessionHeader::new("t", 0)).expect("create t");
    std::fs::copy(side(&b, "-wal"), side(&a, "-wal")).expect("copy B's wal next to A");
    drop(writer);

    let store = SqliteStore::open_read_only(&a).expect("open A");
    let ids: Vec<String> = store.list().expect("list").into_iter().map(|h| h.id).collect();
    assert_eq!(ids, ["t"], "B's sessions page replaced A's");
    assert_eq!(store.load("t").expect("load t").events.len(), 0, "one session, valid and empty");
    let found = store.check_store().expect("check");
    let found: Vec<(&str, &str)> = found.iter().map(|v| (v.code, v.message.as_str())).collect();
    assert_eq!(
        found,
        [(
            STORE_ORPHAN_EVENTS,
            "64 event rows (seqs 0 to 63) belong to session \"s\", which has no sessions row: no command sees them"
        )],
        "the 64 rows of s are not hidden"
    );
}

/// What a reader makes of the store at `path`, opened with `map_bytes`.
fn read_with_map(path: &Path, map_bytes: u64) -> String {
    let options = palimpsest_persistence_sqlite::SqliteOptions { map_bytes, ..Default::default() };
    let store = match SqliteStore::open_read_only_with(path, options) {
        Ok(store) => store,
        Err(e) => return format!("open: {}", e.code()),
    };
    let load = match store.load("s") {
        Ok(log) => format!("{} events", log.events.len()),
        Err(e) => e.code().to_owned(),
    };
    let check = match store.check_store() {
        Ok(found) => format!("{:?}", found.iter().map(|v| v.code).collect::<Vec<_>>()),
        Err(e) => e.code().to_owned(),
    };
    format!("load: {load}; check: {check}")
}

#[test]
fn mapped_and_copied_reads_agree_on_sound_damaged_and_cut_files() {
    let (_dir, path) = temp_db();
    clean_store(&path, "s", 3000);
    let sound = read_with_map(&path, 0);
    assert_eq!(sound, "load: 3000 events; check: []");
    assert_eq!(read_with_map(&path, 1 << 30), sound);
    // Mapped in part: the pages past the mapping are copied.
    assert_eq!(read_with_map(&path, 4 * 4096), sound);

    let bytes = std::fs::read(&path).expect("read");
    let page = 4096;
    assert!(bytes.len() > 8 * page, "{} bytes", bytes.len());
    // A page in the middle overwritten with noise.
    let mut damaged = bytes.clone();
    for (i, b) in damaged[5 * page..6 * page].iter_mut().enumerate() {
        *b = (i * 131 % 251) as u8;
    }
    std::fs::write(&path, &damaged).expect("write");
    let copied = read_with_map(&path, 0);
    assert_ne!(copied, sound, "the damage is seen");
    assert_eq!(read_with_map(&path, 1 << 30), copied);
    assert_eq!(read_with_map(&path, 4 * 4096), copied);
    // The file cut short, mid-page: mapping covers what is there, no more.
    std::fs::write(&path, &bytes[..bytes.len() - 3 * page - 100]).expect("write");
    let copied = read_with_map(&path, 0);
    assert_ne!(copied, sound, "the cut is seen");
    assert_eq!(read_with_map(&path, 1 << 30), copied);
}
