//! The hypervolume history of a study with several objectives: after each trial, the
//! hypervolume of the front of the trials up to it, against the same reference point
//! throughout, as a step line with a point at each trial that grew it.

use super::axis::{Axis, format_number};
use super::front::Front;
use super::svg::{Frame, NARROW, Svg};
use super::{MOST_MARKS, thin, thinned_note};

const HEIGHT: f64 = 340.0;

pub(super) fn draw(front: &Front) -> String {
    let history = front.hypervolume_history();
    let numbers = front.outcomes.iter().map(|o| o.trial.number as f64);
    let (Some(x_axis), Some(y_axis)) = (
        Axis::fit_whole(numbers),
        Axis::fit(history.iter().map(|(_, hv)| *hv)),
    ) else {
        return super::svg::message(
            "No feasible trial yet: the hypervolume starts with the first one.",
        );
    };
    let frame = Frame::below_a_key(NARROW, HEIGHT);
    let mut svg = Svg::new(NARROW, HEIGHT);
    svg.x_axis(&frame, &x_axis, "trial");
    svg.y_axis(&frame, &y_axis, "hypervolume");
    let at = |number: u64, hv: f64| {
        Some((
            frame.x(x_axis.position(number as f64)?),
            frame.y(y_axis.position(hv)?),
        ))
    };
    // A step at each trial that grew the hypervolume, nothing between.
    let mut steps: Vec<(f64, f64)> = Vec::new();
    let mut growths = Vec::new();
    for (number, hv) in &history {
        if growths.last().is_some_and(|(_, last)| last >= hv) {
            continue;
        }
        if let Some((x, y)) = at(*number, *hv) {
            if let Some(&(_, previous)) = steps.last() {
                steps.push((x, previous));
            }
            steps.push((x, y));
        }
        growths.push((*number, *hv));
    }
    if let Some(&(_, y)) = steps.last() {
        steps.push((frame.x(1.0), y));
    }
    svg.polyline(&steps, "hv-line", "");
    let drawn = thin(growths.len(), MOST_MARKS, |_| false);
    let count = drawn.iter().filter(|d| **d).count();
    thinned_note(&mut svg, frame.left, count, growths.len(), "an even sample");
    for ((number, hv), _) in growths.iter().zip(&drawn).filter(|(_, d)| **d) {
        if let Some((x, y)) = at(*number, *hv) {
            let tip = format!("Trial {number} · hypervolume {}", format_number(*hv));
            svg.point(x, y, "pt front", *number, &tip);
        }
    }
    if count == growths.len() {
        svg.text(
            frame.left,
            11.0,
            "start",
            "caption",
            &format!(
                "against the reference point {}",
                front.values_text(&front.reference)
            ),
        );
    }
    svg.finish("hypervolume history")
}
