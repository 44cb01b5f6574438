//! Each kernel on a software GPU (burn's wgpu backend with fusion, as burn's CUDA backend is
//! built, on Mesa's lavapipe Vulkan driver: scripts/install-gpu-soft.sh), against burn's
//! composed ops on burn-flex, on random shapes with odd sizes, edge values (infinities, NaN)
//! and empty tensors.
//!
//! Without a Vulkan driver the tests say they are skipped; `HPTUNE_TEST_GPU_SOFT=required`
//! (CI) makes that a failure.

use burn::backend::wgpu::WgpuDevice;
use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor, TensorData, TensorPrimitive, activation};
use hptune_gpu_kernels::{AdamW, GpuFusedOps, ScaleRule};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// burn's wgpu backend with its default element types.
type Gpu = Wgpu<f32, i32, u32>;

/// The software GPU, or `None` (after saying so) when this machine has no Vulkan driver.
fn gpu() -> Option<WgpuDevice> {
    let device = WgpuDevice::Cpu;
    let probe =
        std::panic::catch_unwind(|| Tensor::<Wgpu, 1>::ones([1], &WgpuDevice::Cpu).into_data());
    match probe {
        Ok(_) => Some(device),
        Err(_) if std::env::var("HPTUNE_TEST_GPU_SOFT").as_deref() == Ok("required") => {
            panic!(
                "HPTUNE_TEST_GPU_SOFT=required but no Vulkan CPU device: run scripts/install-gpu-soft.sh"
            )
        }
        Err(_) => {
            eprintln!(
                "skipped: no Vulkan CPU device (scripts/install-gpu-soft.sh installs lavapipe)"
            );
            None
        }
    }
}

/// `values` as a tensor of `shape` on backend `B`.
fn tensor<B: Backend, const D: usize>(
    values: &[f32],
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), device)
}

/// `count` values uniform in `(-scale, scale)`.
fn random(rng: &mut StdRng, count: usize, scale: f32) -> Vec<f32> {
    (0..count)
        .map(|_| rng.random_range(-scale..scale))
        .collect()
}

/// The values of `tensor`.
fn values<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().to_vec().unwrap()
}

/// A float tensor primitive of `B`.
fn primitive<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> B::FloatTensorPrimitive {
    tensor.into_primitive().tensor()
}

/// The values of a float tensor primitive of `B`, as a tensor of rank `D`.
fn read<B: Backend, const D: usize>(tensor: B::FloatTensorPrimitive) -> Vec<f32> {
    values(Tensor::<B, D>::from_primitive(TensorPrimitive::Float(
        tensor,
    )))
}

/// Asserts `|a - b| <= tolerance * (1 + |b|)` element by element, NaN matching NaN and an
/// infinity the same infinity.
fn assert_close(actual: &[f32], expected: &[f32], tolerance: f32) {
    assert_eq!(actual.len(), expected.len());
    for (i, (a, b)) in actual.iter().zip(expected).enumerate() {
        let same = (a.is_nan() && b.is_nan())
            || (a.is_infinite() && a == b)
            || (a - b).abs() <= tolerance * (1.0 + b.abs());
        assert!(same, "element {i}: {a} vs {b}");
    }
}

/// Shapes `[rows, width]` with odd sizes, one width over a row kernel's cube and one under.
const ROWS: [[usize; 2]; 5] = [[1, 1], [3, 7], [17, 129], [5, 384], [2, 1000]];

