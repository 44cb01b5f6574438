//! The search space: parameters, their values, and the map between values and the unit cube
//! that samplers work in.
//!
//! Every parameter has one coordinate `u ∈ [0, 1]`. Doubles and integers map through their
//! scale (linear, log or reverse-log); integers and discrete values snap to the nearest
//! allowed value; a categorical with `k` values gives each value a slice of width `1/k`.
//! A parameter whose `when` condition does not hold is inactive: it is absent from the
//! trial's parameters and from the flags the worker receives.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// The most points a grid search may enumerate.
pub const MAX_GRID_POINTS: usize = 1_000_000;

/// How a numeric range is spread over the unit interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// Evenly.
    #[default]
    Linear,
    /// Evenly in `ln(x)`: as many values between 1e-5 and 1e-4 as between 1e-4 and 1e-3.
    Log,
    /// Dense near the maximum (momentum 0.9 .. 0.999): the log scale mirrored.
    ReverseLog,
}

/// The values a parameter may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Domain {
    /// A real number in `[min, max]`; `grid_points` says how many values grid search tries.
    Double {
        /// Lower bound, included.
        min: f64,
        /// Upper bound, included.
        max: f64,
        /// How the range maps to the unit interval.
        scale: Scale,
        /// Number of evenly spaced (in the scale) values for grid search.
        grid_points: Option<usize>,
    },
    /// A whole number in `[min, max]`.
    Integer {
        /// Lower bound, included.
        min: i64,
        /// Upper bound, included.
        max: i64,
        /// How the range maps to the unit interval.
        scale: Scale,
        /// Number of values grid search tries (all of them when absent).
        grid_points: Option<usize>,
    },
    /// One of an increasing list of numbers.
    Discrete {
        /// The allowed values, strictly increasing.
        values: Vec<f64>,
        /// How the span of the values maps to the unit interval.
        scale: Scale,
    },
    /// One of a set of unordered strings.
    Categorical {
        /// The allowed values, distinct.
        values: Vec<String>,
    },
}

/// A `when` clause: the parameter is active only if each named parent took one of the listed
/// values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    /// Parent id and the parent values that activate the parameter; all must hold.
    pub requires: BTreeMap<String, Vec<ParamValue>>,
}

/// One parameter of the space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameter {
    /// The id, also the flag name (`--<id>=<value>`).
    pub id: String,
    /// The allowed values.
    pub domain: Domain,
    /// When the parameter is active; always when absent.
    pub condition: Option<Condition>,
}

/// A parameter's value as recorded and as passed to the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// An integer parameter's value.
    Int(i64),
    /// A double or discrete parameter's value.
    Float(f64),
    /// A categorical parameter's value.
    Str(String),
}

impl ParamValue {
    /// The value as a number, if it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            ParamValue::Int(i) => Some(*i as f64),
            ParamValue::Float(x) => Some(*x),
            ParamValue::Str(_) => None,
        }
    }

    /// Equality that treats `16` and `16.0` as the same value.
    pub fn same_as(&self, other: &ParamValue) -> bool {
        match (self, other) {
            (ParamValue::Str(a), ParamValue::Str(b)) => a == b,
            (a, b) => a.as_f64() == b.as_f64() && a.as_f64().is_some(),
        }
    }
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(i) => write!(f, "{i}"),
            ParamValue::Float(x) => write!(f, "{x}"),
            ParamValue::Str(s) => f.write_str(s),
        }
    }
}

/// The parameters of one trial, by id; inactive parameters are absent.
pub type Assignment = BTreeMap<String, ParamValue>;

/// Whether two assignments name the same point.
pub fn same_point(a: &Assignment, b: &Assignment) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, va), (kb, vb))| ka == kb && va.same_as(vb))
}

/// Why a value or an assignment does not fit the space.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpaceError {
    /// The id names no parameter.
    #[error("unknown parameter '{0}' (the study defines: {1})")]
    UnknownParameter(String, String),
    /// The value is outside the parameter's domain.
    #[error("parameter '{id}': {message}")]
    BadValue {
        /// The parameter.
        id: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// An active parameter has no value.
    #[error("parameter '{0}' is missing (it is active for these values)")]
    Missing(String),
    /// A parameter was given a value twice.
    #[error(
        "parameter '{id}' is given twice ({id}={first} and {id}={second}): give each parameter once"
    )]
    Repeated {
        /// The parameter.
        id: String,
        /// The first value.
        first: String,
        /// The second value, as written.
        second: String,
    },
    /// A value was given for a parameter whose condition does not hold.
    #[error("parameter '{0}' is inactive for these values (its `when` condition does not hold)")]
    Inactive(String),
    /// Grid search cannot enumerate this space.
    #[error("{0}")]
    NoGrid(String),
}

