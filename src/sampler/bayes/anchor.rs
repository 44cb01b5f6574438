//! The hyperparameters of a proposal: a full fit (several starts) when the history's length
//! reaches a checkpoint, and at every other length a short refit from the last checkpoint's
//! fit. This costs about what warm-starting from the previous proposal costs, yet depends on
//! the history alone, so a restarted study proposes what the first run would have.

use std::hash::{DefaultHasher, Hash, Hasher};

use super::data::TrainingData;
use super::encoding::Encoding;
use super::fit::{fit, fit_scored, refit};
use super::gp::Hyperparameters;
use crate::sampler::Observation;
use crate::study::Goal;
use crate::study::space::ParamValue;

/// Checkpoint fits kept; older ones are dropped.
const KEPT: usize = 4;

/// The largest checkpoint at most `n`: 5, 10, 15, 20, 25, 30, 36, 43, 51, ... (steps of 5
/// or a fifth, whichever is larger), or `n` itself below 5.
pub fn checkpoint(n: usize) -> usize {
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

/// A checkpoint's fit: the hyperparameters, and whether its model's values were warped.
type Anchor = Option<(Hyperparameters, bool)>;

/// The fit of `data` at a checkpoint. Where its values are warped, the model of the plain
/// values is fitted too, and the warp is kept only if its model explains the values better:
/// a higher log posterior once the warp's log Jacobian is counted (the evidence of a warped
/// Gaussian process, Snelson et al., 2004). The Gaussian likelihood that chose the warp's
/// power sees the values as independent draws; a model of them as a smooth function of the
/// point can explain by itself a skew that the search's own sampling put in them (the many
/// trials near a good point, late in a study).
fn checkpoint_fit(data: &TrainingData) -> Anchor {
    if !data.is_warped() {
        return fit(&data.x, &data.y).map(|hyper| (hyper, false));
    }
    let warped = fit_scored(&data.x, &data.y);
    let plain = fit_scored(&data.x, &data.plain_values());
    match (warped, plain) {
        (Some((warped, with_warp)), Some((plain, without))) => {
            if with_warp + data.warp_log_jacobian() > without {
                Some((warped, true))
            } else {
                Some((plain, false))
            }
        }
        (warped, plain) => warped
            .map(|(hyper, _)| (hyper, true))
            .or(plain.map(|(hyper, _)| (hyper, false))),
    }
}

/// The fits at recent checkpoints, by history length and fingerprint.
#[derive(Debug, Clone, Default)]
pub struct Anchors {
    fits: Vec<(usize, u64, Anchor)>,
}

impl Anchors {
    /// Hyperparameters for `data`, the training data of all of `history`; its values lose
    /// their warp unless the last checkpoint's model kept one.
    pub fn hyperparameters(
        &mut self,
        encoding: &Encoding<'_>,
        goal: Goal,
        history: &[Observation],
        data: &mut TrainingData,
    ) -> Option<Hyperparameters> {
        let at = checkpoint(history.len());
        let key = fingerprint(&history[..at]);
        let anchor = match self.fits.iter().find(|(n, k, _)| (*n, *k) == (at, key)) {
            Some((_, _, anchor)) => anchor.clone(),
            None => {
                // At a checkpoint the anchor is this history's own fit, kept for the
                // proposals after it.
                let anchor = if at == history.len() {
                    checkpoint_fit(data)
                } else {
                    TrainingData::new(encoding, goal, &history[..at])
                        .and_then(|earlier| checkpoint_fit(&earlier))
                };
                if self.fits.len() == KEPT {
                    self.fits.remove(0);
                }
                self.fits.push((at, key, anchor.clone()));
                anchor
            }
        };
        if !anchor.as_ref().is_some_and(|(_, warped)| *warped) {
            data.unwarp();
        }
        if at == history.len() {
            return anchor.map(|(hyper, _)| hyper);
        }
        match anchor {
            Some((anchor, _)) => refit(&data.x, &data.y, &anchor).or(Some(anchor)),
            None => fit(&data.x, &data.y),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::data::tests::history_of;
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
            .hyperparameters(&encoding, Goal::Minimize, &history[..10], &mut data(10))
            .unwrap();
        assert_eq!(anchors.fits.len(), 1, "the fit at 10 is kept");
        assert_eq!(anchors.fits[0].0, 10);
        assert_eq!(
            anchors.fits[0].2.as_ref().map(|(h, _)| h),
            Some(&at_checkpoint)
        );
        let after = anchors
            .hyperparameters(&encoding, Goal::Minimize, &history[..11], &mut data(11))
            .unwrap();
        assert_eq!(anchors.fits.len(), 1, "and serves the proposal at 11");
        // A fresh cache gives the same hyperparameters after the checkpoint.
        let fresh = Anchors::default().hyperparameters(
            &encoding,
            Goal::Minimize,
            &history[..11],
            &mut data(11),
        );
        assert_eq!(fresh, Some(after));
    }

    /// Whether the model of `history` (a checkpoint's length) keeps the warp its values
    /// were given, which must be one.
    fn keeps_the_warp(history: &[Observation]) -> bool {
        let space = Space::new(vec![unit_double("a")]);
        let encoding = Encoding::new(&space);
        let mut data = TrainingData::new(&encoding, Goal::Minimize, history).unwrap();
        assert!(data.is_warped(), "{:?}", data.output.warp());
        let mut anchors = Anchors::default();
        anchors
            .hyperparameters(&encoding, Goal::Minimize, history, &mut data)
            .unwrap();
        assert_eq!(anchors.fits[0].2.as_ref().unwrap().1, data.is_warped());
        data.is_warped()
    }

    #[test]
    fn a_function_spanning_orders_of_magnitude_keeps_its_warp() {
        let points: Vec<f64> = (0..20).map(|i| f64::from(i) / 19.0).collect();
        assert!(keeps_the_warp(&history_of(&points, |a| (9.0 * a).exp())));
    }

    #[test]
    fn a_skew_put_in_by_sampling_near_the_best_point_loses_the_warp() {
        // A Gaussian well, as Hartmann6's terms are: ten trials across it and twenty near its
        // bottom, as a search that has converged leaves them. The values alone look skewed
        // (many near the best, a tail of worse ones: the likelihood test warps them); as a
        // smooth function of the point they need no warp.
        let mut points: Vec<f64> = (0..10).map(|i| f64::from(i) / 9.0).collect();
        points.extend((0..20).map(|i| 0.45 + 0.005 * f64::from(i)));
        let well = |a: f64| -(-((a - 0.5) / 0.2).powi(2)).exp();
        assert!(!keeps_the_warp(&history_of(&points, well)));
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
