//! `hptune plot`: one figure of a study into a file, the same figure the dashboard shows.

use std::path::Path;

use super::{OpsError, find_study};
use crate::plot::{self, Kind, Options, StudyData};
use crate::storage::{Storage, StorageUrl, StudyFollower};

/// The file formats `--out` may name, by extension.
enum Format {
    Svg,
    Png,
    Html,
}

impl Format {
    fn of(path: &Path) -> Result<Self, OpsError> {
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("html" | "htm") => Ok(Format::Html),
            Some("png") => Ok(Format::Png),
            _ => Err(OpsError::BadInput(format!(
                "--out {}: name a .svg, .png or .html file",
                path.display()
            ))),
        }
    }
}

/// Draws figure `kind` of `study` (its name or its study file; in the database at `url`,
/// opened read-only) into `out`, as SVG, PNG or HTML by its extension. The Pareto front and
/// the hypervolume of a study of one objective are bad input.
pub async fn plot(
    url: &StorageUrl,
    study: &str,
    kind: Kind,
    options: &Options,
    out: &Path,
) -> Result<(), OpsError> {
    let format = Format::of(out)?;
    let storage = Storage::open_read_only(url).await?;
    let record = find_study(&storage, study).await?;
    if kind.needs_several_objectives() && record.objectives.len() < 2 {
        return Err(OpsError::BadInput(format!(
            "study '{}' has one objective ({}): --kind {} needs several (`objectives:` in its study file)",
            record.name,
            record.metric,
            kind.as_str()
        )));
    }
    let mut follower = StudyFollower::new(record);
    storage.follow(&mut follower).await?;
    let data = StudyData::new(&follower)?;
    let figure = plot::draw(kind, &data, options);
    let bytes = match format {
        Format::Svg => plot::standalone_svg(&figure).into_bytes(),
        Format::Png => {
            plot::png::render(&plot::standalone_svg(&figure)).map_err(OpsError::Failed)?
        }
        Format::Html => plot::standalone_html(
            &format!("{} · {}", follower.study.name, kind.title()),
            &figure,
        )
        .into_bytes(),
    };
    std::fs::write(out, bytes)
        .map_err(|e| OpsError::Failed(format!("cannot write {}: {e}", out.display())))
}
