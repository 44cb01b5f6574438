//! The hyperparameters of a proposal, of the model of final values or of learning curves: a
//! full fit (several starts) when the history's length reaches a checkpoint, and at every
//! other length a short refit from the last checkpoint's fit. This costs about what
//! warm-starting from the previous proposal costs, yet depends on the history alone, so a
//! restarted study proposes what the first run would have.

use std::hash::{DefaultHasher, Hash, Hasher};

use super::data::TrainingData;
use super::encoding::Encoding;
use crate::sampler::Observation;
use crate::study::Goal;
use crate::study::space::ParamValue;
use hptune_gp::{Hyperparameters, LengthSharing, fit, refit};

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

/// A fingerprint of training data.
fn data_fingerprint(x: &[Vec<f64>], y: &[f64]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for (row, value) in x.iter().zip(y) {
        row.iter().for_each(|v| v.to_bits().hash(&mut hasher));
        value.to_bits().hash(&mut hasher);
    }
    hasher.finish()
}

/// Training data: features, and standardised values.
pub(super) type Data = (Vec<Vec<f64>>, Vec<f64>);

/// A checkpoint's fit: the history's length and fingerprint there, the fingerprint of the data
/// drawn from it, and the hyperparameters fitted to that data.
#[derive(Debug, Clone)]
struct Anchor {
    at: usize,
    history: u64,
    data: Option<u64>,
    fit: Option<Hyperparameters>,
}

/// The fits at recent checkpoints, by history length and fingerprint.
#[derive(Debug, Clone, Default)]
pub(super) struct Anchors {
    fits: Vec<Anchor>,
}

impl Anchors {
    /// How many fits are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.fits.len()
    }

    /// Hyperparameters for `data`, the training data of all of `history`.
    pub(super) fn hyperparameters(
        &mut self,
        encoding: &Encoding<'_>,
        goal: Goal,
        history: &[Observation],
        data: &TrainingData,
    ) -> Option<Hyperparameters> {
        self.fitted(
            &encoding.length_sharing(),
            history,
            (&data.x, &data.y),
            |earlier| TrainingData::new(encoding, goal, data.warping, earlier).map(|d| (d.x, d.y)),
        )
    }

    /// Hyperparameters for the training data `x`, `y` of a model of `history` (of its final
    /// values, or of its learning curves, whose data also holds the trials running), the
    /// features' length scales shared as `sharing` says. The anchor is the full fit to the
    /// data `data_of` draws from the history up to its last checkpoint; where that is not
    /// `x`, `y` themselves, a short refit from it follows.
    pub(super) fn fitted(
        &mut self,
        sharing: &LengthSharing,
        history: &[Observation],
        (x, y): (&[Vec<f64>], &[f64]),
        data_of: impl FnOnce(&[Observation]) -> Option<Data>,
    ) -> Option<Hyperparameters> {
        let at = checkpoint(history.len());
        let key = fingerprint(&history[..at]);
        let cached = self.fits.iter().find(|a| (a.at, a.history) == (at, key));
        let anchor = match cached {
            Some(anchor) => anchor.clone(),
            None => {
                let earlier = data_of(&history[..at]);
                let anchor = Anchor {
                    at,
                    history: key,
                    data: earlier.as_ref().map(|(x, y)| data_fingerprint(x, y)),
                    fit: earlier.and_then(|(x, y)| fit(&x, &y, sharing)),
                };
                if self.fits.len() == KEPT {
                    self.fits.remove(0);
                }
                self.fits.push(anchor.clone());
                anchor
            }
        };
        // At a checkpoint of a model of the history alone, the data is the anchor's.
        if anchor.data == Some(data_fingerprint(x, y)) {
            return anchor.fit;
        }
        match anchor.fit {
            Some(anchor) => refit(x, y, sharing, &anchor).or(Some(anchor)),
            None => fit(x, y, sharing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::bayes::data::Warping;
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
        let hyperparameters = |anchors: &mut Anchors, n: usize| {
            let data = TrainingData::new(&encoding, Goal::Minimize, Warping::Fitted, &history[..n])
                .unwrap();
            anchors.hyperparameters(&encoding, Goal::Minimize, &history[..n], &data)
        };
        let mut anchors = Anchors::default();
        let at_checkpoint = hyperparameters(&mut anchors, 10).unwrap();
        assert_eq!(anchors.fits.len(), 1, "the fit at 10 is kept");
        assert_eq!(anchors.fits[0].at, 10);
        assert_eq!(anchors.fits[0].fit.as_ref(), Some(&at_checkpoint));
        let after = hyperparameters(&mut anchors, 11).unwrap();
        assert_eq!(anchors.fits.len(), 1, "and serves the proposal at 11");
        assert_ne!(after, at_checkpoint, "refitted to the eleventh trial");
        // A fresh cache gives the same hyperparameters after the checkpoint.
        let fresh = hyperparameters(&mut Anchors::default(), 11);
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
