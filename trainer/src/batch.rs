//! Tokenised examples and their collation into padded batches.

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

use crate::data::Example;
use crate::error::Result;
use crate::model::ModelInput;
use crate::tokenize::TextTokenizer;

/// One example after tokenisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedExample {
    /// Token ids with special tokens.
    pub ids: Vec<u32>,
    /// Segment ids.
    pub type_ids: Vec<u32>,
    /// Class index.
    pub label: usize,
}

/// Tokenises every example (truncated to the tokenizer's maximum length).
pub fn encode_all(tokenizer: &TextTokenizer, examples: &[Example]) -> Result<Vec<EncodedExample>> {
    examples
        .iter()
        .map(|example| {
            let encoded = tokenizer.encode(&example.text, example.pair.as_deref())?;
            Ok(EncodedExample {
                ids: encoded.ids,
                type_ids: encoded.type_ids,
                label: example.label,
            })
        })
        .collect()
}

/// Pads `items` to the longest among them and moves them to `device`.
///
/// Returns the model input and the `[batch]` labels.
pub fn collate<B: Backend>(
    items: &[&EncodedExample],
    pad_id: u32,
    device: &B::Device,
) -> (ModelInput<B>, Tensor<B, 1, Int>) {
    let batch = items.len();
    let seq = items.iter().map(|e| e.ids.len()).max().unwrap_or(1).max(1);
    let mut ids = vec![pad_id as i64; batch * seq];
    let mut types = vec![0i64; batch * seq];
    let mut mask = vec![0f32; batch * seq];
    for (row, item) in items.iter().enumerate() {
        let start = row * seq;
        for (col, (&id, &ty)) in item.ids.iter().zip(&item.type_ids).enumerate() {
            ids[start + col] = id as i64;
            types[start + col] = ty as i64;
            mask[start + col] = 1.0;
        }
    }
    let labels: Vec<i64> = items.iter().map(|e| e.label as i64).collect();
    let input = ModelInput {
        input_ids: Tensor::from_data(TensorData::new(ids, [batch, seq]), device),
        token_type_ids: Tensor::from_data(TensorData::new(types, [batch, seq]), device),
        attention_mask: Tensor::from_data(TensorData::new(mask, [batch, seq]), device),
    };
    (
        input,
        Tensor::from_data(TensorData::new(labels, [batch]), device),
    )
}
