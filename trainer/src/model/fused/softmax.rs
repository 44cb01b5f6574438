//! Softmax over the last dimension as one autodiff op: `y = softmax(x)`, `dx = y * (dy - sum(dy * y))`.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{TensorMetadata, backend::Backend};

use super::rows::as_rows;

/// The op's backward step; its state is the softmax output.
#[derive(Debug)]
struct SoftmaxLast;

impl<B: Backend> Backward<B, 1> for SoftmaxLast {
    type State = FloatTensor<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let output = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            softmax_backward::<B>(output, grad)
        });
    }
}

/// `y * (g - sum(g * y))` over the last dimension, on `[rows, width]` views.
fn softmax_backward<B: Backend>(output: FloatTensor<B>, grad: FloatTensor<B>) -> FloatTensor<B> {
    let shape = output.shape();
    let (output, grad) = (as_rows::<B>(output), as_rows::<B>(grad));
    let dot = B::float_sum_dim(B::float_mul(grad.clone(), output.clone()), 1);
    B::float_reshape(B::float_mul(B::float_sub(grad, dot), output), shape)
}

/// Softmax over the last dimension of `tensor`, computed by the inner backend's own softmax and
/// differentiated by [`SoftmaxLast`].
pub(super) fn softmax_last<B: Backend, C: CheckpointStrategy>(
    tensor: FloatTensor<Autodiff<B, C>>,
) -> FloatTensor<Autodiff<B, C>> {
    let last = tensor.rank() - 1;
    match SoftmaxLast
        .prepare::<C>([tensor.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let output = B::softmax(tensor.primitive, last);
            prep.finish(output.clone(), output)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::softmax(tensor.primitive, last)),
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Tensor, activation};

    use super::super::softmax;
    use super::super::test_util::{assert_close, sample};

    type B = Autodiff<Flex>;

    /// The value and gradient of `sum(softmax(x) * weights)` by `f`.
    fn value_and_grad(
        f: impl Fn(Tensor<B, 3>) -> Tensor<B, 3>,
        shape: [usize; 3],
    ) -> (Vec<f32>, Vec<f32>) {
        let x = sample::<B, 3>(shape, 1).require_grad();
        let weights = sample::<B, 3>(shape, 2);
        let y = f(x.clone());
        let grads = (y.clone() * weights).sum().backward();
        let grad = x.grad(&grads).unwrap();
        (
            y.into_data().to_vec().unwrap(),
            grad.into_data().to_vec().unwrap(),
        )
    }

    #[test]
    fn matches_burns_composed_softmax_and_its_gradient() {
        for shape in [[2, 3, 5], [1, 4, 17], [3, 1, 1]] {
            let (ours, our_grad) = value_and_grad(softmax, shape);
            let (burns, burn_grad) = value_and_grad(|x| activation::softmax(x, 2), shape);
            assert_close(&ours, &burns, 1e-6);
            assert_close(&our_grad, &burn_grad, 1e-6);
        }
    }

    #[test]
    fn an_untracked_input_gives_the_same_values() {
        let x = sample::<B, 3>([2, 3, 5], 1);
        let ours: Vec<f32> = softmax(x.clone()).into_data().to_vec().unwrap();
        let burns: Vec<f32> = activation::softmax(x, 2).into_data().to_vec().unwrap();
        assert_close(&ours, &burns, 1e-6);
    }
}
