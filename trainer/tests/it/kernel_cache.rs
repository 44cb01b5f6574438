//! Trainers that start together on one kernel cache folder: the first warms it under the
//! folder's lock, the others wait and find it warm; one compile per shape, every write whole.
//! The mechanism is the same on every backend, so it is tested here with processes that
//! "compile" a file of their own, on the CPU.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use hptune_trainer::kernel_cache::{WarmUp, warm_once};

/// Tells a process of this test binary which folder to warm, making it one of the trainers.
const FOLDER: &str = "HPTUNE_TEST_WARM_FOLDER";
/// The shape key that child warms.
const KEY: &str = "HPTUNE_TEST_WARM_KEY";

/// The "kernel" a warm-up writes: big enough that a torn write would show.
fn kernel(key: &str) -> Vec<u8> {
    key.bytes().cycle().take(1 << 20).collect()
}

/// One trainer: warms `$FOLDER` for `$KEY` once, its "compilation" appending a line to
/// `compiles.log`, taking a while, and writing the kernel by a temporary file and a rename;
/// prints what `warm_once` did and checks the kernel it can then load.
#[test]
#[ignore = "a trainer process of trainers_starting_together_compile_each_shape_once"]
fn one_trainer_warming_the_folder() {
    let dir = std::path::PathBuf::from(std::env::var_os(FOLDER).expect("started by the test"));
    let key = std::env::var(KEY).unwrap();
    let outcome = warm_once(&dir, &key, || -> std::io::Result<()> {
        use std::io::Write;
        let mut log = std::fs::File::options()
            .append(true)
            .create(true)
            .open(dir.join("compiles.log"))?;
        writeln!(log, "{key} {}", std::process::id())?;
        std::thread::sleep(Duration::from_millis(300));
        let temporary = dir.join(format!(".{key}.{}.tmp", std::process::id()));
        std::fs::write(&temporary, kernel(&key))?;
        std::fs::rename(&temporary, dir.join(format!("{key}.kernel")))
    })
    .unwrap();
    assert_eq!(
        std::fs::read(dir.join(format!("{key}.kernel"))).unwrap(),
        kernel(&key)
    );
    println!("outcome: {outcome:?}");
}

/// Starts `count` trainers on `dir` and `key` together; their outcomes.
fn start_together(dir: &Path, key: &str, count: usize) -> Vec<String> {
    let children: Vec<_> = (0..count)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "kernel_cache::one_trainer_warming_the_folder",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                ])
                .env(FOLDER, dir)
                .env(KEY, key)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = stdout.lines().find(|l| l.starts_with("outcome: "));
            line.expect("an outcome line").to_string()
        })
        .collect()
}

#[test]
fn trainers_starting_together_compile_each_shape_once() {
    let dir = tempfile::tempdir().unwrap();
    let count = |outcomes: &[String], what: WarmUp| {
        let line = format!("outcome: {what:?}");
        outcomes.iter().filter(|o| **o == line).count()
    };
    let first = start_together(dir.path(), "b32-s128", 6);
    assert_eq!(count(&first, WarmUp::Ran), 1, "{first:?}");
    assert_eq!(count(&first, WarmUp::AlreadyWarm), 5, "{first:?}");
    // Trainers of other shapes start later: one more compile, for their shapes only.
    let second = start_together(dir.path(), "b16-s64", 4);
    assert_eq!(count(&second, WarmUp::Ran), 1, "{second:?}");
    assert_eq!(count(&second, WarmUp::AlreadyWarm), 3, "{second:?}");
    let log = std::fs::read_to_string(dir.path().join("compiles.log")).unwrap();
    let compiled: Vec<&str> = log.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(compiled, ["b32-s128", "b16-s64"], "{log}");
    // Every file is whole and no temporary file is left, the markers' included.
    let mut names: Vec<String> = walk(dir.path());
    names.sort();
    assert_eq!(
        names,
        [
            ".hptune-warm-up.lock",
            "b16-s64.kernel",
            "b32-s128.kernel",
            "compiles.log",
            "hptune-warm/b16-s64",
            "hptune-warm/b32-s128",
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hptune-warm/b32-s128")).unwrap(),
        "b32-s128\n"
    );
}

/// The files under `dir`, as paths relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            found.extend(
                walk(&entry.path())
                    .into_iter()
                    .map(|f| format!("{name}/{f}")),
            );
        } else {
            found.push(name);
        }
    }
    found
}

#[test]
fn a_trainer_killed_while_warming_leaves_the_folder_cold_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    // The lock is the kernel's: a trainer that dies holding it releases it, and its warm-up,
    // never marked, is run again by the next trainer.
    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args([
            "kernel_cache::one_trainer_warming_the_folder",
            "--exact",
            "--ignored",
        ])
        .env(FOLDER, dir.path())
        .env(KEY, "b8-s32")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Killed during its 300 ms "compilation", once it has logged it.
    let log = dir.path().join("compiles.log");
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.ends_with('\n')) {
        std::thread::sleep(Duration::from_millis(5));
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(!dir.path().join("hptune-warm/b8-s32").exists());
    let outcomes = start_together(dir.path(), "b8-s32", 2);
    assert_eq!(
        outcomes.iter().filter(|o| *o == "outcome: Ran").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
}
