//! `hptune plot`: one figure of a study into a file ([`ops::plot`]).

use std::path::Path;
use std::process::ExitCode;

use hptune::ops;
use hptune::plot::{HistoryX, Kind, Options};
use hptune::storage::StorageUrl;

use super::Failure;

/// Draws figure `kind` of `study` into `out` and says so.
pub async fn plot(
    url: &StorageUrl,
    study: &str,
    kind: Kind,
    history_x: HistoryX,
    out: &Path,
) -> Result<ExitCode, Failure> {
    ops::plot(url, study, kind, &Options { history_x }, out).await?;
    println!("wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}
