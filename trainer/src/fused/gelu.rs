//! GELU in its erf form (BERT's `hidden_act: gelu`) as one autodiff op, with its own kernels
//! on burn-flex.
//!
//! `y = x * Phi(x)` and `dx = dy * (Phi(x) + x * phi(x))`, where `Phi(x) = (1 + erf(x / sqrt 2)) / 2`
//! and `phi(x) = exp(-x^2 / 2) / sqrt(2 pi)`. burn-flex computes erf with a scalar call per element
//! (libm's `erff`): a tenth of a MiniLM training step went there. On burn-flex the op runs the
//! vectorised loops of `kernels.rs` instead.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::ops::FloatTensor;

use super::FusedOps;
use super::unary::unary_op;

/// GELU of `tensor` by the inner backend's [`FusedOps::gelu_erf`], differentiated by
/// [`FusedOps::gelu_erf_backward`] at the kept input.
pub(super) fn gelu<B: FusedOps, C: CheckpointStrategy>(
    tensor: FloatTensor<Autodiff<B, C>>,
) -> FloatTensor<Autodiff<B, C>> {
    unary_op::<B, C>(
        tensor,
        |x| (B::gelu_erf(x.clone()), x),
        B::gelu_erf_backward,
    )
}

/// The kernels on burn-flex's tensors, for contiguous `f32` tensors (others get burn-flex's own).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::ops::{ActivationOps, FloatTensor};

    use super::super::kernels;
    use super::super::output::filled;

    /// GELU of each element.
    pub(crate) fn gelu(tensor: FloatTensor<Flex>) -> FloatTensor<Flex> {
        let Some(input) = tensor.as_slice::<f32>() else {
            return Flex::gelu(tensor);
        };
        // SAFETY: the kernel writes every element.
        unsafe { filled(tensor.layout().shape().clone(), |y| kernels::gelu(input, y)) }
    }

    /// The gradient of GELU at `input` times `grad`.
    pub(crate) fn gelu_backward(
        input: FloatTensor<Flex>,
        grad: FloatTensor<Flex>,
    ) -> FloatTensor<Flex> {
        let (Some(x), Some(g)) = (input.as_slice::<f32>(), grad.as_slice::<f32>()) else {
            return Flex::gelu_backward(input, grad);
        };
        // SAFETY: the kernel writes every element.
        unsafe {
            filled(input.layout().shape().clone(), |y| {
                kernels::gelu_grad(x, g, y)
            })
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Tensor, TensorData, activation};

    use super::super::gelu;
    use super::super::test_util::{assert_close, value_and_grad};

    type B = Autodiff<Flex>;

    /// Values from -12 to 12 (where exp(-x^2/2) underflows), zero and both signs included.
    fn inputs(n: usize) -> Tensor<B, 2> {
        let values: Vec<f32> = (0..n)
            .map(|i| -12.0 + 24.0 * i as f32 / (n - 1) as f32)
            .collect();
        Tensor::from_data(TensorData::new(values, [1, n]), &Default::default())
    }

    #[test]
    fn matches_burns_gelu_and_its_gradient() {
        // 2,001 points put x = 0 exactly on one of them; an odd count splits unevenly in two.
        for n in [2001, 7, 2] {
            let (ours, our_grad) = value_and_grad(inputs(n), gelu);
            let (burns, burn_grad) = value_and_grad(inputs(n), activation::gelu);
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
}
