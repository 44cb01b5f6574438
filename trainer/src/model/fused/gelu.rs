//! GELU in its erf form (BERT's `hidden_act: gelu`) as one autodiff op, with its own kernels
//! on burn-flex.
//!
//! `y = x * Phi(x)` and `dx = dy * (Phi(x) + x * phi(x))`, where `Phi(x) = (1 + erf(x / sqrt 2)) / 2`
//! and `phi(x) = exp(-x^2 / 2) / sqrt(2 pi)`. burn-flex computes erf with a scalar call per element
//! (libm's `erff`): a tenth of a MiniLM training step went there. The kernels here use the
//! rational approximation of erf that PyTorch's vectorised CPU kernel uses (Abramowitz and
//! Stegun 7.1.26, absolute error below 1.5e-7) with an exponential by range reduction and a
//! polynomial, in straight-line loops the compiler vectorises, on two threads.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::tensor::ops::FloatTensor;

use super::FusedOps;

/// The op's backward step; its state is the input.
#[derive(Debug)]
struct Gelu;

impl<B: FusedOps> Backward<B, 1> for Gelu {
    type State = FloatTensor<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let input = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::gelu_erf_backward(input, grad)
        });
    }
}

/// GELU of `tensor` by the inner backend's [`FusedOps::gelu_erf`], differentiated by [`Gelu`].
pub(super) fn gelu<B: FusedOps, C: CheckpointStrategy>(
    tensor: FloatTensor<Autodiff<B, C>>,
) -> FloatTensor<Autodiff<B, C>> {
    match Gelu
        .prepare::<C>([tensor.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let output = B::gelu_erf(tensor.primitive.clone());
            prep.finish(tensor.primitive, output)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::gelu_erf(tensor.primitive)),
    }
}

/// `exp(x)` for `x <= 0`, relative error below 3e-7: `x = k ln 2 + r` with `|r| <= ln 2 / 2`,
/// `exp(r)` by its Taylor polynomial of degree 6, and `2^k` put in the exponent bits. Every
/// step is arithmetic the compiler vectorises (the rounding is the add-and-subtract of 1.5 * 2^23).
#[inline(always)]
pub(super) fn exp_nonpositive(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    // Below -87, exp(x) is under f32's smallest normal number (and 2^k would not fit the
    // exponent bits): it is taken as 0.
    const LOWEST: f32 = -87.0;
    let small = x < LOWEST;
    let x = x.max(LOWEST);
    // ln 2 in two parts (Cody and Waite): `k * LN2_HIGH` is exact, so `r` keeps its digits.
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    let k = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = (x - k * LN2_HIGH) - k * LN2_LOW;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let value = p * f32::from_bits(((k as i32 + 127) << 23) as u32);
    if small { 0.0 } else { value }
}

/// `Phi(x)` and `phi(x)` (see the module documentation), both from one exponential.
#[inline(always)]
fn cdf_and_pdf(x: f32) -> (f32, f32) {
    // The published constants, digits as printed (more than f32 holds).
    #[allow(clippy::excessive_precision)]
    const P: f32 = 0.327_591_1;
    #[allow(clippy::excessive_precision)]
    const A: [f32; 5] = [
        0.254_829_592,
        -0.284_496_736,
        1.421_413_741,
        -1.453_152_027,
        1.061_405_429,
    ];
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let gauss = exp_nonpositive(-z * z); // exp(-x^2 / 2)
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let erf_abs = 1.0 - poly * gauss;
    let erf = if x < 0.0 { -erf_abs } else { erf_abs };
    let inv_sqrt_2pi = 0.5 * std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
    (0.5 * (1.0 + erf), inv_sqrt_2pi * gauss)
}

/// GELU of each element.
pub(super) fn gelu_values(input: &[f32], output: &mut [f32]) {
    on_two_threads(input, None, output, |x, _| x * cdf_and_pdf(x).0);
}

/// The gradient of GELU at each element of `input` times `grad`.
pub(super) fn gelu_grads(input: &[f32], grad: &[f32], output: &mut [f32]) {
    on_two_threads(input, Some(grad), output, |x, g| {
        let (cdf, pdf) = cdf_and_pdf(x);
        g * (cdf + x * pdf)
    });
}

