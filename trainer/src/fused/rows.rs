//! `[..., width]` tensors seen as `[rows, width]`.
//!
//! Built without its `simd` feature (as burn's `flex` feature builds it), burn-flex computes an
//! element-wise op whose operand is broadcast (a per-row scalar such as a mean, or a shared row
//! such as LayerNorm's scale) with a scalar per-element index walk over all dimensions, except
//! on rank-2 tensors, which it walks row by row. The fused ops therefore compute on the
//! `[rows, width]` view of their contiguous operands (a reshape, no copy).

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, TensorMetadata, backend::Backend};

/// `tensor` of shape `[..., width]` reshaped to `[rows, width]`.
pub(super) fn as_rows<B: Backend>(tensor: FloatTensor<B>) -> FloatTensor<B> {
    let shape = tensor.shape();
    let width = shape[shape.num_dims() - 1];
    B::float_reshape(tensor, Shape::new([shape.num_elements() / width, width]))
}
