//! One AdamW update of a parameter tensor, as PyTorch's `torch.optim.AdamW` (and burn's
//! `AdamW`) compute it, with `g` the gradient times the clipping factor (divided by the loss
//! scale for f16):
//!
//! `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g²`, and
//! `p = p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`.
//!
//! burn's optimiser takes about ten passes over the 22 million parameters of MiniLM for this
//! (each op a new tensor), and its gradient clipping one more; on burn-flex it is one pass
//! here (`kernels.rs`).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

/// The rates of AdamW: what every update of a run shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWRates {
    /// The learning rate.
    pub lr: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// First-moment decay.
    pub beta_1: f64,
    /// Second-moment decay.
    pub beta_2: f64,
    /// Added to the denominator.
    pub epsilon: f64,
}

/// The coefficients of one update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWStep {
    /// The rates.
    pub rates: AdamWRates,
    /// The parameter's step number, from 1.
    pub time: i32,
    /// The factor of the gradient: global-norm clipping's, divided by f16's loss scale (1
    /// without either).
    pub grad_scale: f64,
}

impl AdamWStep {
    /// `1 - b1^t` and `1 - b2^t`.
    pub fn bias_corrections(&self) -> (f64, f64) {
        (
            1.0 - self.rates.beta_1.powi(self.time),
            1.0 - self.rates.beta_2.powi(self.time),
        )
    }
}

/// The updated parameter and moments.
pub type Updated<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

/// The update composed of burn's ops: the default of [`super::FusedOps::adamw`]. The moments
/// are zero before the first step.
pub(super) fn adamw<B: Backend>(
    param: FloatTensor<B>,
    grad: FloatTensor<B>,
    moments: Option<(FloatTensor<B>, FloatTensor<B>)>,
    step: &AdamWStep,
) -> Updated<B> {
    let rates = &step.rates;
    let grad = B::float_mul_scalar(grad, step.grad_scale.into());
    let first = B::float_mul_scalar(grad.clone(), (1.0 - rates.beta_1).into());
    let second = B::float_mul_scalar(
        B::float_mul(grad.clone(), grad),
        (1.0 - rates.beta_2).into(),
    );
    let (m, v) = match moments {
        Some((m, v)) => (
            B::float_add(B::float_mul_scalar(m, rates.beta_1.into()), first),
            B::float_add(B::float_mul_scalar(v, rates.beta_2.into()), second),
        ),
        None => (first, second),
    };
    let (correction_1, correction_2) = step.bias_corrections();
    let m_hat = B::float_div_scalar(m.clone(), correction_1.into());
    let v_hat = B::float_div_scalar(v.clone(), correction_2.into());
    let denominator = B::float_add_scalar(B::float_sqrt(v_hat), rates.epsilon.into());
    let update = B::float_mul_scalar(B::float_div(m_hat, denominator), rates.lr.into());
    let decayed = B::float_mul_scalar(param, (1.0 - rates.lr * rates.weight_decay).into());
    (B::float_sub(decayed, update), m, v)
}

