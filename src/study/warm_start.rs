//! `warm_start`: how the finished trials of another study enter this study's space.
//!
//! The other study's space may differ from this one, as SageMaker's warm start allows: ranges
//! and categories changed, parameters added or taken away. A trial carries over by its
//! values, which this study's space maps into its own unit cube:
//!
//! - a parameter both studies tune must have the same type in both; its value must lie in this
//!   study's domain, or the trial is left out (a narrowed range, a category dropped);
//! - a parameter only this study tunes takes, in the other study's trials, the value they ran
//!   with (`warm_start.values`), needed only where it is active;
//! - a parameter only the other study tuned is dropped from its trials: what it changed
//!   shows to the model as noise.

use super::space::{Assignment, Domain, Space};

/// `warm_start`: the study whose finished trials inform the model from the first trial on.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmStart {
    /// The other study's name.
    pub study: String,
    /// The value the other study's trials ran with for each parameter this study tunes and
    /// the other did not (`warm_start.values`).
    pub values: Assignment,
}

/// Why the other study's trials cannot carry over at all.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum WarmStartError {
    /// A parameter has different types in the two studies.
    #[error(
        "parameter '{id}' is {here} here and {there} in study '{study}': its values do not carry over"
    )]
    TypeConflict {
        /// The parameter.
        id: String,
        /// Its type in this study.
        here: &'static str,
        /// Its type in the other study.
        there: &'static str,
        /// The other study.
        study: String,
    },
    /// `warm_start.values` gives a parameter the other study tuned itself.
    #[error(
        "values.{id}: study '{study}' tuned {id} itself: its trials' own values are used, give values only for parameters it did not tune"
    )]
    TunedThere {
        /// The parameter.
        id: String,
        /// The other study.
        study: String,
    },
    /// A parameter this study adds is active in one of the other study's trials and
    /// `warm_start.values` does not say what that trial ran with.
    #[error(
        "parameter '{id}' is not in study '{study}', whose trials ran with some value of it: give that value as warm_start.values.{id}"
    )]
    NoValue {
        /// The parameter.
        id: String,
        /// The other study.
        study: String,
    },
}

/// Why one trial of the other study lies outside this study's space.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outside {
    /// The first parameter of this study, in order, that the trial does not fit.
    pub parameter: String,
    /// How it does not fit.
    pub why: String,
}

/// The map from the other study's trials to this study's space, its types checked.
#[derive(Debug)]
pub(crate) struct Mapping<'a> {
    warm: &'a WarmStart,
    space: &'a Space,
    other: &'a Space,
}

impl WarmStart {
    /// The map from the trials of the other study, whose space is `other`, to `space`; an
    /// error where a parameter has a type in each, or `values` names a parameter the other
    /// study tuned.
    pub(crate) fn mapping<'a>(
        &'a self,
        space: &'a Space,
        other: &'a Space,
    ) -> Result<Mapping<'a>, WarmStartError> {
        if let Some(id) = self.values.keys().find(|id| other.get(id).is_some()) {
            return Err(WarmStartError::TunedThere {
                id: id.clone(),
                study: self.study.clone(),
            });
        }
        for parameter in space.parameters() {
            let Some(theirs) = other.get(&parameter.id) else {
                continue;
            };
            let (here, there) = (type_name(&parameter.domain), type_name(&theirs.domain));
            if here != there {
                return Err(WarmStartError::TypeConflict {
                    id: parameter.id.clone(),
                    here,
                    there,
                    study: self.study.clone(),
                });
            }
        }
        Ok(Mapping {
            warm: self,
            space,
            other,
        })
    }
}

impl Mapping<'_> {
    /// The other study's trial `params` as a trial of this study: `Ok(Err(_))` when it lies
    /// outside this study's space, `Err` when a parameter this study adds is active in it
    /// and has no value in `warm_start.values`.
    pub(crate) fn map(
        &self,
        params: &Assignment,
    ) -> Result<Result<Assignment, Outside>, WarmStartError> {
        let mut chosen = Assignment::new();
        for parameter in self.space.parameters() {
            if !self.space.is_active(parameter, &chosen) {
                continue;
            }
            let id = &parameter.id;
            let value = if self.other.get(id).is_some() {
                params.get(id)
            } else {
                let value = self.warm.values.get(id);
                Some(value.ok_or_else(|| WarmStartError::NoValue {
                    id: id.clone(),
                    study: self.warm.study.clone(),
                })?)
            };
            let outside = |why: String| {
                Ok(Err(Outside {
                    parameter: id.clone(),
                    why,
                }))
            };
            let Some(value) = value else {
                return outside("inactive there, active here".into());
            };
            if let Err(why) = parameter.domain.check(value) {
                return outside(why);
            }
            chosen.insert(id.clone(), value.clone());
        }
        Ok(Ok(chosen))
    }
}

