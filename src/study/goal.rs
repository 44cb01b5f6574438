//! Whether a study's metric should go up or down.

use serde::{Deserialize, Serialize};

/// Whether the metric should go up or down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// Larger is better (accuracy).
    Maximize,
    /// Smaller is better (loss).
    Minimize,
}

impl Goal {
    /// Whether `a` is strictly better than `b`.
    pub(crate) fn better(self, a: f64, b: f64) -> bool {
        match self {
            Goal::Maximize => a > b,
            Goal::Minimize => a < b,
        }
    }

    /// The goal as written in the study file.
    pub fn as_str(self) -> &'static str {
        match self {
            Goal::Maximize => "maximize",
            Goal::Minimize => "minimize",
        }
    }

    /// Reads `maximize` or `minimize`.
    pub(crate) fn parse(text: &str) -> Option<Goal> {
        match text {
            "maximize" => Some(Goal::Maximize),
            "minimize" => Some(Goal::Minimize),
            _ => None,
        }
    }
}
