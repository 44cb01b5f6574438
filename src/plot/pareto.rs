//! The Pareto front of a study with several objectives: with two, one scatter of the
//! trials (the front highlighted and joined by the edge of the region it dominates, shaded up
//! to the reference point; dominated trials faded; infeasible ones hollow); with three or
//! four, a matrix of the pairs, one scatter per pair of objectives.

use super::axis::Axis;
use super::front::{Front, Outcome, Standing};
use super::svg::{Frame, NARROW, Svg, escape};
use super::{MOST_MARKS, thin, thinned_note};
use crate::study::Goal;

/// Height of the two-objective scatter.
const HEIGHT: f64 = 440.0;
/// Height of one cell of the matrix of pairs, as a share of its width.
const CELL_ASPECT: f64 = 0.9;

pub(super) fn draw(front: &Front) -> String {
    let objectives = front.objectives.len();
    let drawn = thin(front.outcomes.len(), MOST_MARKS / (objectives - 1), |i| {
        front.outcomes[i].standing == Standing::Front
    });
    let outcomes: Vec<&Outcome> = front
        .outcomes
        .iter()
        .zip(&drawn)
        .filter_map(|(o, d)| d.then_some(o))
        .collect();
    let (mut svg, label) = if objectives == 2 {
        let mut svg = Svg::new(NARROW, HEIGHT);
        let frame = Frame::below_a_key(NARROW, HEIGHT);
        pair(&mut svg, &frame, front, &outcomes, (0, 1), Titles::Both);
        (svg, "Pareto front")
    } else {
        (
            matrix(front, &outcomes),
            "Pareto front, objectives by pairs",
        )
    };
    thinned_note(
        &mut svg,
        12.0,
        outcomes.len(),
        front.outcomes.len(),
        "the front",
    );
    legend(&mut svg);
    svg.finish(label)
}

/// The lower triangle of a scatter matrix: the cell in row `r` and column `c` (`c <= r`)
/// has objective `c` across and objective `r + 1` up, so a column shares its horizontal
/// axis and a row its vertical one.
fn matrix(front: &Front, outcomes: &[&Outcome]) -> Svg {
    let side = front.objectives.len() - 1;
    let cell_width = NARROW / side as f64;
    let cell_height = (cell_width * CELL_ASPECT).round();
    let mut svg = Svg::new(NARROW, 20.0 + side as f64 * cell_height);
    for row in 0..side {
        for column in 0..=row {
            let frame = Frame {
                left: column as f64 * cell_width + 64.0,
                top: 20.0 + row as f64 * cell_height + 8.0,
                width: cell_width - 64.0 - 12.0,
                height: cell_height - 8.0 - 46.0,
            };
            let titles = match (row + 1 == side, column == 0) {
                (true, true) => Titles::Both,
                (true, false) => Titles::Across,
                (false, true) => Titles::Up,
                (false, false) => Titles::Neither,
            };
            pair(&mut svg, &frame, front, outcomes, (column, row + 1), titles);
        }
    }
    svg
}

/// Which axes of a scatter are titled (a matrix titles only its outer ones).
#[derive(Clone, Copy)]
enum Titles {
    Both,
    Across,
    Up,
    Neither,
}

/// The axis of objective `index` over the trials' values and the reference point.
fn objective_axis(front: &Front, outcomes: &[&Outcome], index: usize) -> Axis {
    let values = outcomes.iter().map(|o| o.values[index]);
    Axis::fit(values.chain([front.reference[index]])).unwrap_or(Axis::Linear {
        low: 0.0,
        high: 1.0,
    })
}

/// The title of objective `index`'s axis: its metric and which way is better.
fn objective_title(front: &Front, index: usize) -> String {
    let (metric, goal) = &front.objectives[index];
    let better = match goal {
        Goal::Maximize => "higher is better",
        Goal::Minimize => "lower is better",
    };
    format!("{metric} ({better})")
}

/// A scatter of objective `x` across against objective `y` up, in `frame`.
struct Scatter<'a> {
    frame: &'a Frame,
    x: usize,
    y: usize,
    x_axis: Axis,
    y_axis: Axis,
}

impl<'a> Scatter<'a> {
    /// The scatter of `pair` in `frame`, its axes fitted to `outcomes` and the reference point.
    fn new(frame: &'a Frame, front: &Front, outcomes: &[&Outcome], (x, y): (usize, usize)) -> Self {
        Scatter {
            frame,
            x,
            y,
            x_axis: objective_axis(front, outcomes, x),
            y_axis: objective_axis(front, outcomes, y),
        }
    }

