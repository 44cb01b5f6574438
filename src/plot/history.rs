//! Optimization history: every succeeded trial's value, stopped trials' last values, failed
//! trials marked along the bottom, and the best value so far as a step line.

use super::axis::Axis;
use super::svg::{Frame, Svg, WIDE};
use super::{HistoryX, MOST_MARKS, StudyData, seconds, thin, thinned_note, time_unit, tip};
use crate::storage::{TrialRecord, TrialState};

const HEIGHT: f64 = 340.0;

pub(super) fn draw(data: &StudyData, by: HistoryX) -> String {
    let succeeded = data.succeeded();
    if succeeded.is_empty() {
        return data.nothing_to_draw();
    }
    let finished: Vec<&TrialRecord> = data
        .follower
        .trials()
        .filter(|t| t.state.is_finished())
        .collect();
    let start = data
        .follower
        .trials()
        .filter_map(|t| seconds(t.started_at.as_deref()?))
        .fold(f64::INFINITY, f64::min);
    let end = finished
        .iter()
        .filter_map(|t| seconds(t.finished_at.as_deref()?))
        .fold(start, f64::max);
    let (unit, unit_name) = time_unit(end - start);
    let x_of = |t: &TrialRecord| match by {
        HistoryX::Number => Some(t.number as f64),
        HistoryX::Time => Some((seconds(t.finished_at.as_deref()?)? - start) / unit),
    };
    let plotted = |t: &TrialRecord| {
        t.value.is_some_and(f64::is_finite)
            && matches!(t.state, TrialState::Succeeded | TrialState::Stopped)
    };
    let x_values = finished.iter().filter_map(|t| x_of(t));
    let x_axis = match by {
        HistoryX::Number => Axis::fit_whole(x_values),
        HistoryX::Time => Axis::fit(x_values),
    };
    let Some(x_axis) = x_axis else {
        return data.nothing_to_draw();
    };
    let y_values = finished
        .iter()
        .filter(|t| plotted(t))
        .filter_map(|t| t.value);
    let y_axis = Axis::fit(y_values).unwrap_or(Axis::Linear {
        low: 0.0,
        high: 1.0,
    });
    let frame = Frame::below_a_key(WIDE, HEIGHT);
    let mut svg = Svg::new(WIDE, HEIGHT);
    let x_title = match by {
        HistoryX::Number => "trial".to_string(),
        HistoryX::Time => format!("{unit_name} since the first trial started"),
    };
    svg.x_axis(&frame, &x_axis, &x_title);
    svg.y_axis(&frame, &y_axis, data.metric());
    let at = |t: &TrialRecord, v: f64| {
        Some((
            frame.x(x_axis.position(x_of(t)?)?),
            frame.y(y_axis.position(v)?),
        ))
    };
    // The best so far, in the order of the axis.
    let mut ordered: Vec<(&TrialRecord, f64, f64)> = succeeded
        .iter()
        .filter_map(|(t, v)| Some((*t, *v, x_of(t)?)))
        .collect();
    ordered.sort_by(|a, b| a.2.total_cmp(&b.2));
    // A step at each trial that improved on the best (its "record"), nothing between.
    let mut best: Option<f64> = None;
    let mut steps = Vec::new();
    let mut records = std::collections::HashSet::new();
    for (trial, value, _) in &ordered {
        // Only a result can be the best (an infeasible trial is none).
        if trial.result().is_none() || best.is_some_and(|b| !data.goal().better(*value, b)) {
            continue;
        }
        if let Some((x, y)) = at(trial, *value) {
            if let Some(&(_, previous)) = steps.last() {
                steps.push((x, previous));
            }
            steps.push((x, y));
            records.insert(trial.number);
        }
        best = Some(*value);
    }
    if let Some(&(_, y)) = steps.last() {
        steps.push((frame.x(1.0), y));
    }
    svg.polyline(&steps, "best-line", "");
    let failed: Vec<&&TrialRecord> = finished
        .iter()
        .filter(|t| t.state == TrialState::Failed)
        .collect();
    let failed_drawn = thin(failed.len(), MOST_MARKS / 4, |_| false);
    for (trial, _) in failed.iter().zip(&failed_drawn).filter(|(_, d)| **d) {
        if let Some(x) = x_of(trial).and_then(|x| x_axis.position(x)) {
            let reason = trial.error.as_deref().unwrap_or("failed");
            svg.raw(&format!(
                r#"<rect class="fail-mark" data-trial="{n}" x="{x:.1}" y="{y:.1}" width="3" height="8"><title>Trial {n} failed: {r}</title></rect>"#,
                n = trial.number,
                x = frame.x(x) - 1.5,
                y = frame.top + frame.height - 8.0,
                r = super::svg::escape(reason)
            ));
        }
    }
    let values: Vec<&&TrialRecord> = finished.iter().filter(|t| plotted(t)).collect();
    let drawn = thin(values.len(), MOST_MARKS, |i| {
        records.contains(&values[i].number)
    });
    let count = drawn.iter().filter(|d| **d).count();
    thinned_note(&mut svg, frame.left, count, values.len(), "every new best");
    for (trial, _) in values.iter().zip(&drawn).filter(|(_, d)| **d) {
        let value = trial.value.unwrap_or_default();
        if let Some((x, y)) = at(trial, value) {
            let class = match trial.state {
                TrialState::Stopped => "pt stopped",
                _ if trial.infeasible.is_some() => "pt infeasible",
                _ => "pt ok",
            };
            svg.point(x, y, class, trial.number, &tip(trial, data.metric()));
        }
    }
    legend(&mut svg, &frame);
    svg.finish("optimization history")
}

/// The key in the top right corner.
fn legend(svg: &mut Svg, frame: &Frame) {
    let (x, y) = (frame.left + frame.width - 230.0, 2.0);
    svg.raw(&format!(
        r#"<g class="legend"><circle class="pt ok" cx="{:.1}" cy="{:.1}" r="4"/><text x="{:.1}" y="{:.1}">value</text><path class="best-line" d="M{:.1},{:.1}h18"/><text x="{:.1}" y="{:.1}">best so far</text><circle class="pt stopped" cx="{:.1}" cy="{:.1}" r="4"/><text x="{:.1}" y="{:.1}">stopped</text></g>"#,
        x,
        y + 6.0,
        x + 8.0,
        y + 10.0,
        x + 60.0,
        y + 6.0,
        x + 84.0,
        y + 10.0,
        x + 168.0,
        y + 6.0,
        x + 176.0,
        y + 10.0
    ));
}
