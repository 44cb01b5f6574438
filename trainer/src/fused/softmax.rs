//! Attention's softmax as one autodiff op: `y = softmax(x + bias)` over the last dimension,
//! `bias` a constant (the padding mask) shared by the rows of a sequence, and
//! `dx = y * (dy - sum(dy * y))`.
//!
//! burn-flex adds a `[batch, 1, 1, seq]` bias to `[batch, heads, seq, seq]` scores by walking
//! the broadcast one element at a time, and its softmax takes libm's scalar `expf` per element;
//! on burn-flex the forward pass here is one loop of `kernels.rs` that adds the bias row,
//! subtracts the row's maximum and exponentiates.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{TensorMetadata, backend::Backend};

use super::FusedOps;
use super::rows::as_rows;
use super::unary::unary_op;

/// `y * (g - sum(g * y))` over the last dimension, on `[rows, width]` views: the default of
/// [`FusedOps::softmax_backward`].
pub(super) fn softmax_backward<B: Backend>(
    output: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> FloatTensor<B> {
    let shape = output.shape();
    let (output, grad) = (as_rows::<B>(output), as_rows::<B>(grad));
    let dot = B::float_sum_dim(B::float_mul(grad.clone(), output.clone()), 1);
    B::float_reshape(B::float_mul(B::float_sub(grad, dot), output), shape)
}

/// `softmax(scores + bias)` by the inner backend's [`FusedOps::masked_softmax`], differentiated
/// with respect to `scores` only, from the kept output.
pub(super) fn masked_softmax<B: FusedOps, C: CheckpointStrategy>(
    scores: FloatTensor<Autodiff<B, C>>,
    bias: FloatTensor<Autodiff<B, C>>,
) -> FloatTensor<Autodiff<B, C>> {
    let bias = bias.primitive;
    unary_op::<B, C>(
        scores,
        |x| {
            let y = B::masked_softmax(x, bias);
            (y.clone(), y)
        },
        B::softmax_backward,
    )
}

/// The forward kernel on burn-flex, for contiguous `f32` operands (others get burn-flex's own
/// ops).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::ops::{ActivationOps, FloatTensor, FloatTensorOps};

    use super::super::kernels;
    use super::super::output::filled;

    /// `softmax(scores + bias)` over the last dimension; `scores` is `[batch, heads, seq, width]`
    /// and `bias` `[batch, 1, 1, width]`.
    pub(crate) fn masked_softmax(
        scores: FloatTensor<Flex>,
        bias: FloatTensor<Flex>,
    ) -> FloatTensor<Flex> {
        let shape = scores.layout().shape().clone();
        let (Some(x), Some(b)) = (scores.as_slice::<f32>(), bias.as_slice::<f32>()) else {
            let last = shape.num_dims() - 1;
            return Flex::softmax(Flex::float_add(scores, bias), last);
        };
        let width = shape[shape.num_dims() - 1];
        if width == 0 || b.is_empty() || b.len() % width != 0 || x.len() % b.len() != 0 {
            let last = shape.num_dims() - 1;
            return Flex::softmax(Flex::float_add(scores, bias), last);
        }
        // SAFETY: the kernel writes every element.
        unsafe { filled(shape, |y| kernels::masked_softmax(x, b, width, y)) }
    }

    /// The softmax's gradient from its `output` and the output's `grad` (same shapes).
    pub(crate) fn softmax_backward(
        output: FloatTensor<Flex>,
        grad: FloatTensor<Flex>,
    ) -> FloatTensor<Flex> {
        let shape = output.layout().shape().clone();
        let width = shape[shape.num_dims() - 1];
        match (output.as_slice::<f32>(), grad.as_slice::<f32>()) {
            (Some(y), Some(g)) if width > 0 && y.len() == g.len() => {
                // SAFETY: the kernel writes every element.
                unsafe { filled(shape, |dx| kernels::softmax_grad(y, g, width, dx)) }
            }
            _ => super::softmax_backward::<Flex>(output, grad),
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Tensor, TensorData, activation};

    use super::super::masked_softmax;
    use super::super::test_util::{assert_close, sample, value_and_grad};

    type B = Autodiff<Flex>;

    /// A padding mask's bias for 2 sequences of width 5: the second has 2 padding positions.
    fn bias() -> Tensor<B, 4> {
        let values = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, f32::MIN, f32::MIN];
        Tensor::from_data(
            TensorData::new(values.to_vec(), [2, 1, 1, 5]),
            &Default::default(),
        )
    }

    /// Scores in (-4, 4) for 2 sequences, 3 heads, 4 queries and 5 keys.
    fn scores() -> Tensor<B, 4> {
        sample::<B, 4>([2, 3, 4, 5], 1).mul_scalar(4.0)
    }

    #[test]
    fn matches_burns_softmax_of_the_biased_scores_and_its_gradient() {
        let (ours, our_grad) = value_and_grad(scores(), |x| masked_softmax(x, bias()));
        let (burns, burn_grad) = value_and_grad(scores(), |x| activation::softmax(x + bias(), 3));
        assert_close(&ours, &burns, 1e-6);
        assert_close(&our_grad, &burn_grad, 1e-6);
        // Padding positions of the second sequence get nothing.
        assert!(
            ours[60..]
                .chunks(5)
                .all(|row| row[3] == 0.0 && row[4] == 0.0)
        );
    }

    #[test]
    fn an_untracked_input_gives_the_same_values() {
        let x = sample::<B, 4>([2, 3, 4, 5], 1);
        let ours: Vec<f32> = masked_softmax(x.clone(), bias())
            .into_data()
            .to_vec()
            .unwrap();
        let burns: Vec<f32> = activation::softmax(x + bias(), 3)
            .into_data()
            .to_vec()
            .unwrap();
        assert_close(&ours, &burns, 1e-6);
    }
}