    /// Where a trial of objective values `values` is drawn.
    fn at(&self, values: &[f64]) -> Option<(f64, f64)> {
        Some((
            self.frame.x(self.x_axis.position(values[self.x])?),
            self.frame.y(self.y_axis.position(values[self.y])?),
        ))
    }
}

/// One scatter of objective `pair.0` across against `pair.1` up in `frame`: its axes, the
/// region the front dominates when `shade` says so, the trials and the reference point.
fn pair(
    svg: &mut Svg,
    frame: &Frame,
    front: &Front,
    outcomes: &[&Outcome],
    pair: (usize, usize),
    titles: Titles,
) {
    let scatter = Scatter::new(frame, front, outcomes, pair);
    let across = match titles {
        Titles::Both | Titles::Across => objective_title(front, scatter.x),
        Titles::Up | Titles::Neither => String::new(),
    };
    svg.x_axis(frame, &scatter.x_axis, &across);
    match titles {
        Titles::Both | Titles::Up => {
            svg.y_axis(frame, &scatter.y_axis, &objective_title(front, scatter.y))
        }
        Titles::Across | Titles::Neither => svg.y_axis_ticks(frame, &scatter.y_axis),
    }
    if front.objectives.len() == 2 {
        edge(svg, &scatter, front);
    }
    // Dominated and infeasible trials first, so that the front is drawn over them.
    let mut order: Vec<&&Outcome> = outcomes.iter().collect();
    order.sort_by_key(|o| o.standing == Standing::Front);
    for outcome in order {
        if let Some((px, py)) = scatter.at(&outcome.values) {
            let class = match outcome.standing {
                Standing::Front => "pt front",
                Standing::Dominated => "pt dominated",
                Standing::Infeasible => "pt infeasible",
            };
            svg.point(px, py, class, outcome.trial.number, &front.tip(outcome));
        }
    }
    if let Some((rx, ry)) = scatter.at(&front.reference) {
        let text = format!("reference point: {}", front.values_text(&front.reference));
        svg.raw(&format!(
            r#"<path class="ref-point" d="M{a:.1},{b:.1}L{c:.1},{d:.1}M{a:.1},{d:.1}L{c:.1},{b:.1}"><title>{t}</title></path>"#,
            a = rx - 5.0,
            b = ry - 5.0,
            c = rx + 5.0,
            d = ry + 5.0,
            t = escape(&text)
        ));
    }
}

/// The edge of the region the front of two objectives dominates up to the reference point,
/// and that region shaded: the front's trials that improve on the reference point in both
/// objectives, joined by steps from the best across to the best up.
fn edge(svg: &mut Svg, scatter: &Scatter, front: &Front) {
    let goals = (front.objectives[0].1, front.objectives[1].1);
    let reference = [front.reference[0], front.reference[1]];
    let mut corners: Vec<[f64; 2]> = front
        .on_front()
        .map(|o| [o.values[0], o.values[1]])
        .filter(|v| goals.0.better(v[0], reference[0]) && goals.1.better(v[1], reference[1]))
        .collect();
    corners.sort_by(|a, b| match goals.0 {
        Goal::Minimize => a[0].total_cmp(&b[0]),
        Goal::Maximize => b[0].total_cmp(&a[0]),
    });
    // Trials of equal values make one corner.
    corners.dedup();
    let (Some(first), Some(last)) = (corners.first(), corners.last()) else {
        return;
    };
    // In objective values: from under the first corner, along the steps, to beside the last.
    let mut steps = vec![[first[0], reference[1]]];
    for (i, values) in corners.iter().enumerate() {
        if i > 0 {
            steps.push([values[0], corners[i - 1][1]]);
        }
        steps.push(*values);
    }
    steps.push([reference[0], last[1]]);
    let line: Vec<(f64, f64)> = steps.iter().filter_map(|v| scatter.at(v)).collect();
    let mut area = line.clone();
    area.extend(scatter.at(&reference));
    svg.polyline(&area, "hv-area", "");
    svg.polyline(&line, "front-line", "");
}

