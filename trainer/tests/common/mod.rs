//! The tiny test model's fixture for the half-precision tests, each in a binary of its own
//! (burn sets the default float type of the CPU device once per process).

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Int, Tensor};
use hptune_trainer::batch::{EncodedExample, collate};
use hptune_trainer::config::BertConfig;
use hptune_trainer::model::{BertClassifier, ModelInput, cross_entropy};
use hptune_trainer::optim::{AdamWSettings, GroupedAdamW};
use hptune_trainer::pretrained::load_classifier;
use hptune_trainer::tokenize::TextTokenizer;

pub type B = Autodiff<Flex>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The values of a matrix, as f32.
pub fn values(tensor: Tensor<B, 2>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().to_vec().unwrap()
}

/// The tiny test model's fixture: transformers' numbers, and its texts as one batch.
pub struct Fixture {
    numbers: serde_json::Value,
    input: ModelInput<B>,
    labels: Tensor<B, 1, Int>,
    config: BertConfig,
}

impl Fixture {
    pub fn load() -> Fixture {
        let device = Default::default();
        let dir = fixtures().join("tiny-bert");
        let numbers: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures().join("tiny-bert.json")).unwrap(),
        )
        .unwrap();
        let texts: Vec<(String, Option<String>, usize)> =
            serde_json::from_value(serde_json::json!([
                numbers["texts"],
                numbers["pairs"],
                numbers["labels"]
            ]))
            .map(
                |(t, p, l): (Vec<String>, Vec<Option<String>>, Vec<usize>)| {
                    t.into_iter()
                        .zip(p)
                        .zip(l)
                        .map(|((t, p), l)| (t, p, l))
                        .collect()
                },
            )
            .unwrap();
        let config = BertConfig::from_file(&dir.join("config.json")).unwrap();
        let tokenizer = TextTokenizer::from_dir(&dir, 128).unwrap();
        let encoded: Vec<EncodedExample> = texts
            .iter()
            .map(|(text, pair, label)| {
                let e = tokenizer.encode(text, pair.as_deref()).unwrap();
                EncodedExample {
                    ids: e.ids,
                    type_ids: e.type_ids,
                    label: *label,
                }
            })
            .collect();
        let items: Vec<&EncodedExample> = encoded.iter().collect();
        let (input, labels) = collate::<B>(&items, tokenizer.pad_id(), &device);
        Fixture {
            numbers,
            input,
            labels,
            config,
        }
    }

    pub fn number(&self, key: &str) -> f64 {
        self.numbers[key].as_f64().unwrap()
    }

    /// The fixture's model, dropout off, in the default float type.
    pub fn model(&self) -> BertClassifier<B> {
        let dir = fixtures().join("tiny-bert");
        load_classifier::<B>(&dir, &self.config, 3, Some(0.0), false, &Default::default())
            .unwrap()
            .0
    }

    /// The largest difference between `model`'s logits and transformers' f32 ones.
    pub fn logits_error(&self, model: &BertClassifier<B>) -> f64 {
        let ours: Vec<f32> = values(model.forward(self.input.clone()));
        let theirs = self.numbers["logits"].as_array().unwrap().iter();
        let theirs = theirs.flat_map(|row| row.as_array().unwrap().iter());
        ours.iter()
            .zip(theirs)
            .map(|(a, b)| (f64::from(*a) - b.as_f64().unwrap()).abs())
            .fold(0.0, f64::max)
    }

    pub fn loss(&self, model: &BertClassifier<B>) -> Tensor<B, 1> {
        cross_entropy(model.forward(self.input.clone()), self.labels.clone())
    }

    /// AdamW as the fixture's step was taken.
    pub fn optimizer(&self, model: &BertClassifier<B>) -> GroupedAdamW<B> {
        let settings = AdamWSettings {
            weight_decay: self.number("weight_decay"),
            max_grad_norm: Some(self.number("max_grad_norm")),
            ..AdamWSettings::default()
        };
        GroupedAdamW::new(model, settings)
    }
}