/// The type of a domain as the study file writes it.
fn type_name(domain: &Domain) -> &'static str {
    match domain {
        Domain::Double { .. } => "double",
        Domain::Integer { .. } => "integer",
        Domain::Discrete { .. } => "discrete",
        Domain::Categorical { .. } => "categorical",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::{Condition, ParamValue, Parameter, Scale, categorical};

    fn double(id: &str, min: f64, max: f64) -> Parameter {
        Parameter {
            id: id.into(),
            domain: Domain::Double {
                min,
                max,
                scale: Scale::Linear,
                grid_points: None,
            },
            condition: None,
        }
    }

    fn point(pairs: &[(&str, ParamValue)]) -> Assignment {
        pairs
            .iter()
            .map(|(id, v)| (id.to_string(), v.clone()))
            .collect()
    }

    fn warm(values: &[(&str, ParamValue)]) -> WarmStart {
        WarmStart {
            study: "earlier".into(),
            values: point(values),
        }
    }

    use ParamValue::{Float, Str};

    #[test]
    fn values_map_into_this_studys_cube_and_added_parameters_take_the_given_value() {
        let other = Space::new(vec![
            double("x", -2.0, 1.5),
            double("y", -1.0, 2.0),
            double("dropped", 0.0, 1.0),
        ]);
        let space = Space::new(vec![
            double("x", -1.0, 1.0),
            double("y", -3.0, 3.0),
            double("added", 0.0, 10.0),
        ]);
        let warm = warm(&[("added", Float(2.5))]);
        let mapping = warm.mapping(&space, &other).unwrap();
        let mapped = mapping
            .map(&point(&[
                ("x", Float(0.5)),
                ("y", Float(1.5)),
                ("dropped", Float(0.7)),
            ]))
            .unwrap()
            .unwrap();
        assert_eq!(
            mapped,
            point(&[("x", Float(0.5)), ("y", Float(1.5)), ("added", Float(2.5))])
        );
        assert_eq!(space.to_unit(&mapped), [Some(0.75), Some(0.75), Some(0.25)]);
        let outside = mapping
            .map(&point(&[
                ("x", Float(-1.5)),
                ("y", Float(0.0)),
                ("dropped", Float(0.0)),
            ]))
            .unwrap()
            .unwrap_err();
        assert_eq!(outside.parameter, "x");
        assert!(outside.why.contains("[-1, 1]"), "{}", outside.why);
    }

    #[test]
    fn a_dropped_category_leaves_its_trials_out_and_a_new_branch_needs_no_value() {
        let other = Space::new(vec![categorical("opt", &["adam", "sgd"])]);
        let mut beta = double("beta", 0.5, 1.0);
        beta.condition = Some(Condition {
            requires: [("opt".to_string(), vec![Str("lamb".into())])].into(),
        });
        let space = Space::new(vec![categorical("opt", &["adam", "lamb"]), beta]);
        let warm = warm(&[]);
        let mapping = warm.mapping(&space, &other).unwrap();
        let adam = point(&[("opt", Str("adam".into()))]);
        assert_eq!(mapping.map(&adam).unwrap(), Ok(adam.clone()));
        let sgd = mapping.map(&point(&[("opt", Str("sgd".into()))])).unwrap();
        assert_eq!(sgd.unwrap_err().parameter, "opt");
    }

    #[test]
    fn conflicting_types_and_missing_or_misplaced_values_are_refused() {
        let other = Space::new(vec![double("x", 0.0, 1.0), double("y", 0.0, 1.0)]);
        let space = Space::new(vec![categorical("x", &["a", "b"])]);
        let conflict = warm(&[]).mapping(&space, &other).unwrap_err();
        assert_eq!(
            conflict.to_string(),
            "parameter 'x' is categorical here and double in study 'earlier': its values do not carry over"
        );
        let space = Space::new(vec![double("x", 0.0, 1.0), double("z", 0.0, 1.0)]);
        let misplaced = warm(&[("y", Float(0.5))])
            .mapping(&space, &other)
            .unwrap_err();
        assert!(matches!(misplaced, WarmStartError::TunedThere { id, .. } if id == "y"));
        let warm = warm(&[]);
        let mapping = warm.mapping(&space, &other).unwrap();
        let trial = point(&[("x", Float(0.5)), ("y", Float(0.5))]);
        assert!(
            mapping
                .map(&trial)
                .unwrap_err()
                .to_string()
                .contains("warm_start.values.z"),
            "{:?}",
            mapping.map(&trial)
        );
    }
}
