//! `warm_start`: the study whose finished trials inform the model, and the values its trials
//! ran with for the parameters this study adds.

use super::Checker;
use super::raw::RawWarmStart;
use crate::study::WarmStart;
use crate::study::space::{Assignment, Space};

impl Checker<'_> {
    /// Checks `warm_start`: a study other than this one (`name`), and each of `values` a
    /// parameter of `space` with a value in its domain. Whether the other study tuned them is
    /// known only when the run reads it. `values` is unchecked while the space is broken.
    pub(super) fn warm_start(
        &mut self,
        raw: Option<RawWarmStart>,
        name: &str,
        space: Option<&Space>,
    ) -> Option<Option<WarmStart>> {
        let Some(raw) = raw else {
            return Some(None);
        };
        let mut ok = true;
        if raw.study == name {
            self.report(
                "warm_start.study",
                "names this study itself: name another one",
            );
            ok = false;
        } else if raw.study.trim().is_empty() {
            self.report("warm_start.study", "must not be empty");
            ok = false;
        }
        let mut values = Assignment::new();
        // Without a space (it failed to parse, and says so) the values cannot be checked.
        if let Some(space) = space {
            for (id, value) in raw.values.unwrap_or_default() {
                let field = format!("warm_start.values.{id}");
                let Some(parameter) = space.get(&id) else {
                    self.report(field, "is not a parameter of this study");
                    ok = false;
                    continue;
                };
                match parameter.domain.parse(&value.as_text()) {
                    Ok(value) => {
                        values.insert(id, value);
                    }
                    Err(message) => {
                        self.report(field, message);
                        ok = false;
                    }
                }
            }
        }
        ok.then_some(Some(WarmStart {
            study: raw.study,
            values,
        }))
    }
}
