//! The unit map of one parameter: a value to its coordinate in `[0, 1]` and back, through
//! its scale; its neighbours for the search; its values checked and read from text.

use super::{Domain, ParamValue, Scale, join, written};

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
    pub(crate) fn value_at(&self, u: f64) -> ParamValue {
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
    pub(crate) fn neighbours(&self, value: &ParamValue) -> Vec<ParamValue> {
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
    pub(crate) fn to_unit(&self, value: &ParamValue) -> Option<f64> {
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
    pub(crate) fn check(&self, value: &ParamValue) -> Result<(), String> {
        match (self, value) {
            (Domain::Double { min, max, .. }, v) => match v.as_f64() {
                Some(x) if x.is_finite() && x >= *min && x <= *max => Ok(()),
                _ => Err(format!(
                    "{} is not a number in [{}, {}]",
                    shown(value),
                    written(*min),
                    written(*max)
                )),
            },
            (Domain::Integer { min, max, .. }, ParamValue::Int(i)) if i >= min && i <= max => {
                Ok(())
            }
            (Domain::Integer { min, max, .. }, _) => Err(format!(
                "{} is not an integer in [{min}, {max}]",
                shown(value)
            )),
            (Domain::Discrete { values, .. }, v)
                if v.as_f64().is_some_and(|x| values.contains(&x)) =>
            {
                Ok(())
            }
            (Domain::Discrete { values, .. }, _) => Err(format!(
                "{} is not one of {}",
                shown(value),
                join(values.iter().map(|v| written(*v)))
            )),
            (Domain::Categorical { values }, ParamValue::Str(s)) if values.contains(s) => Ok(()),
            (Domain::Categorical { values }, _) => Err(format!(
                "'{}' is not one of {}",
                shown(value),
                join(values.iter().cloned())
            )),
        }
    }

    /// Reads a value written as text (`--param lr=3e-5`), typed by the domain.
    pub(crate) fn parse(&self, text: &str) -> Result<ParamValue, String> {
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
}

/// The span that integers map through, so that each integer gets an equal share of `[0, 1]`.
fn integer_span(min: i64, max: i64) -> (f64, f64) {
    (min as f64 - 0.5, max as f64 + 0.5)
}

/// A value as an error shows it: a number [`written`] for people.
fn shown(value: &ParamValue) -> String {
    match value {
        ParamValue::Float(x) => written(*x),
        other => other.to_string(),
    }
}
