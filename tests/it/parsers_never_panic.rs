//! Property tests: the study-file parser and the measurement parsers return an answer (a
//! study, an error, measurements) for any input, and never panic; a study's name always
//! gives a log folder inside the log directory; nesting is refused exactly past its cap.

use std::path::{Component, Path};

use proptest::prelude::*;

use hptune::protocol::{LineParser, Measurement, MetricsFileReader, final_value};
use hptune::spec;

const CASES: u32 = 10_000;

/// Fragments a study file is made of, so that generated files get past the YAML layer often.
fn yaml_fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("name: s\n".to_string()),
        Just("objective: {metric: loss, goal: minimize}\n".to_string()),
        Just("objective: {metric: '', goal: up}\n".to_string()),
        Just("parameters:\n".to_string()),
        Just("  - {id: x, type: double, min: 0, max: 1}\n".to_string()),
        Just("  - {id: x, type: double, min: 1, max: 0, scale: log}\n".to_string()),
        Just(
            "  - {id: n, type: integer, min: 1, max: 4, scale: reverse_log, grid_points: 0}\n"
                .to_string()
        ),
        Just("  - {id: d, type: discrete, values: [3, 2, 1]}\n".to_string()),
        Just("  - {id: c, type: categorical, values: [a, a, 1.5, true]}\n".to_string()),
        Just("  - {id: m, type: double, min: 0, max: 1, when: {c: [a], x: [1]}}\n".to_string()),
        Just("  - {id: e, type: categorical, values: []}\n".to_string()),
        Just("algorithm: grid\n".to_string()),
        Just("algorithm: random\n".to_string()),
        Just("max_trial_count: 3\n".to_string()),
        Just("max_trial_count: -9223372036854775808\n".to_string()),
        Just("parallel_trial_count: 0\n".to_string()),
        Just("seed: 18446744073709551615\n".to_string()),
        Just(
            "trial: {command: [sh], args: ['{x}', '{{', '}', '{nope}'], timeout: 0s}\n".to_string()
        ),
        Just("trial:\n  command: []\n  executor: {kind: vertex}\n".to_string()),
        "[a-z_]{1,12}: [-0-9.e{}\\[\\], a-z']{0,20}\n",
        "\\PC{0,30}",
    ]
}

/// A study with this name and whatever `seed` holds (a study's name is also its log folder:
/// `controller` writes a trial's files in `<log dir>/<name>/`).
fn study_named(name: &str, seed: &str) -> String {
    // Double-quoted, every character but a few written as an escape: YAML reads back exactly
    // the generated name, whatever it holds.
    let name: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' | '/' => c.to_string(),
            _ => format!("\\U{:08x}", c as u32),
        })
        .collect();
    format!(
        "name: \"{name}\"\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: x, type: double, min: 0, max: 1}}\nalgorithm: random\nmax_trial_count: 1\nseed: {seed}\ntrial: {{command: [sh]}}\n"
    )
}

/// Names that are paths, have control characters, are long, or are plain.
fn study_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._-]{0,140}",
        prop::collection::vec(
            prop_oneof![
                Just("..".to_string()),
                Just(".".to_string()),
                Just(String::new()),
                "[a-z]{1,4}"
            ],
            1..5
        )
        .prop_map(|parts| parts.join("/")),
        "/[a-z]{0,8}",
        "[a-z.]{0,3}[\\x00-\\x1f\\x7f /\\\\:*?]{1,2}[a-z]{0,3}",
        "\\PC{0,20}",
        ".{0,20}",
    ]
}

/// A value nested `block` block lists then `flow` flow collections deep (true: a list).
fn nested(block: usize, flow: &[bool]) -> String {
    let mut text = String::new();
    if block > 0 {
        text.push_str("\n  ");
        text.push_str(&"- ".repeat(block));
    }
    for &list in flow {
        text.push_str(if list { "[" } else { "{k: " });
    }
    text.push('1');
    for &list in flow.iter().rev() {
        text.push(if list { ']' } else { '}' });
    }
    text
}

fn study_text() -> impl Strategy<Value = String> {
    prop::collection::vec(yaml_fragment(), 0..14).prop_map(|parts| parts.concat())
}

proptest! {
    // A failing case is printed with its input and shrunk; it is not saved to a file (the
    // default looks for the crate's lib.rs next to this file, and warns when it finds none).
    #![proptest_config(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_study_parser_never_panics(text in study_text()) {
        match spec::parse(Path::new("fuzz.yaml"), &text) {
            Ok(study) => {
                prop_assert!(study.parallel_trial_count >= 1);
                // A valid space maps every point of the cube to a valid assignment.
                let point = vec![0.5; study.space.dimension()];
                let assignment = study.space.from_unit(&point);
                prop_assert!(study.space.check(&assignment).is_ok());
            }
            Err(error) => prop_assert!(!error.issues.is_empty()),
        }
    }

    #[test]
    fn the_study_parser_never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        let _ = spec::parse(Path::new("fuzz.yaml"), &text);
    }

    #[test]
    fn every_accepted_name_is_one_folder_inside_the_log_dir(name in study_name()) {
        let valid = regex::Regex::new("^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$").unwrap();
        match spec::parse(Path::new("fuzz.yaml"), &study_named(&name, "1")) {
            Ok(study) => {
                prop_assert_eq!(&study.name, &name);
                let components: Vec<Component> = Path::new(&name).components().collect();
                prop_assert_eq!(components, vec![Component::Normal(name.as_ref())]);
                prop_assert!(name.len() <= 255 && !name.contains('\0'));
                let logs = Path::new("/logs");
                let folder = logs.join(&name);
                prop_assert_eq!(folder.parent(), Some(logs));
            }
            Err(error) => {
                prop_assert!(!valid.is_match(&name), "a valid name was refused: {}", error);
                prop_assert!(error.to_string().contains("name: "), "{}", error);
            }
        }
    }

    #[test]
    fn nesting_is_refused_exactly_past_64_levels(
        block in 0usize..80,
        flow in prop::collection::vec(any::<bool>(), 0..80),
    ) {
        let text = study_named("deep", &nested(block, &flow));
        let refused = match spec::parse(Path::new("fuzz.yaml"), &text) {
            Ok(_) => false,
            Err(error) => error.to_string().contains("nested more than 64 deep"),
        };
        // The top-level mapping is the first level.
        prop_assert_eq!(refused, 1 + block + flow.len() > 64);
    }

    #[test]
    fn the_line_parser_never_panics(line in "(\\PC|[=.eE+-]|loss|step|nan|inf|[0-9 ]){0,80}") {
        let parser = LineParser::new("loss");
        let measurements = parser.parse(&line);
        prop_assert!(measurements.is_empty() || measurements.iter().any(|m| m.metric == "loss"));
        let _ = final_value(&measurements, "loss");
    }

    #[test]
    fn the_metrics_file_reader_never_panics(
        lines in prop::collection::vec(
            prop_oneof![
                "\\PC{0,60}",
                "\\{\"global_step\": \"[0-9a-z.-]{0,6}\", \"loss\": \"[0-9.eE+-nainf]{0,8}\", \"trial\": \"0\"\\}",
                "\\{\"loss\": [-0-9.e]{1,10}, \"step\": \\[1\\]\\}",
            ],
            0..8,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics");
        std::fs::write(&path, lines.join("\n")).unwrap();
        let mut reader = MetricsFileReader::new();
        let first: Vec<Measurement> = reader.read_new(&path);
        prop_assert!(reader.read_new(&path).is_empty(), "entries are read once");
        let _ = final_value(&first, "loss");
    }
}
