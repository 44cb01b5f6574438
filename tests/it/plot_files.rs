//! `hptune plot` as a user runs it for a report: each figure written as a real file (SVG,
//! PNG, HTML), the PNG decoded and looked into (its size, the plot's colours, its labels),
//! and the wrong `--out` refused with a message that names it; the Pareto front and the
//! hypervolume of a study of two objectives, against a front computed here from the
//! database's rows.

use crate::common;

use common::{Scratch, assert_exit_says, assert_success};

const STUDY: &str = "name: q
objective: {metric: loss, goal: minimize}
parameters:
  - {id: x, type: double, min: -3, max: 3}
  - {id: act, type: categorical, values: [relu, tanh]}
algorithm: random
max_trial_count: 12
parallel_trial_count: 3
seed: 5
trial:
  command: [{worker}]
";

/// The colours the figures draw with (src/plot/figure.css): a trial's point, the best-so-far
/// line, and the two colours only text has (tick labels and axis titles).
const POINT: [u8; 3] = [0x42, 0x63, 0xeb];
const BEST_LINE: [u8; 3] = [0xf7, 0x67, 0x07];
const TICK_TEXT: [u8; 3] = [0x6b, 0x72, 0x80];
const TITLE_TEXT: [u8; 3] = [0x37, 0x41, 0x51];
/// The Pareto figure's colours: a trial on the front, an infeasible trial's ring, the
/// reference point's cross, and a dominated trial (faded: a trial's blue at 30% on white).
const FRONT: [u8; 3] = [0xf7, 0x67, 0x07];
const INFEASIBLE_RING: [u8; 3] = [0x86, 0x8e, 0x96];
const REFERENCE: [u8; 3] = [0x1f, 0x29, 0x37];
const DOMINATED: [u8; 3] = [198, 208, 249];

/// A study of two objectives (tests/fixtures/workers/tradeoff.sh): accuracy = x against
/// ms = 1 + 9x² + 4y, the trials of size = y over 0.7 infeasible; the reference point's
/// ms given, its accuracy derived.
const TRADEOFF: &str = "name: tradeoff
objectives:
  - {metric: accuracy, goal: maximize}
  - {metric: ms, goal: minimize, reference_point: 15}
constraints:
  - {metric: size, max: 0.7}
parameters:
  - {id: x, type: double, min: 0, max: 1}
  - {id: y, type: double, min: 0, max: 1}
algorithm: random
max_trial_count: 30
parallel_trial_count: 4
seed: 3
trial:
  command: [{tradeoff}]
";

/// A scratch directory whose database holds study `tradeoff`, run to its end.
pub(crate) fn run_tradeoff_study() -> Scratch {
    let scratch = Scratch::new();
    let worker =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workers/tradeoff.sh");
    let text = TRADEOFF.replace("{tradeoff}", &worker.display().to_string());
    let study = scratch.study("tradeoff.yaml", &text);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    scratch
}

/// A succeeded trial of `tradeoff` as stored: its number, accuracy, ms, and whether it is
/// feasible.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tradeoff {
    pub(crate) number: u64,
    accuracy: f64,
    pub(crate) ms: f64,
    feasible: bool,
}

impl Tradeoff {
    /// Whether it beats `other`: no worse on both objectives and better on one.
    fn dominates(&self, other: &Tradeoff) -> bool {
        self.accuracy >= other.accuracy
            && self.ms <= other.ms
            && (self.accuracy > other.accuracy || self.ms < other.ms)
    }
}

/// The succeeded trials of `tradeoff`, by number, read from the database's rows.
pub(crate) fn tradeoff_trials(scratch: &Scratch) -> Vec<Tradeoff> {
    scratch
        .query(
            "SELECT number, objective_values, infeasible FROM trials \
             WHERE state = 'succeeded' ORDER BY number",
        )
        .into_iter()
        .map(|row| {
            let values: Vec<f64> = serde_json::from_str(row[1].as_str().unwrap()).unwrap();
            Tradeoff {
                number: row[0].as_u64().unwrap(),
                accuracy: values[0],
                ms: values[1],
                feasible: row[2].is_null(),
            }
        })
        .collect()
}

/// The numbers of the trials on the front of `trials`, found by comparing every pair.
pub(crate) fn tradeoff_front(trials: &[Tradeoff]) -> Vec<u64> {
    let feasible: Vec<&Tradeoff> = trials.iter().filter(|t| t.feasible).collect();
    feasible
        .iter()
        .filter(|t| !feasible.iter().any(|o| o.dominates(t)))
        .map(|t| t.number)
        .collect()
}

/// A scratch directory whose database holds study `q`, run to its end.
fn run_study() -> Scratch {
    let scratch = Scratch::new();
    let study = scratch.study("q.yaml", STUDY);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    scratch
}

