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

use super::rows::as_rows;

/// The op's backward step; its state is `(n, r, gamma)` (see the module documentation), `n`
/// as `[rows, width]` and `r` as `[rows, 1]`.
#[derive(Debug)]
struct LayerNormLast;

impl<B: Backend> Backward<B, 3> for LayerNormLast {
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
        let grad = as_rows::<B>(grad);
        let [input, gamma_node, beta_node] = ops.parents;
        if let Some(node) = beta_node {
            grads.register::<B>(node.id, sum_rows::<B>(grad.clone()));
        }
        if let Some(node) = gamma_node {
            let scaled = B::float_mul(grad.clone(), normalized.clone());
            grads.register::<B>(node.id, sum_rows::<B>(scaled));
        }
        if let Some(node) = input {
            let grad_normalized = B::float_mul(grad, row_view::<B>(gamma));
            let grad_input = input_grad::<B>(grad_normalized, normalized, inv_std);
            grads.register::<B>(node.id, B::float_reshape(grad_input, shape));
        }
    }
}

/// `r * (g - mean(g) - n * mean(g * n))` on `[rows, width]`, every broadcast operand on the
/// right.
fn input_grad<B: Backend>(
    grad_normalized: FloatTensor<B>,
    normalized: FloatTensor<B>,
    inv_std: FloatTensor<B>,
) -> FloatTensor<B> {
    let mean_grad = B::float_mean_dim(grad_normalized.clone(), 1);
    let mean_dot = B::float_mean_dim(B::float_mul(grad_normalized.clone(), normalized.clone()), 1);
    let centered = B::float_sub(
        B::float_sub(grad_normalized, mean_grad),
        B::float_mul(normalized, mean_dot),
    );
    B::float_mul(centered, inv_std)
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

/// `(n, r)` of `[rows, width]` rows (see the module documentation).
fn normalize<B: Backend>(rows: FloatTensor<B>, epsilon: f64) -> (FloatTensor<B>, FloatTensor<B>) {
    let mean = B::float_mean_dim(rows.clone(), 1);
    let centered = B::float_sub(rows, mean);
    let var = B::float_mean_dim(B::float_mul(centered.clone(), centered.clone()), 1);
    let inv_std = B::float_recip(B::float_sqrt(B::float_add_scalar(var, epsilon.into())));
    (B::float_mul(centered, inv_std.clone()), inv_std)
}

/// LayerNorm over the last dimension of `tensor`, differentiated by [`LayerNormLast`]; without
/// a gradient to record it is the inner backend's own `layer_norm`.
pub(super) fn layer_norm_last<B: Backend, C: CheckpointStrategy>(
    tensor: FloatTensor<Autodiff<B, C>>,
    gamma: FloatTensor<Autodiff<B, C>>,
    beta: FloatTensor<Autodiff<B, C>>,
    epsilon: f64,
) -> FloatTensor<Autodiff<B, C>> {
    match LayerNormLast
        .prepare::<C>([tensor.node.clone(), gamma.node.clone(), beta.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let shape = tensor.shape();
            let (normalized, inv_std) = normalize::<B>(as_rows::<B>(tensor.primitive), epsilon);
            let scaled = B::float_mul(normalized.clone(), row_view::<B>(gamma.primitive.clone()));
            let output = B::float_add(scaled, row_view::<B>(beta.primitive));
            prep.finish(
                (normalized, inv_std, gamma.primitive),
                B::float_reshape(output, shape),
            )
        }
        OpsKind::UnTracked(prep) => prep.finish(B::layer_norm(
            tensor.primitive,
            gamma.primitive,
            Some(beta.primitive),
            epsilon,
        )),
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
        for shape in [[2, 3, 8], [1, 5, 33], [4, 1, 2]] {
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
