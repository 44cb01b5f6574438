//! Intermediate values: each trial's learning curve (the objective reported with a step),
//! coloured by how the trial ended; a stopped trial's curve ends in a cross where it was
//! stopped, its tooltip saying why. Under ASHA each rung is a dashed line with a tick at the
//! cut a trial reaching it now must make, and a diamond marks each rung a curve passed (was
//! promoted at). A large study's curves are those of its newest trials and its running ones
//! (what the [`crate::storage::StudyFollower`] holds), and the figure says so.

use std::path::Path;

use super::axis::{Axis, format_number};
use super::svg::{Frame, NARROW, Svg, escape};
use super::{MOST_MARKS, StudyData, thin, thinned_note};
use crate::storage::TrialState;
use crate::study::stopping::{
    Curve, RungCut, StoppingRule, asha_stopped_at, rung_steps, values_at,
};

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
    let plot = Plot {
        frame: &frame,
        x_axis: &x_axis,
        y_axis: &y_axis,
    };
    let rungs = match asha(data) {
        Some(asha) => {
            svg.text(
                frame.left + frame.width,
                11.0,
                "end",
                "caption",
                "◇ promoted at a rung · × stopped · dashed: a rung",
            );
            plot.rungs(&mut svg, data, asha, &curves)
        }
        None => Vec::new(),
    };
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
        let reason = trial.and_then(|t| t.error.as_deref()).unwrap_or("");
        let stopped_at = asha_stopped_at(reason);
        plot.promotions(&mut svg, curve, &rungs, stopped_at);
        let (last_step, last_value) = curve.points[curve.points.len() - 1];
        let tip = format!(
            "Trial {} · {} · step {last_step}: {}{}{}",
            curve.number,
            state.as_str(),
            format_number(last_value),
            if reason.is_empty() { "" } else { "\n" },
            reason
        );
        if let Some(&(x, y)) = points.last() {
            if state == TrialState::Stopped {
                let rung = stopped_at.map(|r| format!(r#" data-rung="{r}""#));
                svg.raw(&format!(
                    r#"<path class="stop-mark"{} d="M{:.1},{:.1}l8,8m0,-8l-8,8"/>"#,
                    rung.unwrap_or_default(),
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

/// The first rung's step and the factor between rungs where the study (its file as last run)
/// stops trials by ASHA.
fn asha(data: &StudyData) -> Option<(i64, f64)> {
    let stored = Path::new("the study file as last run");
    match crate::spec::parse(stored, &data.follower.study.spec)
        .ok()?
        .early_stopping?
    {
        StoppingRule::Asha {
            min_resource,
            reduction_factor,
            ..
        } => Some((min_resource, reduction_factor)),
        StoppingRule::Median { .. } => None,
    }
}

/// Where the figure draws: its frame and axes.
struct Plot<'a> {
    frame: &'a Frame,
    x_axis: &'a Axis,
    y_axis: &'a Axis,
}

impl Plot<'_> {
    /// Draws ASHA's rungs (`(min_resource, factor)`) up to the last step of the `curves`,
    /// each a dashed line with a tick at its cut among those that reached it, and returns
    /// their steps.
    fn rungs(
        &self,
        svg: &mut Svg,
        data: &StudyData,
        (min_resource, factor): (i64, f64),
        curves: &[&Curve],
    ) -> Vec<i64> {
        let last = curves.iter().filter_map(|c| c.last_step()).max();
        let steps = rung_steps(min_resource, factor, last.unwrap_or(0));
        let frame = self.frame;
        for (index, &step) in steps.iter().enumerate() {
            let Some(x) = self.x_axis.position(step as f64) else {
                continue;
            };
            let x = frame.x(x);
            svg.raw(&format!(
                r#"<g class="rung" data-rung="{index}" data-step="{step}"><line class="rung-line" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}"/>"#,
                frame.top,
                frame.top + frame.height
            ));
            svg.text(
                x + 3.0,
                frame.top + 10.0,
                "start",
                "rung-label",
                &format!("rung {index}"),
            );
            let values = values_at(curves.iter().copied(), step);
            if !values.is_empty() {
                let RungCut { keep, n, cutoff } = RungCut::of(data.goal(), values, factor);
                if let Some(y) = self.y_axis.position(cutoff) {
                    svg.raw(&format!(
                        r#"<path class="rung-cutoff" d="M{:.1},{:.1}h14"><title>{}</title></path>"#,
                        x - 7.0,
                        frame.y(y),
                        escape(&format!(
                            "rung {index} (step {step}): of the {n} trials that reached it the best {keep} go on; the cutoff is {} now",
                            format_number(cutoff)
                        ))
                    ));
                }
            }
            svg.raw("</g>");
        }
        steps
    }

    /// Marks the rungs (their `steps`) where `curve` was promoted: a trial ASHA stopped at rung
    /// `stopped_at` passed the ones before it (its worker may report a step more while it
    /// stops); any other, those before its last step.
    fn promotions(&self, svg: &mut Svg, curve: &Curve, steps: &[i64], stopped_at: Option<usize>) {
        let passed = steps
            .iter()
            .enumerate()
            .filter(|(index, step)| match stopped_at {
                Some(rung) => *index < rung,
                None => curve.last_step() > Some(**step),
            });
        for (index, &step) in passed {
            let Some(value) = curve.value_at(step) else {
                continue;
            };
            let (Some(x), Some(y)) = (
                self.x_axis.position(step as f64),
                self.y_axis.position(value),
            ) else {
                continue;
            };
            let (x, y) = (self.frame.x(x), self.frame.y(y));
            let tip = format!(
                "Trial {} promoted at rung {index} (step {step}): {}",
                curve.number,
                format_number(value)
            );
            svg.raw(&format!(
                r#"<path class="promoted" data-rung="{index}" d="M{x:.1},{:.1}l4,4l-4,4l-4,-4z"><title>{}</title></path>"#,
                y - 4.0,
                escape(&tip)
            ));
        }
    }
}
