//! `hptune ask` and `hptune tell` end to end: a client's loop proposes what `hptune run`
//! proposes for the same results; two clients and a controller share one budget exactly; a
//! lease that ends gives its trial back (to the next `ask`, or to `hptune run`), and one that
//! is renewed does not; the stopping rule answers `tell --step`; bad input exits 2 and loses
//! nothing recorded; `hptune session` answers the same requests in one process, beside the
//! commands, a bad request answered with its line and field.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Output, Stdio};
use std::time::Duration;

use common::{Scratch, assert_exit_says, assert_success, expected_loss, states, stdout};
use serde_json::Value;

/// A study of two doubles and an integer, reported by the test worker (the sum of squares).
fn study(name: &str, algorithm: &str, max_trial_count: u32, parallel: u32, extra: &str) -> String {
    format!(
        r#"
name: {name}
objective: {{metric: loss, goal: minimize}}
parameters:
  - {{id: x, type: double, min: -2.0, max: 2.0}}
  - {{id: y, type: double, min: -1.0, max: 3.0}}
  - {{id: n, type: integer, min: 1, max: 5}}
algorithm: {algorithm}
max_trial_count: {max_trial_count}
parallel_trial_count: {parallel}
seed: 5
{extra}
trial:
  command: [{{worker}}]
"#
    )
}

/// `hptune ask FILE --format json ARGS`: its exit and the trials it printed.
fn ask(scratch: &Scratch, file: &str, args: &[&str]) -> (Output, Vec<Value>) {
    let mut all = vec!["ask", file, "--format", "json"];
    all.extend(args);
    let out = scratch.hptune(&all);
    let trials = match out.status.success() {
        true => serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("ask prints a JSON array"),
        false => Vec::new(),
    };
    (out, trials)
}

/// `hptune tell STUDY N ARGS --format json`.
fn tell(scratch: &Scratch, study: &str, number: u64, args: &[&str]) -> Output {
    let number = number.to_string();
    let mut all = vec!["tell", study, &number, "--format", "json"];
    all.extend(args);
    scratch.hptune(&all)
}

fn number(trial: &Value) -> u64 {
    trial["number"].as_u64().unwrap()
}

#[test]
fn a_sequential_ask_tell_loop_proposes_what_run_proposes_for_the_same_results() {
    let text = study("same", "bayesian", 9, 1, "");
    let run = Scratch::new();
    let file = run.study("study.yaml", &text);
    assert_success(&run.hptune(&["run", file.to_str().unwrap()]));
    let ran = run.trials("same");
    assert_eq!(states(&ran), vec!["succeeded"; 9]);

    let client = Scratch::new();
    let file = client.study("study.yaml", &text);
    let file = file.to_str().unwrap();
    for expected in &ran {
        let (out, asked) = ask(&client, file, &[]);
        assert_success(&out);
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0]["number"], expected["number"]);
        assert_eq!(
            asked[0]["params"], expected["params"],
            "trial {}: the client was proposed another configuration than run's worker",
            expected["number"]
        );
        let value = expected["value"].as_f64().unwrap().to_string();
        let out = tell(&client, "same", number(expected), &["--value", &value]);
        assert_success(&out);
        let told: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(told["stop"], false);
        assert_eq!(told["trial"]["state"], "succeeded");
    }
    let (out, _) = ask(&client, file, &[]);
    assert_exit_says(&out, 5, "budget of 9 trials is spent");
}

#[test]
fn a_study_without_a_trial_block_is_driven_by_clients_and_refused_by_run() {
    let scratch = Scratch::new();
    let text = study("clients", "random", 2, 1, "");
    let text = &text[..text.find("trial:").unwrap()];
    let file = scratch.study("study.yaml", text);
    let file = file.to_str().unwrap();
    for _ in 0..2 {
        let (out, asked) = ask(&scratch, file, &[]);
        assert_success(&out);
        let value = expected_loss(&asked[0]).to_string();
        assert_success(&tell(
            &scratch,
            "clients",
            number(&asked[0]),
            &["--value", &value],
        ));
    }
    assert_eq!(states(&scratch.trials("clients")), vec!["succeeded"; 2]);
    for command in [
        vec!["run", file],
        vec![
            "trial", file, "--param", "x=0", "--param", "y=0", "--param", "n=1",
        ],
    ] {
        let out = scratch.hptune(&command);
        assert_exit_says(
            &out,
            2,
            "no `trial:` block: `hptune run` starts each trial's worker",
        );
    }
    assert_eq!(
        scratch.trials("clients").len(),
        2,
        "a refused run adds no trial"
    );
}

