//! `hptune-trainer serve`: a fine-tuned model behind HTTP, as a custom container of Vertex AI
//! and of SageMaker at once: both services' routes on one port ([`routes`]), the requests
//! ([`request`]) batched on the model's thread ([`batcher`]), the answers as Hugging Face's
//! text-classification pipeline gives them ([`predictions`]), behind the accept loop of
//! [`hptune_http`] (read timeouts, a cap on connections). SIGTERM (or Ctrl-C) stops new
//! connections and answers the requests in flight within the grace period; then the process
//! exits, computing nothing more.

pub mod batcher;
pub mod predictions;
pub mod request;
pub mod routes;

use std::sync::{Arc, OnceLock, mpsc};

use hptune_http::Stopped;
use std::time::Duration;

use crate::backend::{DeviceChoice, Precision, dispatch};
use crate::cli::ServeArgs;
use crate::error::{Result, TrainerError};
use crate::kernel_cache::AutotuneLevel;
use batcher::{Batching, InferenceTask};
use routes::{Routes, Served};

/// The port when neither `--port`, `AIP_HTTP_PORT` nor `SAGEMAKER_BIND_TO_PORT` gives one:
/// both services' default.
pub const DEFAULT_PORT: u16 = 8080;

/// Where the server listens and which routes it serves, from the flags and the services'
/// variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The port.
    pub port: u16,
    /// Vertex AI's routes (SageMaker's are fixed).
    pub routes: Routes,
}

impl Endpoint {
    /// `--port`, else Vertex AI's `AIP_HTTP_PORT`, else SageMaker's `SAGEMAKER_BIND_TO_PORT`,
    /// else 8080; `AIP_PREDICT_ROUTE` and `AIP_HEALTH_ROUTE`, else `/predict` and `/health`.
    /// `var` reads a variable.
    pub fn resolve(port: Option<u16>, var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let port = match port {
            Some(port) => port,
            None => match ["AIP_HTTP_PORT", "SAGEMAKER_BIND_TO_PORT"]
                .into_iter()
                .find_map(|name| var(name).map(|value| (name, value)))
            {
                Some((name, value)) => {
                    value
                        .trim()
                        .parse()
                        .map_err(|_| TrainerError::InvalidArgument {
                            flag: "port",
                            message: format!("{name}={value:?} is not a port number (1 to 65535)"),
                        })?
                }
                None => DEFAULT_PORT,
            },
        };
        let route = |name: &'static str, default: &str| -> Result<String> {
            let value = var(name).unwrap_or_else(|| default.to_string());
            let plain = value.starts_with('/')
                && !value.contains(['{', '}', '*', '?', '#'])
                && !value.chars().any(char::is_whitespace);
            if !plain {
                return Err(TrainerError::InvalidArgument {
                    flag: "route",
                    message: format!("{name}={value:?} is not a route: a path such as /predict"),
                });
            }
            Ok(value)
        };
        Ok(Self {
            port,
            routes: Routes {
                predict: route("AIP_PREDICT_ROUTE", "/predict")?,
                health: route("AIP_HEALTH_ROUTE", "/health")?,
            },
        })
    }
}

