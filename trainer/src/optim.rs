//! What Hugging Face's Trainer does around AdamW: parameter groups without weight decay on
//! biases and LayerNorm, global gradient-norm clipping, the linear warmup/decay schedule, and
//! for an f16 model PyTorch's dynamic loss scaling.

use std::collections::{HashMap, HashSet};

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{
    DType, FloatDType, Tensor, TensorData, TensorMetadata, TensorPrimitive,
    backend::AutodiffBackend, backend::Backend,
};

use crate::backend::TrainBackend;
use crate::checkpoint::walk::PathStack;
use crate::error::{Result, TrainerError};
use crate::fused::{AdamWRates, AdamWStep, StepDecision, in_dtype};
use crate::host_reads;
use crate::loss_scale::{DynamicLossScale, SCALE_RULE};
use crate::model::{BertClassifier, FusedOps};

/// AdamW's settings (PyTorch's / Hugging Face's defaults apart from the rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWSettings {
    /// Decoupled weight decay, applied to every weight matrix and embedding.
    pub weight_decay: f64,
    /// First-moment decay.
    pub beta_1: f64,
    /// Second-moment decay.
    pub beta_2: f64,
    /// Added to the denominator.
    pub epsilon: f64,
    /// Maximal global L2 norm of the gradients; `None` or 0 disables clipping.
    pub max_grad_norm: Option<f64>,
}

impl Default for AdamWSettings {
    fn default() -> Self {
        AdamWSettings {
            weight_decay: 0.0,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-8,
            max_grad_norm: Some(1.0),
        }
    }
}

/// `get_linear_schedule_with_warmup`: from 0 up to the peak over the warmup steps, then down
/// to 0 at the last step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearSchedule {
    /// The peak learning rate.
    pub peak: f64,
    /// Steps of linear warmup.
    pub warmup_steps: usize,
    /// Total optimiser steps of the run.
    pub total_steps: usize,
}

impl LinearSchedule {
    /// The rate used by the optimiser step that follows `done` completed steps.
    pub fn rate(&self, done: usize) -> f64 {
        if done < self.warmup_steps {
            return self.peak * done as f64 / self.warmup_steps.max(1) as f64;
        }
        let remaining = self.total_steps.saturating_sub(done) as f64;
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
        self.peak * (remaining / decay_steps).max(0.0)
    }
}

/// A parameter's AdamW moments, its number of updates so far, and its f32 master copy when
/// the model computes in half precision.
struct Moments<B: Backend> {
    first: FloatTensor<B>,
    second: FloatTensor<B>,
    count: Count<B>,
    master: Option<FloatTensor<B>>,
}

/// A parameter's number of updates so far, kept where the step is decided.
enum Count<B: Backend> {
    /// On the host.
    Host(i32),
    /// A one-element `f32` tensor on the device, which alone knows whether a step was skipped.
    Device(FloatTensor<B>),
}

/// Where the optimiser decides each step's gradient factor (see [`StepDecision`]), with f16's
/// dynamic loss scale there.
enum Decider<B: Backend> {
    /// On the host, from the gradient norm read back.
    Host(Option<DynamicLossScale>),
    /// On the device; the loss scale's state is `[scale, finite steps in a row, steps
    /// skipped]` there ([`crate::fused::ScaleRule`]).
    Device(Option<Tensor<B, 1>>),
}

/// The factor of every gradient in an update.
enum Factor<B: Backend> {
    /// Decided on the host.
    Host(f64),
    /// Decided on the device (see [`FusedOps::grad_factor`]; NaN skips the update).
    Device(FloatTensor<B>),
}

