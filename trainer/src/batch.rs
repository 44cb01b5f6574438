//! Tokenised examples, the order they are batched in each epoch, and their collation into
//! padded batches.

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use rand::Rng;
use rand::seq::SliceRandom;
use rayon::prelude::*;

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

/// Tokenises every example (truncated to the tokenizer's maximum length), on rayon's threads.
pub fn encode_all(tokenizer: &TextTokenizer, examples: &[Example]) -> Result<Vec<EncodedExample>> {
    examples
        .par_iter()
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

/// How the training rows are put into batches in each epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BatchOrder {
    /// Shuffled afresh every epoch (Hugging Face's Trainer's default).
    #[default]
    Shuffled,
    /// Shuffled, then sorted by length (longest first) within mega-batches of up to 50 batches,
    /// as transformers' `group_by_length`: a batch holds texts of similar length and pads less.
    LengthGrouped,
    /// The file's order every epoch, unshuffled (to repeat another framework's run exactly).
    Sequential,
}

/// transformers' `LengthGroupedSampler`: at most this many batches make a mega-batch.
const MEGA_BATCH_BATCHES: usize = 50;

/// The batches of one epoch as row indices into rows of token lengths `lengths`; the
/// shuffled orders are drawn from `rng`, so a seeded generator gives the same batches.
pub fn epoch_batches(
    lengths: &[usize],
    batch_size: usize,
    order: BatchOrder,
    rng: &mut impl Rng,
) -> Vec<Vec<usize>> {
    let batch_size = batch_size.max(1);
    let mut rows: Vec<usize> = (0..lengths.len()).collect();
    match order {
        BatchOrder::Sequential => {}
        BatchOrder::Shuffled => rows.shuffle(rng),
        BatchOrder::LengthGrouped => {
            rows.shuffle(rng);
            group_by_length(&mut rows, lengths, batch_size);
        }
    }
    rows.chunks(batch_size).map(<[usize]>::to_vec).collect()
}

/// transformers' `get_length_grouped_indices` on shuffled `rows`: each mega-batch sorted by
/// length, longest first, and the longest row of all moved to the very first batch (a run that
/// does not fit in memory fails at once, not hours later).
fn group_by_length(rows: &mut [usize], lengths: &[usize], batch_size: usize) {
    let batches_per_mega = (rows.len() / (batch_size * 4)).clamp(1, MEGA_BATCH_BATCHES);
    let mega = batches_per_mega * batch_size;
    for chunk in rows.chunks_mut(mega) {
        chunk.sort_by_key(|&row| std::cmp::Reverse(lengths[row]));
    }
    let longest_mega = rows
        .chunks(mega)
        .enumerate()
        .max_by_key(|(index, chunk)| (lengths[chunk[0]], std::cmp::Reverse(*index)))
        .map_or(0, |(index, _)| index);
    rows.swap(0, longest_mega * mega);
}

/// A batch padded to its longest text, in host memory: what [`collate`] moves to a device.
#[derive(Debug, Clone, PartialEq)]
pub struct PaddedBatch {
    /// `[batch, seq]` token ids, `pad_id` after each text.
    pub ids: Vec<i64>,
    /// `[batch, seq]` segment ids.
    pub type_ids: Vec<i64>,
    /// `[batch, seq]` attention mask: 1 on tokens, 0 on padding.
    pub mask: Vec<f32>,
    /// `[batch]` class indices.
    pub labels: Vec<i64>,
    /// Rows.
    pub batch: usize,
    /// Tokens per row.
    pub seq: usize,
}

impl PaddedBatch {
    /// Pads `items` to the longest among them.
    pub fn pad(items: &[&EncodedExample], pad_id: u32) -> Self {
        let batch = items.len();
        let seq = items.iter().map(|e| e.ids.len()).max().unwrap_or(1).max(1);
        let mut ids = vec![pad_id as i64; batch * seq];
        let mut type_ids = vec![0i64; batch * seq];
        let mut mask = vec![0f32; batch * seq];
        for (row, item) in items.iter().enumerate() {
            let start = row * seq;
            for (col, (&id, &ty)) in item.ids.iter().zip(&item.type_ids).enumerate() {
                ids[start + col] = id as i64;
                type_ids[start + col] = ty as i64;
                mask[start + col] = 1.0;
            }
        }
        PaddedBatch {
            ids,
            type_ids,
            mask,
            labels: items.iter().map(|e| e.label as i64).collect(),
            batch,
            seq,
        }
    }

    /// Moves the batch to `device`: the model input and the `[batch]` labels.
    pub fn to_device<B: Backend>(self, device: &B::Device) -> (ModelInput<B>, Tensor<B, 1, Int>) {
        let shape = [self.batch, self.seq];
        let input = ModelInput {
            input_ids: Tensor::from_data(TensorData::new(self.ids, shape), device),
            token_type_ids: Tensor::from_data(TensorData::new(self.type_ids, shape), device),
            attention_mask: Tensor::from_data(TensorData::new(self.mask, shape), device),
        };
        let labels = TensorData::new(self.labels, [self.batch]);
        (input, Tensor::from_data(labels, device))
    }
}

