//! What workers say: the only place that understands the lines they print (once
//! [`LineReader`](super::LineReader) has split them) and the metrics file they write.
//!
//! Two local forms are read:
//! - `key=value` pairs on stdout, Katib style (`step=2 loss=0.3 accuracy=0.91`). A line is a
//!   measurement only if it reports the objective metric; every pair on it is recorded, and
//!   `step` (or `global_step`, `epoch`) gives its step.
//! - the metrics file of `cloudml-hypertune`: JSON lines, numbers often as strings, the file
//!   rewritten whole on each report.
//!
//! The final value is the objective reported without a step, or else the last one reported.

use std::collections::HashSet;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

/// Keys that give the step of a measurement rather than a metric.
const STEP_KEYS: [&str; 3] = ["step", "global_step", "epoch"];
/// Keys of the metrics file that are bookkeeping, not metrics.
const FILE_BOOKKEEPING: [&str; 2] = ["timestamp", "trial"];

/// One reported value of one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Training step or epoch; `None` for a final report.
    pub step: Option<i64>,
    /// The metric's tag.
    pub metric: String,
    /// The value; may be NaN or infinite, which fails the trial if it is the objective.
    pub value: f64,
}

/// The name of a metric in a `name=value` pair: a letter or `_`, then letters, digits and
/// `_ . / | -`.
const NAME: &str = r"[a-z_][\w./|-]*";

static PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)({NAME})\s*=\s*([+-]?(?:nan|inf(?:inity)?|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?))(?:[\s,;]|$)",
    ))
    .expect("the pattern is valid")
});

static WHOLE_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("(?i)^{NAME}$")).expect("the pattern is valid"));

/// Checks that a worker can report the metric `name` on a line: a name the pairs cannot
/// hold, or a step key, could never be read, and every trial would fail.
pub(crate) fn check_metric_name(name: &str) -> Result<(), String> {
    if STEP_KEYS.contains(&name) {
        return Err(format!(
            "'{name}' gives a measurement's step ({}), it cannot be a metric",
            STEP_KEYS.join(", ")
        ));
    }
    if !WHOLE_NAME.is_match(name) {
        return Err(format!(
            "'{name}' cannot be reported as {name}=<value>: a metric's name starts with a letter or `_` and holds only letters, digits and `_` `.` `/` `|` `-`"
        ));
    }
    Ok(())
}

/// Reads measurements from stdout lines.
#[derive(Debug, Clone)]
pub struct LineParser {
    metric: String,
}

impl LineParser {
    /// A parser for a study whose objective is `metric`.
    pub fn new(metric: &str) -> Self {
        Self {
            metric: metric.to_string(),
        }
    }

    /// Why `line`, which reports nothing, looks as if it meant to: it gives the objective a
    /// value that is not a number (`loss=0.5abc`).
    pub(crate) fn unreadable(&self, line: &str) -> Option<ReportError> {
        let text = self
            .objective_texts(line)
            .find(|text| parse_number(text).is_none())?;
        Some(ReportError::NotANumber {
            metric: self.metric.clone(),
            text: text.to_string(),
        })
    }

    /// The text of each `metric=TEXT` pair of the objective on `line` (at the line's start
    /// or after a space, `,` or `;`; the text runs to the next of them), whatever it is.
    /// Scanned by hand: a pattern made for the metric would be compiled for every worker.
    fn objective_texts<'a>(&'a self, line: &'a str) -> impl Iterator<Item = &'a str> {
        let separator = |c: char| c.is_whitespace() || c == ',' || c == ';';
        line.match_indices(self.metric.as_str())
            .filter_map(move |(at, name)| {
                if !line[..at].chars().next_back().is_none_or(separator) {
                    return None;
                }
                let value = line[at + name.len()..]
                    .trim_start()
                    .strip_prefix('=')?
                    .trim_start();
                let end = value.find(separator).unwrap_or(value.len());
                Some(&value[..end]).filter(|text| !text.is_empty())
            })
    }

