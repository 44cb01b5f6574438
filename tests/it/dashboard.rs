//! The dashboard in a real browser (headless Chromium over the DevTools protocol) against the
//! real binary serving a real study: the pages render, the figures show what the study holds,
//! a trial opens with its log, a running study's trials appear without a reload, a study of
//! two objectives shows its Pareto front and hypervolume (and an open page moves the front as
//! results are told), the learning curves show where ASHA promoted and stopped each trial,
//! and a site that points its name at the dashboard reads nothing.
//! Screenshots of each page go to target/dashboard-screenshots/ (printed).

use crate::common;
use crate::early_stopping;
use crate::plot_files;

use common::browser::{Browser, chromium};
use common::dashboard::{Dashboard, wait_until};
use common::{Scratch, assert_success};
use serde_json::json;

/// A study where the answer is known: the worker's loss is x² + y², with x in [-10, 10]
/// and y in [-0.1, 0.1] (so y barely matters) and a categorical it ignores.
const STUDY: &str = "name: known
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -10, max: 10}
  - {id: y, type: double, min: -0.1, max: 0.1}
  - {id: act, type: categorical, values: [relu, tanh, gelu]}
algorithm: random
max_trial_count: 40
parallel_trial_count: 4
seed: 11
trial:
  command: [{worker}]
";

/// A scratch directory whose database holds the study [`STUDY`], run to its end.
fn run_known_study() -> Scratch {
    let scratch = Scratch::new();
    let study = scratch.study("known.yaml", STUDY);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    scratch
}

#[test]
fn every_page_renders_and_the_history_has_one_point_per_finished_trial() {
    let Some(chromium) = chromium() else { return };
    let scratch = run_known_study();
    let finished = scratch.trials("known").len();
    let dashboard = Dashboard::start(&scratch, &[]);
    let mut browser = Browser::start(&chromium, 1400);

    browser.open(&format!("{}/", dashboard.base));
    browser.wait_for(
        "the studies list",
        "document.querySelector('a[href=\"/studies/known\"]')",
    );
    let row = browser.eval("document.querySelector('#studies-body tr').innerText");
    assert!(row.as_str().unwrap().contains("40"), "{row}");
    browser.screenshot("studies.png");

    browser.open(&format!("{}/studies/known", dashboard.base));
    for kind in [
        "history",
        "intermediate",
        "importance",
        "parallel",
        "contour",
        "edf",
        "slice",
        "timeline",
    ] {
        let drawn = browser.eval(&format!(
            "!!document.querySelector('.figure-slot[data-kind={kind}] svg.figure') && !document.querySelector('.figure-slot[data-kind={kind}] .empty')"
        ));
        assert_eq!(drawn, json!(true), "figure {kind} is missing or empty");
    }
    let points = browser.eval(
        "document.querySelectorAll('.figure-slot[data-kind=history] circle[data-trial]').length",
    );
    assert_eq!(points, json!(finished));
    let rows =
        browser.eval("document.querySelectorAll('#trial-table tbody tr[data-trial]').length");
    assert_eq!(rows, json!(40));
    // One objective: no front to draw.
    let fronts = browser.eval(
        "document.querySelectorAll('.figure-slot[data-kind=pareto], .figure-slot[data-kind=hypervolume]').length",
    );
    assert_eq!(fronts, json!(0));
    browser.screenshot("study.png");
}