#[test]
fn ask_exits_5_when_the_study_gives_no_more_trials_and_1_when_the_database_fails() {
    let scratch = Scratch::new();
    let fragile = study("fragile", "random", 10, 1, "max_failed_trial_count: 1");
    let tiny = "name: tiny\nobjective: {metric: loss, goal: minimize}\nparameters:\n  - {id: k, type: categorical, values: [a]}\nalgorithm: grid\nmax_trial_count: 5\ntrial:\n  command: [{worker}]\n";
    // Each study's one trial ends, and it has no other to give.
    for (name, text, result, says) in [
        (
            "fragile",
            fragile.as_str(),
            ["--fail", "diverged"],
            "1 trials failed (max_failed_trial_count 1)",
        ),
        ("tiny", tiny, ["--value", "1"], "every grid point was tried"),
    ] {
        let file = scratch.study(&format!("{name}.yaml"), text);
        let file = file.to_str().unwrap();
        let (_, asked) = ask(&scratch, file, &[]);
        assert_success(&tell(&scratch, name, number(&asked[0]), &result));
        let (out, _) = ask(&scratch, file, &[]);
        assert_exit_says(&out, 5, says);
    }

    // A database that cannot be read is a failure (1), never taken for a spent budget.
    let broken = scratch.path("broken.db");
    std::fs::write(
        &broken,
        "not a database, but long enough to be read as one ".repeat(100),
    )
    .unwrap();
    let url = format!("sqlite://{}", broken.display());
    let file = scratch.path("fragile.yaml");
    let out = scratch.hptune(&["ask", file.to_str().unwrap(), "--storage", &url]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
}

#[test]
fn two_clients_and_a_controller_fill_a_budget_of_40_exactly_on_sqlite() {
    fill_a_budget_together(&Scratch::new(), "together");
}

#[test]
fn two_clients_and_a_controller_fill_a_budget_of_40_exactly_on_postgres() {
    let name = common::unique_name("together");
    if let Some(scratch) = Scratch::on_postgres_without(&name) {
        fill_a_budget_together(&scratch, &name);
    }
}

/// Two clients in ask/tell loops and one `hptune run`, started together on one study of 40
/// trials, each taking a trial whenever it has a free slot.
fn fill_a_budget_together(scratch: &Scratch, name: &str) {
    let text = study(name, "random", 40, 2, "").replace(
        "command: [{worker}]",
        "command: [{worker}]\n  env: {SLEEP: \"0.05\"}",
    );
    let file = scratch.study("study.yaml", &text);
    let file = file.to_str().unwrap();
    // The study exists before the three start: they agree on it either way, but a client
    // that finds the budget spent at once would make the test prove nothing.
    let (out, first) = ask(scratch, file, &[]);
    assert_success(&out);
    let told = tell(
        scratch,
        name,
        number(&first[0]),
        &["--value", &expected_loss(&first[0]).to_string()],
    );
    assert_success(&told);
    let mut controller = scratch
        .command(&["run", file])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::scope(|threads| {
        for _ in 0..2 {
            threads.spawn(|| {
                loop {
                    let (out, asked) = ask(scratch, file, &[]);
                    match out.status.code() {
                        Some(0) => {}
                        Some(5) => break,
                        Some(4) => {
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                        _ => panic!("ask: {}", common::stderr(&out)),
                    }
                    let trial = &asked[0];
                    let value = expected_loss(trial).to_string();
                    assert_success(&tell(scratch, name, number(trial), &["--value", &value]));
                }
            });
        }
    });
    assert!(controller.wait().unwrap().success());
    let trials = scratch.trials(name);
    assert_eq!(trials.len(), 40, "the budget is filled exactly");
    assert_eq!(states(&trials), vec!["succeeded"; 40]);
    for (i, trial) in trials.iter().enumerate() {
        assert_eq!(number(trial), i as u64);
        // The worker sums in its argument order, the clients in the parameters' order.
        let value = trial["value"].as_f64().unwrap();
        assert!((value - expected_loss(trial)).abs() < 1e-9, "{trial}");
    }
    let by_clients = trials.iter().filter(|t| t["owner"] == "client").count();
    assert!(
        by_clients > 1 && by_clients < 40,
        "{by_clients} of 40 trials were the clients'"
    );
}

#[test]
fn a_lease_that_ends_gives_its_trial_back_to_the_next_ask() {
    let scratch = Scratch::new();
    let file = scratch.study("study.yaml", &study("lapse", "random", 3, 2, ""));
    let file = file.to_str().unwrap();
    let (out, asked) = ask(&scratch, file, &["--lease", "1s"]);
    assert_success(&out);
    assert_eq!(asked[0]["lease_seconds"], 1);
    std::thread::sleep(Duration::from_millis(1500));
    // Too late: the tell itself takes the trial back, and records nothing.
    let out = tell(&scratch, "lapse", 0, &["--value", "1.5"]);
    assert_exit_says(&out, 1, "the lease of trial 0 of study 'lapse' has ended");
    // And once it was taken back, waiting for its next attempt.
    let out = tell(&scratch, "lapse", 0, &["--value", "1.5"]);
    assert_exit_says(&out, 1, "it waits for its next attempt");
    let trial = &scratch.trials("lapse")[0];
    assert_eq!(trial["state"], "pending");
    assert_eq!(trial["attempt"], 2);
    // The next ask takes it first, as its next attempt, with the same parameters.
    let (out, again) = ask(&scratch, file, &[]);
    assert_success(&out);
    assert_eq!(again[0]["number"], 0);
    assert_eq!(again[0]["attempt"], 2);
    assert_eq!(again[0]["params"], asked[0]["params"]);
    assert_success(&tell(&scratch, "lapse", 0, &["--value", "1.5"]));
    let attempts = scratch.query(
        "SELECT a.attempt, a.outcome, a.error FROM attempts a JOIN trials t ON t.id = a.trial_id
         WHERE t.number = 0 ORDER BY a.attempt",
    );
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0][1], "retried");
    assert!(
        attempts[0][2]
            .as_str()
            .unwrap()
            .contains("the lease of its client ended"),
        "{attempts:?}"
    );
    assert_eq!(attempts[1][1], "succeeded");
}