    /// The measurements on one line: none unless the line reports the objective.
    pub fn parse(&self, line: &str) -> Vec<Measurement> {
        let pairs: Vec<(&str, f64)> = PAIR
            .captures_iter(line)
            .filter_map(|c| {
                let key = c.get(1)?.as_str();
                let value = parse_number(c.get(2)?.as_str())?;
                Some((key, value))
            })
            .collect();
        if !pairs.iter().any(|(k, _)| *k == self.metric) {
            return Vec::new();
        }
        let step = pairs
            .iter()
            .find(|(k, _)| STEP_KEYS.contains(k))
            .and_then(|(_, v)| as_step(*v));
        pairs
            .into_iter()
            .filter(|(k, _)| !STEP_KEYS.contains(k))
            .map(|(metric, value)| Measurement {
                step,
                metric: metric.to_string(),
                value,
            })
            .collect()
    }
}

fn parse_number(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    let negative = lower.starts_with('-');
    let value = match unsigned {
        "nan" => f64::NAN,
        "inf" | "infinity" => f64::INFINITY,
        _ => return lower.parse().ok(),
    };
    Some(if negative { -value } else { value })
}

fn as_step(value: f64) -> Option<i64> {
    (value.is_finite() && value.fract() == 0.0).then_some(value as i64)
}

/// Reads the metrics file of `cloudml-hypertune` as it grows, giving each entry once.
#[derive(Debug, Clone)]
pub struct MetricsFileReader {
    seen: HashSet<String>,
}

impl Default for MetricsFileReader {
    fn default() -> Self {
        Self::new()
    }
}

impl MetricsFileReader {
    /// A reader that has seen nothing yet.
    pub fn new() -> Self {
        Self {
            seen: HashSet::new(),
        }
    }

    /// The measurements of entries not read before; a missing file has none. Lines that are
    /// not JSON objects are skipped: the worker may be rewriting the file.
    pub fn read_new(&mut self, path: &Path) -> Vec<Measurement> {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if self.seen.contains(line) {
                continue;
            }
            let Ok(serde_json::Value::Object(entry)) = serde_json::from_str(line) else {
                continue;
            };
            self.seen.insert(line.to_string());
            let number = |v: &serde_json::Value| match v {
                serde_json::Value::Number(n) => n.as_f64(),
                serde_json::Value::String(s) => parse_number(s.trim()),
                _ => None,
            };
            let step = STEP_KEYS
                .iter()
                .find_map(|k| entry.get(*k).and_then(number))
                .and_then(as_step);
            for (key, value) in &entry {
                if STEP_KEYS.contains(&key.as_str()) || FILE_BOOKKEEPING.contains(&key.as_str()) {
                    continue;
                }
                if let Some(value) = number(value) {
                    out.push(Measurement {
                        step,
                        metric: key.clone(),
                        value,
                    });
                }
            }
        }
        out
    }
}

/// Why a worker that exited cleanly still failed its trial.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    /// The objective was never reported.
    #[error(
        "the worker never reported '{0}': print a line '{0}=<value>' or write it with cloudml-hypertune"
    )]
    Missing(String),
    /// The objective was given a value that is not a number.
    #[error("the worker reported {metric}={text}, which is not a number")]
    NotANumber {
        /// The metric.
        metric: String,
        /// The value as printed.
        text: String,
    },
    /// The objective was NaN or infinite.
    #[error("the worker reported {metric}={value}{}", step.map(|s| format!(" at step {s}")).unwrap_or_default())]
    NotFinite {
        /// The metric.
        metric: String,
        /// The value as printed.
        value: f64,
        /// Where.
        step: Option<i64>,
    },
}