#[test]
fn masked_softmax_and_its_backward_match_burns_composition() {
    let Some(gpu) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(1);
    for [batch, heads, seq] in [[1, 1, 1], [2, 3, 5], [3, 2, 131], [1, 1, 0]] {
        let shape = [batch, heads, seq, seq];
        let n = batch * heads * seq * seq;
        let scores = random(&mut rng, n, 8.0);
        let mut bias = vec![0.0; batch * seq];
        for (i, b) in bias.iter_mut().enumerate() {
            // Padding: the last key of every sequence but the first is masked out.
            if i % seq.max(1) == seq - 1 && i >= seq {
                *b = -10_000.0;
            }
        }
        let grad = random(&mut rng, n, 1.0);
        let flex = Default::default();
        let expected = activation::softmax(
            tensor::<Flex, 4>(&scores, shape, &flex)
                + tensor::<Flex, 4>(&bias, [batch, 1, 1, seq], &flex),
            3,
        );
        let g = tensor::<Flex, 4>(&grad, shape, &flex);
        let dot = (g.clone() * expected.clone()).sum_dim(3);
        let expected_grad = expected.clone() * (g - dot);

        let probs = Gpu::masked_softmax(
            primitive(tensor::<Wgpu, 4>(&scores, shape, &gpu)),
            primitive(tensor::<Wgpu, 4>(&bias, [batch, 1, 1, seq], &gpu)),
        );
        let input_grad = Gpu::softmax_backward(
            probs.clone(),
            primitive(tensor::<Wgpu, 4>(&grad, shape, &gpu)),
        );
        assert_close(&read::<Wgpu, 4>(probs), &values(expected), 1e-5);
        assert_close(&read::<Wgpu, 4>(input_grad), &values(expected_grad), 1e-5);
    }
}

#[test]
fn softmax_of_infinite_scores_is_nan_where_burns_is() {
    let Some(gpu) = gpu() else { return };
    let scores = [
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        1.0,
        f32::INFINITY,
        0.0,
        f32::NAN,
    ];
    let flex = Default::default();
    let expected = activation::softmax(tensor::<Flex, 2>(&scores, [3, 2], &flex), 1);
    let probs = Gpu::masked_softmax(
        primitive(tensor::<Wgpu, 2>(&scores, [3, 2], &gpu)),
        primitive(tensor::<Wgpu, 2>(&[0.0, 0.0], [1, 2], &gpu)),
    );
    assert_close(&read::<Wgpu, 2>(probs), &values(expected), 1e-6);
}

/// LayerNorm composed of burn's ops, as the trainer's default: output, `n`, `r`.
fn layer_norm_reference(
    x: Tensor<Flex, 2>,
    gamma: Tensor<Flex, 1>,
    beta: Tensor<Flex, 1>,
    epsilon: f64,
) -> [Tensor<Flex, 2>; 3] {
    let centered = x.clone() - x.mean_dim(1);
    let variance = (centered.clone() * centered.clone()).mean_dim(1);
    let inv_std = (variance + epsilon).sqrt().recip();
    let normalized = centered * inv_std.clone();
    let output = normalized.clone() * gamma.unsqueeze() + beta.unsqueeze();
    [output, normalized, inv_std]
}

#[test]
fn layer_norm_and_its_backward_match_burns_autodiff() {
    let Some(gpu) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(2);
    for [rows, width] in ROWS {
        let n = rows * width;
        let x = random(&mut rng, n, 3.0);
        let gamma = random(&mut rng, width, 2.0);
        let beta = random(&mut rng, width, 1.0);
        let grad = random(&mut rng, n, 1.0);
        let flex = Default::default();
        let input = tensor::<Autodiff<Flex>, 2>(&x, [rows, width], &flex).require_grad();
        let g = tensor::<Autodiff<Flex>, 1>(&gamma, [width], &flex).require_grad();
        let b = tensor::<Autodiff<Flex>, 1>(&beta, [width], &flex).require_grad();
        let centered = input.clone() - input.clone().mean_dim(1);
        let variance = (centered.clone() * centered.clone()).mean_dim(1);
        let output = centered * (variance + 1e-12).sqrt().recip() * g.clone().unsqueeze()
            + b.clone().unsqueeze();
        let grads = (output.clone() * tensor::<Autodiff<Flex>, 2>(&grad, [rows, width], &flex))
            .sum()
            .backward();
        let [_, normalized, inv_std] = layer_norm_reference(
            tensor(&x, [rows, width], &flex),
            tensor(&gamma, [width], &flex),
            tensor(&beta, [width], &flex),
            1e-12,
        );

        let [out, n_gpu, r_gpu] = Gpu::layer_norm_rows(
            primitive(tensor::<Wgpu, 2>(&x, [rows, width], &gpu)),
            primitive(tensor::<Wgpu, 1>(&gamma, [width], &gpu)),
            primitive(tensor::<Wgpu, 1>(&beta, [width], &gpu)),
            1e-12,
        );
        let [dx, dgamma, dbeta] = Gpu::layer_norm_rows_backward(
            primitive(tensor::<Wgpu, 2>(&grad, [rows, width], &gpu)),
            n_gpu.clone(),
            r_gpu.clone(),
            primitive(tensor::<Wgpu, 1>(&gamma, [width], &gpu)),
        );
        assert_close(&read::<Wgpu, 2>(out), &values(output.inner()), 1e-4);
        assert_close(&read::<Wgpu, 2>(n_gpu), &values(normalized), 1e-4);
        assert_close(&read::<Wgpu, 2>(r_gpu), &values(inv_std), 1e-4);
        assert_close(
            &read::<Wgpu, 2>(dx),
            &values(input.grad(&grads).unwrap()),
            1e-3,
        );
        assert_close(
            &read::<Wgpu, 1>(dgamma),
            &values(g.grad(&grads).unwrap()),
            1e-4,
        );
        assert_close(
            &read::<Wgpu, 1>(dbeta),
            &values(b.grad(&grads).unwrap()),
            1e-4,
        );
    }
}