/// Runs `hptune plot q --kind KIND --out OUT` in `scratch`.
fn plot(scratch: &Scratch, kind: &str, out: &std::path::Path) -> std::process::Output {
    plot_study(scratch, "q", kind, out)
}

/// Runs `hptune plot STUDY --kind KIND --out OUT` in `scratch`.
fn plot_study(
    scratch: &Scratch,
    study: &str,
    kind: &str,
    out: &std::path::Path,
) -> std::process::Output {
    scratch.hptune(&[
        "plot",
        study,
        "--kind",
        kind,
        "--out",
        out.to_str().unwrap(),
    ])
}

/// A decoded PNG: its size and its pixels as RGBA.
struct Image {
    width: u32,
    height: u32,
    rgba: Vec<u8>,
}

impl Image {
    /// Decodes the PNG file at `path`, checking its signature and header on the way.
    fn read(path: &std::path::Path) -> Image {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(
            &bytes[..8],
            b"\x89PNG\r\n\x1a\n",
            "{} is not a PNG",
            path.display()
        );
        assert_eq!(&bytes[12..16], b"IHDR", "the first chunk is not the header");
        let header_width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let header_height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        decoder.set_transformations(png::Transformations::EXPAND);
        let mut reader = decoder.read_info().unwrap();
        let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut buffer).unwrap();
        assert_eq!((frame.width, frame.height), (header_width, header_height));
        assert_eq!(frame.color_type, png::ColorType::Rgba, "{frame:?}");
        buffer.truncate(frame.buffer_size());
        Image {
            width: frame.width,
            height: frame.height,
            rgba: buffer,
        }
    }

    /// Checks that more than `least` pixels have `colour` (that of `what`).
    fn assert_has(&self, colour: [u8; 3], least: usize, what: &str) {
        let count = self.count(colour);
        assert!(
            count > least,
            "{count} {what} pixels, expected more than {least}"
        );
    }

    /// How many opaque pixels have exactly `colour`.
    fn count(&self, colour: [u8; 3]) -> usize {
        self.rgba
            .chunks_exact(4)
            .filter(|p| p[..3] == colour && p[3] == 255)
            .count()
    }
}

/// The width and height of a standalone SVG file's `viewBox`.
fn view_box(svg: &str) -> (f64, f64) {
    let start = svg.find("viewBox=\"").unwrap() + "viewBox=\"".len();
    let numbers: Vec<f64> = svg[start..]
        .split('"')
        .next()
        .unwrap()
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    (numbers[2], numbers[3])
}

#[test]
fn a_png_shows_the_figure_of_the_svg_with_its_labels() {
    let scratch = run_study();
    let svg_path = scratch.path("history.svg");
    assert_success(&plot(&scratch, "history", &svg_path));
    let (width, height) = view_box(&std::fs::read_to_string(&svg_path).unwrap());
    let png_path = scratch.path("history.png");
    let out = plot(&scratch, "history", &png_path);
    assert_success(&out);
    assert!(common::stdout(&out).contains("wrote"));
    let image = Image::read(&png_path);
    // Two pixels per SVG unit.
    assert_eq!(
        (image.width as f64, image.height as f64),
        (2.0 * width, 2.0 * height)
    );
    // White background, then the plot's marks in its colours: twelve points, the best line.
    assert_eq!(&image.rgba[..4], &[255, 255, 255, 255]);
    image.assert_has(POINT, 12 * 50, "point");
    image.assert_has(BEST_LINE, 500, "best line");
    // Text is drawn (a PNG without fonts would have none of these colours).
    image.assert_has(TICK_TEXT, 200, "tick label");
    image.assert_has(TITLE_TEXT, 50, "axis title");
}

#[test]
fn every_figure_is_written_as_svg_png_and_html() {
    let scratch = run_study();
    for kind in [
        "history",
        "intermediate",
        "parallel",
        "importance",
        "slice",
        "contour",
        "edf",
        "timeline",
    ] {
        for extension in ["svg", "png", "html"] {
            let path = scratch.path(&format!("{kind}.{extension}"));
            assert_success(&plot(&scratch, kind, &path));
            let bytes = std::fs::read(&path).unwrap();
            match extension {
                "png" => {
                    let image = Image::read(&path);
                    let drawn = image.count(TICK_TEXT) + image.count(TITLE_TEXT);
                    assert!(drawn > 50, "{kind}.png has no labels");
                }
                "svg" => assert!(bytes.starts_with(b"<svg"), "{kind}.svg"),
                _ => assert!(bytes.starts_with(b"<!doctype html>"), "{kind}.html"),
            }
        }
    }
}