/// AdamW over two parameter groups, with global gradient clipping.
///
/// Each parameter's update is one [`FusedOps::adamw`] of the inner backend (one pass on
/// burn-flex), and clipping is folded into it as the gradient's factor; the update is burn's
/// and PyTorch's AdamW (decoupled weight decay, bias-corrected moments). A parameter in half
/// precision (bf16, f16) is updated as with PyTorch's autocast: the moments and an f32 master
/// copy of the parameter take the update in f32 from the gradient cast to f32, and the model
/// gets the master copy rounded to its precision (a bf16 weight alone would lose updates
/// smaller than 1/256 of it, i.e. nearly all of them at fine-tuning rates).
///
/// A model with f16 parameters also gets a [`DynamicLossScale`], as PyTorch's `GradScaler`: the
/// caller multiplies the loss by it ([`Self::scale_loss`]), and the step divides it out of the
/// gradients in the same factor as clipping, or skips the update when a gradient is infinite
/// or NaN.
///
/// On a backend whose [`FusedOps::STEP_DECISION`] is [`StepDecision::Device`] (the GPUs), the
/// factor, the loss scale, the skip and each parameter's count of updates stay on the device
/// ([`FusedOps::grad_factor`], [`FusedOps::adamw_on_device`]): a step reads nothing back. On
/// the others the step reads the gradient norm, once.
pub struct GroupedAdamW<B: TrainBackend> {
    settings: AdamWSettings,
    decay_ids: Vec<ParamId>,
    no_decay_ids: Vec<ParamId>,
    no_decay: HashSet<ParamId>,
    moments: HashMap<ParamId, Moments<B::InnerBackend>>,
    decider: Decider<B::InnerBackend>,
}

/// What [`GroupedAdamW::step`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepOutcome {
    /// The parameters were updated; the global gradient norm before clipping (unscaled).
    Applied {
        /// The L2 norm of all gradients, before clipping.
        grad_norm: f64,
    },
    /// A gradient of the scaled loss was infinite or NaN: parameters and moments were left as
    /// they were, and the loss scale halved.
    Skipped,
    /// Decided on the device, nothing read back: the update was applied there, or skipped
    /// when a gradient was not finite.
    OnDevice,
}

impl<B: TrainBackend> GroupedAdamW<B> {
    /// Builds the optimiser for `model`'s parameters, deciding each step where its backend
    /// does ([`FusedOps::STEP_DECISION`]).
    pub fn new(model: &BertClassifier<B>, settings: AdamWSettings) -> Self {
        Self::deciding(
            model,
            settings,
            <B::InnerBackend as FusedOps>::STEP_DECISION,
        )
    }

    /// Builds the optimiser for `model`'s parameters, deciding each step at `decision`.
    fn deciding(
        model: &BertClassifier<B>,
        settings: AdamWSettings,
        decision: StepDecision,
    ) -> Self {
        let mut groups = Groups::default();
        burn::module::Module::visit(model, &mut groups);
        let loss_scale = groups.f16.then(DynamicLossScale::default);
        let decider = match decision {
            StepDecision::Host => Decider::Host(loss_scale),
            StepDecision::Device => {
                let device = model.head.classifier.weight.val().device();
                Decider::Device(loss_scale.map(|scale| Tensor::from_floats(scale.state(), &device)))
            }
        };
        GroupedAdamW {
            settings,
            no_decay: groups.no_decay.iter().copied().collect(),
            decay_ids: groups.decay,
            no_decay_ids: groups.no_decay,
            moments: HashMap::new(),
            decider,
        }
    }

    /// The dynamic loss scale, for an f16 model (read back from the device, one read, where
    /// the step is decided there).
    pub fn loss_scale(&self) -> Result<Option<DynamicLossScale>> {
        match &self.decider {
            Decider::Host(scale) => Ok(scale.clone()),
            Decider::Device(None) => Ok(None),
            Decider::Device(Some(state)) => {
                let state = host_reads::read::<f32, _, 1, _>(state.clone(), "the loss scale")?;
                let state = state.try_into().map_err(|state| {
                    TrainerError::Backend(format!("a loss scale's state of {state:?}"))
                })?;
                Ok(Some(DynamicLossScale::from_state(state)))
            }
        }
    }

    /// `loss` times the loss scale (for an f16 model; `loss` itself otherwise), to take the
    /// backward pass of whose gradients [`Self::step`] takes.
    pub fn scale_loss(&self, loss: Tensor<B, 1>) -> Tensor<B, 1> {
        match &self.decider {
            Decider::Host(Some(scale)) => loss.mul_scalar(scale.scale()),
            Decider::Device(Some(state)) => {
                let scale = in_dtype(state.clone().slice(0..1), loss.dtype());
                loss * Tensor::from_inner(scale)
            }
            Decider::Host(None) | Decider::Device(None) => loss,
        }
    }

