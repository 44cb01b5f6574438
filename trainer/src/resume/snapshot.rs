//! What a checkpoint holds, as its payload: a safetensors file of the model's parameters and
//! the optimiser's moments, each in its own dtype (bit for bit), with the rest of the run's
//! state as JSON in the file's metadata under [`META_KEY`].
//!
//! Tensors are named after the parameter's Hugging Face key (`checkpoint/keymap.rs`), in
//! burn's layout (linear weights not transposed): `model/KEY`, and `adamw/KEY/first`,
//! `adamw/KEY/second`, `adamw/KEY/master` (the f32 copy of a half-precision parameter) and
//! `adamw/KEY/count` (its updates so far) for each parameter updated at least once.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use rand_chacha::ChaCha8Rng;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};

use crate::backend::TrainBackend;
use crate::checkpoint::walk::PathStack;
use crate::error::{Result, TrainerError};
use crate::host_reads;
use crate::metrics::EvalMetrics;
use crate::model::BertClassifier;
use crate::optim::{GroupedAdamW, ParamState};

/// The metadata key of the run's state.
const META_KEY: &str = "hptune";
/// The version of [`Meta`]'s layout.
const VERSION: u32 = 1;

/// Where a run stands besides its model and optimiser: the schedule's position, the position
/// in the data order with the generator that draws it, dropout's stream, the last evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Position {
    /// Optimiser steps done (the schedule's position).
    pub(crate) step: usize,
    /// The epoch to go on with (1-based; one past the last when the run is complete).
    pub(crate) epoch: usize,
    /// Batches of `epoch` already trained.
    pub(crate) batches_done: usize,
    /// The batch-order generator as it was before `epoch`'s batches were drawn from it.
    pub(crate) batch_rng: RngState,
    /// Training-mode dropout calls made (the masks' stream position).
    pub(crate) dropout_calls: u64,
    /// The evaluation of the last epoch done, `None` during the first.
    pub(crate) last_eval: Option<LastEval>,
}

/// The last evaluation reported, to report the final line from when nothing is left to train.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct LastEval {
    /// The epoch it followed (its protocol step).
    pub(crate) epoch: usize,
    /// Its metrics.
    pub(crate) metrics: EvalMetrics,
    /// Its wall-clock milliseconds per sample.
    pub(crate) eval_ms_per_sample: f64,
}

/// A ChaCha8 generator's whole state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RngState {
    seed: [u8; 32],
    stream: u64,
    /// The word position, a u128 (as a decimal string: JSON numbers stop at 2^53 for many readers).
    word_pos: String,
}

impl RngState {
    /// The state of `rng`.
    pub(crate) fn of(rng: &ChaCha8Rng) -> Self {
        RngState {
            seed: rng.get_seed(),
            stream: rng.get_stream(),
            word_pos: rng.get_word_pos().to_string(),
        }
    }

    /// A generator in this state.
    fn generator(&self) -> std::result::Result<ChaCha8Rng, String> {
        use rand::SeedableRng;
        let word_pos = self
            .word_pos
            .parse()
            .map_err(|e| format!("the generator's word position {:?}: {e}", self.word_pos))?;
        let mut rng = ChaCha8Rng::from_seed(self.seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(word_pos);
        Ok(rng)
    }
}

/// Everything but the tensors.
#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    version: u32,
    /// The settings of the run that wrote it (see [`super::Checkpointing::new`]).
    run: serde_json::Value,
    position: Position,
    /// f16's dynamic loss scale `[scale, finite steps in a row, steps skipped]`.
    loss_scale: Option<[f32; 3]>,
}