/// The kernel on burn-flex's tensors, for contiguous `f32` tensors (others get the composed
/// update).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::DType;
    use burn::tensor::ops::FloatTensor;

    use super::super::kernels::{self, AdamWCoefficients};
    use super::super::output::{tensor, written};
    use super::{AdamWStep, Updated};

    /// One update of `param` (see the module documentation): in place when `param` and its
    /// moments are contiguous `f32` tensors that nothing else holds (the optimiser's own after
    /// the first step), else into new tensors.
    pub(crate) fn adamw(
        mut param: FloatTensor<Flex>,
        grad: FloatTensor<Flex>,
        moments: Option<(FloatTensor<Flex>, FloatTensor<Flex>)>,
        step: &AdamWStep,
    ) -> Updated<Flex> {
        let (correction_1, correction_2) = step.bias_corrections();
        let rates = &step.rates;
        let coefficients = AdamWCoefficients {
            grad_scale: step.grad_scale as f32,
            beta_1: rates.beta_1 as f32,
            beta_2: rates.beta_2 as f32,
            step_size: (rates.lr / correction_1) as f32,
            inv_sqrt_correction_2: (1.0 / correction_2.sqrt()) as f32,
            epsilon: rates.epsilon as f32,
            decay: (1.0 - rates.lr * rates.weight_decay) as f32,
        };
        let moments = match (moments, grad.as_slice::<f32>()) {
            (Some((mut m, mut v)), Some(g)) => {
                let len = g.len();
                if let (Some(p), Some(m_mut), Some(v_mut)) = (
                    exclusive(&mut param, len),
                    exclusive(&mut m, len),
                    exclusive(&mut v, len),
                ) {
                    kernels::adamw_in_place(p, g, m_mut, v_mut, &coefficients);
                    return (param, m, v);
                }
                Some((m, v))
            }
            (moments, _) => moments,
        };
        let shape = param.layout().shape().clone();
        let slices = match &moments {
            Some((m, v)) => m.as_slice::<f32>().zip(v.as_slice::<f32>()).map(Some),
            None => Some(None),
        };
        let (Some(p), Some(g), Some(moments_in)) =
            (param.as_slice::<f32>(), grad.as_slice::<f32>(), slices)
        else {
            return super::adamw::<Flex>(param, grad, moments, step);
        };
        if p.len() != g.len()
            || moments_in.is_some_and(|(m, v)| m.len() != p.len() || v.len() != p.len())
        {
            return super::adamw::<Flex>(param, grad, moments, step);
        }
        let (mut m_out, mut v_out) = (Vec::new(), Vec::new());
        // SAFETY: the kernel writes every element of its three outputs.
        let p_out = unsafe {
            written(p.len(), |p_new| {
                m_out = written(p.len(), |m_new| {
                    v_out = written(p.len(), |v_new| {
                        kernels::adamw(p, g, moments_in, &coefficients, p_new, m_new, v_new);
                    });
                });
            })
        };
        (
            tensor(p_out, shape.clone()),
            tensor(m_out, shape.clone()),
            tensor(v_out, shape),
        )
    }

    /// The `len` elements of `tensor` to overwrite, when it is a contiguous `f32` tensor of
    /// `len` elements from offset 0 whose memory nothing else holds.
    fn exclusive(tensor: &mut FloatTensor<Flex>, len: usize) -> Option<&mut [f32]> {
        let whole = tensor.dtype() == DType::F32
            && tensor.as_slice::<f32>().map(<[f32]>::len) == Some(len)
            && tensor.bytes().len() == len * size_of::<f32>();
        whole.then(|| tensor.try_storage_mut::<f32>()).flatten()
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::{Tensor, TensorPrimitive};

    use super::super::FusedOps;
    use super::super::test_util::{assert_close, sample};
    use super::{AdamWRates, AdamWStep, adamw};

    fn values(t: burn::tensor::ops::FloatTensor<Flex>) -> Vec<f32> {
        Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(t))
            .into_data()
            .to_vec()
            .unwrap()
    }

    #[test]
    fn three_steps_of_the_kernel_match_the_composed_update() {
        let n = 70_001; // several rayon tasks and a partial one
        let prim = |seed| sample::<Flex, 1>([n], seed).into_primitive().tensor();
        for (weight_decay, grad_scale) in [(0.01, 1.0), (0.0, 0.3)] {
            let (mut ours, mut composed) = ((prim(1), None), (prim(1), None));
            for time in 1..=3 {
                let step = AdamWStep {
                    rates: AdamWRates {
                        lr: 1e-3,
                        weight_decay,
                        beta_1: 0.9,
                        beta_2: 0.999,
                        epsilon: 1e-8,
                    },
                    time,
                    grad_scale,
                };
                let grad = prim(10 + time as u64);
                let (p, m, v) = Flex::adamw(ours.0, grad.clone(), ours.1, &step);
                ours = (p, Some((m, v)));
                let (p, m, v) = adamw::<Flex>(composed.0, grad, composed.1, &step);
                composed = (p, Some((m, v)));
            }
            let ((p, moments), (q, other)) = (ours, composed);
            assert_close(&values(p), &values(q), 1e-6);
            let ((m, v), (m2, v2)) = (moments.unwrap(), other.unwrap());
            assert_close(&values(m), &values(m2), 1e-6);
            assert_close(&values(v), &values(v2), 1e-6);
        }
    }

    #[test]
    fn the_optimisers_own_tensors_are_updated_in_place_and_shared_ones_are_not() {
        let prim = |seed| sample::<Flex, 1>([5000], seed).into_primitive().tensor();
        let step = |time| AdamWStep {
            rates: AdamWRates {
                lr: 1e-3,
                weight_decay: 0.01,
                beta_1: 0.9,
                beta_2: 0.999,
                epsilon: 1e-8,
            },
            time,
            grad_scale: 1.0,
        };
        let (p, m, v) = Flex::adamw(prim(1), prim(2), None, &step(1));
        let address = p.bytes().as_ptr();
        let (p, m, v) = Flex::adamw(p, prim(3), Some((m, v)), &step(2));
        assert_eq!(
            p.bytes().as_ptr(),
            address,
            "a unique parameter is overwritten"
        );
        let held = p.clone();
        let before = values(held.clone());
        let (p, _, _) = Flex::adamw(p, prim(4), Some((m, v)), &step(3));
        assert_ne!(p.bytes().as_ptr(), address);
        assert_eq!(
            values(held),
            before,
            "a parameter held elsewhere keeps its values"
        );
    }
}