#[test]
fn a_study_of_two_objectives_shows_its_front_and_the_growth_of_its_hypervolume() {
    let Some(chromium) = chromium() else { return };
    let scratch = plot_files::run_tradeoff_study();
    let front = plot_files::tradeoff_front(&plot_files::tradeoff_trials(&scratch));
    let dashboard = Dashboard::start(&scratch, &[]);
    let mut browser = Browser::start(&chromium, 1400);
    browser.open(&format!("{}/studies/tradeoff", dashboard.base));
    let slot = ".figure-slot[data-kind=pareto]";
    let on_front = browser.eval(&format!(
        "[...document.querySelectorAll('{slot} circle.front[data-trial]')].map(c => Number(c.dataset.trial)).sort((a, b) => a - b)"
    ));
    assert_eq!(on_front, json!(front));
    // Dominated trials are drawn faded (a pale blue), the front in the best line's orange.
    let fills = browser.eval(&format!(
        "['dominated', 'front'].map(c => getComputedStyle(document.querySelector(`{slot} circle.${{c}}[data-trial]`)).fill)"
    ));
    assert_eq!(fills, json!(["rgb(198, 208, 249)", "rgb(247, 103, 7)"]));
    let reference = browser.eval(&format!(
        "document.querySelector('{slot} path.ref-point title').textContent"
    ));
    assert!(
        reference
            .as_str()
            .unwrap()
            .starts_with("reference point: accuracy "),
        "{reference}"
    );
    let growth = browser.eval(
        "document.querySelectorAll('.figure-slot[data-kind=hypervolume] path.hv-line').length",
    );
    assert_eq!(growth, json!(1));
    // The table has a column per objective.
    let head = browser.eval("document.querySelector('#trial-table thead').innerText");
    let head = head.as_str().unwrap();
    assert!(head.contains("accuracy") && head.contains("ms"), "{head}");
    let ms = browser.eval(&format!(
        "document.querySelector('#trial-table tbody tr[data-trial=\"{}\"] td:nth-child(4)').innerText",
        front[0]
    ));
    let stored = plot_files::tradeoff_trials(&scratch)
        .into_iter()
        .find(|t| t.number == front[0])
        .unwrap()
        .ms;
    let shown: f64 = ms.as_str().unwrap().parse().unwrap();
    assert!(
        (shown - stored).abs() < 1e-3 * stored,
        "{ms} against {stored}"
    );
    let card = browser.eval("document.querySelector('#front-size').textContent");
    assert_eq!(card, json!(format!("{} trials", front.len())));
    // The table marks the same trials as on the front.
    let marked = browser.eval(
        "[...document.querySelectorAll('#trial-table tbody tr[data-trial]')].filter(r => r.querySelector('.badge.front')).map(r => Number(r.dataset.trial)).sort((a, b) => a - b)",
    );
    assert_eq!(marked, json!(front));
    // A point on the front opens its trial.
    browser.eval(&format!(
        "document.querySelector('{slot} circle.front[data-trial=\"{}\"]').dispatchEvent(new MouseEvent('click', {{bubbles: true}}))",
        front[0]
    ));
    browser.wait_for(
        "the details of the trial clicked",
        &format!(
            "document.querySelector('#drawer:not([hidden]) [data-trial-detail=\"{}\"]')",
            front[0]
        ),
    );
    browser.eval("document.querySelector('#drawer-close').click()");
    browser.screenshot("pareto.png");
}

#[test]
fn the_learning_curves_show_where_asha_promoted_and_stopped_each_trial() {
    let Some(chromium) = chromium() else { return };
    // Trials 0 and 3 run to step 4, 1 is stopped at rung 1 (step 2), 2 and 4 at rung 0.
    let (scratch, _) =
        early_stopping::run_curves(early_stopping::ASHA, &early_stopping::ASHA_CURVES);
    let dashboard = Dashboard::start(&scratch, &[]);
    let mut browser = Browser::start(&chromium, 1400);
    browser.open(&format!("{}/studies/curves", dashboard.base));
    let slot = ".figure-slot[data-kind=intermediate]";
    let mut all = |selector: &str, map: &str| {
        browser.eval(&format!(
            "[...document.querySelectorAll('{slot} {selector}')].map({map})"
        ))
    };
    let rungs = all("g.rung", "g => Number(g.dataset.step)");
    assert_eq!(rungs, json!([1, 2, 4]));
    let by_trial =
        "m => [Number(m.closest('g[data-trial]').dataset.trial), Number(m.dataset.rung)]";
    let promoted = all("path.promoted", by_trial);
    assert_eq!(promoted, json!([[0, 0], [0, 1], [1, 0], [3, 0], [3, 1]]));
    let stopped = all("path.stop-mark", by_trial);
    assert_eq!(stopped, json!([[1, 1], [2, 0], [4, 0]]));
    // Why: each rung's cut among the trials that reached it, and each stop's at the time.
    let cuts = all("g.rung path.rung-cutoff title", "t => t.textContent");
    assert_eq!(
        cuts[0],
        json!(
            "rung 0 (step 1): of the 5 trials that reached it the best 2 go on; the cutoff is 0.9 now"
        )
    );
    assert!(
        cuts[2]
            .as_str()
            .unwrap()
            .ends_with("the best 1 go on; the cutoff is 0.45 now"),
        "{cuts}"
    );
    let tip = all(
        "g[data-trial=\"4\"] circle.curve-end title",
        "t => t.textContent",
    );
    let tip = tip[0].as_str().unwrap();
    assert!(
        tip.contains("early-stopped by ASHA at rung 0 (step 1)")
            && tip.ends_with("(the cutoff is 0.9)"),
        "{tip}"
    );
    browser.screenshot("learning-curves.png");
}

