//! Training throughput of a checkpoint on this machine: full AdamW steps on random token ids.
//!
//! `cargo run --example train_speed -p hptune-trainer -- MODEL_DIR [BATCH] [SEQ] [STEPS] [BACKEND]`
//! prints one line `backend=… samples_per_s=… step_s=… peak_rss_mib=…` (see bench/trainer_speed.sh).

use std::path::PathBuf;
use std::time::Instant;

use burn::tensor::{Int, Tensor, TensorData};
use hptune_trainer::backend::{
    BackendTask, CpuBackend, DeviceChoice, Precision, TrainBackend, dispatch,
};
use hptune_trainer::config::BertConfig;
use hptune_trainer::kernel_cache::AutotuneLevel;
use hptune_trainer::model::{ModelInput, cross_entropy};
use hptune_trainer::optim::{AdamWSettings, GroupedAdamW};
use hptune_trainer::pretrained::load_classifier;
use rand::{Rng, SeedableRng};

struct Speed {
    dir: PathBuf,
    batch: usize,
    seq: usize,
    steps: usize,
}

impl BackendTask for Speed {
    type Output = (f64, f64);

    fn run<B: TrainBackend>(self, device: B::Device) -> hptune_trainer::Result<(f64, f64)> {
        let config = BertConfig::from_file(&self.dir.join("config.json"))?;
        B::seed(&device, 0);
        let (mut model, _) = load_classifier::<B>(&self.dir, &config, 2, None, false, &device)?;
        let mut optimizer = GroupedAdamW::new(&model, AdamWSettings::default());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let n = self.batch * self.seq;
        let ids: Vec<i64> = (0..n)
            .map(|_| rng.random_range(1000..config.vocab_size as i64))
            .collect();
        let labels: Vec<i64> = (0..self.batch).map(|i| (i % 2) as i64).collect();
        let input = ModelInput::<B> {
            input_ids: Tensor::<B, 2, Int>::from_data(
                TensorData::new(ids, [self.batch, self.seq]),
                &device,
            ),
            token_type_ids: Tensor::zeros([self.batch, self.seq], &device),
            attention_mask: Tensor::ones([self.batch, self.seq], &device),
        };
        let labels = Tensor::<B, 1, Int>::from_data(TensorData::new(labels, [self.batch]), &device);
        let mut timed = 0.0;
        // One untimed warm-up step, then the timed ones.
        for step in 0..=self.steps {
            let start = Instant::now();
            let loss = cross_entropy(model.forward(input.clone()), labels.clone());
            let grads = loss.backward();
            model = optimizer.step(1e-5, model, grads)?.0;
            let _ = model.head.classifier.weight.val().into_data();
            if step > 0 {
                timed += start.elapsed().as_secs_f64();
            }
        }
        let step_s = timed / self.steps as f64;
        Ok((self.batch as f64 / step_s, step_s))
    }
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_string());
    let backend = match arg(4, "flex").as_str() {
        "ndarray" => CpuBackend::Ndarray,
        "candle" => CpuBackend::Candle,
        _ => CpuBackend::Flex,
    };
    let speed = Speed {
        dir: PathBuf::from(arg(0, "models/all-MiniLM-L6-v2")),
        batch: arg(1, "32").parse().expect("BATCH is a number"),
        seq: arg(2, "128").parse().expect("SEQ is a number"),
        steps: arg(3, "3").parse().expect("STEPS is a number"),
    };
    match dispatch(
        DeviceChoice::Cpu,
        backend,
        Precision::F32,
        AutotuneLevel::default(),
        speed,
    ) {
        Ok((samples_per_s, step_s)) => println!(
            "backend=burn-{} samples_per_s={samples_per_s:.2} step_s={step_s:.3} peak_rss_mib={:.0}",
            arg(4, "flex"),
            peak_rss_mib()
        ),
        Err(error) => {
            eprintln!("train_speed: {error}");
            std::process::exit(1);
        }
    }
}
