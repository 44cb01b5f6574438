//! Matrix products as one autodiff op whose products, forward and backward, are the inner
//! backend's [`FusedOps::matmul`]: on burn-flex, the system's BLAS when there is one
//! ([`crate::blas`]), at about twice the speed of burn-flex's own.
//!
//! `y = a · b` over the last two dimensions: `da = dy · bᵀ` and `db = aᵀ · dy`, the transposes
//! being views (swapped strides, no copies) that BLAS reads as transposed operands. Each
//! gradient is laid out in memory as its tensor is: attention's heads are views of
//! `[batch, seq, heads, head_dim]` states, and gradients in that layout merge back into
//! `[batch, seq, width]` without the strided copies that contiguous ones would need.

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
            let lhs_grad = B::matmul(grad.clone(), transpose::<B>(rhs.clone()), Some(lhs.clone()));
            grads.register::<B>(node.id, lhs_grad);
        }
        if let Some(node) = rhs_node {
            grads.register::<B>(node.id, B::matmul(transpose::<B>(lhs), grad, Some(rhs)));
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

/// `lhs · rhs` by the inner backend's [`FusedOps::matmul`] (laid out as `like` where it can
/// be), differentiated by [`Matmul`]; operands with broadcast batch dimensions get burn's
/// matmul.
pub(super) fn matmul<B: FusedOps, C: CheckpointStrategy>(
    lhs: FloatTensor<Autodiff<B, C>>,
    rhs: FloatTensor<Autodiff<B, C>>,
    like: Option<FloatTensor<Autodiff<B, C>>>,
) -> FloatTensor<Autodiff<B, C>> {
    if !same_batch(&lhs, &rhs) {
        return Autodiff::<B, C>::float_matmul(lhs, rhs);
    }
    let like = like.map(|tensor| tensor.primitive);
    match Matmul
        .prepare::<C>([lhs.node.clone(), rhs.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let output = B::matmul(lhs.primitive.clone(), rhs.primitive.clone(), like);
            prep.finish((lhs.primitive, rhs.primitive), output)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::matmul(lhs.primitive, rhs.primitive, like)),
    }
}

/// The product on burn-flex's tensors by BLAS, for `f32` operands BLAS can read with equal
/// batch dimensions (others, or no BLAS library, get burn-flex's own).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::ops::{FloatTensor, FloatTensorOps};
    use burn::tensor::{DType, Shape};
    use burn_flex::{FlexTensor, Layout};
    use rayon::prelude::*;

    use super::super::output::{laid_out, written};
    use crate::blas::{Cblas, Matrix, SharedOutput};

    /// `lhs · rhs` over the last two dimensions, laid out in memory as `like` when it has the
    /// product's shape and a layout BLAS can write (see [`output_strides`]).
    pub(crate) fn matmul(
        lhs: FloatTensor<Flex>,
        rhs: FloatTensor<Flex>,
        like: Option<FloatTensor<Flex>>,
    ) -> FloatTensor<Flex> {
        match Cblas::get() {
            Some(blas) if lhs.dtype() == DType::F32 && rhs.dtype() == DType::F32 => {
                product(blas, &lhs, &rhs, like.as_ref().map(FlexTensor::layout))
                    .unwrap_or_else(|| Flex::float_matmul(lhs, rhs))
            }
            _ => Flex::float_matmul(lhs, rhs),
        }
    }

    /// The product by `blas`, or `None` if an operand is a layout BLAS cannot read.
    fn product(
        blas: &Cblas,
        lhs: &FlexTensor,
        rhs: &FlexTensor,
        like: Option<&Layout>,
    ) -> Option<FlexTensor> {
        let (lhs_shape, rhs_shape) = (lhs.layout().shape(), rhs.layout().shape());
        let rank = lhs_shape.num_dims();
        let batch_dims = &lhs_shape[..rank - 2];
        if rank != rhs_shape.num_dims() || batch_dims != &rhs_shape[..rank - 2] {
            return None;
        }
        let mut dims = batch_dims.to_vec();
        dims.extend([lhs_shape[rank - 2], rhs_shape[rank - 1]]);
        let strides = output_strides(&dims, like);
        let (row_stride, col_stride) = (strides[rank - 2], strides[rank - 1]);
        let products: Vec<(Matrix, Matrix, usize)> = matrices(lhs, batch_dims)?
            .into_iter()
            .zip(matrices(rhs, batch_dims)?)
            .zip(batch_offsets(batch_dims, &strides))
            .map(|((a, b), offset)| (a, b, offset))
            .collect();
        let len: usize = dims.iter().product();
        // Rows adjacent in memory: C = A·B row by row; columns adjacent: Cᵀ = Bᵀ·Aᵀ.
        let write = |output: SharedOutput, &(a, b, offset): &(Matrix, Matrix, usize), split| {
            // SAFETY: the strides are a permutation of a dense layout of `len` elements (see
            // `output_strides`), so the products write disjoint sets of elements that together
            // are all of the output.
            unsafe {
                let target = output.at(offset);
                if col_stride == 1 {
                    blas.sgemm_to(a, b, target, row_stride, split);
                } else {
                    blas.sgemm_to(b.transpose(), a.transpose(), target, col_stride, split);
                }
            }
        };
        // SAFETY: the products write all `len` elements (above).
        let values = unsafe {
            written(len, |values| {
                let output = SharedOutput(values.as_mut_ptr().cast());
                if products.len() >= rayon::current_num_threads() {
                    products.par_iter().for_each(|p| write(output, p, false));
                } else {
                    products.iter().for_each(|p| write(output, p, true));
                }
            })
        };
        let strides = strides.iter().map(|&s| s as isize).collect();
        Some(laid_out(values, Layout::new(Shape::from(dims), strides, 0)))
    }

    /// The strides of the product of shape `dims`: `like`'s, when it has that shape, its
    /// strides order a dense layout (every element once, no gaps, whatever the order of the
    /// dimensions) and the rows or the columns of its matrices are adjacent; row-major
    /// otherwise.
    fn output_strides(dims: &[usize], like: Option<&Layout>) -> Vec<usize> {
        let rank = dims.len();
        let dense = |layout: &Layout| -> Option<Vec<usize>> {
            let mut strides = nonnegative_strides(layout)?;
            let mut order: Vec<usize> = (0..rank).filter(|&d| dims[d] > 1).collect();
            order.sort_by_key(|&d| strides[d]);
            let mut expected = 1;
            for d in order {
                (strides[d] == expected).then_some(())?;
                expected *= dims[d];
            }
            // A dimension of one element is never stepped along: its stride is free, and the
            // number of elements is a valid one (at least a row's length, for BLAS).
            for d in (0..rank).filter(|&d| dims[d] <= 1) {
                strides[d] = expected;
            }
            let (rows, cols) = (strides[rank - 2], strides[rank - 1]);
            (rows == 1 || cols == 1).then_some(strides)
        };
        like.filter(|layout| layout.shape()[..] == *dims)
            .and_then(dense)
            .unwrap_or_else(|| {
                let mut strides = vec![1; rank];
                for d in (0..rank - 1).rev() {
                    strides[d] = strides[d + 1] * dims[d + 1];
                }
                strides
            })
    }

    /// `layout`'s strides, or `None` if one is negative (a flipped view).
    fn nonnegative_strides(layout: &Layout) -> Option<Vec<usize>> {
        layout
            .strides()
            .iter()
            .map(|&s| usize::try_from(s).ok())
            .collect()
    }

    /// The offset of each matrix of a `batch_dims`-indexed layout with `strides`, in row-major
    /// batch order.
    fn batch_offsets(batch_dims: &[usize], strides: &[usize]) -> Vec<usize> {
        let batch: usize = batch_dims.iter().product();
        (0..batch)
            .map(|index| {
                let mut offset = 0;
                let mut rest = index;
                for dim in (0..batch_dims.len()).rev() {
                    offset += (rest % batch_dims[dim]) * strides[dim];
                    rest /= batch_dims[dim];
                }
                offset
            })
            .collect()
    }

    /// The `batch_dims`-indexed matrices of `tensor` in row-major batch order, or `None` if its
    /// layout has a negative stride or a matrix BLAS cannot read.
    fn matrices<'a>(tensor: &'a FlexTensor, batch_dims: &[usize]) -> Option<Vec<Matrix<'a>>> {
        let layout = tensor.layout();
        let strides = nonnegative_strides(layout)?;
        let rank = strides.len();
        let shape = layout.shape();
        let (rows, cols) = (shape[rank - 2], shape[rank - 1]);
        let storage = tensor.storage::<f32>();
        batch_offsets(batch_dims, &strides)
            .into_iter()
            .map(|offset| {
                let data = storage.get(layout.start_offset() + offset..)?;
                Matrix::new(data, rows, cols, strides[rank - 2], strides[rank - 1])
            })
            .collect()
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::Tensor;

    use super::super::test_util::{assert_close, sample};
    use super::super::{matmul, matmul_like};

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
        let ours = value_and_grads(a.clone(), b.clone(), matmul);
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
    fn gradients_keep_the_layout_of_their_tensors() {
        // burn's own products (no BLAS library) are always row-major.
        if crate::blas::library_for_test().is_none() {
            return;
        }
        // Attention's heads: views of [batch, seq, heads, head_dim] states.
        let states = |seed| sample::<B, 4>([3, 7, 2, 5], seed).require_grad();
        let (query, key, value) = (states(1), states(2), states(3));
        let heads = |t: Tensor<B, 4>| t.swap_dims(1, 2);
        let scores = matmul(heads(query.clone()), heads(key.clone()).swap_dims(2, 3));
        let context = matmul_like(scores, heads(value.clone()), heads(value.clone()));
        // The context in the values' layout: merging its heads back is a view.
        let merged = context.swap_dims(1, 2);
        assert!(
            merged
                .clone()
                .inner()
                .into_primitive()
                .tensor()
                .is_contiguous()
        );
        let weights = sample::<B, 4>(merged.dims(), 4);
        let grads = (merged * weights).sum().backward();
        for (name, tensor) in [("query", query), ("key", key), ("value", value)] {
            let grad = tensor.grad(&grads).unwrap().into_primitive().tensor();
            assert!(
                grad.is_contiguous(),
                "the {name} gradient is not in its states' layout"
            );
        }
    }

    #[test]
    fn broadcast_batches_get_burns_product() {
        assert_same_as_burns(sample::<B, 3>([4, 6, 5], 1), sample::<B, 3>([1, 5, 3], 2));
    }
}