    /// The loss scale's state `[scale, finite steps in a row, steps skipped]`, for an f16
    /// model (for a checkpoint).
    pub(crate) fn loss_scale_state(&self) -> Result<Option<[f32; 3]>> {
        Ok(self.loss_scale()?.map(|scale| scale.state()))
    }

    /// Sets the loss scale to a state of [`Self::loss_scale_state`]; an error when the model
    /// has no loss scale (it is not f16) and `state` is one, or the other way round.
    pub(crate) fn set_loss_scale_state(&mut self, state: Option<[f32; 3]>) -> Result<()> {
        match (&mut self.decider, state) {
            (Decider::Host(None) | Decider::Device(None), None) => {}
            (Decider::Host(Some(scale)), Some(state)) => {
                *scale = DynamicLossScale::from_state(state);
            }
            (Decider::Device(Some(scale)), Some(state)) => {
                *scale = Tensor::from_floats(state, &scale.device());
            }
            (_, state) => {
                return Err(TrainerError::Backend(format!(
                    "a loss scale of {state:?} for a model {} an f16 loss scale",
                    if state.is_some() { "without" } else { "with" }
                )));
            }
        }
        Ok(())
    }

    /// What the optimiser keeps for parameter `id`, read to the host (for a checkpoint);
    /// `None` before its first update.
    pub(crate) fn param_state(&self, id: ParamId) -> Result<Option<ParamState>> {
        let Some(moments) = self.moments.get(&id) else {
            return Ok(None);
        };
        let count = match &moments.count {
            Count::Host(count) => *count as f32,
            Count::Device(count) => {
                let count = Tensor::<B::InnerBackend, 1>::from_primitive(TensorPrimitive::Float(
                    count.clone(),
                ));
                let count = host_reads::read::<f32, _, 1, _>(count, "a count of updates")?;
                count.first().copied().ok_or_else(|| {
                    TrainerError::Backend("a parameter's count of updates is empty".to_string())
                })?
            }
        };
        Ok(Some(ParamState {
            first: primitive_data::<B::InnerBackend>(moments.first.clone()),
            second: primitive_data::<B::InnerBackend>(moments.second.clone()),
            master: moments
                .master
                .clone()
                .map(primitive_data::<B::InnerBackend>),
            count,
        }))
    }

    /// Gives parameter `id` the moments, count and master copy of `state` (from a
    /// checkpoint), on `device`.
    pub(crate) fn set_param_state(
        &mut self,
        id: ParamId,
        state: ParamState,
        device: &burn::tensor::Device<B::InnerBackend>,
    ) {
        let count = match &self.decider {
            Decider::Host(_) => Count::Host(state.count as i32),
            Decider::Device(_) => Count::Device(B::InnerBackend::float_from_data(
                TensorData::new(vec![state.count], [1]),
                device,
            )),
        };
        let moments = Moments {
            first: B::InnerBackend::float_from_data(state.first, device),
            second: B::InnerBackend::float_from_data(state.second, device),
            count,
            master: state
                .master
                .map(|master| B::InnerBackend::float_from_data(master, device)),
        };
        self.moments.insert(id, moments);
    }

    /// Parameters excluded from weight decay (biases and LayerNorm), for inspection.
    pub fn no_decay_ids(&self) -> &[ParamId] {
        &self.no_decay_ids
    }

    /// Parameters with weight decay (weight matrices and embeddings), for inspection.
    pub fn decay_ids(&self) -> &[ParamId] {
        &self.decay_ids
    }

