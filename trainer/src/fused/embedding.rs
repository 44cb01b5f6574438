//! Embedding lookups as one autodiff op, so that the table's gradient is written once.
//!
//! burn-flex's `embedding_backward` zero-fills a tensor of the table's size, copies it whole and
//! then adds the looked-up rows: for BERT's word embeddings (30,522 x 384 for MiniLM) 47 MB
//! written three times a step on the thread that runs the model, while the rayon threads wait.
//! On burn-flex the gradient here is allocated zeroed (fresh pages from the kernel, which are
//! zero already: only the pages of the rows added are written) and the rows of the output's
//! gradient are added into it.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::tensor::ops::{FloatTensor, IntTensor};

use super::FusedOps;

/// The backward step of [`embedding`]: keeps the table (a shared handle, not a copy) and the
/// indices.
#[derive(Debug)]
struct EmbeddingBackward;

impl<B: FusedOps> Backward<B, 1> for EmbeddingBackward {
    type State = (FloatTensor<B>, IntTensor<B>);

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let (weights, indices) = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::embedding_grad(weights, grad, indices)
        });
    }
}

/// The rows of `weights` at `indices` (`[batch, seq]` into `[batch, seq, width]`) by the inner
/// backend, differentiated by [`FusedOps::embedding_grad`].
pub(super) fn embedding<B: FusedOps, C: CheckpointStrategy>(
    weights: FloatTensor<Autodiff<B, C>>,
    indices: IntTensor<B>,
) -> FloatTensor<Autodiff<B, C>> {
    match EmbeddingBackward
        .prepare::<C>([weights.node])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(
            (weights.primitive.clone(), indices.clone()),
            B::embedding(weights.primitive, indices),
        ),
        OpsKind::UnTracked(prep) => prep.finish(B::embedding(weights.primitive, indices)),
    }
}

/// The gradient on burn-flex's tensors, for an `f32` table and gradient and `i32` indices
/// (others get burn-flex's own).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::ops::{FloatTensor, IntTensor, ModuleOps};

    use super::super::output::tensor;

    /// The gradient of the table `weights` from the gradient `grad` of its rows at `indices`.
    pub(crate) fn embedding_grad(
        weights: FloatTensor<Flex>,
        grad: FloatTensor<Flex>,
        indices: IntTensor<Flex>,
    ) -> FloatTensor<Flex> {
        let shape = weights.layout().shape().clone();
        let (rows, width) = (shape[0], shape[1]);
        let (Some(grad_rows), Some(ids)) = (grad.as_slice::<f32>(), indices.as_slice::<i32>())
        else {
            return Flex::embedding_backward(weights, grad, indices);
        };
        if grad_rows.len() != ids.len() * width {
            return Flex::embedding_backward(weights, grad, indices);
        }
        // Zeroed by the allocator: a fresh mapping for a table this large, no pass over it.
        let mut table = vec![0.0f32; rows * width];
        for (&id, row) in ids.iter().zip(grad_rows.chunks_exact(width)) {
            // An id outside the table (negative ones wrap to huge) panics at the slice, as
            // burn's lookup does.
            let start = id as usize * width;
            for (sum, &g) in table[start..start + width].iter_mut().zip(row) {
                *sum += g;
            }
        }
        tensor(table, shape)
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Int, Tensor, TensorData};

    use super::super::embedding;
    use super::super::test_util::{assert_close, sample};

    type B = Autodiff<Flex>;

    /// The table's value at the rows and the gradient of `sum(rows * w)`, by `lookup`.
    fn value_and_grad(
        lookup: impl FnOnce(Tensor<B, 2>, Tensor<B, 2, Int>) -> Tensor<B, 3>,
    ) -> (Vec<f32>, Vec<f32>) {
        let table = sample::<B, 2>([11, 5], 1).require_grad();
        // Repeated ids (their gradients add up), the first and the last row, rows never used.
        let ids = Tensor::<B, 2, Int>::from_data(
            TensorData::new(vec![3i32, 0, 3, 10, 7, 3], [2, 3]),
            &Default::default(),
        );
        let rows = lookup(table.clone(), ids);
        let weights = sample::<B, 3>([2, 3, 5], 2);
        let grads = (rows.clone() * weights).sum().backward();
        (
            rows.into_data().to_vec().unwrap(),
            table.grad(&grads).unwrap().into_data().to_vec().unwrap(),
        )
    }

    #[test]
    fn rows_and_gradient_match_burns_embedding() {
        let (rows, grad) = value_and_grad(embedding);
        let (burn_rows, burn_grad) = value_and_grad(burn::tensor::module::embedding);
        assert_eq!(rows, burn_rows);
        assert_close(&grad, &burn_grad, 1e-6);
        // Row 3 was looked up three times, rows 1-2 never.
        assert!(grad[3 * 5..4 * 5].iter().all(|&g| g != 0.0));
        assert!(grad[5..15].iter().all(|&g| g == 0.0));
    }
}
