//! Axes: a map from data to pixels along one direction, with ticks a reader can read.

use crate::study::space::{Domain, Scale};

/// How values spread along an axis.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Axis {
    /// Evenly between `low` and `high`.
    Linear {
        /// The value at the axis' start.
        low: f64,
        /// The value at its end.
        high: f64,
    },
    /// Evenly between `low` and `high`, for counts (trial numbers, steps): ticks on whole
    /// numbers only.
    Whole {
        /// The value at the axis' start.
        low: f64,
        /// The value at its end.
        high: f64,
    },
    /// Evenly in `ln(x)` between `low` and `high` (both positive).
    Log {
        /// The value at the axis' start.
        low: f64,
        /// The value at its end.
        high: f64,
    },
    /// One slot per category, in order.
    Categories(Vec<String>),
}

impl Axis {
    /// A linear axis over the finite values of `values`, padded by 5% each side and widened
    /// to nice round ends; a unit range around a single value; `None` when there is none.
    pub(crate) fn fit(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let (low, high) = bounds(values)?;
        let pad = if high > low {
            (high - low) * 0.05
        } else {
            low.abs().max(1.0) * 0.5
        };
        Some(Axis::Linear {
            low: low - pad,
            high: high + pad,
        })
    }

    /// [`Axis::fit`] for whole numbers: ticks only on them.
    pub(crate) fn fit_whole(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        match Self::fit(values)? {
            Axis::Linear { low, high } => Some(Axis::Whole { low, high }),
            other => Some(other),
        }
    }

    /// The axis of a parameter's domain: its own scale over its own range.
    pub(crate) fn of_domain(domain: &Domain) -> Self {
        let numeric = |min: f64, max: f64, scale: Scale| match scale {
            Scale::Log if min > 0.0 => Axis::Log {
                low: min,
                high: max,
            },
            _ => {
                let pad = if max > min { (max - min) * 0.02 } else { 0.5 };
                Axis::Linear {
                    low: min - pad,
                    high: max + pad,
                }
            }
        };
        match domain {
            Domain::Double {
                min, max, scale, ..
            } => numeric(*min, *max, *scale),
            Domain::Integer {
                min, max, scale, ..
            } => numeric(*min as f64, *max as f64, *scale),
            Domain::Discrete { values, scale } => numeric(
                values.first().copied().unwrap_or(0.0),
                values.last().copied().unwrap_or(1.0),
                *scale,
            ),
            Domain::Categorical { values } => Axis::Categories(values.clone()),
        }
    }

    /// Where `value` falls, from 0 (start) to 1 (end); `None` if it cannot be placed.
    pub(crate) fn position(&self, value: f64) -> Option<f64> {
        if !value.is_finite() {
            return None;
        }
        match self {
            Axis::Linear { low, high } | Axis::Whole { low, high } if high > low => {
                Some((value - low) / (high - low))
            }
            Axis::Linear { .. } | Axis::Whole { .. } => Some(0.5),
            Axis::Log { low, high } if value > 0.0 && high > low => {
                Some((value / low).ln() / (high / low).ln())
            }
            Axis::Log { .. } => None,
            Axis::Categories(_) => None,
        }
    }

    /// Where category `name` falls, from 0 to 1 (the middle of its slot).
    pub(crate) fn category_position(&self, name: &str) -> Option<f64> {
        match self {
            Axis::Categories(names) => {
                let index = names.iter().position(|n| n == name)?;
                Some((index as f64 + 0.5) / names.len() as f64)
            }
            _ => None,
        }
    }

    /// The ticks: (position from 0 to 1, label).
    pub(crate) fn ticks(&self, wanted: usize) -> Vec<(f64, String)> {
        match self {
            Axis::Linear { low, high } => nice_ticks(*low, *high, wanted)
                .into_iter()
                .filter_map(|v| Some((self.position(v)?, format_number(v))))
                .collect(),
            Axis::Whole { low, high } => nice_ticks(*low, *high, wanted)
                .into_iter()
                .filter(|v| v.fract() == 0.0)
                .filter_map(|v| Some((self.position(v)?, format_number(v))))
                .collect(),
            Axis::Log { low, high } => log_ticks(*low, *high)
                .into_iter()
                .filter_map(|v| Some((self.position(v)?, format_number(v))))
                .collect(),
            Axis::Categories(names) => names
                .iter()
                .filter_map(|n| Some((self.category_position(n)?, n.clone())))
                .collect(),
        }
    }
}

