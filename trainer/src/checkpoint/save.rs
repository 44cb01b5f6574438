//! Writes a [`BertClassifier`]'s weights as a Hugging Face `model.safetensors`.

use std::collections::HashMap;
use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Tensor, backend::Backend};
use safetensors::{Dtype, tensor::TensorView};

use super::walk::PathStack;
use crate::error::{Result, TrainerError};
use crate::model::BertClassifier;

/// Writes every parameter of `model` to `path` under its Hugging Face key, so that both this
/// trainer and `transformers`' `BertForSequenceClassification` can load the file.
pub fn save_safetensors<B: Backend>(model: &BertClassifier<B>, path: &Path) -> Result<()> {
    let mut collector = Collector::default();
    model.visit(&mut collector);
    let views = collector
        .tensors
        .iter()
        .map(|(key, shape, bytes)| {
            TensorView::new(Dtype::F32, shape.clone(), bytes)
                .map(|view| (key.clone(), view))
                .map_err(|e| TrainerError::BadTensor {
                    path: path.to_path_buf(),
                    tensor: key.clone(),
                    message: e.to_string(),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(metadata), path).map_err(|e| {
        TrainerError::BadTensor {
            path: path.to_path_buf(),
            tensor: String::new(),
            message: format!("writing failed: {e}"),
        }
    })
}

#[derive(Default)]
struct Collector {
    stack: PathStack,
    tensors: Vec<(String, Vec<usize>, Vec<u8>)>,
}

impl<B: Backend> ModuleVisitor<B> for Collector {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.stack.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.stack.exit();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let path = self.stack.current();
        let tensor = if path.is_linear_weight() {
            param.val().transpose()
        } else {
            param.val()
        };
        let shape = tensor.dims().to_vec();
        let bytes = tensor.into_data().convert::<f32>().as_bytes().to_vec();
        self.tensors.push((path.hf_key(), shape, bytes));
    }
}
