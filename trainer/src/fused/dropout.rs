//! Dropout as one autodiff op that keeps nothing for its backward pass: the mask of a call is
//! a function of `(seed, call)` (see [`super::mask`]), so the backward pass draws it
//! again and applies it to the gradient, `dx = dy * mask / (1 - p)`: the op is its own
//! derivative.
//!
//! Composed from burn's ops, dropout on attention's `[batch, heads, seq, seq]` probabilities
//! took five passes over them forward (random words, comparison, zeroing, scaling) and two
//! backward, each into a new tensor; on burn-flex it is one pass each way here (`kernels.rs`).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, unary};
use burn::tensor::ops::FloatTensor;

use super::FusedOps;

/// The op's backward step: the same dropout, applied to the gradient.
#[derive(Debug)]
struct DropoutBackward {
    prob: f64,
    seed: u64,
    call: u64,
}

impl<B: FusedOps> Backward<B, 1> for DropoutBackward {
    type State = ();

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::dropout(grad, self.prob, self.seed, self.call)
        });
    }
}

/// Dropout of `tensor` by the inner backend's [`FusedOps::dropout`], differentiated by
/// [`DropoutBackward`].
pub(super) fn dropout<B: FusedOps, C: CheckpointStrategy>(
    tensor: FloatTensor<Autodiff<B, C>>,
    prob: f64,
    seed: u64,
    call: u64,
) -> FloatTensor<Autodiff<B, C>> {
    (DropoutBackward { prob, seed, call })
        .prepare::<C>([tensor.node.clone()])
        .compute_bound()
        .stateless(B::dropout(tensor.primitive, prob, seed, call))
}

/// The kernel on burn-flex's tensors, for contiguous `f32` tensors (others get the composed
/// dropout).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::ops::FloatTensor;

    use super::super::kernels;
    use super::super::mask::composed;
    use super::super::output::filled;

    /// Dropout of `tensor` with the mask of `(seed, call)`.
    pub(crate) fn dropout(
        tensor: FloatTensor<Flex>,
        prob: f64,
        seed: u64,
        call: u64,
    ) -> FloatTensor<Flex> {
        if prob <= 0.0 {
            return tensor;
        }
        let Some(input) = tensor.as_slice::<f32>() else {
            return composed::<Flex>(tensor, prob, seed, call);
        };
        let shape = tensor.layout().shape().clone();
        // SAFETY: the kernel writes every element.
        unsafe { filled(shape, |y| kernels::dropout(input, y, prob, seed, call)) }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Tensor, TensorPrimitive};

    use super::super::dropout;
    use super::super::mask::{CHUNK, composed};
    use super::super::test_util::{sample, value_and_grad};

    type B = Autodiff<Flex>;

    /// Dropout composed of burn's ops (the default of `FusedOps::dropout`), differentiated by
    /// burn's autodiff.
    fn composed_dropout(x: Tensor<B, 2>, prob: f64, seed: u64, call: u64) -> Tensor<B, 2> {
        let primitive = composed::<B>(x.into_primitive().tensor(), prob, seed, call);
        Tensor::from_primitive(TensorPrimitive::Float(primitive))
    }

    #[test]
    fn the_kernel_draws_the_composed_mask_and_its_gradient() {
        // Several chunks and a partial one; odd lengths split a word's pair; one element.
        for (rows, width) in [(3, CHUNK / 2 + 7), (5, 3), (1, 1)] {
            for (prob, seed, call) in [(0.1, 42, 0), (0.5, 7, 13), (1.0, 1, 1), (0.0, 1, 1)] {
                let x = || sample::<B, 2>([rows, width], 1);
                let fused = value_and_grad(x(), |x| dropout(x, prob, seed, call));
                let burns = value_and_grad(x(), |x| composed_dropout(x, prob, seed, call));
                let case = format!("{rows}x{width}, p={prob}, seed {seed}, call {call}");
                for (ours, theirs) in [(&fused.0, &burns.0), (&fused.1, &burns.1)] {
                    let first_difference = ours.iter().zip(theirs).position(|(a, b)| a != b);
                    assert_eq!(first_difference, None, "{case}");
                }
            }
        }
    }

    #[test]
    fn the_gradient_flows_exactly_where_elements_were_kept() {
        let (values, grad) =
            value_and_grad(sample::<B, 2>([4, 1000], 3), |x| dropout(x, 0.3, 9, 2));
        let weights = sample::<Flex, 2>([4, 1000], 2)
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        let scale = (1.0 / 0.7) as f32;
        for ((v, g), w) in values.iter().zip(&grad).zip(&weights) {
            // d(sum(y * w))/dx = w * scale where kept, 0 where dropped.
            let expected = if *v == 0.0 { 0.0 } else { w * scale };
            assert_eq!(*g, expected);
        }
        let kept = values.iter().filter(|v| **v != 0.0).count();
        assert!(
            (2600..3000).contains(&kept),
            "kept {kept} of 4000 at p = 0.3"
        );
    }
}
