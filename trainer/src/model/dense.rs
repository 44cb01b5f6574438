//! Linear layers applied to `[batch, seq, width]` states as one `[batch * seq, width]` matrix.
//!
//! burn's `Linear` on a rank-3 input multiplies batch by batch and adds its bias as a rank-3
//! broadcast, which burn-flex (built without `simd`) walks element by element; on the
//! `[rows, width]` view it is one matrix product (the fused one: BLAS on burn-flex when the
//! system has it) and a row-by-row bias add (see [`super::fused`]). The reshapes are views of
//! contiguous states.

use burn::nn::Linear;
use burn::tensor::Tensor;

use crate::fused::{FusedOps, matmul};

/// `layer` applied to the last dimension of `input`.
pub(crate) fn dense<B: FusedOps>(layer: &Linear<B>, input: Tensor<B, 3>) -> Tensor<B, 3> {
    let [batch, seq, width] = input.dims();
    let rows = matmul(input.reshape([batch * seq, width]), layer.weight.val());
    let output = match &layer.bias {
        Some(bias) => rows + bias.val().unsqueeze(),
        None => rows,
    };
    let [_, out] = output.dims();
    output.reshape([batch, seq, out])
}