    /// Applies one step at rate `lr` from the gradients of the backward pass of
    /// [`Self::scale_loss`]'s loss.
    pub fn step(
        &mut self,
        lr: f64,
        model: BertClassifier<B>,
        grads: B::Gradients,
    ) -> Result<(BertClassifier<B>, StepOutcome)> {
        let mut grads = GradientsParams::from_grads(grads, &model);
        let squared_sum = {
            let mut sum = SquaredNorm {
                grads: &grads,
                total: None,
            };
            burn::module::Module::visit(&model, &mut sum);
            sum.total
        };
        let max_norm = self.settings.max_grad_norm.filter(|max| *max > 0.0);
        let (factor, outcome) = match &mut self.decider {
            Decider::Host(loss_scale) => {
                let squared_sum = match squared_sum {
                    Some(total) => host_reads::read::<f64, _, 1, _>(total, "the gradient norm")?[0],
                    None => 0.0,
                };
                let scaled_norm = squared_sum.sqrt();
                let loss_scale = match loss_scale {
                    Some(scale) => {
                        let factor = scale.scale();
                        // The squares are summed in f32, where no finite f16 gradient
                        // overflows: the norm is finite exactly when every gradient is.
                        scale.update(scaled_norm.is_finite());
                        if !scaled_norm.is_finite() {
                            return Ok((model, StepOutcome::Skipped));
                        }
                        factor
                    }
                    None => 1.0,
                };
                let norm = scaled_norm / loss_scale;
                // torch.nn.utils.clip_grad_norm_: scale by max / (norm + 1e-6) when that is
                // below 1; the gradients are unscaled by the same factor, in the update's one
                // pass.
                let clip = match max_norm {
                    Some(max) => (max / (norm + 1e-6)).min(1.0),
                    None => 1.0,
                };
                let outcome = StepOutcome::Applied { grad_norm: norm };
                (Factor::Host(clip / loss_scale), outcome)
            }
            Decider::Device(loss_scale) => {
                let device = model.head.classifier.weight.val().device();
                let total = squared_sum.unwrap_or_else(|| Tensor::zeros([1], &device));
                let (factor, next_scale) = B::InnerBackend::grad_factor(
                    total.into_primitive().tensor(),
                    max_norm.unwrap_or(0.0),
                    loss_scale
                        .take()
                        .map(|state| (state.into_primitive().tensor(), SCALE_RULE)),
                );
                *loss_scale =
                    next_scale.map(|state| Tensor::from_primitive(TensorPrimitive::Float(state)));
                (Factor::Device(factor), StepOutcome::OnDevice)
            }
        };
        let mut update = Update {
            optimizer: self,
            grads: &mut grads,
            lr,
            factor,
        };
        let model = burn::module::Module::map(model, &mut update);
        Ok((model, outcome))
    }
}

/// What the optimiser keeps for one parameter, on the host: the moments and the f32 master
/// copy (of a half-precision parameter) in their own dtype and shape, and the count of updates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParamState {
    /// The first moment.
    pub(crate) first: TensorData,
    /// The second moment.
    pub(crate) second: TensorData,
    /// The f32 master copy of a bf16 or f16 parameter.
    pub(crate) master: Option<TensorData>,
    /// The updates applied so far (the bias corrections' exponent).
    pub(crate) count: f32,
}

/// A tensor primitive's values, read to the host (counted as a host read) with its shape.
fn primitive_data<I: Backend>(tensor: FloatTensor<I>) -> TensorData {
    let shape = tensor.shape();
    let flat = I::float_reshape(tensor, [shape.num_elements()].into());
    let mut data =
        host_reads::read_data(Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(flat)));
    data.shape = shape;
    data
}

/// Replaces each parameter that has a gradient by its AdamW update.
struct Update<'a, B: TrainBackend> {
    optimizer: &'a mut GroupedAdamW<B>,
    grads: &'a mut GradientsParams,
    lr: f64,
    factor: Factor<B::InnerBackend>,
}

