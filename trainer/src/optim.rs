//! What Hugging Face's Trainer does around AdamW: parameter groups without weight decay on
//! biases and LayerNorm, global gradient-norm clipping, and the linear warmup/decay schedule.

use std::collections::HashSet;

use burn::module::{ModuleVisitor, Param, ParamId};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::{ElementConversion, Tensor, backend::AutodiffBackend, backend::Backend};

use crate::checkpoint::walk::PathStack;
use crate::model::BertClassifier;

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

type Adaptor<B> = OptimizerAdaptor<AdamW, BertClassifier<B>, B>;

/// AdamW over two parameter groups, with global gradient clipping.
pub struct GroupedAdamW<B: AutodiffBackend> {
    decay: Adaptor<B>,
    no_decay: Adaptor<B>,
    decay_ids: Vec<ParamId>,
    no_decay_ids: Vec<ParamId>,
    max_grad_norm: Option<f64>,
}

impl<B: AutodiffBackend> GroupedAdamW<B> {
    /// Builds the optimiser for `model`'s parameters.
    pub fn new(model: &BertClassifier<B>, settings: AdamWSettings) -> Self {
        let mut groups = Groups::default();
        burn::module::Module::visit(model, &mut groups);
        let config = |decay: f64| {
            AdamWConfig::new()
                .with_beta_1(settings.beta_1 as f32)
                .with_beta_2(settings.beta_2 as f32)
                .with_epsilon(settings.epsilon as f32)
                .with_weight_decay(decay as f32)
                .init()
        };
        GroupedAdamW {
            decay: config(settings.weight_decay),
            no_decay: config(0.0),
            decay_ids: groups.decay,
            no_decay_ids: groups.no_decay,
            max_grad_norm: settings.max_grad_norm.filter(|n| *n > 0.0),
        }
    }

    /// Parameters excluded from weight decay (biases and LayerNorm), for inspection.
    pub fn no_decay_ids(&self) -> &[ParamId] {
        &self.no_decay_ids
    }

    /// Applies one step at rate `lr` from the gradients of a backward pass; returns the global
    /// gradient norm before clipping.
    pub fn step(
        &mut self,
        lr: f64,
        model: BertClassifier<B>,
        mut grads: B::Gradients,
    ) -> (BertClassifier<B>, f64) {
        let mut decay = GradientsParams::from_params(&mut grads, &model, &self.decay_ids);
        let mut no_decay = GradientsParams::from_params(&mut grads, &model, &self.no_decay_ids);
        let norm = {
            let mut sum = SquaredNorm {
                containers: [&decay, &no_decay],
                total: 0.0,
            };
            burn::module::Module::visit(&model, &mut sum);
            sum.total.sqrt()
        };
        if let Some(max) = self.max_grad_norm {
            // torch.nn.utils.clip_grad_norm_: scale by max / (norm + 1e-6) when that is below 1.
            let factor = max / (norm + 1e-6);
            if factor < 1.0 {
                let mut scale = Scale {
                    containers: [&mut decay, &mut no_decay],
                    factor,
                };
                burn::module::Module::visit(&model, &mut scale);
            }
        }
        let model = self.decay.step(lr, model, decay);
        let model = self.no_decay.step(lr, model, no_decay);
        (model, norm)
    }
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

struct SquaredNorm<'a> {
    containers: [&'a GradientsParams; 2],
    total: f64,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        for container in self.containers {
            if let Some(grad) = container.get::<B::InnerBackend, D>(param.id) {
                self.total += grad.square().sum().into_scalar().elem::<f64>();
            }
        }
    }
}

struct Scale<'a> {
    containers: [&'a mut GradientsParams; 2],
    factor: f64,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        for container in self.containers.iter_mut() {
            if let Some(grad) = container.remove::<B::InnerBackend, D>(param.id) {
                container.register(param.id, grad.mul_scalar(self.factor));
            }
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
        assert_eq!(optimizer.decay_ids.len(), 3 + 6 + 1 + 1);
        let mut grouped: HashSet<ParamId> = optimizer.decay_ids.iter().copied().collect();
        grouped.extend(optimizer.no_decay_ids().iter().copied());
        assert_eq!(grouped, all_param_ids::<B, _>(&model));
    }
}
