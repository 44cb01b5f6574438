//! What Hugging Face's Trainer does around AdamW: parameter groups without weight decay on
//! biases and LayerNorm, global gradient-norm clipping, the linear warmup/decay schedule, and
//! for an f16 model PyTorch's dynamic loss scaling.

use std::collections::{HashMap, HashSet};

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{
    DType, ElementConversion, FloatDType, Tensor, TensorMetadata, TensorPrimitive,
    backend::AutodiffBackend, backend::Backend,
};

use crate::backend::TrainBackend;
use crate::checkpoint::walk::PathStack;
use crate::fused::{AdamWStep, in_dtype};
use crate::loss_scale::DynamicLossScale;
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
    time: i32,
    master: Option<FloatTensor<B>>,
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
pub struct GroupedAdamW<B: TrainBackend> {
    settings: AdamWSettings,
    decay_ids: Vec<ParamId>,
    no_decay_ids: Vec<ParamId>,
    no_decay: HashSet<ParamId>,
    moments: HashMap<ParamId, Moments<B::InnerBackend>>,
    loss_scale: Option<DynamicLossScale>,
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
}

impl<B: TrainBackend> GroupedAdamW<B> {
    /// Builds the optimiser for `model`'s parameters.
    pub fn new(model: &BertClassifier<B>, settings: AdamWSettings) -> Self {
        let mut groups = Groups::default();
        burn::module::Module::visit(model, &mut groups);
        GroupedAdamW {
            settings,
            no_decay: groups.no_decay.iter().copied().collect(),
            decay_ids: groups.decay,
            no_decay_ids: groups.no_decay,
            moments: HashMap::new(),
            loss_scale: groups.f16.then(DynamicLossScale::default),
        }
    }

    /// The dynamic loss scale, for an f16 model.
    pub fn loss_scale(&self) -> Option<&DynamicLossScale> {
        self.loss_scale.as_ref()
    }

    /// `loss` times the loss scale (for an f16 model; `loss` itself otherwise), to take the
    /// backward pass of whose gradients [`Self::step`] takes.
    pub fn scale_loss(&self, loss: Tensor<B, 1>) -> Tensor<B, 1> {
        match &self.loss_scale {
            Some(scale) => loss.mul_scalar(scale.scale()),
            None => loss,
        }
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
    ) -> (BertClassifier<B>, StepOutcome) {
        let mut grads = GradientsParams::from_grads(grads, &model);
        let scaled_norm = {
            let mut sum = SquaredNorm {
                grads: &grads,
                total: None,
            };
            burn::module::Module::visit(&model, &mut sum);
            sum.total
                .map_or(0.0, |total| total.into_scalar().elem::<f64>())
                .sqrt()
        };
        let loss_scale = match &mut self.loss_scale {
            Some(scale) => {
                let factor = scale.scale();
                // The squares are summed in f32, where no finite f16 gradient overflows: the
                // norm is finite exactly when every gradient is.
                scale.update(scaled_norm.is_finite());
                if !scaled_norm.is_finite() {
                    return (model, StepOutcome::Skipped);
                }
                factor
            }
            None => 1.0,
        };
        let norm = scaled_norm / loss_scale;
        // torch.nn.utils.clip_grad_norm_: scale by max / (norm + 1e-6) when that is below 1;
        // the gradients are unscaled by the same factor, in the update's one pass.
        let clip = match self.settings.max_grad_norm.filter(|max| *max > 0.0) {
            Some(max) => (max / (norm + 1e-6)).min(1.0),
            None => 1.0,
        };
        let mut update = Update {
            optimizer: self,
            grads: &mut grads,
            lr,
            grad_scale: clip / loss_scale,
        };
        let model = burn::module::Module::map(model, &mut update);
        (model, StepOutcome::Applied { grad_norm: norm })
    }
}

/// Replaces each parameter that has a gradient by its AdamW update.
struct Update<'a, B: TrainBackend> {
    optimizer: &'a mut GroupedAdamW<B>,
    grads: &'a mut GradientsParams,
    lr: f64,
    grad_scale: f64,
}