impl<B: TrainBackend> ModuleMapper<B> for Update<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let settings = &self.optimizer.settings;
        let rates = AdamWRates {
            lr: self.lr,
            weight_decay: match self.optimizer.no_decay.contains(&id) {
                true => 0.0,
                false => settings.weight_decay,
            },
            beta_1: settings.beta_1,
            beta_2: settings.beta_2,
            epsilon: settings.epsilon,
        };
        let require_grad = tensor.is_require_grad();
        let param = tensor.inner().into_primitive().tensor();
        let grad = grad.into_primitive().tensor();
        let precision = param.dtype();
        let half = precision != DType::F32;
        let (master, previous) = match self.optimizer.moments.remove(&id) {
            Some(m) => (m.master, Some((m.first, m.second, m.count))),
            None => (None, None),
        };
        let (param, grad) = match half {
            true => (
                master.unwrap_or_else(|| cast_f32::<B::InnerBackend>(param)),
                cast_f32::<B::InnerBackend>(grad),
            ),
            false => (param, grad),
        };
        let (updated, first, second, count) =
            adamw::<B::InnerBackend>(param, grad, previous, &self.factor, rates);
        let (updated, master) = match half {
            true => (
                B::InnerBackend::float_cast(updated.clone(), precision.into()),
                Some(updated),
            ),
            false => (updated, None),
        };
        let moments = Moments {
            first,
            second,
            count,
            master,
        };
        self.optimizer.moments.insert(id, moments);
        let mut tensor =
            Tensor::from_inner(Tensor::from_primitive(TensorPrimitive::Float(updated)));
        if require_grad {
            tensor = tensor.require_grad();
        }
        Param::from_mapped_value(id, tensor, mapper)
    }
}

/// One AdamW update of `param` from its moments and count (`None` before its first update)
/// with the gradient times `factor`: the new parameter, moments and count.
fn adamw<I: FusedOps>(
    param: FloatTensor<I>,
    grad: FloatTensor<I>,
    previous: Option<(FloatTensor<I>, FloatTensor<I>, Count<I>)>,
    factor: &Factor<I>,
    rates: AdamWRates,
) -> (FloatTensor<I>, FloatTensor<I>, FloatTensor<I>, Count<I>) {
    match factor {
        Factor::Host(grad_scale) => {
            let (time, moments) = match previous {
                None => (1, None),
                Some((m, v, Count::Host(time))) => (time + 1, Some((m, v))),
                Some((_, _, Count::Device(_))) => {
                    unreachable!("a step decided on the host follows steps decided there")
                }
            };
            let step = AdamWStep {
                rates,
                time,
                grad_scale: *grad_scale,
            };
            let (updated, first, second) = I::adamw(param, grad, moments, &step);
            (updated, first, second, Count::Host(time))
        }
        Factor::Device(factor) => {
            let device = I::float_device(&param);
            let state = previous.map(|(m, v, count)| {
                let count = match count {
                    Count::Device(count) => count,
                    Count::Host(time) => {
                        I::float_from_data(TensorData::new(vec![time as f32], [1]), &device)
                    }
                };
                [m, v, count]
            });
            let [updated, first, second, count] =
                I::adamw_on_device(param, grad, state, factor.clone(), &rates);
            (updated, first, second, Count::Device(count))
        }
    }
}

/// `tensor` in f32.
fn cast_f32<B: Backend>(tensor: FloatTensor<B>) -> FloatTensor<B> {
    B::float_cast(tensor, FloatDType::F32)
}

/// Sorts parameter ids into the decay and no-decay groups, and notes f16 parameters.
#[derive(Default)]
struct Groups {
    stack: PathStack,
    decay: Vec<ParamId>,
    no_decay: Vec<ParamId>,
    f16: bool,
}

impl<B: Backend> ModuleVisitor<B> for Groups {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.stack.enter(name, container_type);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.stack.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.f16 |= param.val().dtype() == DType::F16;
        if self.stack.current().is_no_decay() {
            self.no_decay.push(param.id);
        } else {
            self.decay.push(param.id);
        }
    }
}

/// Sums the squares of every parameter's gradient.
struct SquaredNorm<'a, I: Backend> {
    grads: &'a GradientsParams,
    total: Option<Tensor<I, 1>>,
}

impl<B: AutodiffBackend<InnerBackend: FusedOps>> ModuleVisitor<B>
    for SquaredNorm<'_, B::InnerBackend>
{
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(grad) = self.grads.get::<B::InnerBackend, D>(param.id) {
            // Summed in f32 whatever the model's precision, and added up on the device: one
            // read-back a step, not one per parameter.
            let grad = in_dtype(grad, DType::F32);
            let squares = Tensor::from_primitive(TensorPrimitive::Float(
                B::InnerBackend::squared_sum(grad.into_primitive().tensor()),
            ));
            self.total = Some(match self.total.take() {
                Some(total) => total + squares,
                None => squares,
            });
        }
    }
}

