//! Intermediate values: each trial's learning curve (the objective reported with a step),
//! coloured by how the trial ended; a stopped trial's curve ends in a cross where it was
//! stopped. A large study's curves are those of its newest trials and its running ones (what
//! the [`crate::storage::StudyFollower`] holds), and the figure says so.

use super::axis::Axis;
use super::svg::{Frame, NARROW, Svg, escape};
use super::{MOST_MARKS, StudyData, thin, thinned_note};
use crate::storage::TrialState;

const HEIGHT: f64 = 340.0;

pub(super) fn draw(data: &StudyData) -> String {
    let curves: Vec<_> = data
        .follower
        .curves()
        .filter(|c| !c.points.is_empty())
        .collect();
    let steps = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0 as f64));
    let values = curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (Some(x_axis), Some(y_axis)) = (Axis::fit_whole(steps), Axis::fit(values)) else {
        return super::svg::message(
            "No intermediate values yet: workers report them as `step=N metric=value` lines.",
        );
    };
    let frame = Frame::standard(NARROW, HEIGHT);
    let mut svg = Svg::new(NARROW, HEIGHT);
    svg.x_axis(&frame, &x_axis, "step");
    svg.y_axis(&frame, &y_axis, data.metric());
    let state_of = |number| {
        data.follower
            .trial(number)
            .map_or(TrialState::Running, |t| t.state)
    };
    let drawn = thin(curves.len(), MOST_MARKS / 4, |i| {
        !state_of(curves[i].number).is_finished()
    });
    let count = drawn.iter().filter(|d| **d).count();
    match data.follower.details_from() {
        // A large study: only its newest trials' curves were read.
        Some(from) => svg.text(
            frame.left,
            11.0,
            "start",
            "caption",
            &format!(
                "{count} curves drawn: of the trials from {from} on, the running ones{}",
                if count < curves.len() {
                    " and an even sample of the others"
                } else {
                    ""
                }
            ),
        ),
        None => thinned_note(
            &mut svg,
            frame.left,
            count,
            curves.len(),
            "the running ones",
        ),
    }
    for (curve, _) in curves.iter().zip(&drawn).filter(|(_, d)| **d) {
        let trial = data.follower.trial(curve.number);
        let state = state_of(curve.number);
        let points: Vec<(f64, f64)> = curve
            .points
            .iter()
            .filter_map(|(s, v)| {
                Some((
                    frame.x(x_axis.position(*s as f64)?),
                    frame.y(y_axis.position(*v)?),
                ))
            })
            .collect();
        svg.raw(&format!(r#"<g data-trial="{}">"#, curve.number));
        svg.polyline(&points, &format!("curve {}", state.as_str()), "");
        let (last_step, last_value) = curve.points[curve.points.len() - 1];
        let reason = trial.and_then(|t| t.error.as_deref()).unwrap_or("");
        let tip = format!(
            "Trial {} · {} · step {last_step}: {}{}{}",
            curve.number,
            state.as_str(),
            super::axis::format_number(last_value),
            if reason.is_empty() { "" } else { "\n" },
            reason
        );
        if let Some(&(x, y)) = points.last() {
            if state == TrialState::Stopped {
                svg.raw(&format!(
                    r#"<path class="stop-mark" d="M{:.1},{:.1}l8,8m0,-8l-8,8"/>"#,
                    x - 4.0,
                    y - 4.0
                ));
            }
            svg.raw(&format!(
                r#"<circle class="curve-end {}" cx="{x:.1}" cy="{y:.1}" r="3"><title>{}</title></circle>"#,
                state.as_str(),
                escape(&tip)
            ));
        }
        svg.raw("</g>");
    }
    svg.finish("intermediate values")
}
