//! The tiny test model's fixture for the half-precision tests, each in a process of its own
//! (burn sets the default float type of the CPU device once per process).

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Int, Tensor};
use hptune_trainer::batch::{EncodedExample, collate};
use hptune_trainer::config::BertConfig;
use hptune_trainer::model::{BertClassifier, ModelInput, cross_entropy};
use hptune_trainer::optim::{AdamWSettings, GroupedAdamW};
use hptune_trainer::pretrained::load_classifier;
use hptune_trainer::tokenize::TextTokenizer;

pub type B = Autodiff<Flex>;

/// Names the test a process of this binary was started for (by [`runs_in_own_process`]).
const OWN_PROCESS: &str = "HPTUNE_TRAINER_TEST_OWN_PROCESS";

/// Whether the calling test is to run here: true in a process of this test binary started
/// for it alone. Otherwise, false once such a process has run the test, and passed; it
/// fails the test (with the process's output) if the test failed there. For a test that
/// changes what is set once per process (burn's default float type of the CPU device),
/// which the other tests in this process use or set too.
pub fn runs_in_own_process() -> bool {
    // libtest runs each test in a thread named after it, as `--exact` takes it.
    let test = std::thread::current()
        .name()
        .expect("a test thread is named after its test")
        .to_string();
    if std::env::var_os(OWN_PROCESS).is_some_and(|name| name == test.as_str()) {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([&test, "--exact", "--nocapture"])
        .env(OWN_PROCESS, &test)
        .output()
        .expect("the test binary runs");
    eprint!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = String::from_utf8_lossy(&out.stdout).contains("test result: ok. 1 passed;");
    assert!(
        out.status.success() && ran,
        "{test} failed in its own process"
    );
    false
}

/// The trainer's test fixtures: tiny-bert, its data, checkpoints in other formats.
pub fn fixtures() -> PathBuf {
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
