//! Matrix products as one autodiff op whose products, forward and backward, are the inner
//! backend's [`FusedOps::matmul`]: on burn-flex, the system's BLAS when there is one
//! ([`crate::blas`]), at about twice the speed of burn-flex's own.
//!
//! `y = a · b` over the last two dimensions: `da = dy · bᵀ` and `db = aᵀ · dy`, the transposes
//! being views (swapped strides, no copies) that BLAS reads as transposed operands.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{TensorMetadata, backend::Backend};

use super::FusedOps;

/// The op's backward step; its state is `(a, b)`.
#[derive(Debug)]
struct Matmul;

impl<B: FusedOps> Backward<B, 2> for Matmul {
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(
        self,
        ops: Ops<Self::State, 2>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let (lhs, rhs) = ops.state;
        let grad = grads.consume::<B>(&ops.node);
        let [lhs_node, rhs_node] = ops.parents;
        if let Some(node) = lhs_node {
            grads.register::<B>(node.id, B::matmul(grad.clone(), transpose::<B>(rhs)));
        }
        if let Some(node) = rhs_node {
            grads.register::<B>(node.id, B::matmul(transpose::<B>(lhs), grad));
        }
    }
}

/// The last two dimensions swapped (a view on burn-flex).
fn transpose<B: Backend>(tensor: FloatTensor<B>) -> FloatTensor<B> {
    let rank = tensor.rank();
    B::float_swap_dims(tensor, rank - 2, rank - 1)
}

/// Whether the batch dimensions of `lhs` and `rhs` (all but the last two) are equal: the op's
/// backward pass does not sum gradients over broadcast dimensions, burn's matmul does.
fn same_batch(lhs: &impl TensorMetadata, rhs: &impl TensorMetadata) -> bool {
    let (lhs, rhs) = (lhs.shape(), rhs.shape());
    let rank = lhs.num_dims();
    rank == rhs.num_dims() && (0..rank - 2).all(|i| lhs[i] == rhs[i])
}

/// `lhs · rhs` by the inner backend's [`FusedOps::matmul`], differentiated by [`Matmul`];
/// operands with broadcast batch dimensions get burn's matmul.
pub(super) fn matmul<B: FusedOps, C: CheckpointStrategy>(
    lhs: FloatTensor<Autodiff<B, C>>,
    rhs: FloatTensor<Autodiff<B, C>>,
) -> FloatTensor<Autodiff<B, C>> {
    if !same_batch(&lhs, &rhs) {
        return Autodiff::<B, C>::float_matmul(lhs, rhs);
    }
    match Matmul
        .prepare::<C>([lhs.node.clone(), rhs.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let output = B::matmul(lhs.primitive.clone(), rhs.primitive.clone());
            prep.finish((lhs.primitive, rhs.primitive), output)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::matmul(lhs.primitive, rhs.primitive)),
    }
}