/// The ids of every float parameter of a module.
pub fn all_param_ids<B: Backend, M: burn::module::Module<B>>(model: &M) -> HashSet<ParamId> {
    struct Ids(HashSet<ParamId>);
    impl<B: Backend> ModuleVisitor<B> for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.insert(param.id);
        }
    }
    let mut ids = Ids(HashSet::new());
    model.visit(&mut ids);
    ids.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_zero_like_transformers() {
        let s = LinearSchedule {
            peak: 1.0,
            warmup_steps: 10,
            total_steps: 110,
        };
        assert_eq!(s.rate(0), 0.0);
        assert!((s.rate(5) - 0.5).abs() < 1e-12);
        assert!((s.rate(10) - 1.0).abs() < 1e-12);
        assert!((s.rate(60) - 0.5).abs() < 1e-12);
        assert_eq!(s.rate(110), 0.0);
        let no_warmup = LinearSchedule {
            peak: 2.0,
            warmup_steps: 0,
            total_steps: 4,
        };
        assert_eq!(no_warmup.rate(0), 2.0);
        assert!((no_warmup.rate(3) - 0.5).abs() < 1e-12);
    }

    #[cfg(feature = "flex")]
    type B = burn::backend::Autodiff<burn::backend::Flex>;

    /// A one-layer BERT classifier with hidden size 8, in f32, its dropouts at `dropout`.
    #[cfg(feature = "flex")]
    fn tiny_model(dropout: f64) -> BertClassifier<B> {
        use crate::model::{BertClassifierConfig, BertModelConfig, ClassificationHeadConfig};
        let config: crate::config::BertConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 12,
            "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout
        }))
        .unwrap();
        BertClassifierConfig {
            bert: BertModelConfig::from_hf(&config, None),
            head: ClassificationHeadConfig {
                hidden_size: 8,
                num_labels: 2,
                dropout,
                initializer_range: 0.02,
            },
        }
        .init::<B>(&Default::default())
    }

    #[cfg(feature = "flex")]
    #[test]
    fn biases_and_layer_norms_get_no_weight_decay_and_every_param_has_a_group() {
        let model = tiny_model(0.1);
        let optimizer = GroupedAdamW::new(&model, AdamWSettings::default());
        // Per layer 6 biases + 2 LayerNorms x 2; embeddings' LayerNorm 2; pooler and head biases.
        assert_eq!(optimizer.no_decay_ids().len(), 6 + 4 + 2 + 1 + 1);
        // 3 embedding tables, 6 linear weights per layer, pooler and classifier weights.
        assert_eq!(optimizer.decay_ids().len(), 3 + 6 + 1 + 1);
        let mut grouped: HashSet<ParamId> = optimizer.decay_ids().iter().copied().collect();
        grouped.extend(optimizer.no_decay_ids().iter().copied());
        assert_eq!(grouped, all_param_ids::<B, _>(&model));
    }

    /// The bits of a tensor's values, as f32.
    #[cfg(feature = "flex")]
    fn bits<I: Backend>(tensor: FloatTensor<I>) -> Vec<u32> {
        let len = tensor.shape().num_elements();
        let flat = I::float_reshape(tensor, [len].into());
        let values = Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(flat)).into_data();
        let values: Vec<f32> = values.convert::<f32>().to_vec().unwrap();
        values.into_iter().map(f32::to_bits).collect()
    }

    /// Every parameter's values, and the optimiser's master copy and moments of each, as bits.
    #[cfg(feature = "flex")]
    fn snapshot(
        model: &BertClassifier<B>,
        optimizer: &GroupedAdamW<B>,
    ) -> Vec<(ParamId, Vec<u32>, Vec<Vec<u32>>)> {
        struct Values<'a>(&'a GroupedAdamW<B>, Vec<(ParamId, Vec<u32>, Vec<Vec<u32>>)>);
        impl ModuleVisitor<B> for Values<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                let value = bits::<B>(param.val().into_primitive().tensor());
                let state = self.0.moments.get(&param.id).map_or(Vec::new(), |m| {
                    let master = m
                        .master
                        .clone()
                        .expect("an f16 parameter has a master copy");
                    let count = match &m.count {
                        Count::Host(time) => vec![*time as u32],
                        Count::Device(count) => bits::<burn::backend::Flex>(count.clone()),
                    };
                    vec![master, m.first.clone(), m.second.clone()]
                        .into_iter()
                        .map(bits::<burn::backend::Flex>)
                        .chain([count])
                        .collect()
                });
                self.1.push((param.id, value, state));
            }
        }
        let mut values = Values(optimizer, Vec::new());
        burn::module::Module::visit(model, &mut values);
        values.1
    }

    /// Steps of an f16 model whose second overflows, the optimiser deciding at `decision`: the
    /// first is applied, the second skipped changing nothing but the scale, the third applied.
    #[cfg(feature = "flex")]
    fn an_overflowing_f16_step_is_skipped(decision: StepDecision) {
        /// Each parameter cast to f16, as the model computes with `--precision f16`.
        struct ToF16;
        impl ModuleMapper<B> for ToF16 {
            fn map_float<const D: usize>(
                &mut self,
                param: Param<Tensor<B, D>>,
            ) -> Param<Tensor<B, D>> {
                param.map(|t| t.cast(FloatDType::F16).detach().require_grad())
            }
        }
        // A loss whose gradient is `factor` for every element of the pooler's and the head's
        // weights.
        let loss = |model: &BertClassifier<B>, factor: f64| {
            let head = [
                model.bert.pooler.dense.weight.val(),
                model.head.classifier.weight.val(),
            ];
            let sums = head.map(|w| w.cast(FloatDType::F32).mul_scalar(factor).sum());
            let [a, b] = sums;
            a + b
        };
        let model = burn::module::Module::map(tiny_model(0.1), &mut ToF16);
        let mut optimizer = GroupedAdamW::deciding(&model, AdamWSettings::default(), decision);
        let scale = |o: &GroupedAdamW<B>| o.loss_scale().unwrap().map(|s| s.scale());
        assert_eq!(scale(&optimizer), Some(65536.0));

        // 1e-3 x 2^16 = 65.5 is an f16: the step is taken, from the unscaled gradient.
        let grads = optimizer.scale_loss(loss(&model, 1e-3)).backward();
        let (model, outcome) = optimizer.step(1e-3, model, grads).unwrap();
        match outcome {
            StepOutcome::Applied { grad_norm } => {
                // Each gradient is 1e-3 to f16's precision (2^-11) once the scale is divided
                // out.
                let expected = 1e-3 * ((8 * 8 + 8 * 2) as f64).sqrt();
                assert!((grad_norm / expected - 1.0).abs() < 1e-3, "{grad_norm}");
            }
            outcome => assert_eq!(
                (decision, outcome),
                (StepDecision::Device, StepOutcome::OnDevice)
            ),
        }
        let before = snapshot(&model, &optimizer);
        assert!(
            before
                .iter()
                .filter(|(_, _, state)| !state.is_empty())
                .count()
                == 2
        );

        // 1 x 2^16 is above f16's largest, 65504: the gradient is infinite.
        let grads = optimizer.scale_loss(loss(&model, 1.0)).backward();
        let (model, outcome) = optimizer.step(1e-3, model, grads).unwrap();
        let skipped = match decision {
            StepDecision::Host => StepOutcome::Skipped,
            StepDecision::Device => StepOutcome::OnDevice,
        };
        assert_eq!(outcome, skipped);
        assert!(
            snapshot(&model, &optimizer) == before,
            "a skipped step changed a value"
        );
        assert_eq!(scale(&optimizer), Some(32768.0));
        assert_eq!(optimizer.loss_scale().unwrap().unwrap().skipped(), 1);

        // At the halved scale it fits (32768): the step is taken again.
        let grads = optimizer.scale_loss(loss(&model, 1.0)).backward();
        let (model, outcome) = optimizer.step(1e-3, model, grads).unwrap();
        assert_ne!(outcome, StepOutcome::Skipped);
        assert!(snapshot(&model, &optimizer) != before);
        assert_eq!(optimizer.loss_scale().unwrap().unwrap().skipped(), 1);
    }

    #[cfg(feature = "flex")]
    #[test]
    fn an_f16_step_whose_scaled_gradient_overflows_is_skipped_and_changes_nothing_but_the_scale() {
        an_overflowing_f16_step_is_skipped(StepDecision::Host);
    }

    #[cfg(feature = "flex")]
    #[test]
    fn decided_on_the_device_an_overflowing_f16_step_is_skipped_there_too() {
        an_overflowing_f16_step_is_skipped(StepDecision::Device);
    }

    /// The values of every parameter of `model`.
    #[cfg(feature = "flex")]
    fn parameters(model: &BertClassifier<B>) -> Vec<f32> {
        struct Values(Vec<f32>);
        impl ModuleVisitor<B> for Values {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                let bits = bits::<B>(param.val().into_primitive().tensor());
                self.0.extend(bits.into_iter().map(f32::from_bits));
            }
        }
        let mut values = Values(Vec::new());
        burn::module::Module::visit(model, &mut values);
        values.0
    }

    #[cfg(feature = "flex")]
    #[test]
    fn a_step_decided_on_the_device_reads_nothing_and_updates_as_the_hosts() {
        let settings = AdamWSettings {
            weight_decay: 0.01,
            // Small enough that the tiny model's gradients are clipped.
            max_grad_norm: Some(0.05),
            ..AdamWSettings::default()
        };
        let ids = Tensor::<B, 2, burn::tensor::Int>::from_ints(
            [[1, 2, 3, 4], [5, 6, 7, 0]],
            &Default::default(),
        );
        // Without dropout: its masks are numbered by a count shared by the process's tests.
        let initial = tiny_model(0.0);
        // Read before cloning: burn initialises a parameter on its first use, each clone of
        // an uninitialised one on its own (with other random values).
        let start = parameters(&initial);
        let mut runs = Vec::new();
        for decision in [StepDecision::Host, StepDecision::Device] {
            let mut model = initial.clone();
            let mut optimizer = GroupedAdamW::deciding(&model, settings, decision);
            let reads = host_reads::Tally::start();
            for step in 1..=5 {
                let input = crate::model::ModelInput {
                    input_ids: ids.clone(),
                    token_type_ids: ids.zeros_like(),
                    attention_mask: ids.ones_like().float(),
                };
                let labels = Tensor::from_ints([step % 2, 1], &Default::default());
                let loss = crate::model::cross_entropy(model.forward(input), labels);
                let grads = optimizer.scale_loss(loss).backward();
                model = optimizer.step(1e-2, model, grads).unwrap().0;
            }
            let reads = reads.reads();
            runs.push((parameters(&model), reads));
        }
        let [(host, host_reads), (device, device_reads)] = &runs[..] else {
            unreachable!()
        };
        // The host reads the norm once a step; the device nothing.
        assert_eq!((*host_reads, *device_reads), (5, 0));
        let moved = host.iter().zip(&start).filter(|(a, b)| a != b).count();
        assert!(moved > host.len() / 2, "{moved} of {}", host.len());
        // The same updates but for the f32 rounding of the device's clipping factor and bias
        // corrections (f64 on the host; f32's 0.999 makes 1 - 0.999^t 1.3e-5 off) and the
        // order of the update's operations, which AdamW's normalisation carries into the
        // update: seen up to 1.6e-5 (relative) after 5 steps of about 1e-2 over random
        // initialisations; an update taken or dropped wholesale would be 1e-2 apart.
        let worst = device
            .iter()
            .zip(host)
            .map(|(d, h)| (d - h).abs() / (1.0 + h.abs()))
            .fold(0.0f32, f32::max);
        eprintln!("device against host: at most {worst:.2e} apart after 5 steps");
        assert!(worst < 1e-4, "{worst}");
    }
}
