//! The hyperparameters of a proposal: a full fit (several starts) when the history's length
//! reaches a checkpoint, and at every other length a short refit from the last checkpoint's
//! fit. This costs about what warm-starting from the previous proposal costs, yet depends on
//! the history alone, so a restarted study proposes what the first run would have.

use std::hash::{DefaultHasher, Hash, Hasher};

use super::data::TrainingData;
use super::encoding::Encoding;
use crate::gp::{Hyperparameters, fit, refit};
use crate::sampler::Observation;
use crate::study::Goal;
use crate::study::space::ParamValue;

/// Checkpoint fits kept; older ones are dropped.
const KEPT: usize = 4;

/// The largest checkpoint at most `n`: 5, 10, 15, 20, 25, 30, 36, 43, 51, ... (steps of 5
/// or a fifth, whichever is larger), or `n` itself below 5.
pub(super) fn checkpoint(n: usize) -> usize {
    let mut at = 5;
    if n < at {
        return n;
    }
    loop {
        let next = at + (at / 5).max(5);
        if next > n {
            return at;
        }
        at = next;
    }
}

/// A fingerprint of the first trials of a history.
fn fingerprint(history: &[Observation]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for o in history {
        o.number.hash(&mut hasher);
        o.value.map(f64::to_bits).hash(&mut hasher);
        for (id, value) in &o.params {
            id.hash(&mut hasher);
            match value {
                ParamValue::Int(i) => i.hash(&mut hasher),
                ParamValue::Float(x) => x.to_bits().hash(&mut hasher),
                ParamValue::Str(s) => s.hash(&mut hasher),
            }
        }
    }
    hasher.finish()
}

/// The fits at recent checkpoints, by history length and fingerprint.
#[derive(Debug, Clone, Default)]
pub(super) struct Anchors {
    fits: Vec<(usize, u64, Option<Hyperparameters>)>,
}

impl Anchors {
    /// Hyperparameters for `data`, the training data of all of `history`.
    pub(super) fn hyperparameters(
        &mut self,
        encoding: &Encoding<'_>,
        goal: Goal,
        history: &[Observation],
        data: &TrainingData,
    ) -> Option<Hyperparameters> {
        let sharing = encoding.length_sharing();
        let at = checkpoint(history.len());
        let key = fingerprint(&history[..at]);
        let anchor = match self.fits.iter().find(|(n, k, _)| (*n, *k) == (at, key)) {
            Some((_, _, anchor)) => anchor.clone(),
            None => {
                // At a checkpoint the anchor is this history's own fit, kept for the
                // proposals after it.
                let anchor = if at == history.len() {
                    fit(&data.x, &data.y, &sharing)
                } else {
                    TrainingData::new(encoding, goal, &history[..at])
                        .and_then(|earlier| fit(&earlier.x, &earlier.y, &sharing))
                };
                if self.fits.len() == KEPT {
                    self.fits.remove(0);
                }
                self.fits.push((at, key, anchor.clone()));
                anchor
            }
        };
        if at == history.len() {
            return anchor;
        }
        match anchor {
            Some(anchor) => refit(&data.x, &data.y, &sharing, &anchor).or(Some(anchor)),
            None => fit(&data.x, &data.y, &sharing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::{Assignment, ParamValue, Space, unit_double};

    #[test]
    fn the_fit_at_a_checkpoint_is_kept_for_the_proposals_after_it() {
        let space = Space::new(vec![unit_double("a")]);
        let encoding = Encoding::new(&space);
        let history: Vec<Observation> = (0..12u32)
            .map(|n| {
                let a = f64::from(n * 7 % 12) / 11.0;
                Observation {
                    number: u64::from(n),
                    params: Assignment::from([("a".to_string(), ParamValue::Float(a))]),
                    value: Some((6.0 * a).sin()),
                    ..Observation::unconstrained()
                }
            })
            .collect();
        let mut anchors = Anchors::default();
        let data = |n: usize| TrainingData::new(&encoding, Goal::Minimize, &history[..n]).unwrap();
        let at_checkpoint = anchors
            .hyperparameters(&encoding, Goal::Minimize, &history[..10], &data(10))
            .unwrap();
        assert_eq!(anchors.fits.len(), 1, "the fit at 10 is kept");
        assert_eq!(anchors.fits[0].0, 10);
        assert_eq!(anchors.fits[0].2.as_ref(), Some(&at_checkpoint));
        let after = anchors
            .hyperparameters(&encoding, Goal::Minimize, &history[..11], &data(11))
            .unwrap();
        assert_eq!(anchors.fits.len(), 1, "and serves the proposal at 11");
        // A fresh cache gives the same hyperparameters after the checkpoint.
        let fresh = Anchors::default().hyperparameters(
            &encoding,
            Goal::Minimize,
            &history[..11],
            &data(11),
        );
        assert_eq!(fresh, Some(after));
    }

    #[test]
    fn checkpoints_step_by_five_then_by_a_fifth() {
        let points: Vec<usize> = (0..60).map(checkpoint).collect();
        assert_eq!(&points[..7], &[0, 1, 2, 3, 4, 5, 5]);
        assert_eq!(checkpoint(29), 25);
        assert_eq!(checkpoint(30), 30);
        assert_eq!(checkpoint(35), 30);
        assert_eq!(checkpoint(36), 36);
        assert_eq!(checkpoint(50), 43);
        assert!(points.windows(2).all(|w| w[0] <= w[1]));
    }
}