/// The trial's final value of `metric` from all its measurements, in the order received.
pub fn final_value(measurements: &[Measurement], metric: &str) -> Result<f64, ReportError> {
    let objective: Vec<&Measurement> = measurements.iter().filter(|m| m.metric == metric).collect();
    if let Some(bad) = objective.iter().find(|m| !m.value.is_finite()) {
        return Err(ReportError::NotFinite {
            metric: metric.to_string(),
            value: bad.value,
            step: bad.step,
        });
    }
    objective
        .iter()
        .rev()
        .find(|m| m.step.is_none())
        .or(objective.last())
        .map(|m| m.value)
        .ok_or_else(|| ReportError::Missing(metric.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(step: Option<i64>, metric: &str, value: f64) -> Measurement {
        Measurement {
            step,
            metric: metric.into(),
            value,
        }
    }

    #[test]
    fn reads_katib_style_lines_that_report_the_objective() {
        let parser = LineParser::new("accuracy");
        assert_eq!(
            parser.parse("epoch 2: step=2 loss=0.31, accuracy = 9.1e-1"),
            vec![m(Some(2), "loss", 0.31), m(Some(2), "accuracy", 0.91)]
        );
        assert_eq!(
            parser.parse("accuracy=0.93"),
            vec![m(None, "accuracy", 0.93)]
        );
        assert!(parser.parse("loss=0.3 lr=1e-3").is_empty());
        assert!(parser.parse("accuracy=high").is_empty());
        assert!(parser.parse("val_accuracy=0.5").is_empty());
    }

    #[test]
    fn names_an_objective_value_that_is_not_a_number() {
        let parser = LineParser::new("loss");
        assert!(parser.parse("step=3 loss=0.5abc").is_empty());
        assert_eq!(
            parser.unreadable("step=3 loss=0.5abc").unwrap().to_string(),
            "the worker reported loss=0.5abc, which is not a number"
        );
        for (line, text) in [("acc=1,loss = 0.5abc;x", "0.5abc"), ("loss=x loss=1", "x")] {
            match parser.unreadable(line) {
                Some(ReportError::NotANumber { text: got, .. }) => assert_eq!(got, text, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        for fine in [
            "loss=0.5",
            "loss = 1e-3, acc=2",
            "val_loss=x",
            "lossy=x",
            "no loss",
        ] {
            assert_eq!(parser.unreadable(fine), None, "{fine}");
        }
    }

    #[test]
    fn a_metric_name_the_lines_cannot_carry_is_refused() {
        for fine in ["loss", "val/acc", "top-1|x", "_a.b", "Accuracy"] {
            assert_eq!(check_metric_name(fine), Ok(()), "{fine}");
            let line = format!("{fine}=0.5");
            assert_eq!(LineParser::new(fine).parse(&line).len(), 1, "{line}");
        }
        for bad in ["acc@1", "1acc", "a b", "loss=", "", "step", "epoch"] {
            assert!(check_metric_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_nan_and_infinity() {
        let parser = LineParser::new("loss");
        assert!(parser.parse("loss=nan")[0].value.is_nan());
        assert_eq!(parser.parse("loss=-inf")[0].value, f64::NEG_INFINITY);
    }

    #[test]
    fn reads_each_metrics_file_entry_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics");
        let mut reader = MetricsFileReader::new();
        assert!(reader.read_new(&path).is_empty());
        let first =
            r#"{"global_step": "1", "accuracy": "0.5", "timestamp": 1525851440.12, "trial": "0"}"#;
        std::fs::write(&path, format!("{first}\n")).unwrap();
        assert_eq!(reader.read_new(&path), vec![m(Some(1), "accuracy", 0.5)]);
        let second =
            r#"{"global_step": 2, "accuracy": 0.75, "timestamp": 1525851441.5, "trial": "0"}"#;
        std::fs::write(&path, format!("{first}\n{second}\n{{\"trunc")).unwrap();
        assert_eq!(reader.read_new(&path), vec![m(Some(2), "accuracy", 0.75)]);
    }

    #[test]
    fn final_value_prefers_the_report_without_a_step() {
        let ms = [
            m(Some(1), "acc", 0.5),
            m(None, "acc", 0.7),
            m(Some(2), "acc", 0.9),
        ];
        assert_eq!(final_value(&ms, "acc"), Ok(0.7));
        assert_eq!(final_value(&ms[..1], "acc"), Ok(0.5));
        assert_eq!(
            final_value(&ms, "loss"),
            Err(ReportError::Missing("loss".into()))
        );
        let nan = [m(Some(3), "acc", f64::NAN)];
        assert_eq!(
            final_value(&nan, "acc").unwrap_err().to_string(),
            "the worker reported acc=NaN at step 3"
        );
    }
}
