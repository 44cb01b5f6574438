//! [`GpuFusedOps`] on burn's [`Fusion`] backends (burn's CUDA backend is one): each op is
//! registered as one custom op of the fusion stream (as burn-vision registers its own), which
//! runs the inner backend's kernel when the stream executes; the fusion layer plans around it
//! and never splits it into smaller ops.

use std::marker::PhantomData;

use burn_backend::tensor::FloatTensor;
use burn_backend::{DType, Shape, TensorMetadata};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};

use crate::{AdamW, GpuFusedOps, ScaleRule};

/// One registered op: `N` inputs, `M` outputs and what computes them on the inner backend.
struct Custom<B, K, const N: usize, const M: usize> {
    desc: CustomOpIr,
    kernel: K,
    backend: PhantomData<fn() -> B>,
}

impl<B, K, const N: usize, const M: usize> std::fmt::Debug for Custom<B, K, N, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Custom").field("desc", &self.desc).finish()
    }
}

impl<B, K, const N: usize, const M: usize> Operation<B::FusionRuntime> for Custom<B, K, N, M>
where
    B: FusionBackend,
    K: Fn([FloatTensor<B>; N]) -> [FloatTensor<B>; M] + Send + Sync,
{
    fn execute(
        &self,
        handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
    ) {
        let (inputs, outputs) = self.desc.as_fixed::<N, M>();
        let results = (self.kernel)(
            inputs
                .each_ref()
                .map(|ir| handles.get_float_tensor::<B>(ir)),
        );
        for (ir, tensor) in outputs.iter().zip(results) {
            handles.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

/// Registers `kernel` as the op `name` of the fusion stream, from `inputs` to tensors of the
/// shapes and types of `outputs`, and returns those.
fn register<B, K, const N: usize, const M: usize>(
    name: &'static str,
    inputs: [FusionTensor<B::FusionRuntime>; N],
    outputs: [(Shape, DType); M],
    kernel: K,
) -> [FusionTensor<B::FusionRuntime>; M]
where
    B: FusionBackend,
    K: Fn([FloatTensor<B>; N]) -> [FloatTensor<B>; M] + Send + Sync + 'static,
{
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(&inputs);
    let outputs =
        outputs.map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype));
    let inputs = inputs.map(FusionTensor::into_ir);
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    let op = Custom::<B, K, N, M> {
        desc: desc.clone(),
        kernel,
        backend: PhantomData,
    };
    match client
        .register(streams, OperationIr::Custom(desc), op)
        .try_into()
    {
        Ok(outputs) => outputs,
        Err(_) => unreachable!("the stream returns the {M} outputs it was given"),
    }
}

/// The shape and type of `tensor`.
fn like(tensor: &impl TensorMetadata) -> (Shape, DType) {
    (tensor.shape(), tensor.dtype())
}

impl<B: FusionBackend + GpuFusedOps> GpuFusedOps for Fusion<B> {
    fn masked_softmax(scores: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        let out = like(&scores);
        let [probs] = register::<B, _, 2, 1>(
            "hptune_masked_softmax",
            [scores, bias],
            [out],
            |[scores, bias]| [B::masked_softmax(scores, bias)],
        );
        probs
    }

    fn softmax_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let out = like(&grad);
        let [input_grad] = register::<B, _, 2, 1>(
            "hptune_softmax_backward",
            [output, grad],
            [out],
            |[output, grad]| [B::softmax_backward(output, grad)],
        );
        input_grad
    }

    fn layer_norm_rows(
        rows: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        let (shape, dtype) = like(&rows);
        let inv_std = Shape::new([shape[0], 1]);
        register::<B, _, 3, 3>(
            "hptune_layer_norm",
            [rows, gamma, beta],
            [(shape.clone(), dtype), (shape, dtype), (inv_std, dtype)],
            move |[rows, gamma, beta]| B::layer_norm_rows(rows, gamma, beta, epsilon),
        )
    }

    fn layer_norm_rows_backward(
        grad: FloatTensor<Self>,
        normalized: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        let (shape, dtype) = like(&grad);
        let width = Shape::new([shape[1]]);
        register::<B, _, 4, 3>(
            "hptune_layer_norm_backward",
            [grad, normalized, inv_std, gamma],
            [(shape, dtype), (width.clone(), dtype), (width, dtype)],
            |[grad, normalized, inv_std, gamma]| {
                B::layer_norm_rows_backward(grad, normalized, inv_std, gamma)
            },
        )
    }

    fn gelu_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let out = like(&tensor);
        let [output] = register::<B, _, 1, 1>("hptune_gelu", [tensor], [out], |[tensor]| {
            [B::gelu_erf(tensor)]
        });
        output
    }

    fn gelu_erf_backward(input: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let out = like(&grad);
        let [output] = register::<B, _, 2, 1>(
            "hptune_gelu_backward",
            [input, grad],
            [out],
            |[input, grad]| [B::gelu_erf_backward(input, grad)],
        );
        output
    }

    fn grad_factor(
        squared_sum: FloatTensor<Self>,
        max_norm: f64,
        loss_scale: Option<(FloatTensor<Self>, ScaleRule)>,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>) {
        let factor = (Shape::new([2]), DType::F32);
        match loss_scale {
            None => {
                let [factor] = register::<B, _, 1, 1>(
                    "hptune_grad_factor",
                    [squared_sum],
                    [factor],
                    move |[total]| [B::grad_factor(total, max_norm, None).0],
                );
                (factor, None)
            }
            Some((scale, rule)) => {
                let [factor, next_scale] = register::<B, _, 2, 2>(
                    "hptune_grad_factor_scaled",
                    [squared_sum, scale],
                    [factor, (Shape::new([3]), DType::F32)],
                    move |[total, scale]| match B::grad_factor(total, max_norm, Some((scale, rule)))
                    {
                        (factor, Some(next_scale)) => [factor, next_scale],
                        (_, None) => unreachable!("a scaled step returns the scale's next state"),
                    },
                );
                (factor, Some(next_scale))
            }
        }
    }

    fn adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        state: Option<[FloatTensor<Self>; 3]>,
        factor: FloatTensor<Self>,
        step: &AdamW,
    ) -> [FloatTensor<Self>; 4] {
        let step = *step;
        let (shape, dtype) = like(&param);
        let outputs = [
            (shape.clone(), dtype),
            (shape.clone(), DType::F32),
            (shape, DType::F32),
            (Shape::new([1]), DType::F32),
        ];
        match state {
            Some([m, v, steps]) => register::<B, _, 6, 4>(
                "hptune_adamw",
                [param, grad, m, v, steps, factor],
                outputs,
                move |[param, grad, m, v, steps, factor]| {
                    B::adamw(param, grad, Some([m, v, steps]), factor, &step)
                },
            ),
            None => register::<B, _, 3, 4>(
                "hptune_adamw_first",
                [param, grad, factor],
                outputs,
                move |[param, grad, factor]| B::adamw(param, grad, None, factor, &step),
            ),
        }
    }
}
