//! Escapes tried against the [`Workspace`]: links dangling, absolute,
//! relative and in parent components, `..` after a link, devices, FIFOs,
//! sockets, directories, hard links, and a link swapped in by another
//! thread. Each checks that nothing outside the workspace was read, and
//! that the "outside" directory holds exactly its canary afterwards.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::*;

const CANARY: &str = "SECRET: the canary outside the workspace";
const MAX: u64 = 1024;

/// A workspace `ws` and, next to it, a directory `outside` holding one canary.
struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    workspace: Workspace,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let (ws, outside) = (tmp.path().join("ws"), tmp.path().join("outside"));
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(ws.join("a.txt"), "inside").unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::fs::write(outside.join("canary.txt"), CANARY).unwrap();
        let workspace = Workspace::open(&ws).unwrap();
        Fixture { _tmp: tmp, ws, outside, workspace }
    }

    fn read(&self, rel: &str) -> Result<String, ToolError> {
        let r = within(|| self.workspace.read_text(rel, MAX));
        if let Ok(text) = &r {
            assert!(!text.contains("SECRET"), "{rel:?} read the canary outside");
        }
        r
    }

    fn write(&self, rel: &str) -> Result<(), ToolError> {
        within(|| self.workspace.write_text(rel, "written by the model", &CancellationToken::new()))
    }

    /// `outside` holds exactly the canary, unchanged, and nothing else.
    fn assert_outside_untouched(&self) {
        let mut names: Vec<_> =
            std::fs::read_dir(&self.outside).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["canary.txt"], "something was created outside the workspace");
        assert_eq!(std::fs::read_to_string(self.outside.join("canary.txt")).unwrap(), CANARY);
    }
}

/// Runs `f`, failing the test if it blocks for more than a few seconds.
fn within<T>(f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    assert!(started.elapsed() < Duration::from_secs(5), "the call blocked");
    out
}

/// The error's code, and a message check.
#[track_caller]
fn refused<T: std::fmt::Debug>(r: Result<T, ToolError>, code: &str, says: &str) {
    let e = r.expect_err("should be refused");
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(says), "{:?} does not say {says:?}", e.message);
}

const INVALID: &str = "INVALID_ARGUMENTS";

#[test]
fn plain_paths_read_and_write_inside() {
    let f = Fixture::new();
    assert_eq!(f.read("a.txt").unwrap(), "inside");
    f.write("sub/deeper/new.txt").unwrap();
    assert_eq!(std::fs::read_to_string(f.ws.join("sub/deeper/new.txt")).unwrap(), "written by the model");
    f.assert_outside_untouched();
}

#[test]
fn absolute_dot_and_dotdot_paths_are_refused_with_their_reason() {
    let f = Fixture::new();
    let canary = f.outside.join("canary.txt");
    let absolute = canary.to_str().unwrap();
    for (rel, says) in [
        ("", "is empty"),
        (absolute, "is absolute"),
        ("/etc/passwd", "is absolute"),
        ("../outside/canary.txt", "contains `..`"),
        ("sub/../../outside/canary.txt", "contains `..`"),
        ("./a.txt", "contains `.`"),
        ("a\0b", "NUL"),
    ] {
        refused(f.read(rel), INVALID, says);
        refused(f.write(rel), INVALID, says);
    }
    f.assert_outside_untouched();
}

#[test]
fn the_directory_handle_alone_refuses_dotdot_and_dotdot_after_a_link() {
    // Past the lexical check: the handle is what keeps the paths inside.
    let f = Fixture::new();
    symlink("sub", f.ws.join("link")).unwrap();
    let never = CancellationToken::new();
    for rel in ["../outside/canary.txt", "sub/../../outside/canary.txt", "link/../../outside/canary.txt"] {
        refused(f.workspace.read_path(rel, Path::new(rel), MAX), INVALID, "leads outside");
        refused(f.workspace.write_path(rel, Path::new(rel), "x", &never), INVALID, "leads outside");
        refused(
            f.workspace.write_path(rel, Path::new(&rel.replace("canary", "new")), "x", &never),
            INVALID,
            "leads outside",
        );
    }
    // `..` that stays inside is the handle's business too, and allowed.
    assert_eq!(f.workspace.read_path("x", Path::new("link/../a.txt"), MAX).unwrap(), "inside");
    f.assert_outside_untouched();
}

