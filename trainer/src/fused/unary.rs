//! A unary autodiff op whose backward pass is a function of one saved tensor and the output's
//! gradient: the plumbing that GELU and the masked softmax share.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

/// `backward(state, grad)`, the gradient of the op's input.
type BackwardFn<B> = fn(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>;

/// The backward step of a [`unary_op`].
#[derive(Debug)]
struct UnaryBackward<B: Backend> {
    backward: BackwardFn<B>,
}

impl<B: Backend> Backward<B, 1> for UnaryBackward<B> {
    type State = FloatTensor<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let (state, backward) = (ops.state, self.backward);
        unary::<B, _>(ops.parents, ops.node, grads, |grad| backward(state, grad));
    }
}

/// An op of `Autodiff<B, C>` on `input`: `forward` computes the output on the inner backend
/// and the tensor to keep for the backward pass, `backward(kept, grad)` the input's gradient.
pub(super) fn unary_op<B: Backend, C: CheckpointStrategy>(
    input: FloatTensor<Autodiff<B, C>>,
    forward: impl FnOnce(FloatTensor<B>) -> (FloatTensor<B>, FloatTensor<B>),
    backward: BackwardFn<B>,
) -> FloatTensor<Autodiff<B, C>> {
    match (UnaryBackward { backward })
        .prepare::<C>([input.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (output, kept) = forward(input.primitive);
            prep.finish(kept, output)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(input.primitive).0),
    }
}
