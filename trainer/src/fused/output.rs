//! New burn-flex tensors that a kernel fills, without zeroing them first.
//!
//! burn-flex's `FlexTensor::empty` zero-fills its memory, a pass over it as long as the
//! kernel's own for the element-wise ops here: for a MiniLM training step, a few hundred
//! megabytes written twice on the thread that runs the model.

use burn::tensor::{Bytes, DType, Shape};
use burn_flex::{FlexTensor, Layout};

use super::kernels::Uninit;

/// `len` values written by `fill`.
///
/// # Safety
/// `fill` must write every element of the slice it is given.
pub(super) unsafe fn written(len: usize, fill: impl FnOnce(&mut [Uninit])) -> Vec<f32> {
    let mut values = Vec::<f32>::with_capacity(len);
    fill(&mut values.spare_capacity_mut()[..len]);
    // SAFETY: `fill` wrote the `len` elements (the caller vouches for it).
    unsafe { values.set_len(len) };
    values
}

/// A contiguous `f32` tensor of `shape` holding `values` (as many as its elements).
pub(super) fn tensor(values: Vec<f32>, shape: Shape) -> FlexTensor {
    laid_out(values, Layout::contiguous(shape))
}

/// An `f32` tensor holding `values` (as many as its elements) in `layout`, which addresses
/// each of them once from offset 0.
pub(super) fn laid_out(values: Vec<f32>, layout: Layout) -> FlexTensor {
    debug_assert_eq!(values.len(), layout.num_elements());
    FlexTensor::new(Bytes::from_elems(values), layout, DType::F32)
}

/// A contiguous `f32` tensor of `shape` whose elements `fill` writes.
///
/// # Safety
/// `fill` must write every element of the slice it is given.
pub(super) unsafe fn filled(shape: Shape, fill: impl FnOnce(&mut [Uninit])) -> FlexTensor {
    // SAFETY: passed on to the caller.
    let values = unsafe { written(shape.num_elements(), fill) };
    tensor(values, shape)
}
