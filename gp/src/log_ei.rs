//! Log expected improvement, computed so that it stays finite and informative far from the
//! incumbent, where plain EI underflows to zero and its gradient vanishes (Ament et al.,
//! "Unexpected improvements to expected improvement", 2023).
//!
//! With `z = (μ - best) / σ`, `EI = σ h(z)` and `h(z) = z Φ(z) + φ(z)`. For `z ≥ -5`, `h` is
//! computed directly; below, `h(z) = φ(z) · c(t) · R(t)` with `t = -z`, the Mills ratio
//! `R(t) = Φ(-t)/φ(t)` and `c(t) = (1 - t R(t)) / R(t)`, both from the continued fraction
//! `R(t) = 1/(t + 1/(t + 2/(t + 3/(t + …))))`, which has no cancellation.

use std::f64::consts::{FRAC_1_SQRT_2, PI};

use super::model::Prediction;

/// Below this `z`, `h` comes from the continued fraction.
const TAIL: f64 = -5.0;
/// Beyond this `t`, `R(t)` and `c(t)` are `1/t` to double precision (their next terms are
/// `1/t³`).
const FAR: f64 = 1e8;

fn log_phi(z: f64) -> f64 {
    -0.5 * z * z - 0.5 * (2.0 * PI).ln()
}

fn cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z * FRAC_1_SQRT_2)
}

/// Terms of the continued fraction that give `R(t)` and `c(t)` to within a few units in the
/// last place for `t ≥ 5`: 27 at `t = 5`, fewer further out, where it converges faster (a
/// deeper fraction changes neither by more than 4e-16 anywhere above 5).
fn depth(t: f64) -> usize {
    (5.0 + 110.0 / t).ceil() as usize
}

/// `(R(t), c(t))` for `t ≥ 5`, where `1 - t R(t) = c(t) R(t)`.
fn mills(t: f64) -> (f64, f64) {
    if t > FAR {
        return (1.0 / t, 1.0 / t);
    }
    // c(t) = 1/(t + 2/(t + 3/(t + …))), R(t) = 1/(t + c(t)). The tail of the fraction from
    // term k in is kept as p/q, from the innermost term out: t + k/(p/q) = (t p + k q)/p, so
    // the loop multiplies rather than divides (its values stay far below overflow: under
    // 1e45 at this depth).
    let (mut p, mut q) = (t, 1.0);
    for k in (2..depth(t)).rev() {
        (p, q) = (t * p + k as f64 * q, p);
    }
    (p / (t * p + q), q / p)
}

/// `log h(z)` and `Φ(z)/h(z)`, `φ(z)/h(z)` (the factors of its derivatives by μ and σ).
pub(crate) fn log_h(z: f64) -> (f64, f64, f64) {
    if z >= TAIL {
        let phi = log_phi(z).exp();
        let big_phi = cdf(z);
        let h = (z * big_phi + phi).max(f64::MIN_POSITIVE);
        (h.ln(), big_phi / h, phi / h)
    } else {
        let (r, c) = mills(-z);
        // h = φ c R, Φ(z) = φ R.
        (log_phi(z) + (c * r).ln(), 1.0 / c, 1.0 / (c * r))
    }
}

/// `log Φ(z)` and `φ(z)/Φ(z)` (the factor of its derivative), finite far in the lower tail,
/// where `Φ(z) = φ(z) R(-z)`.
pub fn log_cdf(z: f64) -> (f64, f64) {
    if z >= TAIL {
        let big_phi = cdf(z);
        (big_phi.ln(), log_phi(z).exp() / big_phi)
    } else {
        let (r, _) = mills(-z);
        (log_phi(z) + r.ln(), 1.0 / r)
    }
}

/// `log EI` of a maximisation at mean `mean` and variance `variance`, above `best`.
pub fn log_ei(mean: f64, variance: f64, best: f64) -> f64 {
    let sigma = variance.sqrt();
    log_h((mean - best) / sigma).0 + sigma.ln()
}