#[test]
fn a_lease_that_ends_gives_its_trial_to_hptune_run_and_a_renewed_one_does_not_end() {
    let scratch = Scratch::new();
    let file = scratch.study("study.yaml", &study("handed", "random", 3, 2, ""));
    let file = file.to_str().unwrap();
    let (_, lapsed) = ask(&scratch, file, &["--lease", "1s"]);
    let (_, renewed) = ask(&scratch, file, &["--lease", "2s"]);
    assert_eq!((number(&lapsed[0]), number(&renewed[0])), (0, 1));
    for step in 1..=2 {
        std::thread::sleep(Duration::from_millis(1200));
        let out = tell(
            &scratch,
            "handed",
            1,
            &["--metric", "loss=4", "--step", &step.to_string()],
        );
        assert_success(&out);
    }
    // Trial 1's lease, renewed at each step, still runs; trial 0's ended 1.4 s ago.
    let out = scratch.hptune(&["run", file]);
    assert_success(&out);
    assert_success(&tell(&scratch, "handed", 1, &["--value", "3.5"]));
    let trials = scratch.trials("handed");
    assert_eq!(states(&trials), vec!["succeeded"; 3]);
    assert_eq!(trials[0]["attempt"], 2, "run took trial 0 back");
    assert_eq!(
        trials[0]["owner"], trials[2]["owner"],
        "run's worker ran trial 0"
    );
    assert_eq!(
        trials[0]["value"].as_f64().unwrap(),
        expected_loss(&trials[0])
    );
    assert_eq!(
        (trials[1]["attempt"].as_u64(), trials[1]["value"].as_f64()),
        (Some(1), Some(3.5))
    );
    let curve = scratch.query(
        "SELECT m.step, m.value FROM measurements m JOIN trials t ON t.id = m.trial_id
         WHERE t.number = 1 ORDER BY m.id",
    );
    assert_eq!(curve.len(), 3, "two steps and the final value: {curve:?}");
}

