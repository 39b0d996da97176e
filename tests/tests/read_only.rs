//! Read-only means read-only: `verify`, `sessions`, `replay`, `inspect`, `export` and
//! `copy --from` never create, change, repair, checkpoint or lock a store, on every backend and
//! in every state a writer leaves (closed, killed right after an acknowledgement, killed with a
//! torn write or a hot `-wal`). Every file is checksummed before and after. They also work on a
//! read-only directory (run as an unprivileged user, since root ignores permissions) and next
//! to a running writer, and a store that is not there is exit 3 "no … store at", with nothing
//! created.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;

use ctxlog::store::Store;
use ctxlog::Timestamp;
use ctxlog_tests::scenario::cli;
use ctxlog_tests::store_files::{self as sf, Backend, Fixture};

/// Every read-only command, with the arguments that make each do its whole job.
fn read_only_commands(url: &str, session: &str) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    vec![
        s(&["verify", "--store", url]),
        s(&["verify", "--store", url, "--json", "--session", session]),
        s(&["sessions", "--store", url, "--json"]),
        s(&["replay", "--store", url, "--session", session, "--json"]),
        s(&["replay", "--store", url, "--session", session, "--until", "5"]),
        s(&["inspect", "--store", url, "--session", session, "--json"]),
        s(&["inspect", "--store", url, "--session", session, "--view", "--version", "5"]),
        s(&["export", "--store", url, "--session", session]),
        s(&["copy", "--from", url, "--to", "mem:", "--session", session]),
    ]
}

fn run(args: &[String]) -> (i32, String, String) {
    cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Runs every read-only command on the store in `root`; each must exit `expect` and no file
/// may change. Returns the outputs.
fn check_untouched(what: &str, backend: Backend, root: &Path, session: &str, expect: i32) -> Vec<String> {
    let before = sf::checksums(root);
    let url = backend.url(root);
    let mut outputs = Vec::new();
    for args in read_only_commands(&url, session) {
        let (code, out, err) = run(&args);
        assert_eq!(code, expect, "{what}: {args:?}: {out}{err}");
        assert_eq!(
            sf::changes(&before, &sf::checksums(root)),
            Vec::<String>::new(),
            "{what}: {args:?} changed the store"
        );
        outputs.push(out);
    }
    outputs
}

fn copy_of(fx: &Fixture) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    sf::copy_dir(fx.root.path(), dir.path());
    dir
}

#[test]
fn read_only_commands_change_no_byte_of_any_store_file() {
    for backend in Backend::ALL {
        let session = sf::SESSION;
        for fx in [sf::call_by_call(backend, 12), sf::imported(backend, 12)] {
            let dir = copy_of(&fx);
            let what = format!("{} {}", backend.name(), fx.kind);
            let out = check_untouched(&what, backend, dir.path(), session, 0);
            assert!(out[0].starts_with("ok "), "{what}: {}", out[0]);
            assert_eq!(out[7], fx.export, "{what}: export reads the whole session");
        }
    }
}

