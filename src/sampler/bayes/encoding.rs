//! What the model sees of a point: one feature per numeric parameter (its unit coordinate,
//! after rounding to an allowed value), one per value of a categorical (one-hot, so that no
//! order is imposed on unordered values). An inactive parameter's features take a fixed
//! value shared by every point where it is inactive, so it explains no difference between
//! them; the parent's own feature tells the branches apart.

use crate::gp::LengthSharing;
use crate::study::space::{Assignment, Domain, ParamValue, Space};

/// The feature of an inactive numeric parameter: the middle of its range.
const INACTIVE_NUMBER: f64 = 0.5;

#[derive(Debug, Clone, Copy)]
enum Slot {
    Number { continuous: bool },
    OneHot { values: usize },
}

/// The map from assignments to feature vectors for one space.
#[derive(Debug, Clone)]
pub(crate) struct Encoding<'a> {
    space: &'a Space,
    /// Per parameter: its first feature and its kind.
    slots: Vec<(usize, Slot)>,
    width: usize,
}

impl<'a> Encoding<'a> {
    /// The encoding of `space`.
    pub(crate) fn new(space: &'a Space) -> Self {
        let mut width = 0;
        let slots = space
            .parameters()
            .iter()
            .map(|p| {
                let slot = match &p.domain {
                    Domain::Double { .. } => Slot::Number { continuous: true },
                    Domain::Integer { .. } | Domain::Discrete { .. } => {
                        Slot::Number { continuous: false }
                    }
                    Domain::Categorical { values } => Slot::OneHot {
                        values: values.len(),
                    },
                };
                let first = width;
                width += match slot {
                    Slot::Number { .. } => 1,
                    Slot::OneHot { values } => values,
                };
                (first, slot)
            })
            .collect();
        Self {
            space,
            slots,
            width,
        }
    }

