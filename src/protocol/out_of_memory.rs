//! How a worker says it ran out of device memory: the messages of CUDA, PyTorch and burn on
//! its stderr. A trial that fails so is failed as such, not retried as a failure of the
//! machine (its next attempt would run out of memory again).

/// What the out-of-memory errors of CUDA (`CUDA_ERROR_OUT_OF_MEMORY`, `cudaErrorMemoryAllocation`),
/// PyTorch (`torch.OutOfMemoryError: CUDA out of memory`) and burn/CubeCL (`OutOfMemory`,
/// `out of memory`) hold, lower-cased.
const MARKS: [&str; 4] = [
    "out of memory",
    "outofmemory",
    "out_of_memory",
    "cudaerrormemoryallocation",
];

/// The last line of `stderr` (a worker's error output, or its tail) that says the worker
/// ran out of device memory, trimmed.
pub(crate) fn out_of_memory_line(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| {
            let lower = line.to_ascii_lowercase();
            MARKS.iter().any(|mark| lower.contains(mark))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_out_of_memory_errors_of_cuda_pytorch_and_burn() {
        let torch = "Traceback (most recent call last):\n  File \"train.py\"\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
        assert_eq!(
            out_of_memory_line(torch).as_deref(),
            Some("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        );
        assert!(out_of_memory_line("error: CUDA_ERROR_OUT_OF_MEMORY\n").is_some());
        assert!(out_of_memory_line("Error: Alloc(OutOfMemory)\n").is_some());
        assert!(out_of_memory_line("cudaErrorMemoryAllocation\n").is_some());
        assert_eq!(out_of_memory_line("ValueError: bad shape\n"), None);
    }
}
