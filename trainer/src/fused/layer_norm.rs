//! LayerNorm over the last dimension as one autodiff op.
//!
//! With `n = (x - mean) * r`, `r = 1 / sqrt(var + epsilon)` and `y = n * gamma + beta`:
//! `dbeta = sum(dy)` and `dgamma = sum(dy * n)` over all rows, and with `g = dy * gamma`,
//! `dx = r * (g - mean(g) - n * mean(g * n))` over the last dimension.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, TensorMetadata, backend::Backend};

use super::FusedOps;
use super::rows::as_rows;

/// What [`FusedOps::layer_norm_rows`] gives: the output, and `n` and `r` for the backward pass
/// (see the module documentation), `n` as `[rows, width]` and `r` as `[rows, 1]`.
pub(super) type Normalized<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

/// What [`FusedOps::layer_norm_rows_backward`] gives: the gradients of the input, `gamma` and
/// `beta`.
pub(super) type LayerNormGrads<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

/// The op's backward step; its state is `(n, r, gamma)`.
#[derive(Debug)]
struct LayerNormLast;

impl<B: FusedOps> Backward<B, 3> for LayerNormLast {
    type State = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let (normalized, inv_std, gamma) = ops.state;
        let grad = grads.consume::<B>(&ops.node);
        let shape = grad.shape();
        let (input_grad, gamma_grad, beta_grad) =
            B::layer_norm_rows_backward(as_rows::<B>(grad), normalized, inv_std, gamma);
        let [input, gamma_node, beta_node] = ops.parents;
        if let Some(node) = beta_node {
            grads.register::<B>(node.id, beta_grad);
        }
        if let Some(node) = gamma_node {
            grads.register::<B>(node.id, gamma_grad);
        }
        if let Some(node) = input {
            grads.register::<B>(node.id, B::float_reshape(input_grad, shape));
        }
    }
}

/// LayerNorm's forward pass on `[rows, width]` composed of burn's ops: the default of
/// [`FusedOps::layer_norm_rows`].
pub(super) fn layer_norm_rows<B: Backend>(
    rows: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    epsilon: f64,
) -> Normalized<B> {
    let mean = B::float_mean_dim(rows.clone(), 1);
    let centered = B::float_sub(rows, mean);
    let var = B::float_mean_dim(B::float_mul(centered.clone(), centered.clone()), 1);
    let inv_std = B::float_recip(B::float_sqrt(B::float_add_scalar(var, epsilon.into())));
    let normalized = B::float_mul(centered, inv_std.clone());
    let scaled = B::float_mul(normalized.clone(), row_view::<B>(gamma));
    let output = B::float_add(scaled, row_view::<B>(beta));
    (output, normalized, inv_std)
}

/// LayerNorm's backward pass on `[rows, width]` composed of burn's ops: the default of
/// [`FusedOps::layer_norm_rows_backward`].
pub(super) fn layer_norm_rows_backward<B: Backend>(
    grad: FloatTensor<B>,
    normalized: FloatTensor<B>,
    inv_std: FloatTensor<B>,
    gamma: FloatTensor<B>,
) -> LayerNormGrads<B> {
    let beta_grad = sum_rows::<B>(grad.clone());
    let gamma_grad = sum_rows::<B>(B::float_mul(grad.clone(), normalized.clone()));
    let g = B::float_mul(grad, row_view::<B>(gamma));
    let mean_grad = B::float_mean_dim(g.clone(), 1);
    let mean_dot = B::float_mean_dim(B::float_mul(g.clone(), normalized.clone()), 1);
    let centered = B::float_sub(
        B::float_sub(g, mean_grad),
        B::float_mul(normalized, mean_dot),
    );
    (B::float_mul(centered, inv_std), gamma_grad, beta_grad)
}

/// Sums `[rows, width]` over its rows, giving `[width]`.
fn sum_rows<B: Backend>(tensor: FloatTensor<B>) -> FloatTensor<B> {
    let width = tensor.shape()[1];
    B::float_reshape(B::float_sum_dim(tensor, 0), Shape::new([width]))
}

/// `[width]` reshaped to `[1, width]`.
fn row_view<B: Backend>(row: FloatTensor<B>) -> FloatTensor<B> {
    let width = row.shape()[0];
    B::float_reshape(row, Shape::new([1, width]))
}

