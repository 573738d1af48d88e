//! The whole `palimpsest-persistence` contract kit, run against [`JsonlStore`]
//! in a fresh temporary directory per check.

use std::io::Write;

use palimpsest_persistence::testkit::{StoreFactory, WriteFault};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_jsonl::JsonlStore;

struct JsonlFactory {
    dir: tempfile::TempDir,
    fault: WriteFault,
}

impl JsonlFactory {
    fn new() -> JsonlFactory {
        JsonlFactory {
            dir: tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}")),
            fault: WriteFault::default(),
        }
    }

    fn store(&self) -> JsonlStore {
        JsonlStore::open(self.dir.path().join("store"))
            .unwrap_or_else(|e| panic!("open: {e}"))
            .with_write_fault(self.fault.clone())
    }
}

impl StoreFactory for JsonlFactory {
    fn open(&self) -> Box<dyn SessionStore> {
        Box::new(self.store())
    }

    fn append_raw_tail(&self, session_id: &str, bytes: &[u8]) -> bool {
        let path = self.store().path_of(session_id).unwrap_or_else(|e| panic!("path_of: {e}"));
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        file.write_all(bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        true
    }

    fn fail_next_write(&self) -> bool {
        self.fault.arm();
        true
    }

    /// Cuts the checkpoint sidecar in half, as a torn copy would.
    fn damage_checkpoint(&self, session_id: &str) -> bool {
        let path = self.store().path_of(session_id).unwrap_or_else(|e| panic!("path_of: {e}"));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let sidecar = path.with_file_name(name.replace(".jsonl", ".checkpoint.json"));
        let text = std::fs::read(&sidecar).unwrap_or_else(|e| panic!("read {}: {e}", sidecar.display()));
        std::fs::write(&sidecar, &text[..text.len() / 2])
            .unwrap_or_else(|e| panic!("write {}: {e}", sidecar.display()));
        true
    }
}

palimpsest_persistence::store_contract_tests!(JsonlFactory::new());

/// One size limit for writers and readers: over it nothing is written, at
/// it everything reads back (issue 15).
#[test]
fn size_limits_hold_for_writers_and_readers() {
    palimpsest_persistence::testkit::size_limits_hold_for_writers_and_readers(&JsonlFactory::new());
}

/// Whatever ids the kit's odd-id check accepted, nothing was written outside
/// the store directory, and the directory holds only session files.
#[test]
fn odd_ids_stay_inside_the_store_directory() {
    let factory = JsonlFactory::new();
    let store = factory.store();
    let ids = [
        "../escape",
        "a/../../b",
        "/abs",
        "a\\b",
        "..",
        ".",
        "nul\0byte",
        "C:\\x",
        "con",
        "日本語",
        "A",
        "a",
    ];
    for id in ids {
        store
            .create(&palimpsest_core_session::SessionHeader::new(id, 0))
            .unwrap_or_else(|e| panic!("create {id:?}: {e}"));
        let path = store.path_of(id).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(path.parent(), Some(store.dir()), "{id:?} maps outside the directory");
    }
    let outside: Vec<_> = std::fs::read_dir(factory.dir.path())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("store")], "files appeared next to the store");
    let mut inside: Vec<String> = std::fs::read_dir(store.dir())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    inside.sort();
    let mut expected: Vec<String> = ids
        .iter()
        .map(|id| store.path_of(id).map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())))
        .filter_map(|r| r.ok().flatten())
        .collect();
    expected.sort();
    assert_eq!(inside, expected, "the directory holds exactly one file per session, no temporary files");
    let listed: Vec<String> =
        store.list().unwrap_or_else(|e| panic!("{e}")).into_iter().map(|h| h.id).collect();
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(listed, want);
}
