//! The empirical distribution of the succeeded trials' values: for each value, the share of
//! trials at or below it.

use super::axis::Axis;
use super::svg::{Frame, NARROW, Svg};
use super::{MOST_MARKS, StudyData};

const HEIGHT: f64 = 300.0;

pub(super) fn draw(data: &StudyData) -> String {
    let mut values: Vec<f64> = data.succeeded().into_iter().map(|(_, v)| v).collect();
    if values.is_empty() {
        return data.nothing_to_draw();
    }
    values.sort_by(f64::total_cmp);
    let Some(x_axis) = Axis::fit(values.iter().copied()) else {
        return data.nothing_to_draw();
    };
    let y_axis = Axis::Linear {
        low: 0.0,
        high: 1.0,
    };
    let frame = Frame::standard(NARROW, HEIGHT);
    let mut svg = Svg::new(NARROW, HEIGHT);
    svg.x_axis(&frame, &x_axis, data.metric());
    svg.y_axis(&frame, &y_axis, "share of trials at or below");
    let n = values.len() as f64;
    let mut points = vec![(frame.x(0.0), frame.y(0.0))];
    // A step per value, or per quantile when there are more values than marks.
    let stride = values.len().div_ceil(MOST_MARKS);
    for (i, v) in values.iter().enumerate().step_by(stride) {
        let x = frame.x(x_axis.position(*v).unwrap_or(0.0));
        points.push((x, frame.y(i as f64 / n)));
        points.push((x, frame.y((i + 1) as f64 / n)));
    }
    points.push((frame.x(1.0), frame.y(1.0)));
    svg.polyline(&points, "edf-line", "");
    svg.finish("empirical distribution of values")
}