#[test]
fn importance_ranks_first_the_parameter_that_drives_the_objective() {
    let Some(chromium) = chromium() else { return };
    let scratch = run_known_study();
    let dashboard = Dashboard::start(&scratch, &[]);
    let mut browser = Browser::start(&chromium, 1400);
    browser.open(&format!("{}/studies/known", dashboard.base));
    let ranked = browser.eval(
        "[...document.querySelectorAll('.figure-slot[data-kind=importance] rect.bar')].map(b => b.dataset.param)",
    );
    assert_eq!(ranked[0], json!("x"), "{ranked}");
    // `hptune plot` draws the same figure.
    let out = scratch.path("importance.svg");
    assert_success(&scratch.hptune(&[
        "plot",
        "known",
        "--kind",
        "importance",
        "--out",
        out.to_str().unwrap(),
    ]));
    let svg = std::fs::read_to_string(&out).unwrap();
    let first = svg.find("data-param=\"x\"").unwrap();
    assert!(
        first < svg.find("data-param=\"y\"").unwrap()
            && first < svg.find("data-param=\"act\"").unwrap()
    );
}

#[test]
fn clicking_a_trial_shows_its_parameters_and_log_tail() {
    let Some(chromium) = chromium() else { return };
    let scratch = run_known_study();
    let dashboard = Dashboard::start(&scratch, &[]);
    let mut browser = Browser::start(&chromium, 1400);
    browser.open(&format!("{}/studies/known", dashboard.base));
    browser.eval("document.querySelector('#trial-table tbody tr[data-trial=\"7\"]').click()");
    browser.wait_for(
        "trial 7's details",
        "document.querySelector('#drawer:not([hidden]) [data-trial-detail=\"7\"]')",
    );
    let detail = browser.eval("document.querySelector('#drawer-body').innerText");
    let detail = detail.as_str().unwrap();
    // The worker's first line (tests/fixtures/workers/quadratic.sh), from its log file.
    assert!(detail.contains("starting trial 7 of known"), "{detail}");
    assert!(
        detail.contains("Parameters") && detail.contains("Attempts"),
        "{detail}"
    );
    browser.screenshot("trial.png");
}

#[test]
fn a_trial_finished_by_a_running_study_appears_without_a_reload() {
    let Some(chromium) = chromium() else { return };
    let scratch = Scratch::new();
    // Each worker waits for the gate file before it reports: the test decides when trials end.
    let gate = scratch.path("gate");
    let worker = scratch.path("gated.sh");
    std::fs::write(
        &worker,
        format!("#!/bin/sh\nwhile [ ! -e {} ]; do sleep 0.05; done\necho loss=$(echo \"$1\" | cut -d= -f2)\n", gate.display()),
    )
    .unwrap();
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&worker, executable).unwrap();
    let study = scratch.study(
        "live.yaml",
        &format!(
            "name: live\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: x, type: double, min: 0, max: 1}}\nalgorithm: random\nmax_trial_count: 3\nparallel_trial_count: 1\ntrial:\n  command: [{}]\n",
            worker.display()
        ),
    );
    let mut run = scratch
        .command(&["run", study.to_str().unwrap()])
        .spawn()
        .unwrap();
    wait_until("the first trial to run", || {
        scratch
            .try_query("SELECT COUNT(*) FROM trials WHERE state = 'running'")
            .is_ok_and(|rows| rows[0][0] == json!(1))
    });
    let dashboard = Dashboard::start(&scratch, &[]);
    let mut browser = Browser::start(&chromium, 1400);
    browser.open(&format!("{}/studies/live", dashboard.base));
    let state = browser
        .eval("document.querySelector('#trial-table tbody tr[data-trial=\"0\"]').dataset.state");
    assert_eq!(state, json!("running"));
    browser.eval("window.stillTheSamePage = true");
    std::fs::write(&gate, "").unwrap();
    assert!(run.wait().unwrap().success());
    browser.wait_for(
        "the finished trials to appear",
        "document.querySelectorAll('#trial-table tbody tr[data-state=succeeded]').length === 3 \
         && document.querySelectorAll('.figure-slot[data-kind=history] circle[data-trial]').length === 3 \
         && document.querySelectorAll('.figure-slot[data-kind=timeline] rect.span.succeeded').length === 3",
    );
    assert_eq!(
        browser.eval("window.stillTheSamePage === true"),
        json!(true),
        "the page reloaded"
    );
    browser.screenshot("live.png");
}

