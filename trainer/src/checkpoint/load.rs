//! Reads a `model.safetensors` into a [`BertClassifier`], checking every tensor's shape.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Tensor, TensorData, backend::Backend};
use safetensors::{Dtype, SafeTensors};

use super::walk::PathStack;
use crate::error::{Result, TrainerError};
use crate::model::BertClassifier;

/// What loading did besides filling the model.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// Checkpoint keys that were applied.
    pub applied: usize,
    /// Parameters the checkpoint lacked and that keep their fresh initialisation (head, pooler).
    pub newly_initialised: Vec<String>,
    /// Checkpoint keys that no parameter uses (e.g. `embeddings.position_ids`, MLM heads).
    pub unused: Vec<String>,
}

/// Fills `model` with the tensors of the safetensors file at `path`.
///
/// Every parameter must be present with the shape the model has, except the classification
/// head and the pooler, which start new when absent (as in Hugging Face).
pub fn load_safetensors<B: Backend>(
    model: BertClassifier<B>,
    path: &Path,
) -> Result<(BertClassifier<B>, LoadReport)> {
    load(model, path, true)
}

/// Replaces only the parameters that the file at `path` holds (e.g. a saved head), checking
/// their shapes; every other parameter is left as it is.
pub fn overlay_safetensors<B: Backend>(
    model: BertClassifier<B>,
    path: &Path,
) -> Result<(BertClassifier<B>, LoadReport)> {
    load(model, path, false)
}

fn load<B: Backend>(
    model: BertClassifier<B>,
    path: &Path,
    strict: bool,
) -> Result<(BertClassifier<B>, LoadReport)> {
    let bytes = std::fs::read(path).map_err(|e| TrainerError::io(path, "reading", e))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| TrainerError::BadTensor {
        path: path.to_path_buf(),
        tensor: String::new(),
        message: format!("not a safetensors file: {e}"),
    })?;
    let device = model.devices().into_iter().next().ok_or_else(|| {
        TrainerError::Backend("the model has no device to load weights onto".to_string())
    })?;
    let mut mapper = LoadMapper::<B> {
        path: path.to_path_buf(),
        file: &file,
        device,
        stack: PathStack::default(),
        used: BTreeSet::new(),
        report: LoadReport::default(),
        error: None,
        strict,
    };
    let model = model.map(&mut mapper);
    if let Some(error) = mapper.error {
        return Err(error);
    }
    let mut report = mapper.report;
    report.applied = mapper.used.len();
    report.unused = file
        .names()
        .into_iter()
        .filter(|name| !mapper.used.contains(*name))
        .map(str::to_string)
        .collect();
    report.unused.sort();
    Ok((model, report))
}

struct LoadMapper<'a, B: Backend> {
    path: PathBuf,
    file: &'a SafeTensors<'a>,
    device: B::Device,
    stack: PathStack,
    used: BTreeSet<String>,
    report: LoadReport,
    /// The first error; later parameters are left alone once one is set.
    error: Option<TrainerError>,
    /// False to skip parameters the file lacks.
    strict: bool,
}

impl<B: Backend> LoadMapper<'_, B> {
    fn read<const D: usize>(&mut self, current: &Tensor<B, D>) -> Result<Option<Tensor<B, D>>> {
        let param = self.stack.current();
        let keys = param.hf_keys();
        let Some(key) = keys.iter().find(|k| self.file.tensor(k).is_ok()) else {
            if param.may_be_new() || !self.strict {
                self.report.newly_initialised.push(param.hf_key());
                return Ok(None);
            }
            let names = self.file.names();
            return Err(TrainerError::MissingTensor {
                path: self.path.clone(),
                tensor: keys.join("` or `"),
                expected: hf_shape(current.dims().to_vec(), param.is_linear_weight()),
                available: names.len(),
                example: names.first().map_or(String::new(), |n| n.to_string()),
            });
        };
        let view = self.file.tensor(key).expect("key was found above");
        let expected = hf_shape(current.dims().to_vec(), param.is_linear_weight());
        if view.shape() != expected.as_slice() {
            return Err(TrainerError::ShapeMismatch {
                path: self.path.clone(),
                tensor: key.clone(),
                found: view.shape().to_vec(),
                expected,
            });
        }
        let values =
            to_f32(view.dtype(), view.data()).map_err(|message| TrainerError::BadTensor {
                path: self.path.clone(),
                tensor: key.clone(),
                message,
            })?;
        self.used.insert(key.clone());
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

/// Decodes little-endian F32, F16 or BF16 bytes to f32.
fn to_f32(dtype: Dtype, bytes: &[u8]) -> std::result::Result<Vec<f32>, String> {
    match dtype {
        Dtype::F32 => Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()),
        Dtype::F16 => Ok(bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect()),
        Dtype::BF16 => Ok(bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect()),
        other => Err(format!(
            "dtype {other:?} is not a float type; expected F32, F16 or BF16"
        )),
    }
}
