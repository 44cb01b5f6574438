//! Local minimisation with argmin's L-BFGS, shared by the hyperparameter fit and the
//! acquisition refinement.

use std::cell::{Cell, RefCell};

use argmin::core::{CostFunction, Error, Executor, Gradient};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;

/// Number of past steps L-BFGS keeps.
const MEMORY: usize = 7;

/// A point, the function's value there and its gradient.
type Evaluation = (Vec<f64>, f64, Vec<f64>);

/// A function returning its value and gradient together, evaluated once per point even though
/// argmin asks for the two separately; it remembers the best finite point it saw.
struct Problem<'a, F> {
    function: &'a F,
    evaluations: Cell<u64>,
    max_evaluations: u64,
    last: RefCell<Option<Evaluation>>,
    best: &'a RefCell<Option<(Vec<f64>, f64)>>,
}

impl<F: Fn(&[f64]) -> Option<(f64, Vec<f64>)>> Problem<'_, F> {
    /// The value and gradient at `x`; an error once the budget of evaluations is spent,
    /// which ends argmin's run.
    fn evaluate(&self, x: &[f64]) -> Result<(f64, Vec<f64>), Error> {
        if let Some((at, value, gradient)) = self.last.borrow().as_ref()
            && at == x
        {
            return Ok((*value, gradient.clone()));
        }
        if self.evaluations.get() >= self.max_evaluations {
            return Err(Error::msg("the budget of evaluations is spent"));
        }
        self.evaluations.set(self.evaluations.get() + 1);
        let (value, gradient) = match (self.function)(x) {
            Some((v, g)) if v.is_finite() && g.iter().all(|g| g.is_finite()) => (v, g),
            _ => (f64::INFINITY, vec![0.0; x.len()]),
        };
        if value.is_finite() && self.best.borrow().as_ref().is_none_or(|(_, b)| value < *b) {
            *self.best.borrow_mut() = Some((x.to_vec(), value));
        }
        *self.last.borrow_mut() = Some((x.to_vec(), value, gradient.clone()));
        Ok((value, gradient))
    }
}

impl<F: Fn(&[f64]) -> Option<(f64, Vec<f64>)>> CostFunction for Problem<'_, F> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Self::Param) -> Result<Self::Output, Error> {
        Ok(self.evaluate(x)?.0)
    }
}

impl<F: Fn(&[f64]) -> Option<(f64, Vec<f64>)>> Gradient for Problem<'_, F> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;

    fn gradient(&self, x: &Self::Param) -> Result<Self::Gradient, Error> {
        Ok(self.evaluate(x)?.1)
    }
}

/// Minimises `function` (value and gradient, `None` where it is undefined) over the box
/// `[lower, upper]` from `start` (inside it) with at most `max_evaluations` evaluations of
/// `function` (the line search may take several per iteration). Returns the best point seen
/// and its value, or `None` when no point had a finite value.
///
/// argmin's L-BFGS knows no bounds: it runs on `φ` with `x = lower + (upper - lower)
/// (1 - cos φ) / 2`, which maps every real `φ` into the box, so even a wild first step lands
/// on a finite value the line search can work with. A failure of the line search ends the
/// run early; it is not an error.
pub(crate) fn minimize<F>(
    function: F,
    start: &[f64],
    lower: &[f64],
    upper: &[f64],
    max_evaluations: u64,
) -> Option<(Vec<f64>, f64)>
where
    F: Fn(&[f64]) -> Option<(f64, Vec<f64>)>,
{
    let to_box = |phi: &[f64]| -> Vec<f64> {
        phi.iter()
            .zip(lower.iter().zip(upper))
            .map(|(p, (lo, hi))| lo + (hi - lo) * (1.0 - p.cos()) / 2.0)
            .collect()
    };
    let in_phi = |phi: &[f64]| {
        let (value, gradient) = function(&to_box(phi))?;
        let chained = gradient
            .iter()
            .zip(phi)
            .zip(lower.iter().zip(upper))
            .map(|((g, p), (lo, hi))| g * (hi - lo) * p.sin() / 2.0)
            .collect();
        Some((value, chained))
    };
    let phi0: Vec<f64> = start
        .iter()
        .zip(lower.iter().zip(upper))
        .map(|(x, (lo, hi))| {
            let unit = if hi > lo { (x - lo) / (hi - lo) } else { 0.0 };
            (1.0 - 2.0 * unit).clamp(-1.0, 1.0).acos()
        })
        .collect();
    let best = RefCell::new(None);
    let problem = Problem {
        function: &in_phi,
        evaluations: Cell::new(0),
        max_evaluations: max_evaluations.max(1),
        last: RefCell::new(None),
        best: &best,
    };
    let _ = problem.evaluate(&phi0);
    best.borrow().as_ref()?;
    let solver: LBFGS<_, Vec<f64>, Vec<f64>, f64> =
        LBFGS::new(MoreThuenteLineSearch::new(), MEMORY);
    // The problem keeps its own record of the best point, which also covers the points
    // argmin saw before an error (a failed line search, the budget spent); the error itself
    // only ends the search.
    let _ = Executor::new(problem, solver)
        .configure(|state| state.param(phi0).max_iters(max_evaluations))
        .timer(false)
        .run();
    best.into_inner().map(|(phi, value)| (to_box(&phi), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_minimum_of_a_rosenbrock_valley() {
        let rosenbrock = |x: &[f64]| {
            let (a, b) = (x[0], x[1]);
            Some((
                (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2),
                vec![
                    -2.0 * (1.0 - a) - 400.0 * a * (b - a * a),
                    200.0 * (b - a * a),
                ],
            ))
        };
        let (x, value) =
            minimize(rosenbrock, &[-1.2, 1.0], &[-5.0, -5.0], &[5.0, 5.0], 1000).unwrap();
        assert!(value < 1e-8, "{value} at {x:?}");
    }

    #[test]
    fn stays_in_the_box_and_survives_undefined_regions() {
        // The minimum of (x - 3)² on [0, 1] is at the bound, from a start with a steep slope.
        let parabola = |x: &[f64]| Some(((x[0] - 3.0).powi(2), vec![2.0 * (x[0] - 3.0)]));
        let (x, _) = minimize(parabola, &[0.2], &[0.0], &[1.0], 50).unwrap();
        assert!((0.999..=1.0).contains(&x[0]), "{x:?}");
        assert!(minimize(|_: &[f64]| None, &[0.0], &[-1.0], &[1.0], 10).is_none());
        // The budget of evaluations is kept.
        let count = Cell::new(0);
        let counted = |x: &[f64]| {
            count.set(count.get() + 1);
            parabola(x)
        };
        minimize(counted, &[0.2], &[0.0], &[1.0], 4);
        assert!(count.get() <= 4, "{} evaluations", count.get());
        // Undefined (None) below 0.5: a step into it ends the search, which still returns
        // the best defined point, better than the start.
        let half =
            |x: &[f64]| (x[0] >= 0.5).then(|| ((x[0] - 1.0).powi(2), vec![2.0 * (x[0] - 1.0)]));
        let (x, value) = minimize(half, &[2.0], &[0.0], &[10.0], 50).unwrap();
        assert!((0.5..2.0).contains(&x[0]) && value < 1.0, "{x:?}");
    }
}
