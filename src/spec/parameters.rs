//! The `parameters` list: each parameter's domain (bounds, scale, values, grid points) and
//! its `when` condition on other parameters.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::Checker;
use super::raw::{RawParameter, Scalar};
use crate::study::space::{Condition, Domain, MAX_GRID_POINTS, Parameter, Scale, Space, written};

impl Checker<'_> {
    /// Checks the `parameters` list; the space when every parameter is right.
    pub(super) fn space(&mut self, raw: &[RawParameter]) -> Option<Space> {
        if raw.is_empty() {
            self.report("parameters", "must list at least one parameter");
            return None;
        }
        let mut parameters: Vec<Parameter> = Vec::new();
        let mut seen = HashSet::new();
        let mut ok = true;
        for (i, p) in raw.iter().enumerate() {
            let field = format!("parameters[{i}]");
            if !is_identifier(&p.id) {
                self.report(
                    format!("{field}.id"),
                    format!(
                        "'{}' is not a valid id: use letters, digits, '_', '-' and '.', starting with a letter",
                        p.id
                    ),
                );
                ok = false;
            } else if !seen.insert(p.id.clone()) {
                self.report(
                    format!("{field}.id"),
                    format!("duplicate id '{}': each parameter needs its own id", p.id),
                );
                ok = false;
            }
            let domain = self.domain(&field, p);
            let condition = self.condition(&field, p, &parameters);
            match (domain, condition) {
                (Some(domain), Some(condition)) => parameters.push(Parameter {
                    id: p.id.clone(),
                    domain,
                    condition,
                }),
                _ => ok = false,
            }
        }
        ok.then(|| Space::new(parameters))
    }

    fn domain(&mut self, field: &str, p: &RawParameter) -> Option<Domain> {
        let scale = match p.scale.as_deref() {
            None | Some("linear") => Some(Scale::Linear),
            Some("log") => Some(Scale::Log),
            Some("reverse_log") => Some(Scale::ReverseLog),
            Some(other) => {
                self.report(
                    format!("{field}.scale"),
                    format!("'{other}' is not a scale: use linear, log or reverse_log"),
                );
                None
            }
        };
        let numeric = matches!(p.kind.as_str(), "double" | "integer");
        let listed = matches!(p.kind.as_str(), "discrete" | "categorical");
        let mut misplaced = |name: &str, present: bool, allowed: bool| {
            if present && !allowed {
                self.report(
                    format!("{field}.{name}"),
                    format!("does not apply to a {} parameter", p.kind),
                );
            }
        };
        misplaced("min", p.min.is_some(), numeric);
        misplaced("max", p.max.is_some(), numeric);
        misplaced("values", p.values.is_some(), listed);
        misplaced("grid_points", p.grid_points.is_some(), numeric);
        misplaced("scale", p.scale.is_some(), p.kind != "categorical");
        match p.kind.as_str() {
            "double" | "integer" => self.numeric_domain(field, p, scale?),
            "discrete" => self.discrete_domain(field, p, scale?),
            "categorical" => self.categorical_domain(field, p),
            other => {
                self.report(
                    format!("{field}.type"),
                    format!(
                        "'{other}' is not a parameter type: use double, integer, discrete or categorical"
                    ),
                );
                None
            }
        }
    }

    fn numeric_domain(&mut self, field: &str, p: &RawParameter, scale: Scale) -> Option<Domain> {
        let integer = p.kind == "integer";
        let (Some(min), Some(max)) = (p.min, p.max) else {
            for (name, value) in [("min", p.min), ("max", p.max)] {
                if value.is_none() {
                    self.report(
                        field.to_string(),
                        format!("a {} parameter needs `{name}`", p.kind),
                    );
                }
            }
            return None;
        };
        let mut ok = true;
        for (name, value) in [("min", min), ("max", max)] {
            let fits = if integer {
                value.as_i64().is_some()
            } else {
                value.as_f64().is_finite()
            };
            if !fits {
                let what = if integer {
                    format!("an integer from {} to {}", i64::MIN, i64::MAX)
                } else {
                    "a finite number".to_string()
                };
                self.report(
                    format!("{field}.{name}"),
                    format!("must be {what}, got {value}"),
                );
                ok = false;
            }
        }
        let ordered = match (min.as_i64(), max.as_i64()) {
            (Some(lo), Some(hi)) if integer => lo < hi,
            _ => min.as_f64() < max.as_f64(),
        };
        if ok && !ordered {
            self.report(
                format!("{field}.max"),
                format!("max must be > min, got min {min} and max {max}"),
            );
            ok = false;
        }
        if ok && scale != Scale::Linear {
            let lowest = if integer { 1.0 } else { f64::MIN_POSITIVE };
            if min.as_f64() < lowest {
                let need = if integer { "min >= 1" } else { "min > 0" };
                self.report(
                    format!("{field}.min"),
                    format!("{} scale needs {need}, got min {min}", scale_name(scale)),
                );
                ok = false;
            }
        }
        let grid_points = self.grid_points(field, p.grid_points);
        if !ok {
            return None;
        }
        let grid_points = grid_points?;
        Some(match (min.as_i64(), max.as_i64()) {
            (Some(min), Some(max)) if integer => Domain::Integer {
                min,
                max,
                scale,
                grid_points,
            },
            _ => Domain::Double {
                min: min.as_f64(),
                max: max.as_f64(),
                scale,
                grid_points,
            },
        })
    }

    /// `grid_points` as written: from 1 to the most points a grid may have.
    fn grid_points(&mut self, field: &str, value: Option<i64>) -> Option<Option<usize>> {
        match value {
            Some(n) if n < 1 || n > MAX_GRID_POINTS as i64 => {
                self.report(
                    format!("{field}.grid_points"),
                    format!("must be from 1 to {MAX_GRID_POINTS} (the most points a grid may have), got {n}"),
                );
                None
            }
            n => Some(n.map(|n| n as usize)),
        }
    }

    fn values<'a>(&mut self, field: &str, p: &'a RawParameter) -> Option<&'a [Scalar]> {
        match p.values.as_deref() {
            None => {
                self.report(
                    field.to_string(),
                    format!("a {} parameter needs `values`", p.kind),
                );
                None
            }
            Some([]) => {
                self.report(format!("{field}.values"), "must list at least one value");
                None
            }
            Some(values) => Some(values),
        }
    }

    fn discrete_domain(&mut self, field: &str, p: &RawParameter, scale: Scale) -> Option<Domain> {
        let raw = self.values(field, p)?;
        let mut values = Vec::with_capacity(raw.len());
        for (i, value) in raw.iter().enumerate() {
            match value.as_f64() {
                Some(x) if x.is_finite() => values.push(x),
                _ => self.report(
                    format!("{field}.values[{i}]"),
                    format!(
                        "'{}' is not a number: discrete values are numbers (use type categorical for strings)",
                        value.as_text()
                    ),
                ),
            }
        }
        if values.len() != raw.len() {
            return None;
        }
        if let Some(i) = values.windows(2).position(|w| w[1] <= w[0]) {
            self.report(
                format!("{field}.values[{}]", i + 1),
                format!(
                    "discrete values must increase: {} comes after {}",
                    written(values[i + 1]),
                    written(values[i])
                ),
            );
            return None;
        }
        if scale != Scale::Linear && values[0] <= 0.0 {
            self.report(
                format!("{field}.values[0]"),
                format!(
                    "{} scale needs values > 0, got {}",
                    scale_name(scale),
                    written(values[0])
                ),
            );
            return None;
        }
        Some(Domain::Discrete { values, scale })
    }

    fn categorical_domain(&mut self, field: &str, p: &RawParameter) -> Option<Domain> {
        let raw = self.values(field, p)?;
        let values: Vec<String> = raw.iter().map(Scalar::as_text).collect();
        let mut first = HashMap::with_capacity(values.len());
        for (i, text) in values.iter().enumerate() {
            if let Some(earlier) = first.insert(text.as_str(), i) {
                self.report(
                    format!("{field}.values[{i}]"),
                    format!("duplicate value '{text}' (also values[{earlier}])"),
                );
                return None;
            }
        }
        Some(Domain::Categorical { values })
    }

    fn condition(
        &mut self,
        field: &str,
        p: &RawParameter,
        earlier: &[Parameter],
    ) -> Option<Option<Condition>> {
        let Some(when) = &p.when else {
            return Some(None);
        };
        if when.is_empty() {
            self.report(
                format!("{field}.when"),
                "must name at least one parent parameter",
            );
            return None;
        }
        let mut requires = BTreeMap::new();
        let mut ok = true;
        for (parent_id, allowed) in when {
            let place = format!("{field}.when.{parent_id}");
            let Some(parent) = earlier.iter().find(|q| &q.id == parent_id) else {
                let known: Vec<&str> = earlier.iter().map(|q| q.id.as_str()).collect();
                self.report(
                    place,
                    format!(
                        "'{parent_id}' is not a parameter defined before '{}' (defined before it: {})",
                        p.id,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                );
                ok = false;
                continue;
            };
            if matches!(parent.domain, Domain::Double { .. }) {
                self.report(
                    place,
                    format!(
                        "'{parent_id}' is a double: a condition needs a categorical, discrete or integer parent"
                    ),
                );
                ok = false;
                continue;
            }
            if allowed.is_empty() {
                self.report(place, "must list at least one value of the parent");
                ok = false;
                continue;
            }
            let mut values = Vec::new();
            for (i, scalar) in allowed.iter().enumerate() {
                match parent.domain.parse(&scalar.as_text()) {
                    Ok(value) => values.push(value),
                    Err(message) => {
                        self.report(
                            format!("{place}[{i}]"),
                            format!("{message} of '{parent_id}'"),
                        );
                        ok = false;
                    }
                }
            }
            requires.insert(parent_id.clone(), values);
        }
        ok.then_some(Some(Condition { requires }))
    }
}

fn scale_name(scale: Scale) -> &'static str {
    match scale {
        Scale::Linear => "linear",
        Scale::Log => "log",
        Scale::ReverseLog => "reverse_log",
    }
}

fn is_identifier(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}
