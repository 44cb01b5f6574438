//! The figures of a study, drawn as SVG: the same code draws the dashboard's pages and the
//! files of `hptune plot`, so that a report shows what the page showed.
//!
//! Each figure is one file and one function of [`StudyData`]; none draws a NaN (failed
//! trials have no value: they are marked, not plotted) and each says in words why it is
//! empty when it is.

pub(crate) mod axis;
mod contour;
mod edf;
mod front;
mod history;
mod hypervolume;
mod importance;
mod intermediate;
mod parallel;
mod pareto;
pub(crate) mod png;
mod slice;
pub(crate) mod svg;
mod timeline;

use std::str::FromStr;

use crate::storage::{StorageError, StudyFollower, TrialRecord, TrialState};
use crate::study::Goal;
use crate::study::space::{ParamValue, Space};

/// The figure CSS: classes of the marks, shared by the dashboard's pages and the files of
/// `hptune plot`.
pub(crate) const FIGURE_CSS: &str = include_str!("figure.css");

/// A figure of a study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Every value and the best so far, by trial number or by time.
    History,
    /// Learning curves; stopped trials marked where they were stopped.
    Intermediate,
    /// Parallel coordinates: one axis per parameter and one for the objective.
    Parallel,
    /// PED-ANOVA importance of each parameter.
    Importance,
    /// The objective against each parameter.
    Slice,
    /// The objective over the two most important numeric parameters.
    Contour,
    /// The empirical distribution of the values.
    Edf,
    /// Trials' attempts over worker slots and time.
    Timeline,
    /// The trials by their objectives, the Pareto front highlighted (several objectives).
    Pareto,
    /// The hypervolume of the front against trial number (several objectives).
    Hypervolume,
}

impl Kind {
    /// Every figure, in the order the study page shows them.
    pub(crate) const ALL: [Kind; 10] = [
        Kind::Pareto,
        Kind::Hypervolume,
        Kind::History,
        Kind::Intermediate,
        Kind::Importance,
        Kind::Parallel,
        Kind::Contour,
        Kind::Edf,
        Kind::Slice,
        Kind::Timeline,
    ];

    /// Whether the figure is drawn [`svg::WIDE`] (a row of its own) rather than
    /// [`svg::NARROW`].
    pub(crate) fn is_wide(self) -> bool {
        matches!(
            self,
            Kind::History | Kind::Parallel | Kind::Slice | Kind::Timeline
        )
    }

    /// The name in URLs and on the command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::History => "history",
            Kind::Intermediate => "intermediate",
            Kind::Parallel => "parallel",
            Kind::Importance => "importance",
            Kind::Slice => "slice",
            Kind::Contour => "contour",
            Kind::Edf => "edf",
            Kind::Timeline => "timeline",
            Kind::Pareto => "pareto",
            Kind::Hypervolume => "hypervolume",
        }
    }

    /// The title shown above the figure.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Kind::History => "Optimization history",
            Kind::Intermediate => "Intermediate values",
            Kind::Parallel => "Parallel coordinates",
            Kind::Importance => "Parameter importance",
            Kind::Slice => "Slice",
            Kind::Contour => "Contour",
            Kind::Edf => "Empirical distribution",
            Kind::Timeline => "Timeline",
            Kind::Pareto => "Pareto front",
            Kind::Hypervolume => "Hypervolume history",
        }
    }

    /// Whether the figure is only for studies with several objectives.
    pub(crate) fn needs_several_objectives(self) -> bool {
        matches!(self, Kind::Pareto | Kind::Hypervolume)
    }
}

impl FromStr for Kind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                format!("'{text}' is not a figure: use {}", names.join(", "))
            })
    }
}

/// What the history's horizontal axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HistoryX {
    /// Trial numbers.
    #[default]
    Number,
    /// Time since the study's first trial started.
    Time,
}

/// A study read for drawing.
pub(crate) struct StudyData<'a> {
    /// The study and its trials.
    pub follower: &'a StudyFollower,
    /// Its search space.
    pub space: Space,
}

