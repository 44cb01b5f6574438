//! The inference thread: it owns the model, takes the requests queued while it was busy
//! (and those that arrive within the batch wait) and classifies them together, up to the
//! maximum batch size a forward pass. The queue is bounded ([`Queue`]), and a request whose
//! client has gone is dropped before each forward pass, wherever it is in the queue.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::{BackendTask, TrainBackend};
use crate::classify::{Classifier, TextInput};
use crate::error::{Result, TrainerError};

/// The inputs of one request, and where their probabilities go.
pub struct Job {
    /// The inputs.
    pub inputs: Vec<TextInput>,
    /// Their probabilities, by class index, or why they could not be computed.
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>>>,
}

/// Why a job was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotQueued {
    /// The queue holds its most inputs: the client should try again later.
    Full,
    /// The inference thread has ended.
    Closed,
}

/// The sending end of the queue to the inference thread, bounded by the inputs waiting.
pub struct Queue {
    jobs: Sender<Job>,
    waiting: Arc<AtomicUsize>,
    capacity: usize,
}

/// The receiving end of the queue, on the inference thread.
pub struct Jobs {
    jobs: Receiver<Job>,
    waiting: Arc<AtomicUsize>,
}

/// A queue that holds at most `capacity` inputs waiting for the model (a request with more
/// is queued alone when none wait).
pub fn queue(capacity: usize) -> (Queue, Jobs) {
    let (sender, receiver) = mpsc::channel();
    let waiting = Arc::new(AtomicUsize::new(0));
    (
        Queue {
            jobs: sender,
            waiting: waiting.clone(),
            capacity,
        },
        Jobs {
            jobs: receiver,
            waiting,
        },
    )
}

impl Queue {
    /// Whether the queue is full: a request would be refused whatever its size.
    pub fn is_full(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) >= self.capacity
    }

    /// Queues `job`, unless the queue cannot take its inputs.
    pub fn push(&self, job: Job) -> std::result::Result<(), NotQueued> {
        let count = job.inputs.len();
        let before = self.waiting.fetch_add(count, Ordering::Relaxed);
        if before > 0 && before + count > self.capacity {
            self.waiting.fetch_sub(count, Ordering::Relaxed);
            return Err(NotQueued::Full);
        }
        self.jobs.send(job).map_err(|_| {
            self.waiting.fetch_sub(count, Ordering::Relaxed);
            NotQueued::Closed
        })
    }
}

impl Jobs {
    /// The next job, within `wait` if given; `None` on timeout or once every sender is gone.
    fn next(&self, wait: Option<Duration>) -> Option<Job> {
        let job = match wait {
            None => self.jobs.recv().ok()?,
            Some(wait) => match self.jobs.recv_timeout(wait) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            },
        };
        self.waiting.fetch_sub(job.inputs.len(), Ordering::Relaxed);
        Some(job)
    }
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
    pub jobs: Jobs,
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
fn next_batch(jobs: &Jobs, batching: Batching) -> Option<Vec<Job>> {
    let first = jobs.next(None)?;
    let mut count = first.inputs.len();
    let mut batch = vec![first];
    let deadline = Instant::now() + batching.max_wait;
    while count < batching.max_batch_size {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(job) = jobs.next(Some(left)) else {
            break;
        };
        count += job.inputs.len();
        batch.push(job);
    }
    Some(batch)
}

/// A job being answered: the probabilities of its first inputs, or why they could not be
/// computed.
struct InProgress {
    job: Job,
    done: Vec<Vec<f32>>,
    failed: Option<TrainerError>,
}

impl InProgress {
    /// Answers the job if it is complete or failed; otherwise gives it back.
    fn answer_if_finished(self) -> Option<Self> {
        if self.failed.is_none() && !self.left().is_empty() {
            return Some(self);
        }
        let answer = match self.failed {
            Some(e) => Err(e),
            None => Ok(self.done),
        };
        // A client that went away no longer waits for its answer.
        let _ = self.job.reply.send(answer);
        None
    }

    fn left(&self) -> &[TextInput] {
        &self.job.inputs[self.done.len()..]
    }

    /// Whether its client still waits; if not, says so in the log.
    fn awaited(&self) -> bool {
        let awaited = !self.job.reply.is_closed();
        if !awaited {
            tracing::info!(
                "dropped a request of {} inputs ({} computed): its client has gone",
                self.job.inputs.len(),
                self.done.len()
            );
        }
        awaited
    }
}

/// Classifies the inputs of `jobs` together, `batch_size` a forward pass, and gives each job
/// its own; before each pass, the jobs whose client has gone are dropped.
fn answer<B: crate::model::FusedOps>(
    classifier: &Classifier<B>,
    jobs: Vec<Job>,
    batch_size: usize,
) {
    let mut pending: VecDeque<InProgress> = jobs
        .into_iter()
        .map(|job| InProgress {
            job,
            done: Vec::new(),
            failed: None,
        })
        .collect();
    loop {
        pending.retain(InProgress::awaited);
        if pending.is_empty() {
            return;
        }
        // The next pass: the inputs left of the first jobs, up to the batch size.
        let mut shares = Vec::new();
        let mut inputs: Vec<TextInput> = Vec::new();
        for (index, job) in pending.iter().enumerate() {
            let share = job.left().len().min(batch_size - inputs.len());
            inputs.extend_from_slice(&job.left()[..share]);
            shares.push((index, share));
            if inputs.len() == batch_size {
                break;
            }
        }
        tracing::debug!(
            "forward pass: {} inputs of {} requests",
            inputs.len(),
            shares.len()
        );
        match classifier.probabilities(&inputs, batch_size) {
            Ok(mut probabilities) => {
                for &(index, share) in &shares {
                    let rest = probabilities.split_off(share);
                    pending[index].done.append(&mut probabilities);
                    probabilities = rest;
                }
            }
            Err(e) if shares.len() > 1 => {
                // One request's input may be what failed: each is classified on its own.
                tracing::debug!("a batch failed ({e}); classifying its requests one by one");
                for &(index, share) in &shares {
                    let job = &mut pending[index];
                    let own = classifier.probabilities(&job.left()[..share], batch_size);
                    match own {
                        Ok(mut own) => job.done.append(&mut own),
                        Err(e) => job.failed = Some(e),
                    }
                }
            }
            Err(e) => pending[shares[0].0].failed = Some(e),
        }
        pending = pending
            .into_iter()
            .filter_map(InProgress::answer_if_finished)
            .collect();
    }
}
