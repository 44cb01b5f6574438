//! The limits of a server, as flags of both binaries.

use std::time::Duration;

/// How long clients may take and how many may connect at once.
#[derive(Debug, Clone, clap::Args)]
pub struct Limits {
    /// Seconds a client may take to send a request's headers, or pause while sending its
    /// body; a kept-alive connection idle that long is closed too.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub read_timeout: u64,
    /// The most connections open at once; further ones wait in the listen backlog until one
    /// closes.
    #[arg(long, default_value_t = 256, value_parser = at_least_one)]
    pub max_connections: usize,
    /// Seconds the requests in flight have to finish after SIGTERM or Ctrl-C, before their
    /// connections are cut and the process exits.
    #[arg(long, value_name = "SECONDS", default_value_t = 20)]
    pub shutdown_grace: u64,
}

impl Limits {
    /// The read timeout.
    pub fn read_timeout(&self) -> Duration {
        Duration::from_secs(self.read_timeout)
    }

    /// The grace period of a shutdown.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace)
    }
}

fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse() {
        Ok(0) | Err(_) => Err(format!("{value:?} is not a count from 1")),
        Ok(n) => Ok(n),
    }
}