/// The payload of a checkpoint of `model` and `optimizer` at `position`, for the run `run`.
pub(crate) fn encode<B: TrainBackend>(
    model: &BertClassifier<B>,
    optimizer: &GroupedAdamW<B>,
    position: &Position,
    run: &serde_json::Value,
) -> Result<Vec<u8>> {
    let mut tensors: Vec<(String, TensorData)> = Vec::new();
    for (id, key, value) in parameters(model) {
        tensors.push((format!("model/{key}"), value));
        let Some(state) = optimizer.param_state(id)? else {
            continue;
        };
        tensors.push((format!("adamw/{key}/first"), state.first));
        tensors.push((format!("adamw/{key}/second"), state.second));
        if let Some(master) = state.master {
            tensors.push((format!("adamw/{key}/master"), master));
        }
        tensors.push((
            format!("adamw/{key}/count"),
            TensorData::new(vec![state.count], [1]),
        ));
    }
    let meta = Meta {
        version: VERSION,
        run: run.clone(),
        position: position.clone(),
        loss_scale: optimizer.loss_scale_state()?,
    };
    let meta = serde_json::to_string(&meta)
        .map_err(|e| TrainerError::Backend(format!("a checkpoint's state as JSON: {e}")))?;
    let views = tensors
        .iter()
        .map(|(name, data)| {
            let view = TensorView::new(
                safetensors_dtype(data.dtype)?,
                data.shape.as_slice().to_vec(),
                data.as_bytes(),
            )
            .map_err(|e| format!("{name}: {e}"))?;
            Ok((name.clone(), view))
        })
        .collect::<std::result::Result<Vec<_>, String>>()
        .map_err(|e| TrainerError::Backend(format!("a checkpoint's tensor {e}")))?;
    safetensors::serialize(views, Some(HashMap::from([(META_KEY.to_string(), meta)])))
        .map_err(|e| TrainerError::Backend(format!("serialising a checkpoint: {e}")))
}

/// A checkpoint's payload, decoded and checked, not yet applied.
pub(crate) struct Snapshot {
    run: serde_json::Value,
    position: Position,
    loss_scale: Option<[f32; 3]>,
    /// Every tensor, by name.
    tensors: BTreeMap<String, TensorData>,
}

impl Snapshot {
    /// Decodes a checkpoint's payload; the error says what is wrong with it.
    pub(crate) fn decode(payload: &[u8]) -> std::result::Result<Self, String> {
        let (_, metadata) = SafeTensors::read_metadata(payload)
            .map_err(|e| format!("not a safetensors payload: {e}"))?;
        let meta = metadata
            .metadata()
            .as_ref()
            .and_then(|m| m.get(META_KEY))
            .ok_or_else(|| format!("no `{META_KEY}` state in its metadata"))?;
        let meta: Meta =
            serde_json::from_str(meta).map_err(|e| format!("its state is unreadable: {e}"))?;
        if meta.version != VERSION {
            return Err(format!(
                "format version {} (this trainer reads {VERSION})",
                meta.version
            ));
        }
        meta.position.batch_rng.generator()?;
        let file = SafeTensors::deserialize(payload)
            .map_err(|e| format!("not a safetensors payload: {e}"))?;
        let tensors = file
            .tensors()
            .into_iter()
            .map(|(name, view)| {
                let dtype = burn_dtype(view.dtype()).map_err(|e| format!("{name}: {e}"))?;
                let data =
                    TensorData::from_bytes_vec(view.data().to_vec(), view.shape().to_vec(), dtype);
                Ok((name, data))
            })
            .collect::<std::result::Result<_, String>>()?;
        Ok(Snapshot {
            run: meta.run,
            position: meta.position,
            loss_scale: meta.loss_scale,
            tensors,
        })
    }

    /// The settings of the run that wrote it.
    pub(crate) fn run(&self) -> &serde_json::Value {
        &self.run
    }

    /// Where that run stood.
    pub(crate) fn position(&self) -> &Position {
        &self.position
    }

    /// The batch-order generator of [`Position::batch_rng`].
    pub(crate) fn batch_rng(&self) -> ChaCha8Rng {
        self.position
            .batch_rng
            .generator()
            .expect("checked by Snapshot::decode")
    }

    /// Puts the parameters into `model` and the moments and loss scale into `optimizer`; an
    /// error when a tensor is missing or of another shape or dtype than the model's.
    pub(crate) fn apply<B: TrainBackend>(
        mut self,
        model: BertClassifier<B>,
        optimizer: &mut GroupedAdamW<B>,
        path: &Path,
    ) -> Result<BertClassifier<B>> {
        let incompatible = |message: String| TrainerError::Checkpoint {
            path: path.to_path_buf(),
            message: format!("does not fit this run's model: {message}"),
        };
        let device = model.head.classifier.weight.val().inner().device();
        let mut mapper = Restore::<B> {
            tensors: &mut self.tensors,
            device: device.clone(),
            stack: PathStack::default(),
            restored: Vec::new(),
            error: None,
        };
        let model = model.map(&mut mapper);
        if let Some(error) = mapper.error {
            return Err(incompatible(error));
        }
        let restored = mapper.restored;
        optimizer.set_loss_scale_state(self.loss_scale)?;
        for (id, key) in restored {
            let mut take = |part: &str| self.tensors.remove(&format!("adamw/{key}/{part}"));
            let (Some(first), Some(second), Some(count)) =
                (take("first"), take("second"), take("count"))
            else {
                continue;
            };
            let master = take("master");
            let count = count.to_vec::<f32>().ok().and_then(|c| c.first().copied());
            let Some(count) = count else {
                return Err(incompatible(format!("adamw/{key}/count is not one f32")));
            };
            let state = ParamState {
                first,
                second,
                master,
                count,
            };
            optimizer.set_param_state(id, state, &device);
        }
        if let Some(name) = self.tensors.keys().next() {
            return Err(incompatible(format!(
                "it holds `{name}`, which is no parameter's (or part of a parameter's optimiser state) of this model"
            )));
        }
        Ok(model)
    }
}