impl<B: TrainBackend> ModuleMapper<B> for Update<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let settings = &self.optimizer.settings;
        let previous = self.optimizer.moments.remove(&id);
        let step = AdamWStep {
            lr: self.lr,
            weight_decay: match self.optimizer.no_decay.contains(&id) {
                true => 0.0,
                false => settings.weight_decay,
            },
            beta_1: settings.beta_1,
            beta_2: settings.beta_2,
            epsilon: settings.epsilon,
            time: previous.as_ref().map_or(1, |m| m.time + 1),
            grad_scale: self.grad_scale,
        };
        let require_grad = tensor.is_require_grad();
        let param = tensor.inner().into_primitive().tensor();
        let grad = grad.into_primitive().tensor();
        let precision = param.dtype();
        let half = precision != DType::F32;
        let (master, moments) = match previous {
            Some(m) => (m.master, Some((m.first, m.second))),
            None => (None, None),
        };
        let (param, grad) = match half {
            true => (
                master.unwrap_or_else(|| cast_f32::<B::InnerBackend>(param)),
                cast_f32::<B::InnerBackend>(grad),
            ),
            false => (param, grad),
        };
        let (updated, first, second) = B::InnerBackend::adamw(param, grad, moments, &step);
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
            time: step.time,
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

    /// A one-layer BERT classifier with hidden size 8, in f32.
    #[cfg(feature = "flex")]
    fn tiny_model() -> BertClassifier<B> {
        use crate::model::{BertClassifierConfig, BertModelConfig, ClassificationHeadConfig};
        let config: crate::config::BertConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 12
        }))
        .unwrap();
        BertClassifierConfig {
            bert: BertModelConfig::from_hf(&config, None),
            head: ClassificationHeadConfig {
                hidden_size: 8,
                num_labels: 2,
                dropout: 0.1,
                initializer_range: 0.02,
            },
        }
        .init::<B>(&Default::default())
    }

    #[cfg(feature = "flex")]
    #[test]
    fn biases_and_layer_norms_get_no_weight_decay_and_every_param_has_a_group() {
        let model = tiny_model();
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
                    vec![master, m.first.clone(), m.second.clone()]
                        .into_iter()
                        .map(bits::<burn::backend::Flex>)
                        .chain([vec![m.time as u32]])
                        .collect()
                });
                self.1.push((param.id, value, state));
            }
        }
        let mut values = Values(optimizer, Vec::new());
        burn::module::Module::visit(model, &mut values);
        values.1
    }

    #[cfg(feature = "flex")]
    #[test]
    fn an_f16_step_whose_scaled_gradient_overflows_is_skipped_and_changes_nothing_but_the_scale() {
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
        let model = burn::module::Module::map(tiny_model(), &mut ToF16);
        let mut optimizer = GroupedAdamW::new(&model, AdamWSettings::default());
        let scale = |o: &GroupedAdamW<B>| o.loss_scale().map(DynamicLossScale::scale);
        assert_eq!(scale(&optimizer), Some(65536.0));

        // 1e-3 x 2^16 = 65.5 is an f16: the step is taken, from the unscaled gradient.
        let grads = optimizer.scale_loss(loss(&model, 1e-3)).backward();
        let (model, outcome) = optimizer.step(1e-3, model, grads);
        let StepOutcome::Applied { grad_norm } = outcome else {
            panic!("{outcome:?}")
        };
        // Each gradient is 1e-3 to f16's precision (2^-11) once the scale is divided out.
        let expected = 1e-3 * ((8 * 8 + 8 * 2) as f64).sqrt();
        assert!((grad_norm / expected - 1.0).abs() < 1e-3, "{grad_norm}");
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
        let (model, outcome) = optimizer.step(1e-3, model, grads);
        assert_eq!(outcome, StepOutcome::Skipped);
        assert!(
            snapshot(&model, &optimizer) == before,
            "a skipped step changed a value"
        );
        assert_eq!(scale(&optimizer), Some(32768.0));
        assert_eq!(optimizer.loss_scale().unwrap().skipped(), 1);

        // At the halved scale it fits (32768): the step is taken again.
        let grads = optimizer.scale_loss(loss(&model, 1.0)).backward();
        let (model, outcome) = optimizer.step(1e-3, model, grads);
        assert!(
            matches!(outcome, StepOutcome::Applied { .. }),
            "{outcome:?}"
        );
        assert!(snapshot(&model, &optimizer) != before);
    }
}