#[test]
fn layer_norm_of_no_rows_is_empty_and_its_parameter_gradients_zero() {
    let Some(gpu) = gpu() else { return };
    let [out, _, inv_std] = Gpu::layer_norm_rows(
        primitive(Tensor::<Wgpu, 2>::zeros([0, 5], &gpu)),
        primitive(Tensor::<Wgpu, 1>::ones([5], &gpu)),
        primitive(Tensor::<Wgpu, 1>::zeros([5], &gpu)),
        1e-5,
    );
    assert!(read::<Wgpu, 2>(out).is_empty());
    assert!(read::<Wgpu, 2>(inv_std).is_empty());
    let [dx, dgamma, dbeta] = Gpu::layer_norm_rows_backward(
        primitive(Tensor::<Wgpu, 2>::zeros([0, 5], &gpu)),
        primitive(Tensor::<Wgpu, 2>::zeros([0, 5], &gpu)),
        primitive(Tensor::<Wgpu, 2>::zeros([0, 1], &gpu)),
        primitive(Tensor::<Wgpu, 1>::ones([5], &gpu)),
    );
    assert!(read::<Wgpu, 2>(dx).is_empty());
    assert_eq!(read::<Wgpu, 1>(dgamma), [0.0; 5]);
    assert_eq!(read::<Wgpu, 1>(dbeta), [0.0; 5]);
}

#[test]
fn gelu_and_its_backward_match_burns_autodiff() {
    let Some(gpu) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(3);
    for shape in [[1, 1], [7, 33], [3, 1537], [0, 4]] {
        let n = shape[0] * shape[1];
        let mut x = random(&mut rng, n, 6.0);
        if n >= 4 {
            x[..4].copy_from_slice(&[f32::INFINITY, f32::NEG_INFINITY, 0.0, 40.0]);
        }
        let grad = random(&mut rng, n, 1.0);
        let flex = Default::default();
        let input = tensor::<Autodiff<Flex>, 2>(&x, shape, &flex).require_grad();
        let output = activation::gelu(input.clone());
        let grads = (output.clone() * tensor::<Autodiff<Flex>, 2>(&grad, shape, &flex))
            .sum()
            .backward();

        let y = Gpu::gelu_erf(primitive(tensor::<Wgpu, 2>(&x, shape, &gpu)));
        let dx = Gpu::gelu_erf_backward(
            primitive(tensor::<Wgpu, 2>(&x, shape, &gpu)),
            primitive(tensor::<Wgpu, 2>(&grad, shape, &gpu)),
        );
        let expected = values(output.inner());
        let expected_grad = values(input.grad(&grads).unwrap());
        // burn's gradient of x * cdf(x) at ±inf is NaN (inf * 0); the kernel's is the limit.
        let finite = |v: &[f32]| {
            v.iter()
                .zip(&x)
                .map(|(v, x)| if x.is_finite() { *v } else { 0.0 })
                .collect::<Vec<_>>()
        };
        assert_close(&read::<Wgpu, 2>(y), &expected, 1e-5);
        assert_close(&finite(&read::<Wgpu, 2>(dx)), &finite(&expected_grad), 1e-5);
    }
}

