//! `hptune plot` as a user runs it for a report: each figure written as a real file (SVG,
//! PNG, HTML), the PNG decoded and looked into (its size, the plot's colours, its labels),
//! and the wrong `--out` refused with a message that names it.

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

/// A scratch directory whose database holds study `q`, run to its end.
fn run_study() -> Scratch {
    let scratch = Scratch::new();
    let study = scratch.study("q.yaml", STUDY);
    assert_success(&scratch.hptune(&["run", study.to_str().unwrap()]));
    scratch
}

/// Runs `hptune plot q --kind KIND --out OUT` in `scratch`.
fn plot(scratch: &Scratch, kind: &str, out: &std::path::Path) -> std::process::Output {
    scratch.hptune(&["plot", "q", "--kind", kind, "--out", out.to_str().unwrap()])
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
