//! `hptune ask` and `hptune tell`: what [`hptune::ops::ask`] claimed and
//! [`hptune::ops::tell`] recorded, printed for a client that runs its trials itself.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use hptune::ops::{self, Report, Told};
use hptune::storage::StorageUrl;

use super::show::{flags, output};
use super::{ClientFormat, EXIT_STOPPED, Failure};

/// Claims up to `count` trials of the study of `path` under a lease of `lease`
/// ([`ops::ask`]); prints them, one line each (number and flags) or as a JSON array.
pub async fn ask(
    path: &Path,
    url: &StorageUrl,
    count: usize,
    lease: Duration,
    format: ClientFormat,
) -> Result<ExitCode, Failure> {
    let asked = ops::ask(path, url, count, lease).await?;
    let text = match format {
        ClientFormat::Json => pretty(&json!(asked.trials)),
        ClientFormat::Text => {
            let mut text = String::new();
            for trial in &asked.trials {
                text += &format!("{} {}\n", trial.number, flags(&asked.study, trial)?);
            }
            text
        }
    };
    output(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Records `report` for trial `number` of `study` ([`ops::tell`]); prints the trial's state
/// and whether the study's early-stopping rule stopped it, which also exits
/// [`EXIT_STOPPED`].
pub async fn tell(
    url: &StorageUrl,
    study: &str,
    number: u64,
    report: &Report,
    format: ClientFormat,
) -> Result<ExitCode, Failure> {
    let told = ops::tell(url, study, number, report).await?;
    let text = match format {
        ClientFormat::Json => pretty(&told_json(&told)),
        ClientFormat::Text => match &told.stop {
            Some(reason) => format!("trial {number}: stopped: {reason}\n"),
            None => format!("trial {number}: {}\n", told.trial.state.as_str()),
        },
    };
    output(&text)?;
    Ok(match told.stop {
        Some(_) => ExitCode::from(EXIT_STOPPED),
        None => ExitCode::SUCCESS,
    })
}

/// What `tell --format json` prints of `told`: `stop`, `reason` and the trial.
pub fn told_json(told: &Told) -> serde_json::Value {
    json!({
        "stop": told.stop.is_some(),
        "reason": told.stop,
        "trial": told.trial,
    })
}

/// JSON as the commands print it: indented, one value, a newline after it.
fn pretty(value: &serde_json::Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(value).expect("JSON serialises")
    )
}
