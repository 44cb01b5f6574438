//! The `artifacts` block: where the trials' model folders go and how many are kept.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use super::Checker;
use super::raw::RawArtifacts;
use crate::study::Artifacts;

impl Checker<'_> {
    /// Checks `artifacts`: a folder that is not empty, and `keep_best` a whole number from 1.
    pub(super) fn artifacts(&mut self, raw: Option<RawArtifacts>) -> Option<Artifacts> {
        let Some(raw) = raw else {
            return Some(Artifacts::default());
        };
        let dir = match raw.dir {
            Some(dir) if dir.trim().is_empty() => {
                self.report(
                    "artifacts.dir",
                    "must not be empty (leave it out for the default, beside the logs)",
                );
                None
            }
            dir => Some(dir.map(PathBuf::from)),
        };
        let keep_best = match raw.keep_best {
            None => Some(None),
            Some(number) => match number.as_i64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) if n >= 1 => Some(NonZeroUsize::new(n)),
                _ => {
                    self.report(
                        "artifacts.keep_best",
                        format!("must be a whole number from 1, got {number} (leave it out to keep every trial's model)"),
                    );
                    None
                }
            },
        };
        Some(Artifacts {
            dir: dir?,
            keep_best: keep_best?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::parse;

    const STUDY: &str = "name: s\nobjective: {metric: accuracy, goal: maximize}\nparameters:\n  - {id: x, type: double, min: 0, max: 1}\nalgorithm: random\nmax_trial_count: 3\ntrial:\n  command: [w]\n";

    fn keep_best(block: &str) -> Result<Option<usize>, String> {
        parse(Path::new("s.yaml"), &format!("{STUDY}artifacts: {block}\n"))
            .map(|study| study.artifacts.keep_best.map(|n| n.get()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn keep_best_is_a_whole_number_from_one() {
        assert_eq!(keep_best("{keep_best: 2}"), Ok(Some(2)));
        assert_eq!(keep_best("{}"), Ok(None));
        for bad in ["0", "-1", "1.5"] {
            let error = keep_best(&format!("{{keep_best: {bad}}}")).unwrap_err();
            assert!(error.contains("s.yaml:9:"), "{bad}: {error}");
            assert!(error.contains("artifacts.keep_best"), "{bad}: {error}");
        }
    }

    #[test]
    fn an_empty_folder_is_refused_and_a_folder_is_kept_as_written() {
        let error = keep_best("{dir: ''}").unwrap_err();
        assert!(
            error.contains("artifacts.dir: must not be empty"),
            "{error}"
        );
        let study = parse(
            Path::new("s.yaml"),
            &format!("{STUDY}artifacts: {{dir: models/out}}\n"),
        )
        .unwrap();
        assert_eq!(study.artifacts.dir.as_deref(), Some("models/out".as_ref()));
    }
}
