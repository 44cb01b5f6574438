//! The worker protocol: one `key=value` line per evaluation on stdout, and the metrics file in
//! `cloudml-hypertune`'s format when the controller asks for it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Result, TrainerError};
use crate::memory::PeakMemory;
use crate::metrics::{EvalMetrics, Metric};

/// Environment variable naming the metrics file (hptune's name).
pub(crate) const METRICS_FILE_ENV: &str = "HPTUNE_METRICS_FILE";
/// Environment variable naming the metrics file (cloudml-hypertune's name).
pub(crate) const CLOUDML_METRICS_FILE_ENV: &str = "CLOUD_ML_HP_METRIC_FILE";
/// Environment variable holding the trial's id.
pub(crate) const TRIAL_ID_ENV: &str = "HPTUNE_TRIAL_ID";
/// The start of the line that says a run resumed from a checkpoint.
pub(crate) const RESUMED_PREFIX: &str = "hptune: resumed";
/// cloudml-hypertune keeps at most this many lines in the file.
pub(crate) const MAX_FILE_LINES: usize = 100;

/// What a run cost, reported on the final line after its metrics, for studies that trade
/// quality against size, speed or memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RunCosts {
    /// The model's parameter count (`parameters`).
    pub parameters: usize,
    /// Milliseconds per sample of the last evaluation (`eval_ms_per_sample`).
    pub eval_ms_per_sample: f64,
    /// The run's peak memory (`peak_memory_bytes` on a GPU, `peak_rss_bytes` on the CPU).
    pub peak_memory: PeakMemory,
}

impl RunCosts {
    /// ` parameters=N eval_ms_per_sample=X peak_memory_bytes=N`, as appended to the final line.
    fn format(&self) -> String {
        let (memory_key, memory) = self.peak_memory.key_value();
        format!(
            " parameters={} eval_ms_per_sample={} {memory_key}={memory}",
            self.parameters,
            format_value(self.eval_ms_per_sample)
        )
    }
}

/// Sends measurements to the controller.
#[derive(Debug)]
pub(crate) struct Reporter<W: Write> {
    out: W,
    objective: Metric,
    metrics_file: Option<PathBuf>,
    trial: String,
    file_lines: Vec<String>,
    last_step: usize,
}

impl Reporter<std::io::Stdout> {
    /// A reporter on stdout, with the metrics file and trial id from the environment.
    pub(crate) fn from_env(objective: Metric) -> Self {
        let file = std::env::var_os(METRICS_FILE_ENV)
            .or_else(|| std::env::var_os(CLOUDML_METRICS_FILE_ENV))
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let trial = std::env::var(TRIAL_ID_ENV).unwrap_or_default();
        Reporter::new(std::io::stdout(), objective, file, trial)
    }
}

impl<W: Write> Reporter<W> {
    /// A reporter writing lines to `out` and, if given, the metrics file.
    pub(crate) fn new(
        out: W,
        objective: Metric,
        metrics_file: Option<PathBuf>,
        trial: String,
    ) -> Self {
        Reporter {
            out,
            objective,
            metrics_file,
            trial,
            file_lines: Vec::new(),
            last_step: 0,
        }
    }

    /// Reports the evaluation after epoch `step` (1-based) as an intermediate measurement.
    pub(crate) fn report_step(&mut self, step: usize, metrics: &EvalMetrics) -> Result<()> {
        self.last_step = step;
        let line = format_line(Some(step), metrics, self.objective);
        self.emit(&line, step, metrics)
    }

    /// Says that the run resumed from a checkpoint, on a line of its own that reports no
    /// measurement (docs/worker-protocol.md): `hptune: resumed step=E training_step=S`, `E`
    /// the last epoch it had reported (0: none), `S` the optimiser steps it had done.
    pub(crate) fn report_resumed(
        &mut self,
        reported_step: usize,
        training_step: usize,
    ) -> Result<()> {
        self.last_step = reported_step;
        writeln!(
            self.out,
            "{RESUMED_PREFIX} step={reported_step} training_step={training_step}"
        )
        .and_then(|_| self.out.flush())
        .map_err(|e| TrainerError::io("<stdout>", "writing", e))
    }

    /// Reports the final values (a line without `step`), the run's costs after the metrics.
    pub(crate) fn report_final(&mut self, metrics: &EvalMetrics, costs: &RunCosts) -> Result<()> {
        let line = format_line(None, metrics, self.objective) + &costs.format();
        self.emit(&line, self.last_step, metrics)
    }