#[test]
fn dangling_links_never_create_anything_outside() {
    let f = Fixture::new();
    symlink(f.outside.join("new-abs.txt"), f.ws.join("abs")).unwrap();
    symlink("../outside/new-rel.txt", f.ws.join("rel")).unwrap();
    symlink(f.outside.join("newdir"), f.ws.join("absdir")).unwrap();
    symlink("../outside/newdir", f.ws.join("reldir")).unwrap();
    symlink("not-yet.txt", f.ws.join("inner")).unwrap();
    for rel in ["abs", "rel", "inner"] {
        refused(f.write(rel), INVALID, "is a symbolic link");
    }
    for rel in ["absdir/f.txt", "reldir/f.txt", "absdir/x/y.txt", "reldir/x/y.txt"] {
        refused(f.write(rel), INVALID, "leads outside");
    }
    for rel in ["abs", "rel", "absdir/f.txt", "reldir/f.txt"] {
        refused(f.read(rel), INVALID, "leads outside");
    }
    // The links are still links, pointing where they did.
    assert!(std::fs::symlink_metadata(f.ws.join("abs")).unwrap().is_symlink());
    assert!(!f.ws.join("not-yet.txt").exists());
    f.assert_outside_untouched();
}

#[test]
fn a_link_in_a_parent_component_cannot_lead_out() {
    let f = Fixture::new();
    symlink(&f.outside, f.ws.join("escape")).unwrap();
    symlink("../outside", f.ws.join("escape-rel")).unwrap();
    symlink("../../outside", f.ws.join("sub/up")).unwrap();
    for dir in ["escape", "escape-rel", "sub/up"] {
        for name in ["canary.txt", "new.txt", "new/deeper.txt"] {
            let rel = format!("{dir}/{name}");
            refused(f.read(&rel), INVALID, "leads outside");
            refused(f.write(&rel), INVALID, "leads outside");
        }
    }
    let listing = f.workspace.list(LIMITS).unwrap();
    assert!(!listing.contains("canary"), "{listing}");
    assert!(listing.contains("escape (a symbolic link)"), "{listing}");
    f.assert_outside_untouched();
}

#[test]
fn links_to_devices_and_proc_are_refused_as_leading_out() {
    let f = Fixture::new();
    for (name, target) in [
        ("zero", "/dev/zero"),
        ("null", "/dev/null"),
        ("random", "/dev/urandom"),
        ("tty", "/dev/tty"),
        ("stdin", "/proc/self/fd/0"),
        ("environ", "/proc/self/environ"),
    ] {
        symlink(target, f.ws.join(name)).unwrap();
        refused(f.read(name), INVALID, "leads outside");
        refused(f.write(name), INVALID, "is a symbolic link");
    }
    f.assert_outside_untouched();
}

#[test]
fn fifos_sockets_directories_and_links_to_them_are_refused_without_blocking() {
    let f = Fixture::new();
    let fifo = f.ws.join("pipe");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, 0o600.into(), 0).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(f.ws.join("sock")).unwrap();
    symlink("pipe", f.ws.join("pipe-link")).unwrap();
    symlink("sock", f.ws.join("sock-link")).unwrap();
    symlink("sub", f.ws.join("sub-link")).unwrap();
    for (rel, says) in [
        ("pipe", "is a FIFO (named pipe), not a regular file"),
        ("pipe-link", "is a FIFO"),
        ("sock", "is a socket"),
        ("sock-link", "is a socket"),
        ("sub", "is a directory"),
        ("sub-link", "is a directory"),
    ] {
        refused(f.read(rel), INVALID, says);
    }
    for (rel, says) in [
        ("pipe", "is a FIFO"),
        ("sock", "is a socket"),
        ("sub", "is a directory"),
        ("pipe-link", "is a symbolic link"),
    ] {
        refused(f.write(rel), INVALID, says);
    }
    let meta = std::fs::symlink_metadata(&fifo).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()), "the FIFO was replaced");
    f.assert_outside_untouched();
}

