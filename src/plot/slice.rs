//! Slice: the objective against each parameter, one panel per parameter, points coloured by
//! trial number (light: early, dark: late) to show where the search went.

use super::axis::Axis;
use super::svg::{Frame, Svg, WIDE, value_colour};
use super::{MOST_MARKS, StudyData, place, thin, thinned_note, tip, value_axis};

const PANEL_HEIGHT: f64 = 230.0;
const COLUMNS: usize = 4;

pub(super) fn draw(data: &StudyData) -> String {
    let succeeded = match data.results(1, "A slice") {
        Ok(succeeded) => succeeded,
        Err(figure) => return figure,
    };
    let y_axis = value_axis(&succeeded);
    let parameters = data.space.parameters();
    let rows = parameters.len().div_ceil(COLUMNS).max(1);
    let mut svg = Svg::new(WIDE, rows as f64 * PANEL_HEIGHT);
    let panel_width = WIDE / COLUMNS as f64;
    let last = succeeded
        .iter()
        .map(|(t, _)| t.number)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let values: Vec<f64> = succeeded.iter().map(|(_, v)| *v).collect();
    let shares = data.rank_shares(&values);
    let most = (MOST_MARKS / parameters.len().max(1)).max(100);
    let best_share = (most / 4) as f64 / succeeded.len() as f64;
    let drawn = thin(succeeded.len(), most, |i| shares[i] < best_share);
    let count = drawn.iter().filter(|d| **d).count();
    thinned_note(&mut svg, 12.0, count, succeeded.len(), "the best");
    for (i, parameter) in parameters.iter().enumerate() {
        let frame = Frame {
            left: (i % COLUMNS) as f64 * panel_width + 52.0,
            top: (i / COLUMNS) as f64 * PANEL_HEIGHT + 20.0,
            width: panel_width - 64.0,
            height: PANEL_HEIGHT - 60.0,
        };
        let axis = Axis::of_domain(&parameter.domain);
        svg.x_axis(&frame, &axis, &parameter.id);
        svg.y_axis_ticks(&frame, &y_axis);
        for ((trial, value), _) in succeeded.iter().zip(&drawn).filter(|(_, d)| **d) {
            let (Some(v), Some(y)) = (trial.params.get(&parameter.id), y_axis.position(*value))
            else {
                continue;
            };
            if let Some(x) = place(&axis, v) {
                let colour = value_colour(1.0 - trial.number as f64 / last);
                svg.point_filled(
                    frame.x(x),
                    frame.y(y),
                    &colour,
                    trial.number,
                    &tip(trial, data.metric()),
                );
            }
        }
    }
    svg.finish("slice plot")
}