#[test]
fn a_torn_write_left_by_a_killed_fs_writer_is_left_in_place_by_readers() {
    let fx = sf::call_by_call(Backend::Fs, 12);
    let dir = copy_of(&fx);
    let log = Backend::Fs.path(dir.path()).join("streams").join(format!("{}.log", sf::SESSION));
    let mut bytes = std::fs::read(&log).unwrap();
    let whole = bytes.len();
    // The first 30 bytes of a copy of the first frame: a frame whose length runs past the end.
    let first = bytes[..30].to_vec();
    bytes.extend_from_slice(&first);
    std::fs::write(&log, &bytes).unwrap();
    check_untouched("fs torn tail", Backend::Fs, dir.path(), sf::SESSION, 0);
    let (_, _, err) = cli(&["verify", "--store", &Backend::Fs.url(dir.path())]);
    assert!(err.contains("note:") && err.contains("torn write"), "verify notes it: {err}");
    // A writer's open moves it to a quarantine file; from then on verify reports the repair
    // (exit 4) until it is accepted or the file is removed.
    drop(ctxlog_store_fs::FsStore::open(Backend::Fs.path(dir.path())).unwrap());
    assert_eq!(std::fs::metadata(&log).unwrap().len(), whole as u64);
    let url = Backend::Fs.url(dir.path());
    let (code, out, err) = cli(&["verify", "--store", &url]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("REPAIRED") && out.contains(".torn-") && err.contains("--accept-repairs"), "{out}{err}");
    let (code, out, err) = cli(&["verify", "--store", &url, "--accept-repairs"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("repaired (accepted)"), "{out}");
    let (code, out, _) = cli(&["verify", "--store", &url, "--json"]);
    assert_eq!(code, 4);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!((first["ok"].as_bool(), first["repairs"].as_array().map(Vec::len)), (Some(false), Some(1)));
}

#[test]
fn a_hot_wal_left_by_a_killed_sqlite_writer_is_read_without_a_checkpoint() {
    let live = tempfile::tempdir().unwrap();
    let killed = tempfile::tempdir().unwrap();
    let id: ctxlog::StreamId = sf::SESSION.parse().unwrap();
    {
        let store = Backend::Sqlite.open_writer(live.path());
        // A reader keeps the writer's checkpoints from emptying the -wal.
        let reader = rusqlite::Connection::open(Backend::Sqlite.path(live.path())).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM records;").unwrap();
        let config = ctxlog::Config { budget: 3_000, ..ctxlog::Config::default() };
        let mut session = ctxlog::Session::create(
            store.as_ref(),
            id,
            ctxlog::WireFormat::Anthropic,
            config,
            Timestamp::from_millis(1_000),
        )
        .unwrap();
        for i in 0..10 {
            sf::engine_call(&mut session, i);
        }
        sf::copy_dir(live.path(), killed.path());
    }
    assert!(std::fs::metadata(killed.path().join("ctxlog.db-wal")).unwrap().len() > 32 * 1024);
    let out = check_untouched("sqlite hot -wal", Backend::Sqlite, killed.path(), sf::SESSION, 0);
    assert_eq!(out[3].lines().count(), 10, "all ten calls are read from the -wal");
    // Without its -shm SQLite cannot read a -wal without writing one: the reader copies.
    std::fs::remove_file(killed.path().join("ctxlog.db-shm")).unwrap();
    let again = check_untouched("sqlite hot -wal, no -shm", Backend::Sqlite, killed.path(), sf::SESSION, 0);
    assert_eq!(again[3], out[3]);
}

#[test]
fn read_only_commands_work_next_to_a_running_writer() {
    for backend in Backend::ALL {
        let dir = tempfile::tempdir().unwrap();
        let url = backend.url(dir.path());
        let store = backend.open_writer(dir.path());
        let id: ctxlog::StreamId = sf::SESSION.parse().unwrap();
        let config = ctxlog::Config { budget: 3_000, ..ctxlog::Config::default() };
        let mut session = ctxlog::Session::create(
            store.as_ref(),
            id,
            ctxlog::WireFormat::Anthropic,
            config.clone(),
            Timestamp::from_millis(1_000),
        )
        .unwrap();
        let other: ctxlog::StreamId = "00000000-0000-4000-8000-00000000beef".parse().unwrap();
        let mut busy = ctxlog::Session::create(
            store.as_ref(),
            other,
            ctxlog::WireFormat::Anthropic,
            config,
            Timestamp::from_millis(1_000),
        )
        .unwrap();
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| {
                for i in 0..12 {
                    sf::engine_call(&mut busy, i);
                }
            });
            for i in 0..6 {
                sf::engine_call(&mut session, i);
                for args in read_only_commands(&url, sf::SESSION) {
                    let (code, out, err) = run(&args);
                    assert_eq!(code, 0, "{}: {args:?} while the writer runs: {out}{err}", backend.name());
                }
            }
            writer.join().unwrap();
        });
        assert_eq!(busy.state().calls(), 12, "{}: the other writer was never disturbed", backend.name());
        assert_eq!(store.head(other).unwrap(), Some(busy.state().version()));
    }
}