#[test]
fn a_device_node_inside_is_refused_where_one_can_be_made() {
    // Making a device node takes privilege: as an unprivileged user the
    // node cannot exist, which is the protection; as root, it is refused.
    let f = Fixture::new();
    let dev = rustix::fs::makedev(1, 5); // /dev/zero
    match rustix::fs::mknodat(
        rustix::fs::CWD,
        f.ws.join("zero"),
        rustix::fs::FileType::CharacterDevice,
        0o600.into(),
        dev,
    ) {
        Ok(()) => {
            refused(f.read("zero"), INVALID, "is a character device");
            refused(f.write("zero"), INVALID, "is a character device");
        }
        Err(e) => assert!(matches!(e, rustix::io::Errno::PERM | rustix::io::Errno::ACCESS), "{e}"),
    }
}

#[test]
fn hard_links_are_refused_for_reading_and_writing() {
    let f = Fixture::new();
    std::fs::hard_link(f.outside.join("canary.txt"), f.ws.join("hard")).unwrap();
    refused(f.read("hard"), INVALID, "has 2 hard links");
    refused(f.write("hard"), INVALID, "has 2 hard links");
    f.assert_outside_untouched();
}

#[test]
fn reads_are_capped_by_the_bytes_read() {
    let f = Fixture::new();
    std::fs::write(f.ws.join("max.txt"), "x".repeat(MAX as usize)).unwrap();
    std::fs::write(f.ws.join("big.txt"), "x".repeat(MAX as usize + 1)).unwrap();
    std::fs::write(f.ws.join("bin"), [0xff, 0xfe]).unwrap();
    assert_eq!(f.read("max.txt").unwrap().len(), MAX as usize);
    refused(f.read("big.txt"), TOO_LARGE, "larger than the 1024-byte read limit");
    refused(f.read("bin"), "TOOL_FAILED", "is not UTF-8");
    refused(f.read("missing.txt"), "TOOL_FAILED", "missing.txt");
}

#[test]
fn writes_replace_the_file_whole_keep_its_mode_and_leave_no_temporary() {
    let f = Fixture::new();
    let script = f.ws.join("sub/run.sh");
    std::fs::write(&script, "old").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
    f.write("sub/run.sh").unwrap();
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "written by the model");
    assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o750);

    // A cancelled turn renames nothing into place.
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    refused(f.workspace.write_text("a.txt", "late", &cancelled), "CANCELLED", "was not written");
    assert_eq!(std::fs::read_to_string(f.ws.join("a.txt")).unwrap(), "inside");

    let mut names: Vec<_> =
        std::fs::read_dir(f.ws.join("sub")).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.extend(std::fs::read_dir(&f.ws).unwrap().map(|e| e.unwrap().file_name()));
    assert!(names.iter().all(|n| !n.to_string_lossy().contains(".tmp")), "{names:?}");

    // The longest name a file can have still gets written.
    let longest = "n".repeat(255);
    f.write(&longest).unwrap();
    assert_eq!(std::fs::read_to_string(f.ws.join(&longest)).unwrap(), "written by the model");
}

/// A setuid (or setgid, or sticky) file replaced by the model must not
/// become the running user's setuid program with the model's content: the
/// new file takes the old one's permission bits only.
#[test]
fn a_write_never_keeps_setuid_setgid_or_sticky_bits() {
    let f = Fixture::new();
    let tool = f.ws.join("tool");
    for mode in [0o4755, 0o2755, 0o6711, 0o1644] {
        std::fs::write(&tool, "#!/bin/sh").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(std::fs::metadata(&tool).unwrap().permissions().mode() & 0o7777, mode, "the fixture");
        f.write("tool").unwrap();
        assert_eq!(std::fs::metadata(&tool).unwrap().permissions().mode() & 0o7777, mode & 0o777, "{mode:o}");
    }
}

const LIMITS: ListLimits = ListLimits { visited: 1000, bytes: 64 * 1024, depth: 8 };