impl<'a> StudyData<'a> {
    /// The data of a followed study; fails if its stored search space does not read back.
    pub(crate) fn new(follower: &'a StudyFollower) -> Result<Self, StorageError> {
        let space = follower.study.space()?;
        Ok(StudyData { follower, space })
    }

    /// The objective's goal.
    fn goal(&self) -> Goal {
        self.follower.study.goal
    }

    /// The objective's metric.
    fn metric(&self) -> &str {
        &self.follower.study.metric
    }

    /// The succeeded trials with a finite value, by number.
    fn succeeded(&self) -> Vec<(&TrialRecord, f64)> {
        self.follower
            .trials()
            .filter(|t| t.state == TrialState::Succeeded)
            .filter_map(|t| Some((t, t.value.filter(|v| v.is_finite())?)))
            .collect()
    }

    /// The succeeded trials with their values, or the figure that says why there are fewer
    /// than `at_least` (`what` needs them).
    fn results(&self, at_least: usize, what: &str) -> Result<Vec<(&TrialRecord, f64)>, String> {
        let succeeded = self.succeeded();
        match succeeded.len() {
            0 => Err(self.nothing_to_draw()),
            n if n < at_least => Err(svg::message(&format!(
                "{what} needs at least {at_least} succeeded trials."
            ))),
            _ => Ok(succeeded),
        }
    }

    /// Why a figure of values is empty: no trial yet, or none succeeded.
    fn nothing_to_draw(&self) -> String {
        let failed = self.follower.count(TrialState::Failed);
        let total = self.follower.trials().count();
        let text = match (total, failed) {
            (0, _) => "No trials yet: this figure fills in as trials finish.".to_string(),
            (_, 0) => "No trial has succeeded yet.".to_string(),
            (_, f) => format!("No trial has succeeded yet ({f} failed: see the trial table)."),
        };
        svg::message(&text)
    }

    /// Figure `draw` of the study's Pareto front, or the figure that says why there is none.
    fn with_front(&self, draw: fn(&front::Front) -> String) -> String {
        match front::Front::of(self) {
            Ok(front) => draw(&front),
            Err(figure) => figure,
        }
    }

    /// Ranks from 0 (best) to 1 (worst) of `values` under the goal, for colours.
    fn rank_shares(&self, values: &[f64]) -> Vec<f64> {
        let mut order: Vec<usize> = (0..values.len()).collect();
        let goal = self.goal();
        order.sort_by(|a, b| match goal {
            Goal::Minimize => values[*a].total_cmp(&values[*b]),
            Goal::Maximize => values[*b].total_cmp(&values[*a]),
        });
        let mut shares = vec![0.0; values.len()];
        let last = (values.len().max(2) - 1) as f64;
        for (rank, index) in order.into_iter().enumerate() {
            shares[index] = rank as f64 / last;
        }
        shares
    }
}

/// The Pareto front of a study with several objectives in numbers, for a summary.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FrontSummary {
    /// The numbers of the trials on the front, in order.
    pub trials: Vec<u64>,
    /// The hypervolume they dominate up to the reference point.
    pub hypervolume: f64,
}

/// The front of the study `follower` follows, in numbers; `None` for a study of one
/// objective, or with no result yet.
pub(crate) fn front_summary(follower: &StudyFollower) -> Option<FrontSummary> {
    let data = StudyData::new(follower).ok()?;
    let front = front::Front::of(&data).ok()?;
    Some(FrontSummary {
        trials: front.on_front().map(|o| o.trial.number).collect(),
        hypervolume: front.hypervolume(),
    })
}

/// Options of the figures that have some.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The history's horizontal axis.
    pub history_x: HistoryX,
}

/// Draws figure `kind` of a study as an SVG element (styled by [`FIGURE_CSS`]).
pub(crate) fn draw(kind: Kind, data: &StudyData, options: &Options) -> String {
    match kind {
        Kind::History => history::draw(data, options.history_x),
        Kind::Intermediate => intermediate::draw(data),
        Kind::Parallel => parallel::draw(data),
        Kind::Importance => importance::draw(data),
        Kind::Slice => slice::draw(data),
        Kind::Contour => contour::draw(data),
        Kind::Edf => edf::draw(data),
        Kind::Timeline => timeline::draw(data),
        Kind::Pareto => data.with_front(pareto::draw),
        Kind::Hypervolume => data.with_front(hypervolume::draw),
    }
}