/// LayerNorm over the last dimension of `tensor` by the inner backend's
/// [`FusedOps::layer_norm_rows`], differentiated by [`LayerNormLast`].
pub(super) fn layer_norm_last<B: FusedOps, C: CheckpointStrategy>(
    tensor: FloatTensor<Autodiff<B, C>>,
    gamma: FloatTensor<Autodiff<B, C>>,
    beta: FloatTensor<Autodiff<B, C>>,
    epsilon: f64,
) -> FloatTensor<Autodiff<B, C>> {
    let shape = tensor.shape();
    let forward = |tensor: FloatTensor<B>, gamma: FloatTensor<B>, beta| {
        B::layer_norm_rows(as_rows::<B>(tensor), gamma, beta, epsilon)
    };
    match LayerNormLast
        .prepare::<C>([tensor.node.clone(), gamma.node.clone(), beta.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (output, normalized, inv_std) =
                forward(tensor.primitive, gamma.primitive.clone(), beta.primitive);
            prep.finish(
                (normalized, inv_std, gamma.primitive),
                B::float_reshape(output, shape),
            )
        }
        OpsKind::UnTracked(prep) => {
            let (output, _, _) = forward(tensor.primitive, gamma.primitive, beta.primitive);
            prep.finish(B::float_reshape(output, shape))
        }
    }
}

