//! The tensors of a `model.safetensors` file, decoded to f32 and looked up by checkpoint key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

use crate::error::{Result, TrainerError};

/// What to do with a PyTorch pickle checkpoint.
pub const CONVERT_TO_SAFETENSORS: &str = "PyTorch pickle checkpoints (pytorch_model.bin) are not read; \
     convert it to model.safetensors in the same folder, e.g. with python: \
     BertForSequenceClassification.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True) \
     (or safetensors.torch.save_file(torch.load(\"pytorch_model.bin\"), \"model.safetensors\"))";

/// One stored tensor: its shape and its values as f32, or why they cannot be used.
#[derive(Debug, Clone)]
pub struct StoredTensor {
    /// The shape as stored (PyTorch's layout).
    pub shape: Vec<usize>,
    /// The values, row-major, or a message saying why the dtype cannot be used.
    pub values: std::result::Result<Vec<f32>, String>,
}

/// Every tensor of a weights file, by checkpoint key.
#[derive(Debug)]
pub struct WeightFile {
    /// Where the tensors came from.
    pub path: PathBuf,
    tensors: BTreeMap<String, StoredTensor>,
}

impl WeightFile {
    /// Reads a safetensors file. A PyTorch pickle (`pytorch_model.bin`, `.pt`) is an error
    /// saying how to convert it: no reader of that format builds here without rebuilding burn.
    pub fn open(path: &Path) -> Result<Self> {
        let is_pytorch = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "bin" | "pt" | "pth"));
        if is_pytorch {
            return Err(TrainerError::ModelNotFound(format!(
                "{}: {CONVERT_TO_SAFETENSORS}",
                path.display()
            )));
        }
        Ok(WeightFile {
            path: path.to_path_buf(),
            tensors: read_safetensors(path)?,
        })
    }

    /// The tensor stored under `key`.
    pub fn get(&self, key: &str) -> Option<&StoredTensor> {
        self.tensors.get(key)
    }

    /// Every key, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

fn read_safetensors(path: &Path) -> Result<BTreeMap<String, StoredTensor>> {
    let bytes = std::fs::read(path).map_err(|e| TrainerError::io(path, "reading", e))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| TrainerError::BadTensor {
        path: path.to_path_buf(),
        tensor: String::new(),
        message: format!("not a safetensors file: {e}"),
    })?;
    Ok(file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let tensor = StoredTensor {
                shape: view.shape().to_vec(),
                values: safetensors_f32(view.dtype(), view.data()),
            };
            (name, tensor)
        })
        .collect())
}

/// Decodes safetensors' little-endian F32, F16 or BF16 bytes to f32.
fn safetensors_f32(dtype: Dtype, bytes: &[u8]) -> std::result::Result<Vec<f32>, String> {
    match dtype {
        Dtype::F32 => Ok(decode(bytes, f32::from_le_bytes)),
        Dtype::F16 => Ok(decode(bytes, |b| half::f16::from_le_bytes(b).to_f32())),
        Dtype::BF16 => Ok(decode(bytes, |b| half::bf16::from_le_bytes(b).to_f32())),
        other => Err(not_float(other)),
    }
}

fn decode<const N: usize>(bytes: &[u8], element: impl Fn([u8; N]) -> f32) -> Vec<f32> {
    bytes
        .chunks_exact(N)
        .map(|chunk| element(chunk.try_into().expect("chunks_exact gives N bytes")))
        .collect()
}

fn not_float(dtype: impl std::fmt::Debug) -> String {
    format!("dtype {dtype:?} is not a float type; expected F32, F16 or BF16")
}