/// Pads `items` to the longest among them and moves them to `device`.
///
/// Returns the model input and the `[batch]` labels.
pub fn collate<B: Backend>(
    items: &[&EncodedExample],
    pad_id: u32,
    device: &B::Device,
) -> (ModelInput<B>, Tensor<B, 1, Int>) {
    PaddedBatch::pad(items, pad_id).to_device(device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Lengths like SST-2's: mostly short, a few long.
    fn lengths(n: usize) -> Vec<usize> {
        (0..n).map(|i| 3 + (i * 7919) % 61).collect()
    }

    fn batches(order: BatchOrder, seed: u64, n: usize) -> Vec<Vec<usize>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        epoch_batches(&lengths(n), 32, order, &mut rng)
    }

    #[test]
    fn every_order_takes_every_row_once() {
        for order in [
            BatchOrder::Shuffled,
            BatchOrder::LengthGrouped,
            BatchOrder::Sequential,
        ] {
            for n in [1, 31, 32, 33, 1000, 7001] {
                let batches = batches(order, 7, n);
                assert_eq!(batches.len(), n.div_ceil(32), "{order:?} n={n}");
                assert!(batches[..batches.len() - 1].iter().all(|b| b.len() == 32));
                let mut rows: Vec<usize> = batches.concat();
                rows.sort_unstable();
                assert_eq!(rows, (0..n).collect::<Vec<_>>(), "{order:?} n={n}");
            }
        }
    }

    #[test]
    fn a_seed_gives_the_same_batches_and_another_seed_others() {
        for order in [BatchOrder::Shuffled, BatchOrder::LengthGrouped] {
            assert_eq!(batches(order, 42, 5000), batches(order, 42, 5000));
            assert_ne!(batches(order, 42, 5000), batches(order, 43, 5000));
        }
        assert_eq!(
            batches(BatchOrder::Sequential, 1, 70).concat(),
            (0..70).collect::<Vec<_>>()
        );
    }

    #[test]
    fn consecutive_epochs_draw_other_batches() {
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let first = epoch_batches(&lengths(5000), 32, BatchOrder::LengthGrouped, &mut rng);
        let second = epoch_batches(&lengths(5000), 32, BatchOrder::LengthGrouped, &mut rng);
        assert_ne!(first, second);
    }

    /// Padded tokens (batch size times longest, less the tokens) over all the batches.
    fn padding(batches: &[Vec<usize>], lengths: &[usize]) -> usize {
        batches
            .iter()
            .map(|b| {
                let longest = b.iter().map(|&r| lengths[r]).max().unwrap_or(0);
                b.iter().map(|&r| longest - lengths[r]).sum::<usize>()
            })
            .sum()
    }

    #[test]
    fn grouped_batches_hold_similar_lengths() {
        let lengths = lengths(6400);
        let grouped = batches(BatchOrder::LengthGrouped, 3, 6400);
        let shuffled = batches(BatchOrder::Shuffled, 3, 6400);
        // Within a mega-batch of 50 batches of 32 drawn from 61 lengths, a batch spans at most
        // a few lengths; shuffled batches span nearly all of them.
        for batch in &grouped {
            let (min, max) = (
                batch.iter().map(|&r| lengths[r]).min().unwrap(),
                batch.iter().map(|&r| lengths[r]).max().unwrap(),
            );
            assert!(
                max - min <= 4,
                "a grouped batch spans lengths {min}..={max}"
            );
        }
        assert!(padding(&grouped, &lengths) * 10 < padding(&shuffled, &lengths));
        // Each mega-batch is a shuffled sample: the grouping keeps the epoch shuffled, not
        // sorted over the whole data set.
        let firsts: Vec<usize> = grouped.iter().step_by(50).map(|b| lengths[b[0]]).collect();
        assert!(firsts.iter().all(|&l| l >= 58), "{firsts:?}");
    }

    #[test]
    fn the_longest_row_comes_first() {
        let mut lengths = lengths(3000);
        lengths[2999] = 500;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let batches = epoch_batches(&lengths, 32, BatchOrder::LengthGrouped, &mut rng);
        assert_eq!(batches[0][0], 2999);
    }

    #[test]
    fn padding_fills_to_the_longest_text() {
        let a = EncodedExample {
            ids: vec![101, 7, 102],
            type_ids: vec![0, 0, 0],
            label: 1,
        };
        let b = EncodedExample {
            ids: vec![101, 102],
            type_ids: vec![0, 0],
            label: 0,
        };
        let padded = PaddedBatch::pad(&[&a, &b], 0);
        assert_eq!((padded.batch, padded.seq), (2, 3));
        assert_eq!(padded.ids, vec![101, 7, 102, 101, 102, 0]);
        assert_eq!(padded.mask, vec![1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
        assert_eq!(padded.labels, vec![1, 0]);
    }
}
