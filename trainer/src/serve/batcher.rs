//! The inference thread: it owns the model, takes the requests queued while it was busy
//! (and those that arrive within the batch wait) and classifies them together, up to the
//! maximum batch size a forward pass.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::{BackendTask, TrainBackend};
use crate::classify::{Classifier, TextInput};
use crate::error::Result;

/// The inputs of one request, and where their probabilities go.
pub struct Job {
    /// The inputs.
    pub inputs: Vec<TextInput>,
    /// Their probabilities, by class index, or why they could not be computed.
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>>>,
}

/// How requests are batched.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    /// The most inputs in one forward pass.
    pub max_batch_size: usize,
    /// How long the first request of a batch waits for others to join it.
    pub max_wait: Duration,
}

/// The work of the inference thread on the chosen backend: load the model, say so on
/// `loaded` (with its labels), then serve `jobs` until every sender is gone.
pub struct InferenceTask {
    /// The model folder.
    pub model_dir: std::path::PathBuf,
    /// Tokens per text (pair), special tokens included; longer texts are truncated.
    pub max_seq_len: usize,
    /// How requests are batched.
    pub batching: Batching,
    /// The requests.
    pub jobs: Receiver<Job>,
    /// The model's labels once loaded, or why it could not be.
    pub loaded: std::sync::mpsc::SyncSender<std::result::Result<Vec<String>, String>>,
}

impl BackendTask for InferenceTask {
    type Output = ();

    fn run<B: TrainBackend>(self, device: B::Device) -> Result<()> {
        let classifier =
            match Classifier::<B::InnerBackend>::load(&self.model_dir, self.max_seq_len, device) {
                Ok(classifier) => classifier,
                Err(e) => {
                    let _ = self.loaded.send(Err(e.to_string()));
                    return Err(e);
                }
            };
        let _ = self.loaded.send(Ok(classifier.labels().to_vec()));
        while let Some(jobs) = next_batch(&self.jobs, self.batching) {
            answer(&classifier, jobs, self.batching.max_batch_size);
        }
        Ok(())
    }
}

/// The next jobs to run together: the first to come, then those queued or arriving within
/// the wait, until they hold a full batch; `None` once every sender is gone.
fn next_batch(jobs: &Receiver<Job>, batching: Batching) -> Option<Vec<Job>> {
    let first = jobs.recv().ok()?;
    let mut count = first.inputs.len();
    let mut batch = vec![first];
    let deadline = Instant::now() + batching.max_wait;
    while count < batching.max_batch_size {
        let left = deadline.saturating_duration_since(Instant::now());
        match jobs.recv_timeout(left) {
            Ok(job) => {
                count += job.inputs.len();
                batch.push(job);
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
        }
    }
    Some(batch)
}

/// Classifies the inputs of `jobs` together and gives each job its own.
fn answer<B: crate::model::FusedOps>(
    classifier: &Classifier<B>,
    jobs: Vec<Job>,
    batch_size: usize,
) {
    let inputs: Vec<TextInput> = jobs.iter().flat_map(|j| j.inputs.iter().cloned()).collect();
    match classifier.probabilities(&inputs, batch_size) {
        Ok(mut probabilities) => {
            for job in jobs {
                let rest = probabilities.split_off(job.inputs.len());
                let own = std::mem::replace(&mut probabilities, rest);
                // A client that went away no longer waits for its answer.
                let _ = job.reply.send(Ok(own));
            }
        }
        Err(e) if jobs.len() > 1 => {
            // One request's input may be what failed: each is answered on its own.
            tracing::debug!("a batch failed ({e}); classifying its requests one by one");
            for job in jobs {
                let own = classifier.probabilities(&job.inputs, batch_size);
                let _ = job.reply.send(own);
            }
        }
        Err(e) => {
            if let Some(job) = jobs.into_iter().next() {
                let _ = job.reply.send(Err(e));
            }
        }
    }
}