/// A study of two objectives whose results clients tell while its page is open: the page
/// moves the front's marks in the table, the summary and the Pareto figure, including off
/// trials that did not change, without a reload.
#[test]
fn an_open_page_moves_the_front_as_results_are_told() {
    let Some(chromium) = chromium() else { return };
    let scratch = Scratch::new();
    let study = scratch.study(
        "pair.yaml",
        "name: pair\nobjectives: [{metric: loss, goal: minimize}, {metric: ms, goal: minimize}]\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\nalgorithm: random\nmax_trial_count: 3\nparallel_trial_count: 3\n",
    );
    assert_success(&scratch.hptune(&["ask", study.to_str().unwrap(), "--count", "3"]));
    let tell = |number: &str, loss: &str, ms: &str| {
        let (loss, ms) = (format!("loss={loss}"), format!("ms={ms}"));
        assert_success(
            &scratch.hptune(&["tell", "pair", number, "--metric", &loss, "--metric", &ms]),
        );
    };
    // Two trials that trade one objective for the other: both on the front.
    tell("0", "1", "3");
    tell("1", "3", "1");
    let dashboard = Dashboard::start(&scratch, &[]);
    let mut browser = Browser::start(&chromium, 1400);
    browser.open(&format!("{}/studies/pair", dashboard.base));
    let marked = "JSON.stringify([...document.querySelectorAll('#trial-table tbody tr[data-trial]')].filter(r => r.querySelector('.badge.front')).map(r => Number(r.dataset.trial)).sort((a, b) => a - b))";
    let drawn = "JSON.stringify([...document.querySelectorAll('.figure-slot[data-kind=pareto] circle.front[data-trial]')].map(c => Number(c.dataset.trial)).sort((a, b) => a - b))";
    let size = "document.querySelector('#front-size').textContent";
    assert_eq!(browser.eval(marked), json!("[0,1]"));
    assert_eq!(browser.eval(drawn), json!("[0,1]"));
    assert_eq!(browser.eval(size), json!("2 trials"));
    browser.eval("window.stillTheSamePage = true");
    // A third trial better in both: it alone is on the front, though 0 and 1 did not change.
    tell("2", "0.5", "0.5");
    browser.wait_for(
        "the front to move to trial 2",
        &format!("{marked} === '[2]' && {drawn} === '[2]' && {size} === '1 trials'"),
    );
    assert_eq!(
        browser.eval("window.stillTheSamePage === true"),
        json!(true),
        "the page reloaded"
    );
    browser.screenshot("live-front.png");
}

/// The database is replaced under an open page by one holding another study of the same name,
/// at the same revision: the page starts over from the new study.
#[test]
fn an_open_page_whose_study_was_replaced_shows_the_new_one() {
    let Some(chromium) = chromium() else { return };
    let scratch = run_known_study();
    let dashboard = Dashboard::start(&scratch, &[]);
    let mut browser = Browser::start(&chromium, 1400);
    browser.open(&format!("{}/studies/known", dashboard.base));
    let rows = "document.querySelectorAll('#trial-table tbody tr[data-trial]').length";
    assert_eq!(browser.eval(rows), json!(40));
    browser.eval("window.stillTheSamePage = true");
    for file in ["hptune.db", "hptune.db-wal", "hptune.db-shm"] {
        let _ = std::fs::remove_file(scratch.path(file));
    }
    // Its models too: the new study's trials would not write into the old one's folders.
    std::fs::remove_dir_all(scratch.path("hptune-artifacts")).unwrap();
    let study = scratch.study(
        "again.yaml",
        &STUDY.replace("max_trial_count: 40", "max_trial_count: 3"),
    );
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    browser.wait_for(
        "the page of the new study",
        &format!("window.stillTheSamePage === undefined && {rows} === 3"),
    );
}

#[test]
fn a_site_that_points_its_name_at_the_dashboard_reads_nothing() {
    let Some(chromium) = chromium() else { return };
    let scratch = run_known_study();
    let dashboard = Dashboard::start(&scratch, &[]);
    let port = dashboard.base.rsplit(':').next().unwrap();
    // DNS rebinding: the other site's name now resolves to this machine's loopback address,
    // so its page and the dashboard would be one origin to the browser.
    let mut browser = Browser::start_with(
        &chromium,
        1400,
        &["--host-resolver-rules=MAP rebound.test 127.0.0.1"],
    );
    browser.open(&format!("http://rebound.test:{port}/"));
    let text = browser.eval("document.body.innerText");
    let text = text.as_str().unwrap();
    assert!(
        text.contains("does not answer to the name rebound.test")
            && text.contains("--allow-host rebound.test")
            && !text.contains("minimize loss"),
        "{text}"
    );
    let read = browser.eval(
        "Promise.all(['/api/studies', '/studies/known/trials/0?fragment=1'].map(u => fetch(u).then(r => r.status)))",
    );
    assert_eq!(read, json!([403, 403]));
    browser.screenshot("rebound.png");
    // The same browser at the dashboard's own address.
    browser.open(&format!("{}/", dashboard.base));
    browser.wait_for(
        "the studies list",
        "document.querySelector('a[href=\"/studies/known\"]')",
    );
}
