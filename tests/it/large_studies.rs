//! Study files too large, too deep or too wide for what they describe: each is refused with
//! exit code 2 and a message naming the file and the limit, or (a wide result) printed
//! whole; never a panic, a crash, or memory and time out of proportion to the file. The
//! commands run in 256 MiB of data memory (`ulimit -d`): what hptune needs is a few
//! megabytes, and a regression that enumerates or reads without bound fails here instead of
//! taking the machine's memory.

use crate::common;

use std::process::Output;

use common::{Scratch, assert_exit_says, assert_success, stderr, stdout};

/// `hptune ARGS` in the scratch directory, in 256 MiB of data memory.
fn hptune_in_bounded_memory(scratch: &Scratch, args: &[&str]) -> Output {
    std::process::Command::new("sh")
        .args(["-c", "ulimit -d 262144 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_hptune"))
        .args(args)
        .current_dir(scratch.dir.path())
        .env("HPTUNE_STORAGE", scratch.storage())
        .env_remove("RUST_LOG")
        .output()
        .expect("hptune runs")
}

/// A study whose parameters are `parameters` (YAML list items) and whose other fields are
/// `extra` lines.
fn study(name: &str, parameters: &str, extra: &str) -> String {
    format!(
        "name: {name}\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n{parameters}{extra}trial:\n  command: [sh, -c, 'echo loss=1']\n"
    )
}

const RANDOM: &str = "algorithm: random\nmax_trial_count: 1\n";

#[test]
fn a_study_file_past_4_mib_is_refused_without_reading_the_rest() {
    let scratch = Scratch::new();
    let out = hptune_in_bounded_memory(&scratch, &["run", "/dev/zero"]);
    assert_exit_says(
        &out,
        2,
        "/dev/zero: the study file is larger than 4 MiB, the most hptune reads",
    );
    let padding = format!("# {}\n", "x".repeat(1 << 20)).repeat(5);
    let text = study("big", "  - {id: x, type: double, min: 0, max: 1}\n", RANDOM) + &padding;
    let path = scratch.study("big.yaml", &text);
    let out = hptune_in_bounded_memory(&scratch, &["run", path.to_str().unwrap()]);
    assert_exit_says(&out, 2, "big.yaml: the study file is larger than 4 MiB");
}

#[test]
fn nesting_past_64_levels_is_refused_where_it_goes_too_deep() {
    let scratch = Scratch::new();
    let parameters = "  - {id: x, type: double, min: 0, max: 1}\n";
    // The top-level mapping is the first level; `seed` holds the others.
    let flow = |depth: usize| format!("seed: {}1{}\n", "[".repeat(depth), "]".repeat(depth));
    let path = scratch.study("deep.yaml", &study("deep", parameters, &flow(63)));
    let out = hptune_in_bounded_memory(&scratch, &["run", path.to_str().unwrap()]);
    assert_exit_says(&out, 2, "seed: invalid type: sequence");
    assert!(!stderr(&out).contains("nested"), "{}", stderr(&out));
    let expected =
        "lists and mappings are nested more than 64 deep here (hptune reads at most 64 levels)";
    let path = scratch.study("deep.yaml", &study("deep", parameters, &flow(64)));
    let out = hptune_in_bounded_memory(&scratch, &["run", path.to_str().unwrap()]);
    assert_exit_says(&out, 2, &format!("deep.yaml:5:{}: {expected}", 7 + 63));
    for deep in [
        flow(100_000),
        format!("seed: {}1{}\n", "{k: ".repeat(100_000), "}".repeat(100_000)),
        format!("seed:\n  {}1\n", "- ".repeat(100_000)),
    ] {
        let path = scratch.study("deep.yaml", &study("deep", parameters, &deep));
        let out = hptune_in_bounded_memory(&scratch, &["run", path.to_str().unwrap()]);
        assert_exit_says(&out, 2, expected);
    }
}

#[test]
fn a_grid_of_10_to_the_21_points_is_refused_before_it_is_enumerated() {
    let scratch = Scratch::new();
    let parameters: String = (0..7)
        .map(|i| format!("  - {{id: p{i}, type: integer, min: 0, max: 999}}\n"))
        .collect();
    let path = scratch.study(
        "grid.yaml",
        &study("grid", &parameters, "algorithm: grid\n"),
    );
    let out = hptune_in_bounded_memory(&scratch, &["run", path.to_str().unwrap()]);
    assert_exit_says(
        &out,
        2,
        "grid.yaml:4:3: parameters: the grid has more than 1000000 points",
    );
}

#[test]
fn a_duplicate_among_100_000_categorical_values_is_found_with_its_first_place() {
    let scratch = Scratch::new();
    let mut values: Vec<String> = (0..100_000).map(|i| format!("v{i}")).collect();
    values.push("v3".into());
    let parameters = format!(
        "  - {{id: c, type: categorical, values: [{}]}}\n",
        values.join(", ")
    );
    let path = scratch.study("wide.yaml", &study("wide", &parameters, RANDOM));
    let out = hptune_in_bounded_memory(&scratch, &["run", path.to_str().unwrap()]);
    assert_exit_says(
        &out,
        2,
        "parameters[0].values[100000]: duplicate value 'v3' (also values[3])",
    );
}

#[test]
fn a_result_cell_past_65_535_characters_is_printed_whole() {
    let scratch = Scratch::new();
    let value = "a".repeat(70_000);
    let parameters = format!("  - {{id: c, type: categorical, values: [{value}]}}\n");
    let path = scratch.study("cell.yaml", &study("cell", &parameters, RANDOM));
    let cell = format!("c={value}");
    let run = scratch.hptune(&["run", path.to_str().unwrap()]);
    assert_success(&run);
    assert!(
        stdout(&run).contains(&cell),
        "the run's table shows the cell"
    );
    let trials = scratch.hptune(&["trials", "cell"]);
    assert_success(&trials);
    let table = stdout(&trials);
    let row = table.lines().nth(1).expect("a row for the trial");
    assert!(
        row.contains("succeeded") && row.contains(&cell),
        "{}",
        row.chars().take(80).collect::<String>()
    );
}
