//! The HTML export rendered by a real browser: headless Chromium (Debian's
//! `chromium` package) takes a 1000×1400 screenshot of the exported rich
//! session, and the PNG must exist, have that size, and show a page rather
//! than a blank or an error: many colours, a good share of pixels that are
//! not the background, and the role colours of the stylesheet.
//!
//! `cargo xtask ci` installs Chromium first (`.ci/install-chromium`) and
//! runs the tests with `CI` set: there a missing Chromium fails this test.
//! Elsewhere it is skipped, and says so on stderr (uncaptured, so the
//! skip shows in `cargo test` output).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 1400;
/// How long Chromium may take before the test gives up on it.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(120);

/// The first `chromium` on PATH.
fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("chromium")).find(|p| p.is_file())
}

/// Chromium, or `None` after reporting the skip. In CI a missing Chromium
/// is a failure.
fn chromium_or_skip() -> Option<PathBuf> {
    if let Some(found) = find_chromium() {
        return Some(found);
    }
    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !in_ci,
        "chromium is not on PATH, and CI is set: the HTML render check must run in CI \
         (`cargo xtask ci` installs it with .ci/install-chromium)"
    );
    // Written straight to the process's stderr, past libtest's capture, so
    // the skip is visible in a normal `cargo test` run.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED export_html: chromium is not installed (run .ci/install-chromium, or set CI to make this fail)"
    );
    None
}

fn export_html(dir: &Path, view: &str) -> PathBuf {
    let out = dir.join(format!("export-{view}.html"));
    let rich = Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/export/rich.jsonl");
    let status = Command::new(env!("CARGO_BIN_EXE_palimpsest"))
        .args(["export", &rich.display().to_string(), "--format", "html", "--view", view, "-o"])
        .arg(&out)
        .env_remove("PALIMPSEST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the palimpsest binary runs");
    assert!(status.success(), "export failed: {status}");
    out
}

/// Runs Chromium with the flags of the issue and waits for it, at most
/// [`CHROMIUM_TIMEOUT`].
fn screenshot(chromium: &Path, page: &Path, png: &Path, profile: &Path) {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={WIDTH},{HEIGHT}"))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if started.elapsed() > CHROMIUM_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium took longer than {CHROMIUM_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert!(status.success() && png.is_file(), "chromium gave no screenshot ({status}): {stderr}");
}

/// What a screenshot shows, in numbers.
struct Picture {
    width: u32,
    height: u32,
    /// Colour → pixel count.
    colours: HashMap<[u8; 3], usize>,
}

impl Picture {
    fn load(path: &Path) -> Picture {
        let decoder = png::Decoder::new(std::io::BufReader::new(fs::File::open(path).expect("open the PNG")));
        let mut reader = decoder.read_info().expect("a PNG");
        let mut buf = vec![0; reader.output_buffer_size().expect("a sane size")];
        let frame = reader.next_frame(&mut buf).expect("a frame");
        let bytes = &buf[..frame.buffer_size()];
        let channels = match frame.color_type {
            png::ColorType::Rgb => 3,
            png::ColorType::Rgba => 4,
            other => panic!("unexpected PNG colour type {other:?}"),
        };
        assert_eq!(frame.bit_depth, png::BitDepth::Eight, "8-bit channels");
        let mut colours = HashMap::new();
        for px in bytes.chunks_exact(channels) {
            *colours.entry([px[0], px[1], px[2]]).or_insert(0) += 1;
        }
        Picture { width: frame.width, height: frame.height, colours }
    }

    fn pixels(&self) -> usize {
        self.colours.values().sum()
    }

    /// The share of pixels that are not the most common colour (the page
    /// background).
    fn foreground_share(&self) -> f64 {
        let background = self.colours.values().max().copied().unwrap_or(0);
        1.0 - background as f64 / self.pixels().max(1) as f64
    }

    fn count(&self, rgb: [u8; 3]) -> usize {
        self.colours.get(&rgb).copied().unwrap_or(0)
    }
}

#[test]
fn the_html_export_renders_in_headless_chromium() {
    let Some(chromium) = chromium_or_skip() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    for view in ["transcript", "model"] {
        let page = export_html(dir.path(), view);
        let png = dir.path().join(format!("{view}.png"));
        let profile = tempfile::tempdir().expect("a profile dir");
        screenshot(&chromium, &page, &png, profile.path());

        let picture = Picture::load(&png);
        assert_eq!((picture.width, picture.height), (WIDTH, HEIGHT), "{view}: the window size");
        assert_eq!(picture.pixels(), (WIDTH * HEIGHT) as usize);
        let distinct: HashSet<_> = picture.colours.keys().collect();
        assert!(distinct.len() > 200, "{view}: only {} colours: a blank page?", distinct.len());
        let share = picture.foreground_share();
        assert!(share > 0.15, "{view}: {:.1}% of the page is not background", share * 100.0);
        // The stylesheet applied: the page background and the role
        // accents (4px solid borders) are there, exact.
        assert!(picture.count([0xf6, 0xf7, 0xf9]) > 100_000, "{view}: the page background is missing");
        for (role, rgb) in
            [("user", [0x2f, 0x6f, 0xdb]), ("assistant", [0x17, 0x91, 0x5a]), ("tool", [0xc2, 0x78, 0x03])]
        {
            assert!(
                picture.count(rgb) > 400,
                "{view}: the {role} colour is missing ({} px)",
                picture.count(rgb)
            );
        }
    }
}