/// AdamW composed of burn's ops on burn-flex, as the trainer's default, at update number
/// `time` (bias corrections in f64 on the host): the new parameter and moments.
fn adamw_reference(
    param: &[f32],
    grad: &[f32],
    moments: Option<(&[f32], &[f32])>,
    factor: f32,
    step: &AdamW,
    time: i32,
) -> [Vec<f32>; 3] {
    let flex = Default::default();
    let n = param.len();
    let t = |v: &[f32]| tensor::<Flex, 1>(v, [n], &flex);
    let g = t(grad) * factor;
    let (m, v) = match moments {
        Some((m, v)) => (t(m) * step.beta_1, t(v) * step.beta_2),
        None => (t(param).zeros_like(), t(param).zeros_like()),
    };
    let m = m + g.clone() * (1.0 - step.beta_1);
    let v = v + g.clone() * g * (1.0 - step.beta_2);
    let corrections = (1.0 - step.beta_1.powi(time), 1.0 - step.beta_2.powi(time));
    let denominator = (v.clone() / corrections.1).sqrt() + step.epsilon;
    let update = m.clone() / corrections.0 / denominator * step.lr;
    let p = t(param) * (1.0 - step.lr * step.weight_decay) - update;
    [values(p), values(m), values(v)]
}

/// GradScaler's factors, with a growth interval short enough to reach.
const RULE: ScaleRule = ScaleRule {
    growth_interval: 3,
    growth: 2.0,
    backoff: 0.5,
};

#[test]
fn grad_factor_clips_unscales_and_marks_infinite_gradients() {
    let Some(gpu) = gpu() else { return };
    let one = |values: &[f32]| primitive(tensor::<Wgpu, 1>(values, [values.len()], &gpu));
    let factor = |total: f32, max_norm| {
        let (factor, next) = Gpu::grad_factor(one(&[total]), max_norm, None);
        assert!(next.is_none());
        read::<Wgpu, 1>(factor)
    };
    let scaled = |total: f32, max_norm, state: &[f32]| {
        let (factor, next) = Gpu::grad_factor(one(&[total]), max_norm, Some((one(state), RULE)));
        (read::<Wgpu, 1>(factor), read::<Wgpu, 1>(next.unwrap()))
    };
    // Norm 5 (scaled by 8: 40), clipped to 1; the third finite step in a row doubles the scale.
    let (factor_clipped, next) = scaled(1600.0, 1.0, &[8.0, 2.0, 5.0]);
    let [scale, norm] = factor_clipped[..] else {
        panic!()
    };
    assert!((norm - 5.0).abs() < 1e-5);
    assert!((scale - 1.0 / (5.0 + 1e-6) / 8.0).abs() < 1e-6);
    assert_eq!(next, [16.0, 0.0, 5.0]);
    // Under the limit, or no limit: only the loss scale; the run goes on.
    assert_eq!(
        scaled(0.25, 1.0, &[2.0, 0.0, 0.0]),
        (vec![0.5, 0.25], vec![2.0, 1.0, 0.0])
    );
    assert_eq!(factor(0.25, 1.0), [1.0, 0.5]);
    assert_eq!(factor(1e6, 0.0), [1.0, 1000.0]);
    // A doubled scale that overflows f32 stays as it was.
    let (_, next) = scaled(1.0, 1.0, &[f32::MAX, 2.0, 0.0]);
    assert_eq!(next, [f32::MAX, 0.0, 0.0]);
    // A gradient overflowed: the update is skipped, the scale halved, the skip counted.
    let (factor_inf, next) = scaled(f32::INFINITY, 1.0, &[1024.0, 2.0, 1.0]);
    assert!(factor_inf[0].is_nan());
    assert_eq!(next, [512.0, 0.0, 2.0]);
    assert!(factor(f32::NAN, 1.0)[0].is_nan());
}

