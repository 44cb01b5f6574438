//! The `hptune-trainer` binary: parse flags, run, turn errors into one stderr line and an
//! exit code.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use hptune_trainer::cli::{Cli, Command};
use hptune_trainer::run;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HPTUNE_TRAINER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = match (&cli.command, &cli.train) {
        (Some(Command::Predict(args)), _) => run::predict(args).and_then(|predictions| {
            let json = serde_json::to_string_pretty(&predictions)
                .map_err(|e| hptune_trainer::TrainerError::Backend(e.to_string()))?;
            println!("{json}");
            Ok(())
        }),
        (Some(Command::Serve(args)), _) => hptune_trainer::serve::serve(args),
        (Some(Command::WarmCache(args)), _) => {
            hptune_trainer::warm::warm_cache(args).map(|warmed| println!("warm-cache: {warmed}"))
        }
        (None, Some(args)) => run::train(args).map(|_| ()),
        (None, None) => {
            eprintln!(
                "hptune-trainer: give training flags (see --help), `predict`, `serve` or `warm-cache`"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hptune-trainer: error: {error}");
            ExitCode::from(error.exit_code() as u8)
        }
    }
}