#[test]
fn an_unknown_extension_or_an_unwritable_path_is_refused_by_name() {
    let scratch = run_study();
    let gif = scratch.path("history.gif");
    assert_exit_says(
        &plot(&scratch, "history", &gif),
        2,
        "history.gif: name a .svg, .png or .html file",
    );
    assert!(!gif.exists());
    let nameless = scratch.path("history");
    assert_exit_says(&plot(&scratch, "history", &nameless), 2, "name a .svg");
    let nowhere = scratch.path("no/such/folder/history.png");
    let message = assert_exit_says(&plot(&scratch, "history", &nowhere), 1, "cannot write");
    assert!(message.contains("no/such/folder/history.png"), "{message}");
    // A folder where the file should be.
    let folder = scratch.path("taken.png");
    std::fs::create_dir(&folder).unwrap();
    assert_exit_says(&plot(&scratch, "history", &folder), 1, "taken.png");
}

/// The numbers of the trials a figure draws with `class`, in the order drawn.
fn drawn_as(svg: &str, class: &str) -> Vec<u64> {
    let mut numbers: Vec<u64> = svg
        .split(&format!("<circle class=\"{class}\" data-trial=\""))
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
        .collect();
    numbers.sort();
    numbers
}

#[test]
fn the_pareto_front_of_two_objectives_is_the_one_the_database_holds() {
    let scratch = run_tradeoff_study();
    let trials = tradeoff_trials(&scratch);
    let front = tradeoff_front(&trials);
    let numbers = |keep: &dyn Fn(&Tradeoff) -> bool| -> Vec<u64> {
        trials
            .iter()
            .filter(|t| keep(t))
            .map(|t| t.number)
            .collect()
    };
    let infeasible = numbers(&|t| !t.feasible);
    let dominated = numbers(&|t| t.feasible && !front.contains(&t.number));
    // Seed 3 gives each kind of trial: the figure must tell them apart.
    assert!(
        front.len() >= 2 && !dominated.is_empty() && !infeasible.is_empty(),
        "{trials:?}"
    );
    let svg_path = scratch.path("pareto.svg");
    assert_success(&plot_study(&scratch, "tradeoff", "pareto", &svg_path));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert_eq!(drawn_as(&svg, "pt front"), front, "{svg}");
    assert_eq!(drawn_as(&svg, "pt dominated"), dominated);
    assert_eq!(drawn_as(&svg, "pt infeasible"), infeasible);
    // The reference point: ms as the study gives it; accuracy the worst feasible one less a
    // tenth of the feasible accuracies' range.
    let accuracies = trials.iter().filter(|t| t.feasible).map(|t| t.accuracy);
    let (low, high) = accuracies.fold((f64::MAX, f64::MIN), |(l, h), a| (l.min(a), h.max(a)));
    let corner = low - 0.1 * (high - low);
    let title = svg
        .split("<path class=\"ref-point\"")
        .nth(1)
        .and_then(|p| p.split("<title>").nth(1))
        .unwrap();
    let (accuracy, ms) = title
        .trim_start_matches("reference point: accuracy ")
        .split_once(", ms ")
        .unwrap();
    assert!(
        (accuracy.parse::<f64>().unwrap() - corner).abs() < 1e-3,
        "{title}"
    );
    assert!(ms.starts_with("15<"), "{title}");
    assert!(svg.contains("class=\"front-line\"") && svg.contains("class=\"hv-area\""));

    // The PNG shows the same: the front's colour, faded points, the rings and the cross.
    let png_path = scratch.path("pareto.png");
    assert_success(&plot_study(&scratch, "tradeoff", "pareto", &png_path));
    let image = Image::read(&png_path);
    image.assert_has(FRONT, front.len() * 30, "front");
    image.assert_has(DOMINATED, dominated.len() * 30, "dominated");
    image.assert_has(INFEASIBLE_RING, infeasible.len() * 10, "infeasible ring");
    image.assert_has(REFERENCE, 40, "reference point");

    // The hypervolume grows at each feasible trial no earlier one dominates or equals.
    let grew: Vec<u64> = trials
        .iter()
        .enumerate()
        .filter(|(i, t)| {
            t.feasible
                && !trials[..*i]
                    .iter()
                    .any(|o| o.feasible && o.accuracy >= t.accuracy && o.ms <= t.ms)
        })
        .map(|(_, t)| t.number)
        .collect();
    let path = scratch.path("hypervolume.svg");
    assert_success(&plot_study(&scratch, "tradeoff", "hypervolume", &path));
    let svg = std::fs::read_to_string(&path).unwrap();
    assert_eq!(drawn_as(&svg, "pt front"), grew, "{svg}");
    assert!(svg.contains("class=\"hv-line\""));
}

#[test]
fn the_front_of_a_study_of_one_objective_is_refused_by_name() {
    let scratch = run_study();
    for kind in ["pareto", "hypervolume"] {
        let out = scratch.path(&format!("{kind}.svg"));
        assert_exit_says(
            &plot(&scratch, kind, &out),
            2,
            &format!("study 'q' has one objective (loss): --kind {kind} needs several"),
        );
        assert!(!out.exists());
    }
}
