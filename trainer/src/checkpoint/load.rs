//! Fills a [`BertClassifier`] from a weights file (see [`WeightFile`]), checking every
//! tensor's shape.

use std::collections::BTreeSet;
use std::path::Path;

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Tensor, TensorData, backend::Backend};

use super::walk::PathStack;
use super::weights::WeightFile;
use crate::error::{Result, TrainerError};
use crate::model::BertClassifier;

/// What loading did besides filling the model.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// Checkpoint keys that were applied.
    pub applied: usize,
    /// Parameters the checkpoint lacked and that keep their fresh initialisation (head, pooler).
    pub newly_initialised: Vec<String>,
    /// Tensors whose stored shape differed from the model's and that were re-initialised
    /// instead (only with `ignore_mismatched_sizes`), as `key: stored [..], model [..]`.
    pub mismatched: Vec<String>,
    /// Checkpoint keys that no parameter uses (e.g. `embeddings.position_ids`, MLM heads).
    pub unused: Vec<String>,
}

/// Fills `model` with the tensors of the weights file at `path` (safetensors, or PyTorch's
/// format for `.bin`).
///
/// Every parameter must be present with the shape the model has, except the classification
/// head and the pooler, which start new when absent (as in Hugging Face). A tensor of another
/// shape is an error naming it and both shapes, unless `ignore_mismatched_sizes` is set: then
/// it keeps its fresh initialisation and is listed in [`LoadReport::mismatched`], as
/// `from_pretrained(..., ignore_mismatched_sizes=True)` does.
pub fn load_weights<B: Backend>(
    model: BertClassifier<B>,
    path: &Path,
    ignore_mismatched_sizes: bool,
) -> Result<(BertClassifier<B>, LoadReport)> {
    load(model, path, true, ignore_mismatched_sizes)
}

/// Replaces only the parameters that the file at `path` holds (e.g. a saved head), checking
/// their shapes; every other parameter is left as it is.
pub fn overlay_weights<B: Backend>(
    model: BertClassifier<B>,
    path: &Path,
) -> Result<(BertClassifier<B>, LoadReport)> {
    load(model, path, false, false)
}

fn load<B: Backend>(
    model: BertClassifier<B>,
    path: &Path,
    strict: bool,
    ignore_mismatched_sizes: bool,
) -> Result<(BertClassifier<B>, LoadReport)> {
    let file = WeightFile::open(path)?;
    let device = model.devices().into_iter().next().ok_or_else(|| {
        TrainerError::Backend("the model has no device to load weights onto".to_string())
    })?;
    let mut mapper = LoadMapper::<B> {
        file: &file,
        device,
        stack: PathStack::default(),
        used: BTreeSet::new(),
        report: LoadReport::default(),
        error: None,
        strict,
        ignore_mismatched_sizes,
    };
    let model = model.map(&mut mapper);
    if let Some(error) = mapper.error {
        return Err(error);
    }
    let mut report = mapper.report;
    report.applied = mapper.used.len();
    report.unused = file
        .names()
        .filter(|name| !mapper.used.contains(*name))
        .map(str::to_string)
        .collect();
    Ok((model, report))
}

struct LoadMapper<'a, B: Backend> {
    file: &'a WeightFile,
    device: B::Device,
    stack: PathStack,
    used: BTreeSet<String>,
    report: LoadReport,
    /// The first error; later parameters are left alone once one is set.
    error: Option<TrainerError>,
    /// False to skip parameters the file lacks.
    strict: bool,
    /// True to keep the fresh initialisation of tensors stored with another shape.
    ignore_mismatched_sizes: bool,
}

impl<B: Backend> LoadMapper<'_, B> {
    fn read<const D: usize>(&mut self, current: &Tensor<B, D>) -> Result<Option<Tensor<B, D>>> {
        let param = self.stack.current();
        let keys = param.hf_keys();
        let expected = hf_shape(current.dims().to_vec(), param.is_linear_weight());
        let path = &self.file.path;
        let Some((key, stored)) = keys
            .iter()
            .find_map(|k| self.file.get(k).map(|stored| (k, stored)))
        else {
            if param.may_be_new() || !self.strict {
                self.report.newly_initialised.push(param.hf_key());
                return Ok(None);
            }
            return Err(TrainerError::MissingTensor {
                path: path.clone(),
                tensor: keys.join("` or `"),
                expected,
                available: self.file.len(),
                example: self.file.names().next().unwrap_or_default().to_string(),
            });
        };
        self.used.insert(key.clone());
        if stored.shape != expected {
            if self.ignore_mismatched_sizes {
                self.report.mismatched.push(format!(
                    "{key}: stored {:?}, model {expected:?}",
                    stored.shape
                ));
                return Ok(None);
            }
            return Err(TrainerError::ShapeMismatch {
                path: path.clone(),
                tensor: key.clone(),
                found: stored.shape.clone(),
                expected,
                hint: if param.may_be_new() {
                    "; the checkpoint's head has another number of labels than the data: \
                     pass --ignore-mismatched-sizes to start a new head"
                } else {
                    ""
                },
            });
        }
        let values = stored
            .values
            .clone()
            .map_err(|message| TrainerError::BadTensor {
                path: path.clone(),
                tensor: key.clone(),
                message,
            })?;
        let tensor = Tensor::<B, D>::from_data(TensorData::new(values, expected), &self.device);
        Ok(Some(if param.is_linear_weight() {
            tensor.transpose()
        } else {
            tensor
        }))
    }
}

impl<B: Backend> ModuleMapper<B> for LoadMapper<'_, B> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.stack.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.stack.exit();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.error.is_some() {
            return param;
        }
        let (id, tensor, mapper) = param.consume();
        match self.read(&tensor) {
            Ok(Some(loaded)) => {
                // Keep the parameter trainable (the loaded tensor starts without autodiff).
                let loaded = loaded.set_require_grad(tensor.is_require_grad());
                Param::from_mapped_value(id, loaded, mapper)
            }
            Ok(None) => Param::from_mapped_value(id, tensor, mapper),
            Err(error) => {
                self.error = Some(error);
                Param::from_mapped_value(id, tensor, mapper)
            }
        }
    }
}

/// The shape PyTorch stores for a burn tensor of `dims` (linear weights are transposed).
fn hf_shape(mut dims: Vec<usize>, transposed: bool) -> Vec<usize> {
    if transposed {
        dims.reverse();
    }
    dims
}
