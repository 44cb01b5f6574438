//! The search space: parameters, their values, and the map between values and the unit cube
//! that samplers work in.
//!
//! Every parameter has one coordinate `u ∈ [0, 1]`. Doubles and integers map through their
//! scale (linear, log or reverse-log); integers and discrete values snap to the nearest
//! allowed value; a categorical with `k` values gives each value a slice of width `1/k`.
//! A parameter whose `when` condition does not hold is inactive: it is absent from the
//! trial's parameters and from the flags the worker receives.
//!
//! This file holds the types and the map of a whole assignment; one parameter's map is in
//! `domain.rs`, grid search's enumeration in `grid.rs`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

mod domain;
mod grid;

/// The most points a grid search may enumerate.
pub(crate) const MAX_GRID_POINTS: usize = 1_000_000;

/// How a numeric range is spread over the unit interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Scale {
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
pub(crate) enum Domain {
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
pub(crate) struct Condition {
    /// Parent id and the parent values that activate the parameter; all must hold.
    pub requires: BTreeMap<String, Vec<ParamValue>>,
}

/// One parameter of the space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameter {
    /// The id, also the flag name (`--<id>=<value>`).
    pub id: String,
    /// The allowed values.
    pub(crate) domain: Domain,
    /// When the parameter is active; always when absent.
    pub(crate) condition: Option<Condition>,
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
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            ParamValue::Int(i) => Some(*i as f64),
            ParamValue::Float(x) => Some(*x),
            ParamValue::Str(_) => None,
        }
    }

    /// Equality that treats `16` and `16.0` as the same value.
    pub(crate) fn same_as(&self, other: &ParamValue) -> bool {
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

/// A number as hptune writes it for people: the shortest digits that read back as `value`,
/// in exponent form where the plain form would be mostly zeros (below 1e-6 and from 1e16 in
/// magnitude: `1e-300`, not 300 zeros). A worker's flags keep the plain form
/// ([`ParamValue`]'s `Display`), which every parser of decimals reads.
pub fn written(value: f64) -> String {
    let magnitude = value.abs();
    match magnitude != 0.0 && magnitude.is_finite() && !(1e-6..1e16).contains(&magnitude) {
        true => format!("{value:e}"),
        false => value.to_string(),
    }
}

/// The parameters of one trial, by id; inactive parameters are absent.
pub type Assignment = BTreeMap<String, ParamValue>;

/// An assignment as a key of a hash set: two keys are equal when the assignments name the
/// same point, each value [`ParamValue::same_as`] the other's (`16` and `16.0` alike, as a
/// stored trial's parameters and a grid point are).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct PointKey<'a>(Vec<(&'a str, Coordinate<'a>)>);

/// One value of a [`PointKey`].
#[derive(Debug, PartialEq, Eq, Hash)]
enum Coordinate<'a> {
    /// A number, by the bits of its value as a double (`-0.0` as `0.0`, which it equals).
    Number(u64),
    /// A categorical value.
    Text(&'a str),
}

impl<'a> PointKey<'a> {
    /// The key of `point`; `None` when one of its values is NaN, which is the same as no
    /// value, so `point` is no other point.
    pub(crate) fn of(point: &'a Assignment) -> Option<Self> {
        let coordinate = |value: &'a ParamValue| match value {
            ParamValue::Str(text) => Some(Coordinate::Text(text)),
            number => {
                let x = number.as_f64().filter(|x| !x.is_nan())?;
                Some(Coordinate::Number(
                    if x == 0.0 { 0.0f64 } else { x }.to_bits(),
                ))
            }
        };
        point
            .iter()
            .map(|(id, value)| Some((id.as_str(), coordinate(value)?)))
            .collect::<Option<_>>()
            .map(PointKey)
    }
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

/// The search space of a study: its parameters in the order the study file lists them.
/// A parameter's `when` parents always come before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Space {
    parameters: Vec<Parameter>,
}

impl Space {
    /// Builds a space; `spec.rs` has checked ids, domains and conditions.
    pub(crate) fn new(parameters: Vec<Parameter>) -> Self {
        Self { parameters }
    }

    /// The parameters, parents before children.
    pub fn parameters(&self) -> &[Parameter] {
        &self.parameters
    }

    /// The parameter with this id.
    pub(crate) fn get(&self, id: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| p.id == id)
    }

    /// Number of parameters (active or not): the dimension of the unit cube.
    pub fn dimension(&self) -> usize {
        self.parameters.len()
    }

    /// Whether `parameter`'s condition holds for the values chosen so far.
    pub(crate) fn is_active(&self, parameter: &Parameter, chosen: &Assignment) -> bool {
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
                chosen.insert(parameter.id.clone(), parameter.domain.value_at(*u));
            }
        }
        chosen
    }

    /// The unit coordinates of an assignment; `None` for inactive parameters.
    pub(crate) fn to_unit(&self, assignment: &Assignment) -> Vec<Option<f64>> {
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
    pub(crate) fn parse_assignment(
        &self,
        pairs: &[(String, String)],
    ) -> Result<Assignment, SpaceError> {
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

/// A categorical parameter of `values`, for tests of samplers.
#[cfg(test)]
pub(crate) fn categorical(id: &str, values: &[&str]) -> Parameter {
    Parameter {
        id: id.into(),
        domain: Domain::Categorical {
            values: values.iter().map(|v| v.to_string()).collect(),
        },
        condition: None,
    }
}

#[cfg(test)]
mod tests;