    /// The space encoded.
    pub(crate) fn space(&self) -> &'a Space {
        self.space
    }

    /// Number of features.
    #[cfg(test)]
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// The features of an assignment.
    pub(crate) fn encode(&self, assignment: &Assignment) -> Vec<f64> {
        let mut features = vec![0.0; self.width];
        for (parameter, &(first, slot)) in self.space.parameters().iter().zip(&self.slots) {
            let value = assignment.get(&parameter.id);
            match (slot, &parameter.domain, value) {
                (Slot::Number { .. }, domain, value) => {
                    features[first] = value
                        .and_then(|v| domain.to_unit(v))
                        .unwrap_or(INACTIVE_NUMBER);
                }
                (Slot::OneHot { .. }, Domain::Categorical { values }, Some(ParamValue::Str(s))) => {
                    if let Some(i) = values.iter().position(|v| v == s) {
                        features[first + i] = 1.0;
                    }
                }
                (Slot::OneHot { .. }, _, _) => {}
            }
        }
        features
    }

    /// The assignment at unit point `unit` (one coordinate per parameter) and its features.
    pub(crate) fn at(&self, unit: &[f64]) -> (Assignment, Vec<f64>) {
        let assignment = self.space.from_unit(unit);
        let features = self.encode(&assignment);
        (assignment, features)
    }

    /// The unit coordinates of an assignment, the middle for inactive parameters.
    pub(crate) fn unit(&self, assignment: &Assignment) -> Vec<f64> {
        self.space
            .to_unit(assignment)
            .into_iter()
            .map(|u| u.unwrap_or(INACTIVE_NUMBER))
            .collect()
    }

    /// Whether parameter `index` is numeric, so that nearness along its unit coordinate means
    /// nearness of values (it does not for a categorical).
    pub(crate) fn is_ordered(&self, index: usize) -> bool {
        matches!(self.slots[index].1, Slot::Number { .. })
    }

    /// The length scale each feature takes ([`LengthSharing`]): a numeric parameter's feature
    /// its own, the one-hot features of a categorical one shared, each difference counted half.
    pub(crate) fn length_sharing(&self) -> LengthSharing {
        let mut features = Vec::with_capacity(self.width);
        for (parameter, &(_, slot)) in self.slots.iter().enumerate() {
            match slot {
                Slot::Number { .. } => features.push((parameter, 1.0)),
                Slot::OneHot { values } => {
                    features.extend(std::iter::repeat_n((parameter, 0.5), values))
                }
            }
        }
        LengthSharing::new(features)
    }

    /// The unit points one discrete step from `unit`: each active categorical, integer or
    /// discrete parameter moved to each of its [`Domain::neighbours`], the others kept.
    pub(crate) fn neighbours(&self, unit: &[f64]) -> Vec<Vec<f64>> {
        let assignment = self.space.from_unit(unit);
        self.space
            .parameters()
            .iter()
            .enumerate()
            .filter_map(|(index, p)| Some((index, &p.domain, assignment.get(&p.id)?)))
            .flat_map(|(index, domain, value)| {
                domain
                    .neighbours(value)
                    .into_iter()
                    .filter_map(move |next| {
                        let mut moved = unit.to_vec();
                        moved[index] = domain.to_unit(&next)?;
                        Some(moved)
                    })
            })
            .collect()
    }

    /// The parameters that gradient refinement may move at this point: the active doubles,
    /// as `(parameter index, feature index)`; their feature is their unit coordinate.
    pub(crate) fn continuous(&self, assignment: &Assignment) -> Vec<(usize, usize)> {
        self.space
            .parameters()
            .iter()
            .zip(&self.slots)
            .enumerate()
            .filter(|(_, (p, (_, slot)))| {
                matches!(slot, Slot::Number { continuous: true }) && assignment.contains_key(&p.id)
            })
            .map(|(index, (_, (first, _)))| (index, *first))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::{Condition, Parameter, Scale};

    fn space() -> Space {
        let param = |id: &str, domain| Parameter {
            id: id.into(),
            domain,
            condition: None,
        };
        let mut momentum = param(
            "momentum",
            Domain::Double {
                min: 0.0,
                max: 1.0,
                scale: Scale::Linear,
                grid_points: None,
            },
        );
        momentum.condition = Some(Condition {
            requires: [("optimizer".to_string(), vec![ParamValue::Str("sgd".into())])].into(),
        });
        Space::new(vec![
            param(
                "optimizer",
                Domain::Categorical {
                    values: vec!["adam".into(), "sgd".into(), "lamb".into()],
                },
            ),
            param(
                "layers",
                Domain::Integer {
                    min: 1,
                    max: 4,
                    scale: Scale::Linear,
                    grid_points: None,
                },
            ),
            momentum,
        ])
    }

    #[test]
    fn categoricals_are_one_hot_and_integers_rounded() {
        let space = space();
        let encoding = Encoding::new(&space);
        assert_eq!(encoding.width(), 5);
        // optimizer = sgd (middle third), layers = 3 (u in [0.5, 0.75)), momentum 0.3.
        let (assignment, features) = encoding.at(&[0.5, 0.6, 0.3]);
        assert_eq!(assignment["layers"], ParamValue::Int(3));
        assert_eq!(features, vec![0.0, 1.0, 0.0, 0.625, 0.3]);
        assert_eq!(encoding.continuous(&assignment), vec![(2, 4)]);
    }

    #[test]
    fn neighbours_move_one_discrete_parameter_by_one_step() {
        let space = space();
        let encoding = Encoding::new(&space);
        // optimizer = sgd, layers = 3, momentum 0.3 (a double: never moved).
        let unit = [0.5, 0.6, 0.3];
        let moved: Vec<Assignment> = encoding
            .neighbours(&unit)
            .iter()
            .map(|u| encoding.at(u).0)
            .collect();
        let text = |s: &str| ParamValue::Str(s.into());
        let described: Vec<(ParamValue, ParamValue)> = moved
            .iter()
            .map(|a| (a["optimizer"].clone(), a["layers"].clone()))
            .collect();
        assert_eq!(
            described,
            vec![
                (text("adam"), ParamValue::Int(3)),
                (text("lamb"), ParamValue::Int(3)),
                (text("sgd"), ParamValue::Int(2)),
                (text("sgd"), ParamValue::Int(4)),
            ]
        );
        // Momentum keeps its coordinate where it stays active.
        assert_eq!(moved[3]["momentum"], ParamValue::Float(0.3));
    }

    #[test]
    fn inactive_parameters_share_one_feature_value() {
        let space = space();
        let encoding = Encoding::new(&space);
        let (a, fa) = encoding.at(&[0.1, 0.1, 0.9]);
        let (_, fb) = encoding.at(&[0.1, 0.1, 0.2]);
        assert_eq!(fa, fb, "momentum is inactive for adam and must not matter");
        assert_eq!(fa[4], INACTIVE_NUMBER);
        assert!(encoding.continuous(&a).is_empty());
    }
}