/// `output[i] = f(a[i], b[i])` (`b[i]` is 0 without `b`), the halves on two threads.
fn on_two_threads(
    a: &[f32],
    b: Option<&[f32]>,
    output: &mut [f32],
    f: impl Fn(f32, f32) -> f32 + Sync,
) {
    let run = |a: &[f32], b: Option<&[f32]>, out: &mut [f32]| match b {
        Some(b) => {
            for ((o, &x), &g) in out.iter_mut().zip(a).zip(b) {
                *o = f(x, g);
            }
        }
        None => {
            for (o, &x) in out.iter_mut().zip(a) {
                *o = f(x, 0.0);
            }
        }
    };
    let mid = a.len() / 2;
    let (a_low, a_high) = a.split_at(mid);
    let (out_low, out_high) = output.split_at_mut(mid);
    let (b_low, b_high) = match b.map(|b| b.split_at(mid)) {
        Some((low, high)) => (Some(low), Some(high)),
        None => (None, None),
    };
    std::thread::scope(|s| {
        s.spawn(|| run(a_high, b_high, out_high));
        run(a_low, b_low, out_low);
    });
}

/// The kernels on burn-flex's tensors, for contiguous `f32` tensors (others get burn-flex's own).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::DType;
    use burn::tensor::ops::{ActivationOps, FloatTensor};
    use burn_flex::FlexTensor;

    /// GELU of each element.
    pub fn gelu(tensor: FloatTensor<Flex>) -> FloatTensor<Flex> {
        let Some(input) = tensor.as_slice::<f32>() else {
            return Flex::gelu(tensor);
        };
        let mut output = FlexTensor::empty(tensor.layout().shape().clone(), DType::F32);
        super::gelu_values(input, output.storage_mut::<f32>());
        output
    }

    /// The gradient of GELU at `input` times `grad`.
    pub fn gelu_backward(input: FloatTensor<Flex>, grad: FloatTensor<Flex>) -> FloatTensor<Flex> {
        let (Some(x), Some(g)) = (input.as_slice::<f32>(), grad.as_slice::<f32>()) else {
            return Flex::gelu_backward(input, grad);
        };
        let mut output = FlexTensor::empty(input.layout().shape().clone(), DType::F32);
        super::gelu_grads(x, g, output.storage_mut::<f32>());
        output
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Tensor, TensorData, activation};

    use super::super::gelu;
    use super::super::test_util::assert_close;
    use super::exp_nonpositive;

    type B = Autodiff<Flex>;

    /// Values from -12 to 12 (where exp(-x^2/2) underflows), zero and both signs included.
    fn inputs(n: usize) -> Tensor<B, 2> {
        let values: Vec<f32> = (0..n)
            .map(|i| -12.0 + 24.0 * i as f32 / (n - 1) as f32)
            .collect();
        Tensor::from_data(TensorData::new(values, [1, n]), &Default::default())
    }

    /// The value and gradient of `sum(f(x) * w)` at `x`, for weights `w` in [-1, 1].
    fn value_and_grad(
        f: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>,
        x: Tensor<B, 2>,
    ) -> (Vec<f32>, Vec<f32>) {
        let x = x.require_grad();
        let n = x.dims()[1];
        let w: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin()).collect();
        let w = Tensor::<B, 2>::from_data(TensorData::new(w, [1, n]), &Default::default());
        let y = f(x.clone());
        let grads = (y.clone() * w).sum().backward();
        let grad = x.grad(&grads).unwrap();
        (
            y.into_data().to_vec().unwrap(),
            grad.into_data().to_vec().unwrap(),
        )
    }

    #[test]
    fn matches_burns_gelu_and_its_gradient() {
        // 2,001 points put x = 0 exactly on one of them; an odd count splits unevenly in two.
        for n in [2001, 7, 2] {
            let (ours, our_grad) = value_and_grad(gelu, inputs(n));
            let (burns, burn_grad) = value_and_grad(activation::gelu, inputs(n));
            assert_close(&ours, &burns, 1e-6);
            assert_close(&our_grad, &burn_grad, 1e-6);
        }
    }

    #[test]
    fn an_untracked_input_gives_the_same_values() {
        let x = inputs(101);
        let ours: Vec<f32> = gelu(x.clone()).into_data().to_vec().unwrap();
        let burns: Vec<f32> = activation::gelu(x).into_data().to_vec().unwrap();
        assert_close(&ours, &burns, 1e-6);
    }

    #[test]
    fn the_exponential_is_within_3e_7_of_std() {
        for i in 0..=100_000 {
            let x = -90.0 * i as f32 / 100_000.0;
            let (ours, std) = (exp_nonpositive(x), x.exp());
            let close = (ours - std).abs() <= 3e-7 * std;
            let flushed = x < -87.0 && ours == 0.0;
            assert!(close || flushed, "exp({x}): {ours} vs {std}");
        }
    }
}