/// Serves the model of `args.model_dir` until SIGTERM or Ctrl-C.
pub fn serve(args: &ServeArgs) -> Result<()> {
    let device: DeviceChoice = args.inference.device.parse()?;
    if args.max_batch_size == 0 {
        return Err(TrainerError::InvalidArgument {
            flag: "max-batch-size",
            message: "must be at least 1".into(),
        });
    }
    let endpoint = Endpoint::resolve(args.port, |name| std::env::var(name).ok())?;
    let (queue, jobs) = batcher::queue(args.max_queued_inputs);
    let (loaded_tx, loaded_rx) = mpsc::sync_channel(1);
    let task = InferenceTask {
        model_dir: args.model_dir.clone(),
        max_seq_len: args.inference.max_seq_len,
        batching: Batching {
            max_batch_size: args.max_batch_size,
            max_wait: Duration::from_millis(args.max_batch_wait_ms),
        },
        jobs,
        loaded: loaded_tx,
    };
    let cpu = args.inference.cpu_backend;
    let inference = std::thread::Builder::new()
        .name("inference".into())
        .spawn(move || dispatch(device, cpu, Precision::F32, AutotuneLevel::default(), task))
        .map_err(|e| TrainerError::Backend(format!("cannot start the inference thread: {e}")))?;
    let served = Arc::new(Served {
        labels: OnceLock::new(),
        queue,
        max_body_bytes: args.max_body_bytes,
        max_instances: args.max_instances,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The cores are the model's: one thread reads and answers the requests.
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| TrainerError::Backend(format!("cannot start the HTTP runtime: {e}")))?;
    let address = format!("{}:{}", args.host, endpoint.port);
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .map_err(|e| TrainerError::Backend(format!("cannot listen on {address}: {e}")))?;
        tracing::info!(
            "listening on {address}: POST {} and {}, GET {} and {}; loading {}",
            endpoint.routes.predict,
            routes::INVOCATIONS,
            endpoint.routes.health,
            routes::PING,
            args.model_dir.display()
        );
        let app = routes::router(&endpoint.routes, served.clone());
        let limits = args.http.clone();
        let server =
            tokio::spawn(async move { hptune_http::serve(listener, app, &limits, stopped()).await });
        let labels = tokio::task::spawn_blocking(move || loaded_rx.recv())
            .await
            .ok()
            .and_then(|r| r.ok());
        match labels {
            Some(Ok(labels)) => {
                tracing::info!("model loaded: labels {labels:?}; ready");
                let _ = served.labels.set(labels);
            }
            Some(Err(message)) => return Err(TrainerError::ModelNotFound(message)),
            None => return Err(TrainerError::Backend("the inference thread ended".into())),
        }
        match server
            .await
            .map_err(|e| TrainerError::Backend(format!("the server failed: {e}")))?
        {
            Stopped::Drained => tracing::info!("stopped: every request in flight was answered"),
            Stopped::Cut(open) => tracing::warn!(
                "stopped: {open} connections were cut at the end of the grace period; their requests are dropped"
            ),
        }
        Ok(())
    });
    // The server is gone with its queue's sender: the inference thread drops the requests
    // whose connection was cut, and ends.
    drop(served);
    drop(runtime);
    match inference.join() {
        Ok(Err(e)) if result.is_ok() => Err(e),
        _ => result,
    }
}

/// Resolves on SIGTERM (how both services stop a container) or Ctrl-C.
async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: answering the requests in flight, then stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: answering the requests in flight, then stopping"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(port: Option<u16>, vars: &[(&str, &str)]) -> Result<Endpoint> {
        Endpoint::resolve(port, |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_flag_then_vertex_then_sagemaker_then_8080() {
        assert_eq!(resolve(None, &[]).unwrap().port, 8080);
        assert_eq!(
            resolve(None, &[("SAGEMAKER_BIND_TO_PORT", "9000")])
                .unwrap()
                .port,
            9000
        );
        let both = [
            ("AIP_HTTP_PORT", "7080"),
            ("SAGEMAKER_BIND_TO_PORT", "9000"),
        ];
        assert_eq!(resolve(None, &both).unwrap().port, 7080);
        assert_eq!(resolve(Some(81), &both).unwrap().port, 81);
        let error = resolve(None, &[("AIP_HTTP_PORT", "http")])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("AIP_HTTP_PORT=\"http\" is not a port"),
            "{error}"
        );
    }

    #[test]
    fn vertex_routes_come_from_its_variables() {
        let endpoint = resolve(None, &[("AIP_PREDICT_ROUTE", "/v1/models/m:predict")]).unwrap();
        assert_eq!(endpoint.routes.predict, "/v1/models/m:predict");
        assert_eq!(endpoint.routes.health, "/health");
        let error = resolve(None, &[("AIP_HEALTH_ROUTE", "health")])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("AIP_HEALTH_ROUTE=\"health\" is not a route"),
            "{error}"
        );
    }
}