/// The smallest and largest finite value.
pub(crate) fn bounds(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// Round values (1, 2 or 5 times a power of ten apart) inside `[low, high]`, about `wanted`
/// of them.
fn nice_ticks(low: f64, high: f64, wanted: usize) -> Vec<f64> {
    if high.partial_cmp(&low) != Some(std::cmp::Ordering::Greater) || wanted == 0 {
        return vec![low];
    }
    let rough = (high - low) / wanted as f64;
    let power = 10f64.powf(rough.log10().floor());
    // The round step whose number of ticks is nearest the wanted one.
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .min_by(|a, b| {
            let miss = |s: f64| ((high - low) / s - wanted as f64).abs();
            miss(*a).total_cmp(&miss(*b))
        })
        .unwrap_or(power);
    let first = (low / step).ceil() as i64;
    let last = (high / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Powers of ten inside `[low, high]`, with 2 and 5 times them when there are few.
fn log_ticks(low: f64, high: f64) -> Vec<f64> {
    let (first, last) = (low.log10().floor() as i32, high.log10().ceil() as i32);
    let multiples: &[f64] = if last - first <= 2 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    (first..=last)
        .flat_map(|p| multiples.iter().map(move |m| m * 10f64.powi(p)))
        .filter(|v| *v >= low * (1.0 - 1e-9) && *v <= high * (1.0 + 1e-9))
        .collect()
}

/// A number as a label: at most four significant digits, exponent form when very small or
/// large, no trailing zeros.
pub(crate) fn format_number(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let magnitude = value.abs();
    if !(1e-3..1e5).contains(&magnitude) {
        let text = format!("{value:.2e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        return format!("{mantissa}e{exponent}");
    }
    let decimals = (3 - magnitude.log10().floor() as i32).clamp(0, 6) as usize;
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_inside_the_axis() {
        assert_eq!(
            nice_ticks(0.0, 1.0, 5),
            [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        let labels: Vec<String> = Axis::Linear {
            low: -0.3,
            high: 10.2,
        }
        .ticks(5)
        .into_iter()
        .map(|t| t.1)
        .collect();
        assert_eq!(labels, ["0", "2", "4", "6", "8", "10"]);
        let log: Vec<String> = Axis::Log {
            low: 1e-5,
            high: 1e-2,
        }
        .ticks(5)
        .into_iter()
        .map(|t| t.1)
        .collect();
        assert_eq!(log, ["1e-5", "1e-4", "0.001", "0.01"]);
    }

    #[test]
    fn numbers_read_short() {
        assert_eq!(format_number(0.123456), "0.1235");
        assert_eq!(format_number(1234.0), "1234");
        assert_eq!(format_number(3.0e-5), "3e-5");
        assert_eq!(format_number(2.5e7), "2.5e7");
        assert_eq!(format_number(-2.0), "-2");
    }

    #[test]
    fn positions_follow_the_scale() {
        let log = Axis::Log {
            low: 1.0,
            high: 100.0,
        };
        assert_eq!(log.position(10.0), Some(0.5));
        assert_eq!(log.position(-1.0), None);
        let whole: Vec<String> = Axis::fit_whole([0.0, 2.0])
            .unwrap()
            .ticks(6)
            .into_iter()
            .map(|t| t.1)
            .collect();
        assert_eq!(whole, ["0", "1", "2"]);
        let names = Axis::Categories(vec!["a".into(), "b".into()]);
        assert_eq!(names.category_position("b"), Some(0.75));
        assert_eq!(Axis::fit([f64::NAN]), None);
    }
}