/// A standalone SVG file of a figure: the figure with its styles inside.
pub(crate) fn standalone_svg(figure: &str) -> String {
    let style = format!("<style>{FIGURE_CSS}</style>");
    match figure.find('>') {
        Some(end) => format!("{}{style}{}\n", &figure[..=end], &figure[end + 1..]),
        None => figure.to_string(),
    }
}

/// A standalone HTML file of a figure, with a title; it needs nothing else to show.
pub(crate) fn standalone_html(title: &str, figure: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2rem;color:#1f2937}}h1{{font-size:1.2rem;font-weight:600}}{FIGURE_CSS}</style></head><body><h1>{t}</h1>{figure}</body></html>\n",
        t = svg::escape(title)
    )
}

/// The most marks (points, lines, bars) one figure draws: beyond it a figure draws the
/// trials that matter most and an even sample of the others, and says so, so that a study of
/// 100,000 trials costs the page what one of a few thousand does.
pub(crate) const MOST_MARKS: usize = 2000;

/// Which of `count` items to draw: each one `keep` holds for, and an even sample of the
/// others, about `most` in all.
fn thin(count: usize, most: usize, keep: impl Fn(usize) -> bool) -> Vec<bool> {
    if count <= most {
        return vec![true; count];
    }
    let kept = (0..count).filter(|i| keep(*i)).count();
    let room = most.saturating_sub(kept).max(1);
    let stride = (count - kept).div_ceil(room).max(1);
    let mut others = 0;
    (0..count)
        .map(|i| {
            if keep(i) {
                return true;
            }
            others += 1;
            (others - 1) % stride == 0
        })
        .collect()
}

/// Says, above the plotting area, that only `drawn` of `total` trials are drawn.
fn thinned_note(svg: &mut svg::Svg, left: f64, drawn: usize, total: usize, which: &str) {
    if drawn < total {
        svg.text(
            left,
            11.0,
            "start",
            "caption",
            &format!("{drawn} of {total} trials drawn: {which} and an even sample of the others"),
        );
    }
}

/// A trial's tooltip: its number, value and parameters.
fn tip(trial: &TrialRecord, metric: &str) -> String {
    let value = match trial.value {
        Some(v) => format!("{metric} {}", axis::format_number(v)),
        None => trial.state.as_str().to_string(),
    };
    tip_with(trial, &value)
}

/// A trial's tooltip: its number, `value` (what it measured, in words) and parameters.
fn tip_with(trial: &TrialRecord, value: &str) -> String {
    let params: Vec<String> = trial
        .params
        .iter()
        .map(|(id, v)| match v {
            ParamValue::Float(x) => format!("{id}={}", axis::format_number(*x)),
            other => format!("{id}={other}"),
        })
        .collect();
    format!("Trial {} · {value}\n{}", trial.number, params.join("\n"))
}

/// The axis of the objective over `results` (a unit one if there are none).
fn value_axis(results: &[(&TrialRecord, f64)]) -> axis::Axis {
    axis::Axis::fit(results.iter().map(|(_, v)| *v)).unwrap_or(axis::Axis::Linear {
        low: 0.0,
        high: 1.0,
    })
}

/// Seconds since the epoch of a stored time.
fn seconds(time: &str) -> Option<f64> {
    chrono::DateTime::parse_from_rfc3339(time)
        .ok()
        .map(|t| t.timestamp_millis() as f64 / 1000.0)
}

/// How to show spans of `range` seconds: the unit's size in seconds and its name.
fn time_unit(range: f64) -> (f64, &'static str) {
    if range > 2.0 * 3600.0 {
        (3600.0, "hours")
    } else if range > 120.0 {
        (60.0, "minutes")
    } else {
        (1.0, "seconds")
    }
}

/// A parameter's value as a position on its axis (categoricals by their slot).
fn place(axis: &axis::Axis, value: &ParamValue) -> Option<f64> {
    match value {
        ParamValue::Str(s) => axis.category_position(s),
        other => axis.position(other.as_f64()?),
    }
}

#[cfg(test)]
mod tests;