#[test]
fn tell_with_a_step_says_when_the_stopping_rule_stops_the_trial() {
    let scratch = Scratch::new();
    let rule = "early_stopping: {rule: median, min_steps: 1, min_trials: 1}";
    let file = scratch.study("study.yaml", &study("curves", "random", 4, 2, rule));
    let file = file.to_str().unwrap();
    let (_, asked) = ask(&scratch, file, &["--count", "2"]);
    assert_eq!(asked.len(), 2);
    for step in ["1", "2"] {
        let out = tell(
            &scratch,
            "curves",
            0,
            &["--metric", "loss=1", "--step", step],
        );
        assert_success(&out);
        let told: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (&told["stop"], &told["trial"]["state"]),
            (&Value::Bool(false), &Value::from("running"))
        );
    }
    assert_success(&tell(&scratch, "curves", 0, &["--value", "1"]));
    // Trial 1 is worse than the median of the succeeded trials at step 1.
    let out = tell(&scratch, "curves", 1, &["--value", "10", "--step", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
    let told: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(told["stop"], true);
    assert!(told["reason"].as_str().unwrap().contains("median rule"));
    assert_eq!(told["trial"]["state"], "stopped");
    assert_eq!(told["trial"]["value"], 10.0);
    let out = tell(&scratch, "curves", 1, &["--value", "9"]);
    assert_exit_says(&out, 2, "it has ended already (stopped)");
    // Text: the reason, and the same exit.
    let (_, next) = ask(&scratch, file, &[]);
    let out = scratch.hptune(&[
        "tell",
        "curves",
        &number(&next[0]).to_string(),
        "--value",
        "20",
        "--step",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stdout(&out).contains("stopped: early-stopped by the median rule"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn ask_claims_at_most_the_studys_parallel_slots_and_says_when_all_are_leased() {
    let scratch = Scratch::new();
    let file = scratch.study("study.yaml", &study("slots", "random", 10, 2, ""));
    let file = file.to_str().unwrap();
    let (out, asked) = ask(&scratch, file, &["--count", "3"]);
    assert_success(&out);
    assert_eq!(asked.iter().map(number).collect::<Vec<_>>(), vec![0, 1]);
    let (out, _) = ask(&scratch, file, &[]);
    assert_exit_says(&out, 4, "clients hold 2 trials, its parallel_trial_count");
    assert_success(&tell(&scratch, "slots", 1, &["--fail", "out of memory"]));
    let out = scratch.hptune(&["ask", file]);
    assert_success(&out);
    assert!(stdout(&out).starts_with("2 --x="), "{}", stdout(&out));
    let trials = scratch.trials("slots");
    assert_eq!(trials[1]["state"], "failed");
    assert_eq!(trials[1]["error"], "out of memory");
}

#[test]
fn a_study_of_several_objectives_is_told_each_objective_by_name() {
    let scratch = Scratch::new();
    let text = study("pair", "random", 3, 1, "").replace(
        "objective: {metric: loss, goal: minimize}",
        "objectives: [{metric: loss, goal: minimize}, {metric: latency, goal: minimize}]",
    );
    let file = scratch.study("pair.yaml", &text);
    let (_, asked) = ask(&scratch, file.to_str().unwrap(), &[]);
    assert_eq!(asked.len(), 1);
    for (args, says) in [
        (
            vec!["--value", "1"],
            "--value stands for a study's one objective: study 'pair' has 2 (loss, latency); give each as --metric loss=V --metric latency=V",
        ),
        (
            vec!["--metric", "loss=1"],
            "a final result needs every objective: give --metric latency=V too",
        ),
    ] {
        assert_exit_says(&tell(&scratch, "pair", 0, &args), 2, says);
    }
    assert_eq!(scratch.trials("pair")[0]["state"], "running");
    let both = ["--metric", "loss=1", "--metric", "latency=3.5"];
    assert_success(&tell(&scratch, "pair", 0, &both));
    let stored = scratch.query("SELECT state, objective_values FROM trials WHERE number = 0");
    assert_eq!(stored[0][0], "succeeded");
    let values: Vec<f64> = serde_json::from_str(stored[0][1].as_str().unwrap()).unwrap();
    assert_eq!(values, [1.0, 3.5]);
}

#[test]
fn bad_input_exits_2_and_loses_nothing_recorded() {
    let scratch = Scratch::new();
    let constraint = "constraints: [{metric: memory, max: 8}]";
    let file = scratch.study("study.yaml", &study("strict", "random", 5, 2, constraint));
    let file = file.to_str().unwrap();
    let (_, asked) = ask(&scratch, file, &["--count", "2"]);
    assert_eq!(asked.len(), 2);
    assert_success(&tell(
        &scratch,
        "strict",
        0,
        &["--metric", "loss=2", "--metric", "memory=3", "--step", "1"],
    ));
    let measurements = || scratch.query("SELECT COUNT(*) FROM measurements")[0][0].clone();
    let before = measurements();
    for (args, says) in [
        (vec!["--value", "1", "--step", "x"], "invalid value 'x'"),
        (vec!["--value", "1", "--fail", "oom"], "cannot be used with"),
        (
            vec!["--metric", "accuracy=0.9"],
            "study 'strict' has no metric 'accuracy' (its metrics: loss, memory)",
        ),
        (
            vec!["--metric", "loss=nan", "--step", "2"],
            "an intermediate value must be a finite number",
        ),
        (
            vec!["--metric", "memory=3"],
            "a final result needs the objective",
        ),
        (
            vec!["--value", "1", "--metric", "loss=2"],
            "loss is given twice",
        ),
        (vec!["--fail", " "], "give the reason"),
    ] {
        assert_exit_says(&tell(&scratch, "strict", 0, &args), 2, says);
    }
    assert_exit_says(
        &tell(&scratch, "strict", 7, &["--value", "1"]),
        2,
        "study 'strict' has no trial 7",
    );
    assert_exit_says(
        &tell(&scratch, "nothing", 0, &["--value", "1"]),
        2,
        "no study named 'nothing'",
    );
    assert_eq!(measurements(), before, "a refused tell records nothing");
    let trial = &scratch.trials("strict")[0];
    assert_eq!(
        (&trial["state"], trial["attempt"].as_u64()),
        (&Value::from("running"), Some(1))
    );

    // A NaN final value fails the trial with the reason, as a worker's does; what was
    // recorded stays; a second tell is refused.
    let out = tell(
        &scratch,
        "strict",
        0,
        &["--value", "NaN", "--metric", "memory=4"],
    );
    assert_success(&out);
    let told: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(told["trial"]["state"], "failed");
    assert!(
        told["trial"]["error"]
            .as_str()
            .unwrap()
            .contains("loss=NaN"),
        "{told}"
    );
    assert_exit_says(
        &tell(&scratch, "strict", 0, &["--value", "1"]),
        2,
        "it has ended already (failed)",
    );
    let kept = scratch.query(
        "SELECT m.metric, m.step, m.value FROM measurements m JOIN trials t ON t.id = m.trial_id
         WHERE t.number = 0 ORDER BY m.id",
    );
    assert_eq!(
        kept.len(),
        3,
        "both intermediate values and the final memory: {kept:?}"
    );

    // The final result of trial 1, with a constraint broken: succeeded, infeasible.
    assert_success(&tell(
        &scratch,
        "strict",
        1,
        &["--value", "0.5", "--metric", "memory=9"],
    ));
    let trial = &scratch.trials("strict")[1];
    assert_eq!(trial["state"], "succeeded");
    assert!(
        trial["infeasible"].as_str().unwrap().contains("memory"),
        "{trial}"
    );
    // A trial that a controller runs is not a client's to tell.
    scratch.execute("UPDATE trials SET owner = 'elsewhere:1@2', state = 'running', lease_expires_at = NULL, lease_seconds = NULL, finished_at = NULL WHERE number = 1");
    assert_exit_says(
        &tell(&scratch, "strict", 1, &["--value", "1"]),
        2,
        "a controller runs it (elsewhere:1@2)",
    );
}

/// A running `hptune session`: a request written, its answer read.
struct Session {
    child: std::process::Child,
    answers: BufReader<std::process::ChildStdout>,
}

impl Session {
    fn start(scratch: &Scratch, file: &str) -> Self {
        let mut child = scratch
            .command(&["session", file])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("hptune session starts");
        let answers = BufReader::new(child.stdout.take().unwrap());
        Session { child, answers }
    }

    /// Writes `line` and reads its answer: its exit code and the answer.
    fn request(&mut self, line: &str) -> (u64, Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let mut answer = String::new();
        self.answers.read_line(&mut answer).unwrap();
        let answer: Value = serde_json::from_str(&answer).expect("one JSON answer per line");
        (answer["exit"].as_u64().unwrap(), answer)
    }
}

#[test]
fn a_session_answers_requests_beside_the_commands_and_survives_a_bad_one() {
    let scratch = Scratch::new();
    let constraint = "constraints: [{metric: memory, max: 8}]";
    let file = scratch.study("study.yaml", &study("talk", "random", 4, 2, constraint));
    let file = file.to_str().unwrap();
    let mut session = Session::start(&scratch, file);

    let (exit, asked) = session.request(r#"{"op": "ask"}"#);
    assert_eq!((exit, number(&asked["result"][0])), (0, 0), "{asked}");
    assert_eq!(asked["result"][0]["owner"], "client");
    // A command beside the session claims the study's other slot: the session's next ask
    // finds both leased, as `hptune ask` would.
    let (out, by_command) = ask(&scratch, file, &[]);
    assert_success(&out);
    assert_eq!(number(&by_command[0]), 1);
    let (exit, full) = session.request(r#"{"op": "ask", "lease": "10m"}"#);
    assert_eq!(exit, 4, "{full}");
    assert!(
        full["error"]
            .as_str()
            .unwrap()
            .contains("clients hold 2 trials")
    );

    // Bad requests are answered, naming the line and the field, and the session goes on.
    for (line, says) in [
        (
            "{\"op\": \"tell\", \"trial\": 0",
            "request line 3: the request: not JSON",
        ),
        (
            r#"{"op": "tell", "trial": 0, "value": true}"#,
            "request line 4: field 'value': true is not a number",
        ),
        (
            r#"{"op": "tell", "trial": 0, "valeu": 1}"#,
            "request line 5: field 'valeu': tell takes no such field",
        ),
        (
            r#"{"op": "tell", "trial": 0, "metrics": {"accuracy": 1}}"#,
            "study 'talk' has no metric 'accuracy'",
        ),
        (
            r#"{"op": "tell", "trial": 7, "value": 1}"#,
            "study 'talk' has no trial 7",
        ),
    ] {
        let (exit, answer) = session.request(line);
        assert_eq!(exit, 2, "{line}: {answer}");
        let said = answer["error"].as_str().unwrap();
        assert!(said.contains(says), "{line}: {said}");
    }

    let (exit, told) =
        session.request(r#"{"op": "tell", "trial": 0, "value": "2.5", "metrics": {"memory": 3}}"#);
    assert_eq!(
        (exit, &told["result"]["trial"]["state"]),
        (0, &Value::from("succeeded")),
        "{told}"
    );
    assert_success(&tell(&scratch, "talk", 1, &["--value", "1.5"]));
    let (_, twice) = session.request(r#"{"op": "tell", "trial": 1, "value": 1}"#);
    assert!(
        twice["error"]
            .as_str()
            .unwrap()
            .contains("it has ended already"),
        "{twice}"
    );
    for expected in [2, 3] {
        let (exit, asked) = session.request(r#"{"op": "ask"}"#);
        assert_eq!(
            (exit, number(&asked["result"][0])),
            (0, expected),
            "{asked}"
        );
        let tell = format!(r#"{{"op": "tell", "trial": {expected}, "value": {expected}}}"#);
        assert_eq!(session.request(&tell).0, 0);
    }
    let (exit, spent) = session.request(r#"{"op": "ask"}"#);
    assert_eq!(exit, 5, "{spent}");
    assert!(
        spent["error"]
            .as_str()
            .unwrap()
            .contains("budget of 4 trials is spent")
    );
    // Trial 0 alone reported the constrained metric (within its bound): the others are
    // infeasible, however low their loss.
    let (exit, best) = session.request(r#"{"op": "best"}"#);
    assert_eq!(
        (exit, number(&best["result"]), &best["result"]["value"]),
        (0, 0, &Value::from(2.5))
    );
    let (_, trials) = session.request(r#"{"op": "trials"}"#);
    assert_eq!(trials["result"], Value::Array(scratch.trials("talk")));

    // The end of its input ends it, cleanly.
    drop(session.child.stdin.take());
    let out = session.child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_session_on_a_study_file_that_cannot_serve_ends_before_its_first_request() {
    let scratch = Scratch::new();
    let file = scratch.study(
        "study.yaml",
        &study("talk", "random", 4, 2, "").replace("max_trial_count", "max_trial_cuont"),
    );
    let mut session = Session::start(&scratch, file.to_str().unwrap());
    // The request may or may not be read before the session ends: either way it is not
    // answered, and the session exits 2 saying where the file is wrong.
    let _ = writeln!(session.child.stdin.take().unwrap(), r#"{{"op": "ask"}}"#);
    let mut answers = String::new();
    session.answers.read_to_string(&mut answers).unwrap();
    let out = session.child.wait_with_output().unwrap();
    assert_exit_says(&out, 2, "unknown field `max_trial_cuont`");
    assert_eq!(answers, "", "no answer: the session never served");
    assert_exit_says(
        &scratch.hptune(&["trials", "talk"]),
        2,
        "no study named 'talk'",
    );
}