impl Scale {
    /// Maps `x ∈ [min, max]` to `[0, 1]`.
    pub(crate) fn to_unit(self, x: f64, min: f64, max: f64) -> f64 {
        if max <= min {
            return 0.5;
        }
        let u = match self {
            Scale::Linear => (x - min) / (max - min),
            Scale::Log => (x / min).ln() / (max / min).ln(),
            Scale::ReverseLog => 1.0 - ((max + min - x) / min).ln() / (max / min).ln(),
        };
        u.clamp(0.0, 1.0)
    }

    /// Maps `u ∈ [0, 1]` to `[min, max]`.
    fn value_at(self, u: f64, min: f64, max: f64) -> f64 {
        // The ends exactly, whatever the rounding of the formulas below.
        if u <= 0.0 {
            return min;
        }
        if u >= 1.0 {
            return max;
        }
        let x = match self {
            Scale::Linear => min + u * (max - min),
            Scale::Log => min * (max / min).powf(u),
            Scale::ReverseLog => max + min - min * (max / min).powf(1.0 - u),
        };
        x.clamp(min, max)
    }
}

impl Domain {
    /// The value at unit coordinate `u`.
    pub fn from_unit(&self, u: f64) -> ParamValue {
        match self {
            Domain::Double {
                min, max, scale, ..
            } => ParamValue::Float(scale.value_at(u, *min, *max)),
            Domain::Integer {
                min, max, scale, ..
            } => {
                let (lo, hi) = integer_span(*min, *max);
                let x = scale.value_at(u, lo, hi).round() as i64;
                ParamValue::Int(x.clamp(*min, *max))
            }
            Domain::Discrete { values, scale } => {
                let target = u.clamp(0.0, 1.0);
                let nearest = values
                    .iter()
                    .map(|v| (v, (self.value_to_unit(*v, *scale, values) - target).abs()))
                    .min_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|(v, _)| *v)
                    .unwrap_or(f64::NAN);
                ParamValue::Float(nearest)
            }
            Domain::Categorical { values } => {
                let k = values.len();
                let index = ((u.clamp(0.0, 1.0) * k as f64) as usize).min(k.saturating_sub(1));
                ParamValue::Str(values.get(index).cloned().unwrap_or_default())
            }
        }
    }

    /// The values one step from `value`: every other value of a categorical (none is nearer
    /// than another), the next value down and up of an integer or a discrete list; none for a
    /// double, which moves continuously, or for a value outside the domain.
    pub fn neighbours(&self, value: &ParamValue) -> Vec<ParamValue> {
        match (self, value) {
            (Domain::Categorical { values }, ParamValue::Str(s)) if values.contains(s) => values
                .iter()
                .filter(|v| *v != s)
                .map(|v| ParamValue::Str(v.clone()))
                .collect(),
            (Domain::Integer { min, max, .. }, ParamValue::Int(x)) if (min..=max).contains(&x) => {
                [x.checked_sub(1), x.checked_add(1)]
                    .into_iter()
                    .flatten()
                    .filter(|y| (min..=max).contains(&y))
                    .map(ParamValue::Int)
                    .collect()
            }
            (Domain::Discrete { values, .. }, value) => {
                let Some(index) = value
                    .as_f64()
                    .and_then(|x| values.iter().position(|v| *v == x))
                else {
                    return Vec::new();
                };
                [index.checked_sub(1), Some(index + 1)]
                    .into_iter()
                    .flatten()
                    .filter_map(|i| values.get(i))
                    .map(|v| ParamValue::Float(*v))
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// The unit coordinate of `value` (the centre of its slice for integers and categoricals).
    pub fn to_unit(&self, value: &ParamValue) -> Option<f64> {
        match (self, value) {
            (Domain::Categorical { values }, ParamValue::Str(s)) => {
                let index = values.iter().position(|v| v == s)?;
                Some((index as f64 + 0.5) / values.len() as f64)
            }
            (Domain::Categorical { .. }, _) | (_, ParamValue::Str(_)) => None,
            (
                Domain::Double {
                    min, max, scale, ..
                },
                v,
            ) => Some(scale.to_unit(v.as_f64()?, *min, *max)),
            (
                Domain::Integer {
                    min, max, scale, ..
                },
                v,
            ) => {
                let (lo, hi) = integer_span(*min, *max);
                Some(scale.to_unit(v.as_f64()?, lo, hi))
            }
            (Domain::Discrete { values, scale }, v) => {
                Some(self.value_to_unit(v.as_f64()?, *scale, values))
            }
        }
    }

    fn value_to_unit(&self, x: f64, scale: Scale, values: &[f64]) -> f64 {
        match (values.first(), values.last()) {
            (Some(lo), Some(hi)) => scale.to_unit(x, *lo, *hi),
            _ => 0.5,
        }
    }

    /// Checks that `value` is one of the domain's values.
    pub fn check(&self, value: &ParamValue) -> Result<(), String> {
        match (self, value) {
            (Domain::Double { min, max, .. }, v) => match v.as_f64() {
                Some(x) if x.is_finite() && x >= *min && x <= *max => Ok(()),
                _ => Err(format!("{value} is not a number in [{min}, {max}]")),
            },
            (Domain::Integer { min, max, .. }, ParamValue::Int(i)) if i >= min && i <= max => {
                Ok(())
            }
            (Domain::Integer { min, max, .. }, _) => {
                Err(format!("{value} is not an integer in [{min}, {max}]"))
            }
            (Domain::Discrete { values, .. }, v)
                if v.as_f64().is_some_and(|x| values.contains(&x)) =>
            {
                Ok(())
            }
            (Domain::Discrete { values, .. }, _) => Err(format!(
                "{value} is not one of {}",
                join(values.iter().map(|v| v.to_string()))
            )),
            (Domain::Categorical { values }, ParamValue::Str(s)) if values.contains(s) => Ok(()),
            (Domain::Categorical { values }, _) => Err(format!(
                "'{value}' is not one of {}",
                join(values.iter().cloned())
            )),
        }
    }

    /// Reads a value written as text (`--param lr=3e-5`), typed by the domain.
    pub fn parse(&self, text: &str) -> Result<ParamValue, String> {
        let value = match self {
            Domain::Categorical { .. } => ParamValue::Str(text.to_string()),
            Domain::Integer { .. } => ParamValue::Int(
                text.trim()
                    .parse()
                    .map_err(|_| format!("'{text}' is not an integer"))?,
            ),
            Domain::Double { .. } | Domain::Discrete { .. } => ParamValue::Float(
                text.trim()
                    .parse()
                    .map_err(|_| format!("'{text}' is not a number"))?,
            ),
        };
        self.check(&value)?;
        Ok(value)
    }

    /// How many values grid search tries at most (`grid_points`, or every value), found
    /// without listing them; an error when grid search cannot enumerate the parameter.
    fn grid_count(&self, id: &str) -> Result<usize, SpaceError> {
        let count = match self {
            Domain::Double {
                grid_points: Some(n),
                ..
            }
            | Domain::Integer {
                grid_points: Some(n),
                ..
            } => *n,
            Domain::Double {
                grid_points: None, ..
            } => {
                return Err(SpaceError::NoGrid(format!(
                    "grid search cannot enumerate the double parameter '{id}': give it `grid_points: N`"
                )));
            }
            Domain::Integer { min, max, .. } => {
                let count = *max as i128 - *min as i128 + 1;
                if count > MAX_GRID_POINTS as i128 {
                    return Err(SpaceError::NoGrid(format!(
                        "the integer parameter '{id}' has {count} values, too many for grid search: give it `grid_points: N`"
                    )));
                }
                count as usize
            }
            Domain::Discrete { values, .. } => values.len(),
            Domain::Categorical { values } => values.len(),
        };
        if count > MAX_GRID_POINTS {
            return Err(too_many_points());
        }
        Ok(count)
    }

    /// The values grid search tries, in increasing order.
    fn grid_values(&self, id: &str) -> Result<Vec<ParamValue>, SpaceError> {
        let count = self.grid_count(id)?;
        let evenly = |n: usize| -> Vec<ParamValue> {
            let mut out: Vec<ParamValue> = Vec::with_capacity(n);
            for i in 0..n {
                let u = if n == 1 {
                    0.5
                } else {
                    i as f64 / (n - 1) as f64
                };
                let v = self.from_unit(u);
                if !out.last().is_some_and(|last| last.same_as(&v)) {
                    out.push(v);
                }
            }
            out
        };
        Ok(match self {
            Domain::Double { .. }
            | Domain::Integer {
                grid_points: Some(_),
                ..
            } => evenly(count),
            Domain::Integer { min, max, .. } => (*min..=*max).map(ParamValue::Int).collect(),
            Domain::Discrete { values, .. } => {
                values.iter().map(|v| ParamValue::Float(*v)).collect()
            }
            Domain::Categorical { values } => {
                values.iter().map(|v| ParamValue::Str(v.clone())).collect()
            }
        })
    }
}

fn too_many_points() -> SpaceError {
    SpaceError::NoGrid(format!(
        "the grid has more than {MAX_GRID_POINTS} points: lower `grid_points` or use algorithm random or bayesian"
    ))
}

/// The search space of a study: its parameters in the order the study file lists them.
/// A parameter's `when` parents always come before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Space {
    parameters: Vec<Parameter>,
}

impl Space {
    /// Builds a space; `spec.rs` has checked ids, domains and conditions.
    pub fn new(parameters: Vec<Parameter>) -> Self {
        Self { parameters }
    }

    /// The parameters, parents before children.
    pub fn parameters(&self) -> &[Parameter] {
        &self.parameters
    }

    /// The parameter with this id.
    pub fn get(&self, id: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| p.id == id)
    }

    /// Number of parameters (active or not): the dimension of the unit cube.
    pub fn dimension(&self) -> usize {
        self.parameters.len()
    }

    /// Whether `parameter`'s condition holds for the values chosen so far.
    pub fn is_active(&self, parameter: &Parameter, chosen: &Assignment) -> bool {
        parameter.condition.as_ref().is_none_or(|condition| {
            condition.requires.iter().all(|(parent, allowed)| {
                chosen
                    .get(parent)
                    .is_some_and(|v| allowed.iter().any(|a| a.same_as(v)))
            })
        })
    }

    /// The assignment at point `unit` of the cube (one coordinate per parameter, in order);
    /// coordinates of inactive parameters are ignored.
    pub fn from_unit(&self, unit: &[f64]) -> Assignment {
        let mut chosen = Assignment::new();
        for (parameter, u) in self.parameters.iter().zip(unit) {
            if self.is_active(parameter, &chosen) {
                chosen.insert(parameter.id.clone(), parameter.domain.from_unit(*u));
            }
        }
        chosen
    }

    /// The unit coordinates of an assignment; `None` for inactive parameters.
    pub fn to_unit(&self, assignment: &Assignment) -> Vec<Option<f64>> {
        self.parameters
            .iter()
            .map(|p| {
                assignment
                    .get(&p.id)
                    .and_then(|value| p.domain.to_unit(value))
            })
            .collect()
    }

    /// Checks a complete assignment: every active parameter present and in its domain, no
    /// unknown or inactive one.
    pub fn check(&self, assignment: &Assignment) -> Result<(), SpaceError> {
        if let Some(unknown) = assignment.keys().find(|id| self.get(id).is_none()) {
            return Err(self.unknown(unknown));
        }
        let mut chosen = Assignment::new();
        for parameter in &self.parameters {
            let active = self.is_active(parameter, &chosen);
            match (assignment.get(&parameter.id), active) {
                (Some(value), true) => {
                    parameter
                        .domain
                        .check(value)
                        .map_err(|message| SpaceError::BadValue {
                            id: parameter.id.clone(),
                            message,
                        })?;
                    chosen.insert(parameter.id.clone(), value.clone());
                }
                (None, true) => return Err(SpaceError::Missing(parameter.id.clone())),
                (Some(_), false) => return Err(SpaceError::Inactive(parameter.id.clone())),
                (None, false) => {}
            }
        }
        Ok(())
    }

    /// Reads `id=value` pairs written by hand into a checked assignment; a parameter given
    /// twice is refused.
    pub fn parse_assignment(&self, pairs: &[(String, String)]) -> Result<Assignment, SpaceError> {
        let mut assignment = Assignment::new();
        for (id, text) in pairs {
            if let Some(first) = assignment.get(id) {
                return Err(SpaceError::Repeated {
                    id: id.clone(),
                    first: first.to_string(),
                    second: text.clone(),
                });
            }
            let parameter = self.get(id).ok_or_else(|| self.unknown(id))?;
            let value = parameter
                .domain
                .parse(text)
                .map_err(|message| SpaceError::BadValue {
                    id: id.clone(),
                    message,
                })?;
            assignment.insert(id.clone(), value);
        }
        self.check(&assignment)?;
        Ok(assignment)
    }

    fn unknown(&self, id: &str) -> SpaceError {
        SpaceError::UnknownParameter(
            id.to_string(),
            join(self.parameters.iter().map(|p| p.id.clone())),
        )
    }

    /// Every point of the grid once, in a stable order: the first parameter varies slowest;
    /// inactive parameters are left out, so conditional branches are not repeated. A grid of
    /// more than [`MAX_GRID_POINTS`] points is refused before it is built.
    pub fn grid(&self) -> Result<Vec<Assignment>, SpaceError> {
        self.grid_size()?;
        let points = self.partial_grid(|_| true)?;
        Ok(points.into_iter().map(|(point, _)| point).collect())
    }

    /// The number of points of [`Space::grid`], counted without listing them (at most
    /// [`MAX_GRID_POINTS`], or an error): only the values of `when` parents are enumerated,
    /// the other parameters multiply counts.
    pub fn grid_size(&self) -> Result<usize, SpaceError> {
        let parents: HashSet<&str> = self
            .parameters
            .iter()
            .filter_map(|p| p.condition.as_ref())
            .flat_map(|c| c.requires.keys().map(String::as_str))
            .collect();
        let points = self.partial_grid(|p| parents.contains(p.id.as_str()))?;
        Ok(points.iter().map(|(_, count)| count).sum())
    }

    /// The grid as partial points, each standing for a number of points: the parameters that
    /// `listed` picks have their value in the point, the others only multiply its number.
    /// Each step counts the points it would make before making them, so nothing past
    /// [`MAX_GRID_POINTS`] is ever built; a parameter that no point activates is not
    /// enumerated.
    fn partial_grid(
        &self,
        listed: impl Fn(&Parameter) -> bool,
    ) -> Result<Vec<(Assignment, usize)>, SpaceError> {
        for parameter in &self.parameters {
            parameter.domain.grid_count(&parameter.id)?;
        }
        let mut points = vec![(Assignment::new(), 1usize)];
        for parameter in &self.parameters {
            let active: Vec<bool> = points
                .iter()
                .map(|(point, _)| self.is_active(parameter, point))
                .collect();
            if !active.contains(&true) {
                continue;
            }
            let n = parameter.domain.grid_count(&parameter.id)?;
            let size = points
                .iter()
                .zip(&active)
                .try_fold(0usize, |sum, ((_, count), &on)| {
                    let count = if on { count.checked_mul(n)? } else { *count };
                    sum.checked_add(count)
                });
            if size.is_none_or(|size| size > MAX_GRID_POINTS) {
                return Err(too_many_points());
            }
            if !listed(parameter) {
                for ((_, count), _) in points.iter_mut().zip(&active).filter(|(_, on)| **on) {
                    *count *= n;
                }
                continue;
            }
            let values = parameter.domain.grid_values(&parameter.id)?;
            let mut next = Vec::new();
            for ((point, count), on) in points.into_iter().zip(active) {
                if !on {
                    next.push((point, count));
                    continue;
                }
                for value in &values {
                    let mut extended = point.clone();
                    extended.insert(parameter.id.clone(), value.clone());
                    next.push((extended, count));
                }
            }
            points = next;
        }
        Ok(points)
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// A double parameter over `[0, 1]`, for tests of samplers.
#[cfg(test)]
pub(crate) fn unit_double(id: &str) -> Parameter {
    Parameter {
        id: id.into(),
        domain: Domain::Double {
            min: 0.0,
            max: 1.0,
            scale: Scale::Linear,
            grid_points: None,
        },
        condition: None,
    }
}

/// The span that integers map through, so that each integer gets an equal share of `[0, 1]`.
fn integer_span(min: i64, max: i64) -> (f64, f64) {
    (min as f64 - 0.5, max as f64 + 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn double(min: f64, max: f64, scale: Scale) -> Domain {
        Domain::Double {
            min,
            max,
            scale,
            grid_points: None,
        }
    }

    fn param(id: &str, domain: Domain) -> Parameter {
        Parameter {
            id: id.into(),
            domain,
            condition: None,
        }
    }

    #[test]
    fn log_scale_maps_decades_evenly() {
        let d = double(1e-5, 1e-3, Scale::Log);
        assert!((d.from_unit(0.5).as_f64().unwrap() - 1e-4).abs() < 1e-12);
        assert!((d.to_unit(&ParamValue::Float(1e-4)).unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn reverse_log_is_dense_near_the_maximum() {
        let d = double(0.9, 0.999, Scale::ReverseLog);
        assert_eq!(d.from_unit(0.0).as_f64(), Some(0.9));
        assert!((d.from_unit(1.0).as_f64().unwrap() - 0.999).abs() < 1e-12);
        let mid = d.from_unit(0.5).as_f64().unwrap();
        assert!(mid > (0.9 + 0.999) / 2.0, "{mid}");
        for u in [0.1, 0.37, 0.8] {
            let x = d.from_unit(u);
            assert!((d.to_unit(&x).unwrap() - u).abs() < 1e-9);
        }
    }

    #[test]
    fn integers_get_equal_shares_of_the_unit_interval() {
        let d = Domain::Integer {
            min: 1,
            max: 4,
            scale: Scale::Linear,
            grid_points: None,
        };
        let mut counts = [0; 4];
        for i in 0..4000 {
            let ParamValue::Int(v) = d.from_unit((i as f64 + 0.5) / 4000.0) else {
                panic!()
            };
            counts[(v - 1) as usize] += 1;
        }
        assert_eq!(counts, [1000; 4]);
    }

    #[test]
    fn discrete_values_snap_to_the_nearest_in_their_scale() {
        let d = Domain::Discrete {
            values: vec![8.0, 16.0, 32.0],
            scale: Scale::Log,
        };
        assert_eq!(d.from_unit(0.5), ParamValue::Float(16.0));
        assert_eq!(d.from_unit(0.7), ParamValue::Float(16.0));
        assert_eq!(d.from_unit(0.8), ParamValue::Float(32.0));
        assert_eq!(d.from_unit(0.0), ParamValue::Float(8.0));
    }

    #[test]
    fn neighbours_are_one_step_away() {
        let categorical = Domain::Categorical {
            values: vec!["adam".into(), "sgd".into(), "lamb".into()],
        };
        let text = |s: &str| ParamValue::Str(s.into());
        assert_eq!(
            categorical.neighbours(&text("sgd")),
            vec![text("adam"), text("lamb")]
        );
        assert!(categorical.neighbours(&text("rmsprop")).is_empty());
        let integer = Domain::Integer {
            min: 1,
            max: 4,
            scale: Scale::Log,
            grid_points: None,
        };
        assert_eq!(
            integer.neighbours(&ParamValue::Int(2)),
            vec![ParamValue::Int(1), ParamValue::Int(3)]
        );
        assert_eq!(
            integer.neighbours(&ParamValue::Int(4)),
            vec![ParamValue::Int(3)]
        );
        assert!(integer.neighbours(&ParamValue::Int(9)).is_empty());
        let discrete = Domain::Discrete {
            values: vec![8.0, 16.0, 32.0],
            scale: Scale::Log,
        };
        assert_eq!(
            discrete.neighbours(&ParamValue::Float(8.0)),
            vec![ParamValue::Float(16.0)]
        );
        assert_eq!(
            discrete.neighbours(&ParamValue::Float(16.0)),
            vec![ParamValue::Float(8.0), ParamValue::Float(32.0)]
        );
        assert!(discrete.neighbours(&ParamValue::Float(12.0)).is_empty());
        assert!(
            double(0.0, 1.0, Scale::Linear)
                .neighbours(&ParamValue::Float(0.5))
                .is_empty()
        );
    }

    #[test]
    fn categoricals_split_the_interval_into_slices() {
        let d = Domain::Categorical {
            values: vec!["a".into(), "b".into(), "c".into()],
        };
        assert_eq!(d.from_unit(0.0), ParamValue::Str("a".into()));
        assert_eq!(d.from_unit(0.5), ParamValue::Str("b".into()));
        assert_eq!(d.from_unit(1.0), ParamValue::Str("c".into()));
        assert_eq!(d.to_unit(&ParamValue::Str("c".into())), Some(2.5 / 3.0));
    }

    fn conditional_space() -> Space {
        let mut momentum = param("momentum", double(0.0, 0.9, Scale::Linear));
        momentum.condition = Some(Condition {
            requires: [("optimizer".to_string(), vec![ParamValue::Str("sgd".into())])].into(),
        });
        if let Domain::Double { grid_points, .. } = &mut momentum.domain {
            *grid_points = Some(2);
        }
        Space::new(vec![
            param(
                "optimizer",
                Domain::Categorical {
                    values: vec!["adam".into(), "sgd".into()],
                },
            ),
            momentum,
        ])
    }

    #[test]
    fn inactive_parameters_are_absent() {
        let space = conditional_space();
        let adam = space.from_unit(&[0.1, 0.5]);
        assert_eq!(adam.len(), 1);
        let sgd = space.from_unit(&[0.9, 0.5]);
        assert_eq!(sgd.get("momentum"), Some(&ParamValue::Float(0.45)));
    }

    #[test]
    fn grid_enumerates_conditional_branches_once() {
        let grid = conditional_space().grid().unwrap();
        let shown: Vec<String> = grid
            .iter()
            .map(|p| serde_json::to_string(p).unwrap())
            .collect();
        assert_eq!(
            shown,
            [
                r#"{"optimizer":"adam"}"#,
                r#"{"momentum":0.0,"optimizer":"sgd"}"#,
                r#"{"momentum":0.9,"optimizer":"sgd"}"#,
            ]
        );
    }

    fn integers(id: &str, max: i64) -> Parameter {
        param(
            id,
            Domain::Integer {
                min: 1,
                max,
                scale: Scale::Linear,
                grid_points: None,
            },
        )
    }

    #[test]
    fn grid_size_counts_the_points_of_the_grid() {
        assert_eq!(conditional_space().grid_size(), Ok(3));
        let mut first = integers("first", 1000);
        first.condition = conditional_space().parameters[1].condition.clone();
        let mut second = integers("second", 1000);
        second.condition = Some(Condition {
            requires: [(
                "optimizer".to_string(),
                vec![ParamValue::Str("adam".into())],
            )]
            .into(),
        });
        // 2 x 1000 x 1000 as a product, but each branch has only one of the two.
        let space = Space::new(vec![
            conditional_space().parameters[0].clone(),
            first,
            second,
        ]);
        assert_eq!(space.grid_size(), Ok(2000));
        assert_eq!(space.grid().unwrap().len(), 2000);
    }

    #[test]
    fn a_grid_past_the_limit_is_refused_by_its_size_alone() {
        // 1000^7 = 10^21 points; counting them must not build any.
        let space = Space::new((0..7).map(|i| integers(&format!("p{i}"), 1000)).collect());
        assert_eq!(space.grid_size(), Err(too_many_points()));
        assert_eq!(space.grid().unwrap_err(), too_many_points());
        let mut huge = integers("huge", 10);
        huge.domain = Domain::Integer {
            min: 1,
            max: 10,
            scale: Scale::Linear,
            grid_points: Some(usize::MAX),
        };
        assert_eq!(Space::new(vec![huge]).grid_size(), Err(too_many_points()));
    }

    #[test]
    fn grid_refuses_a_double_without_grid_points() {
        let space = Space::new(vec![param("x", double(0.0, 1.0, Scale::Linear))]);
        let err = space.grid().unwrap_err().to_string();
        assert!(err.contains("grid_points"), "{err}");
    }

    #[test]
    fn check_reports_missing_inactive_and_out_of_range_values() {
        let space = conditional_space();
        let parse = |pairs: &[(&str, &str)]| {
            let pairs: Vec<_> = pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
            space.parse_assignment(&pairs)
        };
        assert!(parse(&[("optimizer", "adam")]).is_ok());
        assert_eq!(
            parse(&[("optimizer", "sgd")]).unwrap_err(),
            SpaceError::Missing("momentum".into())
        );
        assert_eq!(
            parse(&[("optimizer", "adam"), ("momentum", "0.5")]).unwrap_err(),
            SpaceError::Inactive("momentum".into())
        );
        let err = parse(&[("optimizer", "sgd"), ("momentum", "2")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a number in [0, 0.9]"), "{err}");
        let err = parse(&[("lr", "1")]).unwrap_err().to_string();
        assert!(err.contains("unknown parameter 'lr'"), "{err}");
    }
}
