//! What Hugging Face's Trainer does around AdamW: parameter groups without weight decay on
//! biases and LayerNorm, global gradient-norm clipping, and the linear warmup/decay schedule.

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
use crate::model::fused::AdamWStep;
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
pub struct GroupedAdamW<B: TrainBackend> {
    settings: AdamWSettings,
    decay_ids: Vec<ParamId>,
    no_decay_ids: Vec<ParamId>,
    no_decay: HashSet<ParamId>,
    moments: HashMap<ParamId, Moments<B::InnerBackend>>,
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

    /// Applies one step at rate `lr` from the gradients of a backward pass; returns the global
    /// gradient norm before clipping.
    pub fn step(
        &mut self,
        lr: f64,
        model: BertClassifier<B>,
        grads: B::Gradients,
    ) -> (BertClassifier<B>, f64) {
        let mut grads = GradientsParams::from_grads(grads, &model);
        let norm = {
            let mut sum = SquaredNorm {
                grads: &grads,
                total: None,
            };
            burn::module::Module::visit(&model, &mut sum);
            sum.total
                .map_or(0.0, |total| total.into_scalar().elem::<f64>())
                .sqrt()
        };
        // torch.nn.utils.clip_grad_norm_: scale by max / (norm + 1e-6) when that is below 1.
        let grad_scale = match self.settings.max_grad_norm.filter(|max| *max > 0.0) {
            Some(max) => (max / (norm + 1e-6)).min(1.0),
            None => 1.0,
        };
        let mut update = Update {
            optimizer: self,
            grads: &mut grads,
            lr,
            grad_scale,
        };
        (burn::module::Module::map(model, &mut update), norm)
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

/// Sorts parameter ids into the decay and no-decay groups.
#[derive(Default)]
struct Groups {
    stack: PathStack,
    decay: Vec<ParamId>,
    no_decay: Vec<ParamId>,
}

impl<B: Backend> ModuleVisitor<B> for Groups {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.stack.enter(name, container_type);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.stack.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
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
            let grad = match grad.dtype() {
                DType::F32 => grad,
                _ => grad.cast(FloatDType::F32),
            };
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
    #[test]
    fn biases_and_layer_norms_get_no_weight_decay_and_every_param_has_a_group() {
        use crate::model::{BertClassifierConfig, BertModelConfig, ClassificationHeadConfig};
        type B = burn::backend::Autodiff<burn::backend::Flex>;
        let config: crate::config::BertConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 12
        }))
        .unwrap();
        let model = BertClassifierConfig {
            bert: BertModelConfig::from_hf(&config, None),
            head: ClassificationHeadConfig {
                hidden_size: 8,
                num_labels: 2,
                dropout: 0.1,
                initializer_range: 0.02,
            },
        }
        .init::<B>(&Default::default());
        let optimizer = GroupedAdamW::new(&model, AdamWSettings::default());
        // Per layer 6 biases + 2 LayerNorms x 2; embeddings' LayerNorm 2; pooler and head biases.
        assert_eq!(optimizer.no_decay_ids().len(), 6 + 4 + 2 + 1 + 1);
        // 3 embedding tables, 6 linear weights per layer, pooler and classifier weights.
        assert_eq!(optimizer.decay_ids().len(), 3 + 6 + 1 + 1);
        let mut grouped: HashSet<ParamId> = optimizer.decay_ids().iter().copied().collect();
        grouped.extend(optimizer.no_decay_ids().iter().copied());
        assert_eq!(grouped, all_param_ids::<B, _>(&model));
    }
}
