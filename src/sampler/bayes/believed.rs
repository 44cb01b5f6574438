//! The trial the model believes best: of the succeeded feasible trials, the one of highest posterior
//! mean, fitted to the history as a proposal's model is. Where values are noisy it discounts
//! a trial that stands out by luck, which the best observed value does not.

use super::anchor::Anchors;
use super::data::{TrainingData, Warping};
use super::encoding::Encoding;
use crate::sampler::Observation;
use crate::study::Goal;
use crate::study::space::Space;
use hptune_gp::{Gp, GpError};

/// A trial and the value the model expects of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Believed {
    /// The trial's number.
    pub number: u64,
    /// The model's value at its parameters (the warped posterior mean, mapped back to the
    /// metric's units).
    pub value: f64,
}

/// The succeeded feasible trial of `history` (finished trials) whose posterior mean is best
/// for `goal`, in the model the sampler fits for a study over `space` with a trial budget of
/// `budget` (`None`: no limit); `None` when none succeeded feasibly.
pub(crate) fn believed_best(
    space: &Space,
    budget: Option<u64>,
    goal: Goal,
    history: &[Observation],
) -> Result<Option<Believed>, GpError> {
    let encoding = Encoding::new(space);
    let warping = Warping::of(space, budget);
    let Some(data) = TrainingData::new(&encoding, goal, warping, history) else {
        return Ok(None);
    };
    let hyper = Anchors::default()
        .hyperparameters(&encoding, goal, history, &data)
        .ok_or(GpError::NotPositiveDefinite { size: data.x.len() })?;
    let output = data.output;
    let gp = Gp::new(data.x, &data.y, &hyper)?;
    let succeeded: Vec<&Observation> = history
        .iter()
        .filter(|o| o.value.is_some() && o.feasible)
        .collect();
    let points: Vec<Vec<f64>> = succeeded
        .iter()
        .map(|o| encoding.encode(&o.params))
        .collect();
    let best = succeeded
        .iter()
        .zip(gp.predict_many(&points))
        // The first of equal means.
        .reduce(|a, b| if b.1.0 > a.1.0 { b } else { a });
    Ok(best.map(|(o, (mean, _))| Believed {
        number: o.number,
        value: output.value(mean),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::{Assignment, ParamValue, unit_double};

    #[test]
    fn a_lucky_outlier_in_noise_is_not_believed_best() {
        // A bowl with its bottom at 0.5, noise of ±0.05 and one trial 0.7 below its
        // neighbours by luck, far from the bottom.
        let space = Space::new(vec![unit_double("a")]);
        let history: Vec<Observation> = (0..40u32)
            .map(|n| {
                let a = f64::from(n) / 39.0;
                let noise = 0.05 * (f64::from(n) * 2.3).sin();
                let luck = if n == 5 { -0.7 } else { 0.0 };
                Observation {
                    number: u64::from(n),
                    params: Assignment::from([("a".to_string(), ParamValue::Float(a))]),
                    value: Some((a - 0.5).powi(2) * 4.0 + noise + luck),
                    ..Observation::unconstrained()
                }
            })
            .collect();
        let observed = history
            .iter()
            .min_by(|a, b| a.value.unwrap().total_cmp(&b.value.unwrap()))
            .unwrap();
        assert_eq!(observed.number, 5, "the lucky trial is the best observed");
        let believed = believed_best(&space, None, Goal::Minimize, &history)
            .unwrap()
            .unwrap();
        assert!(
            (17..=22).contains(&believed.number),
            "{believed:?} is not near the bottom"
        );
        assert!(believed.value.abs() < 0.1, "{believed:?}");
    }

    #[test]
    fn an_infeasible_trial_is_never_believed_best() {
        let space = Space::new(vec![unit_double("a")]);
        let at = |number: u64, a: f64, feasible| Observation {
            number,
            params: Assignment::from([("a".to_string(), ParamValue::Float(a))]),
            value: Some(a),
            feasible,
            ..Observation::unconstrained()
        };
        let history: Vec<Observation> = (0..8u32)
            .map(|n| at(u64::from(n), f64::from(n) / 7.0, n < 6))
            .collect();
        let believed = believed_best(&space, None, Goal::Maximize, &history)
            .unwrap()
            .unwrap();
        assert_eq!(believed.number, 5);
        let mut none_feasible = history;
        none_feasible.iter_mut().for_each(|o| o.feasible = false);
        assert_eq!(
            believed_best(&space, None, Goal::Maximize, &none_feasible),
            Ok(None)
        );
    }

    #[test]
    fn no_succeeded_trial_believes_none() {
        let space = Space::new(vec![unit_double("a")]);
        let failed = Observation {
            number: 0,
            params: Assignment::from([("a".to_string(), ParamValue::Float(0.2))]),
            value: None,
            ..Observation::unconstrained()
        };
        assert_eq!(
            believed_best(&space, None, Goal::Maximize, &[failed]),
            Ok(None)
        );
    }
}