/// The product on burn-flex's tensors by BLAS, for `f32` operands BLAS can read with equal
/// batch dimensions (others, or no BLAS library, get burn-flex's own).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::ops::{FloatTensor, FloatTensorOps};
    use burn::tensor::{Bytes, DType, Shape};
    use burn_flex::{FlexTensor, Layout};
    use rayon::prelude::*;

    use crate::blas::{Cblas, Matrix};

    /// `lhs · rhs` over the last two dimensions.
    pub fn matmul(lhs: FloatTensor<Flex>, rhs: FloatTensor<Flex>) -> FloatTensor<Flex> {
        match Cblas::get() {
            Some(blas) if lhs.dtype() == DType::F32 && rhs.dtype() == DType::F32 => {
                product(blas, &lhs, &rhs).unwrap_or_else(|| Flex::float_matmul(lhs, rhs))
            }
            _ => Flex::float_matmul(lhs, rhs),
        }
    }

    /// The product by `blas`, or `None` if an operand is a layout BLAS cannot read.
    fn product(blas: &Cblas, lhs: &FlexTensor, rhs: &FlexTensor) -> Option<FlexTensor> {
        let (lhs_shape, rhs_shape) = (lhs.layout().shape(), rhs.layout().shape());
        let rank = lhs_shape.num_dims();
        let batch_dims = &lhs_shape[..rank - 2];
        if rank != rhs_shape.num_dims() || batch_dims != &rhs_shape[..rank - 2] {
            return None;
        }
        let (m, n) = (lhs_shape[rank - 2], rhs_shape[rank - 1]);
        let batch: usize = batch_dims.iter().product();
        let lhs_matrices = matrices(lhs, batch_dims)?;
        let rhs_matrices = matrices(rhs, batch_dims)?;
        let mut dims = batch_dims.to_vec();
        dims.extend([m, n]);
        let len = batch * m * n;
        let mut values = Vec::<f32>::with_capacity(len);
        let outputs = &mut values.spare_capacity_mut()[..len];
        if m * n > 0 {
            if batch >= rayon::current_num_threads() {
                outputs
                    .par_chunks_mut(m * n)
                    .zip(lhs_matrices.par_iter().zip(&rhs_matrices))
                    .for_each(|(out, (a, b))| blas.sgemm_on_this_thread(*a, *b, out));
            } else {
                for (out, (a, b)) in outputs
                    .chunks_mut(m * n)
                    .zip(lhs_matrices.iter().zip(&rhs_matrices))
                {
                    blas.sgemm(*a, *b, out);
                }
            }
        }
        // SAFETY: the products wrote all `len` elements. (Writing them once, instead of zeroing
        // the output first as burn-flex's `FlexTensor::empty` does, saves a tenth of a step.)
        unsafe { values.set_len(len) };
        let layout = Layout::contiguous(Shape::from(dims));
        Some(FlexTensor::new(Bytes::from_elems(values), layout, DType::F32))
    }

    /// The `batch_dims`-indexed matrices of `tensor` in row-major batch order, or `None` if its
    /// layout has a negative stride or a matrix BLAS cannot read.
    fn matrices<'a>(tensor: &'a FlexTensor, batch_dims: &[usize]) -> Option<Vec<Matrix<'a>>> {
        let layout = tensor.layout();
        let strides: Vec<usize> = layout
            .strides()
            .iter()
            .map(|&s| usize::try_from(s).ok())
            .collect::<Option<_>>()?;
        let rank = strides.len();
        let shape = layout.shape();
        let (rows, cols) = (shape[rank - 2], shape[rank - 1]);
        let storage = tensor.storage::<f32>();
        let batch: usize = batch_dims.iter().product();
        (0..batch)
            .map(|index| {
                let mut offset = layout.start_offset();
                let mut rest = index;
                for dim in (0..batch_dims.len()).rev() {
                    offset += (rest % batch_dims[dim]) * strides[dim];
                    rest /= batch_dims[dim];
                }
                let data = storage.get(offset..)?;
                Matrix::new(data, rows, cols, strides[rank - 2], strides[rank - 1])
            })
            .collect()
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::Tensor;

    use super::super::matmul;
    use super::super::test_util::{assert_close, sample};

    type B = Autodiff<Flex>;

    /// The product of `f(a, b)` and the gradients of `sum(product * w)` at `a` and `b`.
    fn value_and_grads<const D: usize>(
        a: Tensor<B, D>,
        b: Tensor<B, D>,
        product: impl Fn(Tensor<B, D>, Tensor<B, D>) -> Tensor<B, D>,
    ) -> [Vec<f32>; 3] {
        let (a, b) = (a.require_grad(), b.require_grad());
        let y = product(a.clone(), b.clone());
        let weights = sample::<B, D>(y.dims(), 5);
        let grads = (y.clone() * weights).sum().backward();
        [
            y.into_data().to_vec().unwrap(),
            a.grad(&grads).unwrap().into_data().to_vec().unwrap(),
            b.grad(&grads).unwrap().into_data().to_vec().unwrap(),
        ]
    }

    fn assert_same_as_burns<const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) {
        let ours = value_and_grads(a.clone(), b.clone(), |a, b| matmul(a, b));
        let burns = value_and_grads(a, b, |a, b| a.matmul(b));
        for (ours, burns) in ours.iter().zip(&burns) {
            assert_close(ours, burns, 1e-5);
        }
    }

    #[test]
    fn dense_products_and_gradients_match_burns() {
        // Rows enough to split over threads, and a single row.
        for rows in [300, 1] {
            assert_same_as_burns(sample::<B, 2>([rows, 48], 1), sample::<B, 2>([48, 40], 2));
        }
    }

    #[test]
    fn attention_products_of_permuted_heads_match_burns() {
        // [batch, seq, heads, head_dim] seen as [batch, heads, seq, head_dim], as attention
        // does: strided matrices, and one operand transposed.
        let heads = |seed| sample::<B, 4>([3, 7, 2, 5], seed).swap_dims(1, 2);
        assert_same_as_burns(heads(1), heads(2).swap_dims(2, 3));
        let probabilities = sample::<B, 4>([3, 2, 7, 7], 3);
        assert_same_as_burns(probabilities, heads(4));
    }

    #[test]
    fn broadcast_batches_get_burns_product() {
        assert_same_as_burns(sample::<B, 3>([4, 6, 5], 1), sample::<B, 3>([1, 5, 3], 2));
    }
}