#[test]
fn a_missing_store_is_exit_3_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    for backend in Backend::ALL {
        let url = backend.url(&dir.path().join("nope"));
        for args in read_only_commands(&url, sf::SESSION).into_iter().chain([vec![
            "restore".to_owned(),
            "--store".to_owned(),
            url.clone(),
            "--seq".to_owned(),
            "1".to_owned(),
        ]]) {
            let (code, out, err) = run(&args);
            assert_eq!(code, 3, "{args:?}: {out}{err}");
            assert!(err.contains(&format!("no {} store at", backend.name())), "{args:?}: {err}");
        }
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was created");
}

#[test]
fn inspect_past_the_head_is_an_error_not_a_clamp() {
    let fx = sf::imported(Backend::Fs, 3);
    let url = fx.url(fx.root.path());
    let past = (fx.events + 1).to_string();
    let (code, out, err) = cli(&["inspect", "--store", &url, "--version", &past]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(&format!("--version {past} is past the head")) && err.contains(&fx.events.to_string()),
        "{err}"
    );
    let at = fx.events.to_string();
    assert_eq!(cli(&["inspect", "--store", &url, "--version", &at]).0, 0);
}

/// On a read-only directory: as an unprivileged user (root ignores permissions), the commands
/// run in a child process of this test binary.
#[test]
fn read_only_commands_work_on_a_read_only_directory() {
    for backend in Backend::ALL {
        let fx = sf::call_by_call(backend, 6);
        let dir = copy_of(&fx);
        let before = sf::checksums(dir.path());
        set_mode_recursively(dir.path(), 0o555, 0o444);
        let output = as_unprivileged_user(dir.path(), backend)
            .unwrap_or_else(|| panic!("cannot run as an unprivileged user (needs setpriv as root)"));
        set_mode_recursively(dir.path(), 0o755, 0o644);
        assert_eq!(sf::changes(&before, &sf::checksums(dir.path())), Vec::<String>::new());
        let lines: Vec<&str> = output.split("child:").skip(1).map(|l| l.lines().next().unwrap_or("")).collect();
        assert_eq!(lines.len(), read_only_commands("x", "y").len(), "{output}");
        for l in lines {
            assert!(l.ends_with("exit 0"), "{}: {l}\n{output}", backend.name());
        }
    }
}

fn set_mode_recursively(dir: &Path, dirs: u32, files: u32) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            set_mode_recursively(&entry.path(), dirs, files);
        } else {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(files)).unwrap();
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dirs)).unwrap();
}

/// Runs `child_runs_read_only_commands` on `dir`: as `nobody` through `setpriv` when this
/// process is root, as this user otherwise.
fn as_unprivileged_user(dir: &Path, backend: Backend) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let exe = std::env::current_exe().unwrap();
    let probe = tempfile::NamedTempFile::new().unwrap();
    let root = std::fs::metadata(probe.path()).unwrap().uid() == 0;
    let mut cmd = if root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&exe);
        c
    } else {
        std::process::Command::new(&exe)
    };
    let out = cmd
        .args(["--exact", "child_runs_read_only_commands", "--ignored", "--nocapture", "--test-threads=1"])
        .env("CTXLOG_RO_DIR", dir)
        .env("CTXLOG_RO_BACKEND", backend.name())
        .output()
        .ok()?;
    Some(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
#[ignore = "run as an unprivileged child by read_only_commands_work_on_a_read_only_directory"]
fn child_runs_read_only_commands() {
    let (Some(dir), Some(name)) = (std::env::var_os("CTXLOG_RO_DIR"), std::env::var("CTXLOG_RO_BACKEND").ok()) else {
        return;
    };
    let backend = Backend::ALL.into_iter().find(|b| b.name() == name).unwrap();
    let url = backend.url(Path::new(&dir));
    for args in read_only_commands(&url, sf::SESSION) {
        let (code, _, err) = run(&args);
        println!("child: {} {}: {} exit {code}", args[0], args.len(), err.lines().next().unwrap_or(""));
    }
}
