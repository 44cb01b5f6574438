//! The Matern-5/2 kernel with one length scale per feature (ARD): twice differentiable, so
//! the model is smooth enough for gradients of the acquisition, yet not as rigid as the
//! squared exponential.

const SQRT5: f64 = 2.236_067_977_499_79;

/// `k(a, b) = s² (1 + √5 r + 5r²/3) exp(-√5 r)`, `r² = Σ_d (a_d - b_d)² / ℓ_d²`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Matern52 {
    inverse_squared_lengths: Vec<f64>,
    variance: f64,
}

impl Matern52 {
    /// A kernel with these length scales (one per feature) and signal variance `s²`.
    pub(crate) fn new(length_scales: &[f64], variance: f64) -> Self {
        Self {
            inverse_squared_lengths: length_scales.iter().map(|l| 1.0 / (l * l)).collect(),
            variance,
        }
    }

    /// The signal variance `s² = k(x, x)`.
    pub(crate) fn variance(&self) -> f64 {
        self.variance
    }

    /// The scaled distance `r` between two points.
    pub(crate) fn distance(&self, a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .zip(&self.inverse_squared_lengths)
            .map(|((x, y), w)| (x - y) * (x - y) * w)
            .sum::<f64>()
            .sqrt()
    }

    /// `k(a, b)`.
    pub(crate) fn value(&self, a: &[f64], b: &[f64]) -> f64 {
        self.of_distance(self.distance(a, b))
    }

    /// `k` as a function of the scaled distance.
    pub(crate) fn of_distance(&self, r: f64) -> f64 {
        let s = SQRT5 * r;
        self.variance * (1.0 + s + s * s / 3.0) * (-s).exp()
    }

    /// `k` and its slope `-(1/r) dk/dr = (5/3) s² (1 + √5 r) exp(-√5 r)` at the scaled
    /// distance `r`, from one exponential. The slope is finite at `r = 0`, and the common
    /// factor of every derivative of `k` (by a coordinate or by a log length scale).
    pub(crate) fn value_and_slope(&self, r: f64) -> (f64, f64) {
        let s = SQRT5 * r;
        let decay = self.variance * (-s).exp();
        (
            decay * (1.0 + s + s * s / 3.0),
            decay * (5.0 / 3.0) * (1.0 + s),
        )
    }

    /// Adds `weight · ∂k(x, b)/∂x` to `gradient`, given the slope of
    /// [`Matern52::value_and_slope`] at the distance of `x` and `b`:
    /// `∂k(x, b)/∂x_d = -slope (x_d - b_d) / ℓ_d²`.
    pub(crate) fn add_gradient(
        &self,
        x: &[f64],
        b: &[f64],
        slope: f64,
        weight: f64,
        gradient: &mut [f64],
    ) {
        let factor = -weight * slope;
        for (((g, xi), bi), w) in gradient
            .iter_mut()
            .zip(x)
            .zip(b)
            .zip(&self.inverse_squared_lengths)
        {
            *g += factor * (xi - bi) * w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_matches_the_closed_form_and_decays_with_distance() {
        let k = Matern52::new(&[0.5, 2.0], 1.5);
        assert_eq!(k.value(&[0.3, 0.1], &[0.3, 0.1]), 1.5);
        // r = sqrt((0.5/0.5)^2 + (1/2)^2) = sqrt(1.25)
        let r = 1.25f64.sqrt();
        let s = 5f64.sqrt() * r;
        let expected = 1.5 * (1.0 + s + s * s / 3.0) * (-s).exp();
        assert!((k.value(&[0.0, 0.0], &[0.5, 1.0]) - expected).abs() < 1e-14);
        assert!(k.value(&[0.0, 0.0], &[1.0, 0.0]) < k.value(&[0.0, 0.0], &[0.5, 0.0]));
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let k = Matern52::new(&[0.3, 0.7, 1.1], 2.0);
        let x = [0.2, 0.5, 0.9];
        let b = [0.4, 0.1, 0.8];
        let mut gradient = vec![0.0; 3];
        let (_, slope) = k.value_and_slope(k.distance(&x, &b));
        k.add_gradient(&x, &b, slope, 1.0, &mut gradient);
        for (d, analytic) in gradient.iter().enumerate() {
            let numeric = super::super::central_difference(|x| k.value(x, &b), &x, d);
            assert!(
                (numeric - analytic).abs() < 1e-7,
                "{d}: {numeric} vs {analytic}"
            );
        }
    }
}
