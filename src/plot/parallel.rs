//! Parallel coordinates: one vertical axis per parameter (log scales as log, categoricals as
//! categories, an inactive parameter below its axis) and one for the objective; each
//! succeeded trial a line, coloured by its rank (dark: best), the best drawn on top.

use std::fmt::Write;

use super::axis::Axis;
use super::svg::{Svg, WIDE, escape, value_colour};
use super::{MOST_MARKS, StudyData, place, thin, thinned_note, tip, value_axis};

const HEIGHT: f64 = 380.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 320.0;
/// Where an inactive parameter's lines go: below the axis, in its own band.
const INACTIVE: f64 = 352.0;

pub(super) fn draw(data: &StudyData) -> String {
    let succeeded = match data.results(1, "Parallel coordinates") {
        Ok(succeeded) => succeeded,
        Err(figure) => return figure,
    };
    let values: Vec<f64> = succeeded.iter().map(|(_, v)| *v).collect();
    let objective = value_axis(&succeeded);
    let parameters = data.space.parameters();
    let axes: Vec<(String, Axis)> = parameters
        .iter()
        .map(|p| (p.id.clone(), Axis::of_domain(&p.domain)))
        .chain([(data.metric().to_string(), objective)])
        .collect();
    let gap = (WIDE - 140.0) / (axes.len().max(2) - 1) as f64;
    let x = |i: usize| 70.0 + i as f64 * gap;
    let y = |position: f64| BOTTOM - position * (BOTTOM - TOP);
    let mut svg = Svg::new(WIDE, HEIGHT);
    let shares = data.rank_shares(&values);
    let best_share = (MOST_MARKS / 4) as f64 / succeeded.len() as f64;
    let drawn = thin(succeeded.len(), MOST_MARKS, |i| shares[i] < best_share);
    let mut order: Vec<usize> = (0..succeeded.len()).filter(|i| drawn[*i]).collect();
    thinned_note(
        &mut svg,
        20.0,
        order.len(),
        succeeded.len(),
        "the best 25% of those drawn",
    );
    order.sort_by(|a, b| shares[*b].total_cmp(&shares[*a]));
    let faint = if order.len() > 500 { " faint" } else { "" };
    for index in order {
        let (trial, value) = succeeded[index];
        let mut d = String::new();
        for (i, p) in parameters.iter().enumerate() {
            let py = match trial.params.get(&p.id) {
                Some(v) => place(&axes[i].1, v).map_or(INACTIVE, y),
                None => INACTIVE,
            };
            let _ = write!(d, "{}{:.1},{py:.1}", if i == 0 { "M" } else { "L" }, x(i));
        }
        let last = axes.len() - 1;
        let vy = y(axes[last].1.position(value).unwrap_or(0.0));
        let _ = write!(
            d,
            "{}{:.1},{vy:.1}",
            if last == 0 { "M" } else { "L" },
            x(last)
        );
        let _ = write!(
            svg.body_mut(),
            r#"<path class="pc-line{faint}" data-trial="{}" stroke="{}" d="{d}"><title>{}</title></path>"#,
            trial.number,
            value_colour(shares[index]),
            escape(&tip(trial, data.metric()))
        );
    }
    for (i, (name, axis)) in axes.iter().enumerate() {
        let ax = x(i);
        svg.raw(&format!(
            r#"<line class="pc-axis" x1="{ax:.1}" x2="{ax:.1}" y1="{TOP}" y2="{BOTTOM}"/>"#
        ));
        svg.text(ax, TOP - 18.0, "middle", "axis-title", name);
        for (position, label) in axis.ticks(5) {
            svg.text(ax - 6.0, y(position) + 4.0, "end", "tick pc-tick", &label);
        }
        let conditional = i < parameters.len() && parameters[i].condition.is_some();
        if conditional {
            svg.text(ax - 6.0, INACTIVE + 4.0, "end", "tick pc-tick", "inactive");
        }
    }
    svg.finish("parallel coordinates")
}
