//! Grid search's view of the space: every point once, counted before it is built, so that
//! a grid past [`MAX_GRID_POINTS`] is refused by its size alone.

use std::collections::HashSet;

use super::{Assignment, Domain, MAX_GRID_POINTS, ParamValue, Parameter, Space, SpaceError};

impl Domain {
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
                let v = self.value_at(u);
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

pub(super) fn too_many_points() -> SpaceError {
    SpaceError::NoGrid(format!(
        "the grid has more than {MAX_GRID_POINTS} points: lower `grid_points` or use algorithm random or bayesian"
    ))
}

impl Space {
    /// Every point of the grid once, in a stable order: the first parameter varies slowest;
    /// inactive parameters are left out, so conditional branches are not repeated. A grid of
    /// more than [`MAX_GRID_POINTS`] points is refused before it is built.
    pub(crate) fn grid(&self) -> Result<Vec<Assignment>, SpaceError> {
        self.grid_size()?;
        let points = self.partial_grid(|_| true)?;
        Ok(points.into_iter().map(|(point, _)| point).collect())
    }

    /// The number of points of [`Space::grid`], counted without listing them (at most
    /// [`MAX_GRID_POINTS`], or an error): only the values of `when` parents are enumerated,
    /// the other parameters multiply counts.
    pub(crate) fn grid_size(&self) -> Result<usize, SpaceError> {
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