/// Each float parameter of `model`: its id, its Hugging Face key and its values on the host.
fn parameters<B: TrainBackend>(model: &BertClassifier<B>) -> Vec<(ParamId, String, TensorData)> {
    #[derive(Default)]
    struct Collect {
        stack: PathStack,
        found: Vec<(ParamId, String, TensorData)>,
    }
    impl<B: TrainBackend> ModuleVisitor<B> for Collect {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.stack.enter(name, container_type);
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.stack.exit();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let values = host_reads::read_data(param.val().inner());
            self.found
                .push((param.id, self.stack.current().hf_key(), values));
        }
    }
    let mut collect = Collect::default();
    model.visit(&mut collect);
    collect.found
}

/// Replaces each parameter by its tensor of a checkpoint, taken out of `tensors`.
struct Restore<'a, B: TrainBackend> {
    tensors: &'a mut BTreeMap<String, TensorData>,
    device: burn::tensor::Device<B::InnerBackend>,
    stack: PathStack,
    /// The id and key of each parameter restored.
    restored: Vec<(ParamId, String)>,
    /// What does not fit, the first such parameter's; later ones are left alone once set.
    error: Option<String>,
}

impl<B: TrainBackend> ModuleMapper<B> for Restore<'_, B> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.stack.enter(name, container_type);
    }

    fn exit_module(&mut self, _: &str, _: &str) {
        self.stack.exit();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.error.is_some() {
            return param;
        }
        let (id, tensor, mapper) = param.consume();
        let key = self.stack.current().hf_key();
        let name = format!("model/{key}");
        let stored = self.tensors.remove(&name);
        let dims = tensor.dims().to_vec();
        let dtype = tensor.dtype();
        match stored {
            Some(data) if data.shape.as_slice() == dims.as_slice() && data.dtype == dtype => {
                let values = B::InnerBackend::float_from_data(data, &self.device);
                let values =
                    Tensor::<B::InnerBackend, D>::from_primitive(TensorPrimitive::Float(values));
                let restored =
                    Tensor::from_inner(values).set_require_grad(tensor.is_require_grad());
                self.restored.push((id, key));
                Param::from_mapped_value(id, restored, mapper)
            }
            other => {
                let found = match other {
                    Some(data) => format!("{:?} {:?}", data.dtype, data.shape.as_slice()),
                    None => "nothing".to_string(),
                };
                self.error = Some(format!(
                    "`{name}` is {found}, the model's is {dtype:?} {dims:?}"
                ));
                Param::from_mapped_value(id, tensor, mapper)
            }
        }
    }
}

/// The float dtypes a checkpoint holds, as burn and safetensors name them.
const DTYPES: [(DType, Dtype); 3] = [
    (DType::F32, Dtype::F32),
    (DType::F16, Dtype::F16),
    (DType::BF16, Dtype::BF16),
];

/// safetensors' name of a float dtype.
fn safetensors_dtype(dtype: DType) -> std::result::Result<Dtype, String> {
    DTYPES
        .into_iter()
        .find_map(|(burn, stored)| (burn == dtype).then_some(stored))
        .ok_or_else(|| format!("of dtype {dtype:?}, not F32, F16 or BF16"))
}

/// burn's dtype of a safetensors float dtype.
fn burn_dtype(dtype: Dtype) -> std::result::Result<DType, String> {
    DTYPES
        .into_iter()
        .find_map(|(burn, stored)| (stored == dtype).then_some(burn))
        .ok_or_else(|| format!("dtype {dtype:?}, not F32, F16 or BF16"))
}
