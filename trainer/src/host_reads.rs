//! Reads of tensors from the device to the host, counted.
//!
//! On a GPU a read waits until the device has run everything queued before it: the host stops
//! enqueuing work, and the device then idles while the host enqueues the next. The training loop
//! reads through [`read`] (or [`read_data`]) only, so that [`Tally`] can say how many reads a training step made
//! (the goal is none between two progress reports). Reads are counted per thread, the thread
//! that runs the training loop being the one that matters; the figures are logged at debug level under
//! this module's target, `hptune_trainer::host_reads` (`HPTUNE_TRAINER_LOG=info,hptune_trainer::host_reads=debug`).

use std::cell::Cell;

use burn::tensor::{BasicOps, Element, Tensor, TensorData, backend::Backend};

use crate::error::{Result, TrainerError};

thread_local! {
    /// Every read made through [`read`] by this thread.
    static READS: Cell<u64> = const { Cell::new(0) };
}

/// Reads `tensor`'s values to the host as `E`, counting one read; `what` names the values in
/// the error of a failed read.
pub fn read<E: Element, B: Backend, const D: usize, K: BasicOps<B>>(
    tensor: Tensor<B, D, K>,
    what: &str,
) -> Result<Vec<E>> {
    read_data(tensor).convert::<E>().to_vec::<E>().map_err(|e| {
        TrainerError::Backend(format!("cannot read {what} back from the device: {e:?}"))
    })
}

/// Reads `tensor`'s values to the host as they are (dtype and shape), counting one read.
pub fn read_data<B: Backend, const D: usize, K: BasicOps<B>>(
    tensor: Tensor<B, D, K>,
) -> TensorData {
    READS.set(READS.get() + 1);
    tensor.into_data()
}

/// How many reads [`read`] has made on this thread.
pub fn count() -> u64 {
    READS.get()
}

/// The CPU time (user and system, every thread) this process has used, in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The reads of one stretch of work (an epoch's training steps, an evaluation), with the
/// wall-clock and CPU time it took: on a GPU, CPU time close to wall time says the host, not
/// the device, sets the pace.
#[derive(Debug, Clone, Copy)]
pub struct Tally {
    start: u64,
    started: std::time::Instant,
    cpu_start: f64,
}

impl Tally {
    /// Starts counting from now.
    pub fn start() -> Self {
        Tally {
            start: count(),
            started: std::time::Instant::now(),
            cpu_start: cpu_seconds(),
        }
    }

    /// The reads since [`Tally::start`].
    pub fn reads(&self) -> u64 {
        count() - self.start
    }

    /// Logs the reads since [`Tally::start`] of `what` (e.g. "epoch 1/3 training") over `steps`
    /// steps, and the wall-clock and process CPU milliseconds per step, at debug level; returns
    /// the reads.
    pub fn log(&self, what: &str, steps: usize) -> u64 {
        let reads = self.reads();
        let per_step = |total: f64| total / steps.max(1) as f64;
        tracing::debug!(
            "{what}: {reads} host reads in {steps} steps, {:.3} per step; {:.2} ms wall, {:.2} ms host CPU per step",
            per_step(reads as f64),
            per_step(1e3 * self.started.elapsed().as_secs_f64()),
            per_step(1e3 * (cpu_seconds() - self.cpu_start)),
        );
        reads
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::Int;

    use super::*;

    #[test]
    fn each_read_is_counted_once_and_returns_the_values() {
        let device = Default::default();
        let tally = Tally::start();
        let floats = Tensor::<Flex, 1>::from_floats([1.5, -2.0], &device);
        let ints = Tensor::<Flex, 2, Int>::from_ints([[3, 4], [5, 6]], &device);
        assert_eq!(read::<f64, _, 1, _>(floats, "floats").unwrap(), [1.5, -2.0]);
        assert_eq!(tally.reads(), 1);
        assert_eq!(read::<i64, _, 2, _>(ints, "ints").unwrap(), [3, 4, 5, 6]);
        assert_eq!(tally.log("test", 2), 2);
    }
}