/// The kernels on burn-flex's tensors, for contiguous `f32` tensors (others get the composed
/// passes).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::Shape;
    use burn::tensor::ops::FloatTensor;

    use super::super::kernels;
    use super::super::output::{tensor, written};
    use super::{LayerNormGrads, Normalized};

    /// LayerNorm's forward pass on `[rows, width]`.
    pub(crate) fn layer_norm_rows(
        rows: FloatTensor<Flex>,
        gamma: FloatTensor<Flex>,
        beta: FloatTensor<Flex>,
        epsilon: f64,
    ) -> Normalized<Flex> {
        let shape = rows.layout().shape().clone();
        let (Some(x), Some(g), Some(b)) = (
            rows.as_slice::<f32>(),
            gamma.as_slice::<f32>(),
            beta.as_slice::<f32>(),
        ) else {
            return super::layer_norm_rows::<Flex>(rows, gamma, beta, epsilon);
        };
        let count = shape[0];
        let mut inv_std = Vec::new();
        let mut normalized = Vec::new();
        // SAFETY: the kernel writes every element of its three outputs.
        let output = unsafe {
            written(x.len(), |y| {
                normalized = written(x.len(), |n| {
                    inv_std = written(count, |r| {
                        kernels::layer_norm(x, g, b, epsilon as f32, y, n, r);
                    });
                });
            })
        };
        (
            tensor(output, shape.clone()),
            tensor(normalized, shape),
            tensor(inv_std, Shape::new([count, 1])),
        )
    }

    /// LayerNorm's backward pass on `[rows, width]`.
    pub(crate) fn layer_norm_rows_backward(
        grad: FloatTensor<Flex>,
        normalized: FloatTensor<Flex>,
        inv_std: FloatTensor<Flex>,
        gamma: FloatTensor<Flex>,
    ) -> LayerNormGrads<Flex> {
        let shape = grad.layout().shape().clone();
        let slices = (
            grad.as_slice::<f32>(),
            normalized.as_slice::<f32>(),
            inv_std.as_slice::<f32>(),
            gamma.as_slice::<f32>(),
        );
        let (Some(dy), Some(n), Some(r), Some(g)) = slices else {
            return super::layer_norm_rows_backward::<Flex>(grad, normalized, inv_std, gamma);
        };
        let (mut gamma_grad, mut beta_grad) = (Vec::new(), Vec::new());
        // SAFETY: the kernel writes every element.
        let input_grad = unsafe {
            written(dy.len(), |dx| {
                (gamma_grad, beta_grad) = kernels::layer_norm_grad(dy, n, r, g, dx);
            })
        };
        let width = Shape::new([g.len()]);
        (
            tensor(input_grad, shape),
            tensor(gamma_grad, width.clone()),
            tensor(beta_grad, width),
        )
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::ops::ModuleOps;
    use burn::tensor::{Tensor, TensorPrimitive};

    use super::super::layer_norm;
    use super::super::test_util::{assert_close, sample};

    type B = Autodiff<Flex>;
    const EPSILON: f64 = 1e-12;

    /// burn's own LayerNorm, the composition of ops that burn's autodiff differentiates.
    fn burns(x: Tensor<B, 3>, gamma: Tensor<B, 1>, beta: Tensor<B, 1>) -> Tensor<B, 3> {
        Tensor::from_primitive(TensorPrimitive::Float(<B as ModuleOps<B>>::layer_norm(
            x.into_primitive().tensor(),
            gamma.into_primitive().tensor(),
            Some(beta.into_primitive().tensor()),
            EPSILON,
        )))
    }

    /// The value of `f` and the gradients of `sum(f(x, gamma, beta) * weights)`.
    fn value_and_grads(
        f: impl Fn(Tensor<B, 3>, Tensor<B, 1>, Tensor<B, 1>) -> Tensor<B, 3>,
        shape: [usize; 3],
    ) -> [Vec<f32>; 4] {
        let x = Tensor::from_inner(sample::<Flex, 3>(shape, 1).mul_scalar(3.0).add_scalar(0.5))
            .require_grad();
        let gamma =
            Tensor::from_inner(sample::<Flex, 1>([shape[2]], 2).add_scalar(1.0)).require_grad();
        let beta = sample::<B, 1>([shape[2]], 3).require_grad();
        let weights = sample::<B, 3>(shape, 4);
        let y = f(x.clone(), gamma.clone(), beta.clone());
        let grads = (y.clone() * weights).sum().backward();
        [
            y.into_data().to_vec().unwrap(),
            x.grad(&grads).unwrap().into_data().to_vec().unwrap(),
            gamma.grad(&grads).unwrap().into_data().to_vec().unwrap(),
            beta.grad(&grads).unwrap().into_data().to_vec().unwrap(),
        ]
    }

    #[test]
    fn matches_burns_composed_layer_norm_and_its_gradients() {
        // Rows in one task of the kernel's, and in three (150 rows: partial sums of gamma's
        // and beta's gradients added up).
        for shape in [[2, 3, 8], [1, 5, 33], [4, 1, 2], [3, 50, 16]] {
            let ours = value_and_grads(|x, g, b| layer_norm(x, g, b, EPSILON), shape);
            let burns = value_and_grads(burns, shape);
            for (what, (ours, burns)) in ["output", "dx", "dgamma", "dbeta"]
                .iter()
                .zip(ours.iter().zip(&burns))
            {
                assert_eq!(ours.len(), burns.len(), "{what} of {shape:?}");
                assert_close(ours, burns, 1e-5);
            }
        }
    }

    #[test]
    fn with_constant_gamma_and_beta_the_input_gradient_matches() {
        let grad_of_input = |f: &dyn Fn(Tensor<B, 3>) -> Tensor<B, 3>| {
            let x = sample::<B, 3>([2, 3, 8], 1).require_grad();
            let grads = (f(x.clone()) * sample::<B, 3>([2, 3, 8], 4))
                .sum()
                .backward();
            let grad: Vec<f32> = x.grad(&grads).unwrap().into_data().to_vec().unwrap();
            grad
        };
        let (gamma, beta) = (sample::<B, 1>([8], 2), sample::<B, 1>([8], 3));
        let ours = grad_of_input(&|x| layer_norm(x, gamma.clone(), beta.clone(), EPSILON));
        let burns = grad_of_input(&|x| burns(x, gamma.clone(), beta.clone()));
        assert_close(&ours, &burns, 1e-5);
    }

    #[test]
    fn an_untracked_input_gives_the_same_values() {
        let x = sample::<B, 3>([2, 3, 8], 1);
        let gamma = sample::<B, 1>([8], 2);
        let beta = sample::<B, 1>([8], 3);
        let ours: Vec<f32> = layer_norm(x.clone(), gamma.clone(), beta.clone(), EPSILON)
            .into_data()
            .to_vec()
            .unwrap();
        let burns: Vec<f32> = burns(x, gamma, beta).into_data().to_vec().unwrap();
        assert_close(&ours, &burns, 1e-5);
    }
}