#[test]
fn adamw_matches_burns_composition_counts_its_updates_and_skips_on_nan() {
    let Some(gpu) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(4);
    let step = AdamW {
        lr: 1e-3,
        weight_decay: 0.01,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-8,
    };
    for n in [1, 1023, 4099, 0] {
        let param = random(&mut rng, n, 1.0);
        let grad = random(&mut rng, n, 10.0);
        let m = random(&mut rng, n, 0.1);
        let v: Vec<f32> = random(&mut rng, n, 0.01).iter().map(|x| x.abs()).collect();
        let t = |values: &[f32]| primitive(tensor::<Wgpu, 1>(values, [values.len()], &gpu));
        let factor = || t(&[0.25, 4.0]);

        // The third update: two before it.
        let state = || Some([t(&m), t(&v), t(&[2.0])]);
        let [p, m3, v3, steps] = Gpu::adamw(t(&param), t(&grad), state(), factor(), &step);
        let expected = adamw_reference(&param, &grad, Some((&m, &v)), 0.25, &step, 3);
        // The bias corrections are f32's on the device (as PyTorch's fused AdamW's), f64's in
        // the reference: 1 - 0.999^3 differs by f32's spacing near 1 over 0.003, 4e-5 of it,
        // 2e-5 of an update of about lr, far below the tolerance.
        for (actual, expected) in [p, m3, v3].into_iter().zip(&expected) {
            assert_close(&read::<Wgpu, 1>(actual), expected, 1e-5);
        }
        assert_eq!(read::<Wgpu, 1>(steps), [3.0]);
        let [p, m1, v1, steps] = Gpu::adamw(t(&param), t(&grad), None, factor(), &step);
        let expected = adamw_reference(&param, &grad, None, 0.25, &step, 1);
        for (actual, expected) in [p, m1, v1].into_iter().zip(&expected) {
            assert_close(&read::<Wgpu, 1>(actual), expected, 1e-5);
        }
        assert_eq!(read::<Wgpu, 1>(steps), [1.0]);

        // Skipped: nothing changes, the count neither; a first step's moments are zero.
        let skip = || t(&[f32::NAN, f32::INFINITY]);
        let [p, first_moment, second, steps] =
            Gpu::adamw(t(&param), t(&grad), state(), skip(), &step);
        assert_eq!(read::<Wgpu, 1>(p), param);
        assert_eq!(read::<Wgpu, 1>(first_moment), m);
        assert_eq!(read::<Wgpu, 1>(second), v);
        assert_eq!(read::<Wgpu, 1>(steps), [2.0]);
        let [p, first_moment, second, steps] = Gpu::adamw(t(&param), t(&grad), None, skip(), &step);
        assert_eq!(read::<Wgpu, 1>(p), param);
        assert_eq!(read::<Wgpu, 1>(first_moment), vec![0.0; n]);
        assert_eq!(read::<Wgpu, 1>(second), vec![0.0; n]);
        assert_eq!(read::<Wgpu, 1>(steps), [0.0]);
    }
}

#[test]
fn adamw_updates_in_place_only_what_nothing_else_holds() {
    let Some(gpu) = gpu() else { return };
    let step = AdamW {
        lr: 0.1,
        weight_decay: 0.0,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-8,
    };
    let param = Tensor::<Wgpu, 1>::random([257], Distribution::Default, &gpu);
    let kept = param.clone();
    let before = values(kept.clone());
    let grad = primitive(Tensor::<Wgpu, 1>::ones([257], &gpu));
    let factor = primitive(tensor::<Wgpu, 1>(&[1.0, 1.0], [2], &gpu));
    let [updated, _, _, _] = Gpu::adamw(primitive(param), grad, None, factor, &step);
    // A clone was held: it keeps its values; the update is p - lr * sign(g).
    assert_eq!(values(kept), before);
    let expected: Vec<f32> = before.iter().map(|p| p - 0.1).collect();
    assert_close(&read::<Wgpu, 1>(updated), &expected, 1e-5);
}