    /// The writer, for tests.
    #[cfg(test)]
    pub(crate) fn into_inner(self) -> W {
        self.out
    }

    fn emit(&mut self, line: &str, step: usize, metrics: &EvalMetrics) -> Result<()> {
        writeln!(self.out, "{line}")
            .and_then(|_| self.out.flush())
            .map_err(|e| TrainerError::io("<stdout>", "writing", e))?;
        if let Some(path) = self.metrics_file.clone() {
            let timestamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let record = serde_json::json!({
                "global_step": step.to_string(),
                self.objective.name(): format_value(metrics.get(self.objective)),
                "timestamp": timestamp,
                "trial": self.trial,
            });
            self.file_lines.push(record.to_string());
            if self.file_lines.len() > MAX_FILE_LINES {
                self.file_lines.remove(0);
            }
            write_atomically(&path, &(self.file_lines.join("\n") + "\n"))?;
        }
        Ok(())
    }
}

/// `step=2 loss=0.41 accuracy=0.89 macro_f1=0.88 mcc=0.78`, or without step the final line with
/// the objective first.
pub(crate) fn format_line(step: Option<usize>, metrics: &EvalMetrics, objective: Metric) -> String {
    let mut order = vec![objective];
    order.extend(
        [Metric::Loss, Metric::Accuracy, Metric::MacroF1, Metric::Mcc]
            .into_iter()
            .filter(|m| *m != objective),
    );
    let mut parts: Vec<String> = step.map(|s| format!("step={s}")).into_iter().collect();
    parts.extend(
        order
            .iter()
            .map(|m| format!("{}={}", m.name(), format_value(metrics.get(*m)))),
    );
    parts.join(" ")
}

fn format_value(value: f64) -> String {
    format!("{value:.6}")
}

fn write_atomically(path: &Path, content: &str) -> Result<()> {
    let tmp = path.with_extension("tmp-hptune-trainer");
    std::fs::write(&tmp, content).map_err(|e| TrainerError::io(&tmp, "writing", e))?;
    std::fs::rename(&tmp, path).map_err(|e| TrainerError::io(path, "renaming onto", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(accuracy: f64) -> EvalMetrics {
        EvalMetrics {
            loss: 0.5,
            accuracy,
            macro_f1: 0.25,
            mcc: -0.125,
        }
    }

    #[test]
    fn step_lines_and_final_line_follow_the_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("metrics.jsonl");
        let mut reporter =
            Reporter::new(Vec::new(), Metric::Accuracy, Some(file.clone()), "7".into());
        reporter.report_step(1, &metrics(0.75)).unwrap();
        reporter.report_step(2, &metrics(0.875)).unwrap();
        let costs = RunCosts {
            parameters: 4_386_178,
            eval_ms_per_sample: 0.0625,
            peak_memory: PeakMemory::Device(1 << 31),
        };
        reporter.report_final(&metrics(0.875), &costs).unwrap();
        let out = String::from_utf8(reporter.into_inner()).unwrap();
        assert_eq!(
            out,
            "step=1 accuracy=0.750000 loss=0.500000 macro_f1=0.250000 mcc=-0.125000\n\
             step=2 accuracy=0.875000 loss=0.500000 macro_f1=0.250000 mcc=-0.125000\n\
             accuracy=0.875000 loss=0.500000 macro_f1=0.250000 mcc=-0.125000 \
             parameters=4386178 eval_ms_per_sample=0.062500 peak_memory_bytes=2147483648\n"
        );
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1]["global_step"], "2");
        assert_eq!(lines[1]["accuracy"], "0.875000");
        assert_eq!(lines[1]["trial"], "7");
        assert!(lines[1]["timestamp"].as_f64().unwrap() > 1.0e9);
    }

    #[test]
    fn metrics_file_keeps_the_last_hundred_reports() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m");
        let mut reporter = Reporter::new(Vec::new(), Metric::Loss, Some(file.clone()), "0".into());
        for step in 1..=105 {
            reporter.report_step(step, &metrics(0.5)).unwrap();
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), MAX_FILE_LINES);
        assert!(lines[0].contains("\"global_step\":\"6\""));
        assert!(lines[0].contains("\"loss\":\"0.500000\""));
    }
}