#[test]
fn listing_shows_what_each_entry_is_and_never_follows_links() {
    let f = Fixture::new();
    std::fs::write(f.ws.join("sub/b.txt"), "bb").unwrap();
    symlink(&f.outside, f.ws.join("out")).unwrap();
    rustix::fs::mknodat(rustix::fs::CWD, f.ws.join("pipe"), rustix::fs::FileType::Fifo, 0o600.into(), 0)
        .unwrap();
    let listing = f.workspace.list(LIMITS).unwrap();
    assert_eq!(
        listing,
        "a.txt (6 bytes)\nout (a symbolic link)\npipe (a FIFO (named pipe))\nsub/b.txt (2 bytes)"
    );
}

#[test]
fn listing_stops_at_its_limits_and_says_so() {
    let f = Fixture::new();
    for i in 0..50 {
        std::fs::write(f.ws.join(format!("f{i:02}.txt")), "").unwrap();
    }
    let few = f.workspace.list(ListLimits { visited: 10, ..LIMITS }).unwrap();
    assert!(few.ends_with("(listing stopped: more than 10 entries)"), "{few}");
    assert!(few.lines().count() <= 11, "{few}");

    let short = f.workspace.list(ListLimits { bytes: 100, ..LIMITS }).unwrap();
    assert!(short.ends_with("(listing stopped: the listing reached its 100-byte limit)"), "{short}");
    assert!(short.len() < 100 + 80, "{short}");

    let mut deep = f.ws.join("d");
    for _ in 0..4 {
        deep = deep.join("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom.txt"), "").unwrap();
    let shallow = f.workspace.list(ListLimits { depth: 2, ..LIMITS }).unwrap();
    assert!(shallow.contains("d/d/d/ (not listed: deeper than 2 levels)"), "{shallow}");
    assert!(!shallow.contains("bottom.txt"), "{shallow}");
}

#[test]
fn a_link_swapped_in_by_another_thread_never_leads_out() {
    // A second thread flips `ws/d` between a real directory and a link to
    // `outside`, as fast as it can, while this one reads, writes and lists
    // through it. Whatever the interleaving, nothing outside is touched.
    let f = Fixture::new();
    std::fs::create_dir(f.ws.join("d")).unwrap();
    std::fs::write(f.ws.join("d/canary.txt"), "inside").unwrap();
    symlink(&f.outside, f.ws.join("spare-link")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (ws, flipping) = (f.ws.clone(), Arc::clone(&stop));
    let (started_tx, started) = mpsc::channel();
    let flipper = std::thread::spawn(move || {
        // One atomic exchange per flip, so `d` always exists: a write never
        // finds it missing and creates a fresh directory in its place.
        let (d, spare) = (ws.join("d"), ws.join("spare-link"));
        let _ = started_tx.send(());
        while !flipping.load(Ordering::Relaxed) {
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &d,
                rustix::fs::CWD,
                &spare,
                rustix::fs::RenameFlags::EXCHANGE,
            )
            .expect("RENAME_EXCHANGE (ext4, tmpfs, btrfs and xfs have it)");
        }
    });
    started.recv().unwrap();
    let (mut read_inside, mut refused_escape) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rounds = 0;
    while rounds < 500 || (read_inside == 0 || refused_escape == 0) && Instant::now() < deadline {
        rounds += 1;
        match f.workspace.read_text("d/canary.txt", MAX) {
            Ok(text) => {
                assert!(text == "inside" || text == "overwritten", "read through the swapped link: {text}");
                read_inside += 1;
            }
            Err(e) if e.code == INVALID && e.message.contains("leads outside") => refused_escape += 1,
            Err(_) => {} // the name was mid-rename: not found
        }
        let _ = f.workspace.write_text("d/new.txt", "x", &CancellationToken::new());
        let _ = f.workspace.write_text("d/canary.txt", "overwritten", &CancellationToken::new());
        if rounds % 10 == 0 {
            if let Ok(listing) = f.workspace.list(LIMITS) {
                assert!(!listing.contains("SECRET"), "{listing}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    assert!(
        read_inside > 0 && refused_escape > 0,
        "the race was not exercised: {read_inside} reads, {refused_escape} refusals"
    );
    f.assert_outside_untouched();
}
