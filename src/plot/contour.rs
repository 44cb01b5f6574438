//! Contour: the objective over the two most important numeric parameters, interpolated
//! between the succeeded trials (inverse-distance weighting in the axes' coordinates) and
//! drawn as a heat map with the trials on top.

use super::axis::Axis;
use super::svg::{Frame, NARROW, Svg, value_colour};
use super::{MOST_MARKS, StudyData, place, thin, thinned_note, tip};
use crate::importance::ped_anova;
use crate::study::space::{Domain, Parameter};

const HEIGHT: f64 = 420.0;
/// Cells of the heat map along each axis.
const CELLS: usize = 36;

pub(super) fn draw(data: &StudyData) -> String {
    let succeeded = match data.results(3, "A contour") {
        Ok(succeeded) => succeeded,
        Err(figure) => return figure,
    };
    let numeric: Vec<&Parameter> = data
        .space
        .parameters()
        .iter()
        .filter(|p| !matches!(p.domain, Domain::Categorical { .. }))
        .collect();
    if numeric.len() < 2 {
        return super::svg::message("A contour needs two numeric parameters.");
    }
    let trials: Vec<_> = succeeded.iter().map(|(t, v)| (&t.params, *v)).collect();
    let numeric_params: Vec<Parameter> = numeric.iter().map(|p| (*p).clone()).collect();
    let ranked = ped_anova(&numeric_params, data.goal(), &trials);
    let find = |id: &str| numeric.iter().find(|p| p.id == id).copied();
    let (Some(px), Some(py)) = (find(&ranked[0].parameter), find(&ranked[1].parameter)) else {
        return super::svg::message("A contour needs two numeric parameters.");
    };
    let (x_axis, y_axis) = (Axis::of_domain(&px.domain), Axis::of_domain(&py.domain));
    let points: Vec<(f64, f64, f64, usize)> = succeeded
        .iter()
        .enumerate()
        .filter_map(|(i, (t, v))| {
            let x = place(&x_axis, t.params.get(&px.id)?)?;
            let y = place(&y_axis, t.params.get(&py.id)?)?;
            Some((x, y, *v, i))
        })
        .collect();
    if points.len() < 3 {
        return super::svg::message(
            "Too few trials have both of the two most important parameters.",
        );
    }
    let values: Vec<f64> = succeeded.iter().map(|(_, v)| *v).collect();
    let shares = data.rank_shares(&values);
    let frame = Frame::standard(NARROW, HEIGHT);
    let mut svg = Svg::new(NARROW, HEIGHT);
    // The map is interpolated from, and shows, the same trials: the best and a sample.
    let best_share = (MOST_MARKS / 4) as f64 / succeeded.len() as f64;
    let drawn = thin(points.len(), MOST_MARKS, |i| {
        shares[points[i].3] < best_share
    });
    let used: Vec<_> = points
        .iter()
        .zip(&drawn)
        .filter(|(_, d)| **d)
        .map(|(p, _)| p)
        .collect();
    thinned_note(&mut svg, frame.left, used.len(), points.len(), "the best");
    let (w, h) = (frame.width / CELLS as f64, frame.height / CELLS as f64);
    for cx in 0..CELLS {
        for cy in 0..CELLS {
            let (ux, uy) = (
                (cx as f64 + 0.5) / CELLS as f64,
                (cy as f64 + 0.5) / CELLS as f64,
            );
            let share = interpolate(&used, &shares, ux, uy);
            svg.raw(&format!(
                r#"<rect class="cell" x="{:.1}" y="{:.1}" width="{:.2}" height="{:.2}" fill="{}"/>"#,
                frame.x(cx as f64 / CELLS as f64),
                frame.y((cy + 1) as f64 / CELLS as f64),
                w + 0.3,
                h + 0.3,
                value_colour(share)
            ));
        }
    }
    svg.x_axis(&frame, &x_axis, &px.id);
    svg.y_axis(&frame, &y_axis, &py.id);
    for (x, y, _, i) in &used {
        let trial = succeeded[*i].0;
        svg.point(
            frame.x(*x),
            frame.y(*y),
            "pt on-map",
            trial.number,
            &tip(trial, data.metric()),
        );
    }
    svg.finish("contour plot")
}

/// The rank share at (x, y), weighting each trial by the inverse square of its distance.
fn interpolate(points: &[&(f64, f64, f64, usize)], shares: &[f64], x: f64, y: f64) -> f64 {
    let (mut sum, mut weights) = (0.0, 0.0);
    for (px, py, _, i) in points {
        let d2 = (px - x).powi(2) + (py - y).powi(2);
        if d2 < 1e-12 {
            return shares[*i];
        }
        let w = 1.0 / d2;
        sum += w * shares[*i];
        weights += w;
    }
    sum / weights
}