/// `log EI` at a prediction, and its gradient by the point's features.
pub fn log_ei_with_gradient(prediction: &Prediction, best: f64) -> (f64, Vec<f64>) {
    let sigma = prediction.variance.sqrt();
    let z = (prediction.mean - best) / sigma;
    let (log_h, cdf_over_h, pdf_over_h) = log_h(z);
    // d EI = Φ dμ + φ dσ, so d log EI = (Φ dμ + φ dσ) / (σ h); dσ = dvar / (2σ).
    let gradient = prediction
        .mean_gradient
        .iter()
        .zip(&prediction.variance_gradient)
        .map(|(dm, dv)| (cdf_over_h * dm + pdf_over_h * dv / (2.0 * sigma)) / sigma)
        .collect();
    (log_h + sigma.ln(), gradient)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct_h(z: f64) -> f64 {
        z * cdf(z) + log_phi(z).exp()
    }

    #[test]
    fn log_h_agrees_with_the_direct_formula_on_both_sides_of_the_switch() {
        for z in [3.0, 0.0, -2.0, -4.99, -5.01, -7.0, -12.0] {
            let exact = direct_h(z).ln();
            let (ours, _, _) = log_h(z);
            // The direct formula loses digits to cancellation as z falls; 1e-6 is its
            // accuracy at z = -12.
            assert!((ours - exact).abs() < 1e-6, "z={z}: {ours} vs {exact}");
        }
    }

    #[test]
    fn the_mills_ratio_agrees_with_erfc_near_and_with_its_asymptotic_series_far() {
        // Near: R(t) = Φ(-t)/φ(t), from erfc, accurate while e^(t²/2) keeps its digits.
        for i in 0..=210 {
            let t = 5.0 + 0.1 * i as f64;
            let exact = cdf(-t) / log_phi(t).exp();
            let (r, c) = mills(t);
            assert!((r / exact - 1.0).abs() < 1e-12, "t={t}: R {r} vs {exact}");
            // c = (1 - tR)/R loses t² digits to cancellation in the reference.
            let exact_c = (1.0 - t * exact) / exact;
            assert!(
                (c / exact_c - 1.0).abs() < 1e-9,
                "t={t}: c {c} vs {exact_c}"
            );
        }
        // Far: R(t) = (1/t) Σ (-1)^k (2k-1)!! / t^(2k), and 1 - tR(t) likewise, the series
        // cut where its terms fall under 1e-17 of the first.
        for i in 0..=350 {
            let t = 40.0 * 10f64.powf(i as f64 / 50.0);
            let (mut r, mut rest, mut term) = (0.0, 0.0, 1.0);
            for k in 0..12 {
                r += term;
                if k > 0 {
                    rest -= term;
                }
                term *= -(2.0 * k as f64 + 1.0) / (t * t);
            }
            let (exact_r, exact_c) = (r / t, rest / (r / t));
            let (r, c) = mills(t);
            assert!(
                (r / exact_r - 1.0).abs() < 1e-15,
                "t={t}: R {r} vs {exact_r}"
            );
            assert!(
                (c / exact_c - 1.0).abs() < 1e-14,
                "t={t}: c {c} vs {exact_c}"
            );
        }
    }

    #[test]
    fn log_h_stays_finite_and_follows_the_asymptote_far_in_the_tail() {
        // h(z) ~ φ(z)/z² for z → -∞.
        for z in [-40.0, -100.0, -1e4] {
            let (ours, a, b) = log_h(z);
            let asymptote = log_phi(z) - 2.0 * (-z).ln();
            assert!(
                (ours - asymptote).abs() < 1e-2,
                "z={z}: {ours} vs {asymptote}"
            );
            assert!(a.is_finite() && b.is_finite());
        }
        let (left, _, _) = log_h(-40.0);
        let (right, _, _) = log_h(-39.0);
        assert!(left < right);
    }

    #[test]
    fn log_cdf_agrees_with_erfc_and_follows_the_tail_asymptote() {
        for z in [4.0, 0.3, -2.0, -4.99, -5.01, -9.0, -20.0] {
            let exact = cdf(z).ln();
            let (ours, ratio) = log_cdf(z);
            assert!(
                (ours - exact).abs() < 1e-9 * exact.abs().max(1.0),
                "z={z}: {ours} vs {exact}"
            );
            let exact_ratio = log_phi(z).exp() / cdf(z);
            assert!((ratio - exact_ratio).abs() < 1e-8 * exact_ratio, "z={z}");
        }
        // Φ(z) ~ φ(z)/(-z) for z → -∞, where erfc underflows.
        let (far, ratio) = log_cdf(-60.0);
        assert!((far - (log_phi(-60.0) - 60f64.ln())).abs() < 1e-3, "{far}");
        assert!((ratio - 60.0).abs() < 0.1, "{ratio}");
    }

    #[test]
    fn gradient_matches_finite_differences_in_and_out_of_the_tail() {
        // A prediction whose mean and variance are linear in x: μ = a·x, var = v0 + b·x.
        let a = [0.8, -0.3];
        let b = [0.05, 0.02];
        let at = |x: &[f64], shift: f64| {
            let mean = a[0] * x[0] + a[1] * x[1] - shift;
            let variance = 0.1 + b[0] * x[0] + b[1] * x[1];
            Prediction {
                mean,
                variance,
                mean_gradient: a.to_vec(),
                variance_gradient: b.to_vec(),
            }
        };
        for shift in [0.0, 3.0, 30.0] {
            let x = [0.4, 0.7];
            let (_, gradient) = log_ei_with_gradient(&at(&x, shift), 0.2);
            for (d, analytic) in gradient.iter().enumerate() {
                let value = |x: &[f64]| {
                    let p = at(x, shift);
                    log_ei(p.mean, p.variance, 0.2)
                };
                let numeric = super::super::central_difference(value, &x, d);
                assert!(
                    (numeric - analytic).abs() < 1e-5 * (1.0 + numeric.abs()),
                    "shift {shift}, d {d}: {numeric} vs {analytic}"
                );
            }
        }
    }
}