/// The key along the top.
fn legend(svg: &mut Svg) {
    let (x, y) = (NARROW - 400.0, 8.0);
    svg.raw(&format!(
        r#"<g class="legend"><circle class="pt front" cx="{:.1}" cy="{y:.1}" r="4"/><text x="{:.1}" y="{:.1}">on the front</text><circle class="pt dominated" cx="{:.1}" cy="{y:.1}" r="4"/><text x="{:.1}" y="{:.1}">dominated</text><circle class="pt infeasible" cx="{:.1}" cy="{y:.1}" r="4"/><text x="{:.1}" y="{:.1}">infeasible</text><path class="ref-point" d="M{:.1},{:.1}l8,8m0,-8l-8,8"/><text x="{:.1}" y="{:.1}">reference point</text></g>"#,
        x,
        x + 8.0,
        y + 4.0,
        x + 100.0,
        x + 108.0,
        y + 4.0,
        x + 185.0,
        x + 193.0,
        y + 4.0,
        x + 268.0,
        y - 4.0,
        x + 282.0,
        y + 4.0,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{TrialRecord, TrialState};

    /// `count` succeeded trials, numbered from 0.
    fn trials(count: usize) -> Vec<TrialRecord> {
        (0..count as u64)
            .map(|n| TrialRecord::in_state(n, TrialState::Succeeded, Some(n as f64)))
            .collect()
    }

    fn front<'a>(
        objectives: &[(&str, Goal)],
        trials: &'a [TrialRecord],
        rows: &[(Vec<f64>, Standing)],
        reference: Vec<f64>,
    ) -> Front<'a> {
        Front {
            objectives: objectives
                .iter()
                .map(|(m, g)| (m.to_string(), *g))
                .collect(),
            outcomes: trials
                .iter()
                .zip(rows)
                .map(|(trial, (values, standing))| Outcome {
                    trial,
                    values: values.clone(),
                    standing: *standing,
                })
                .collect(),
            reference,
        }
    }

    /// How many elements of `class` the figure has (the legend's excluded: its marks carry
    /// no trial).
    fn marks(svg: &str, class: &str) -> usize {
        svg.matches(&format!("class=\"{class}\" data-trial="))
            .count()
    }

    #[test]
    fn two_objectives_draw_the_front_over_faded_and_hollow_trials_with_the_reference_point() {
        let trials = trials(5);
        let rows = [
            (vec![0.9, 8.0], Standing::Front),
            (vec![0.8, 3.0], Standing::Front),
            (vec![0.7, 5.0], Standing::Dominated),
            (vec![0.95, 2.0], Standing::Infeasible),
            (vec![0.6, 1.0], Standing::Front),
        ];
        let objectives = [("accuracy", Goal::Maximize), ("ms", Goal::Minimize)];
        let front = front(&objectives, &trials, &rows, vec![0.5, 9.0]);
        let svg = draw(&front);
        assert_eq!(marks(&svg, "pt front"), 3, "{svg}");
        assert_eq!(marks(&svg, "pt dominated"), 1);
        assert_eq!(marks(&svg, "pt infeasible"), 1);
        // The reference point (and the legend's), the shaded region and its edge.
        assert_eq!(svg.matches("class=\"ref-point\"").count(), 2);
        assert!(svg.contains("reference point: accuracy 0.5, ms 9"), "{svg}");
        assert_eq!(svg.matches("class=\"hv-area\"").count(), 1);
        // The edge: from under the best accuracy up to it, three corners joined by two
        // steps, then across to the reference point's accuracy: 3 + 2 + 2 vertices.
        let edge = svg.split("class=\"front-line\" d=\"").nth(1).unwrap();
        let edge = edge.split('"').next().unwrap();
        assert_eq!(edge.matches(['M', 'L']).count(), 7, "{edge}");
        assert!(
            svg.contains("accuracy (higher is better)") && svg.contains("ms (lower is better)")
        );
        assert!(
            svg.contains("Trial 1 · on the front · accuracy 0.8, ms 3"),
            "{svg}"
        );
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn three_and_four_objectives_draw_every_pair_once() {
        for (count, pairs) in [(3, 3), (4, 6)] {
            let trials = trials(4);
            let rows: Vec<(Vec<f64>, Standing)> = (0..4)
                .map(|i| {
                    let values = (0..count).map(|k| ((i + k) % 4) as f64).collect();
                    let standing = if i == 3 {
                        Standing::Dominated
                    } else {
                        Standing::Front
                    };
                    (values, standing)
                })
                .collect();
            let objectives: Vec<(&str, Goal)> = ["a", "b", "c", "d"][..count]
                .iter()
                .map(|m| (*m, Goal::Minimize))
                .collect();
            let front = front(&objectives, &trials, &rows, vec![5.0; count]);
            let svg = draw(&front);
            assert_eq!(marks(&svg, "pt front"), 3 * pairs, "{count} objectives");
            assert_eq!(marks(&svg, "pt dominated"), pairs);
            assert_eq!(svg.matches("class=\"ref-point\"").count(), pairs + 1);
            // No edge: a projection of a front of three is not a staircase.
            assert!(!svg.contains("front-line"));
            // Each objective titles its column or its row: the first and last once, the
            // others twice.
            for (k, metric) in objectives.iter().enumerate() {
                let titled = svg.matches(&format!(">{} (lower", metric.0)).count();
                let expected = if k == 0 || k == count - 1 { 1 } else { 2 };
                assert_eq!(titled, expected, "{} of {count}", metric.0);
            }
        }
    }
}
