//! `hptune plot`: draw one figure of a study into a file, the same figure the dashboard shows.

use std::path::Path;
use std::process::ExitCode;

use hptune::plot::{self, HistoryX, Kind, Options, StudyData};
use hptune::storage::{Storage, StorageUrl, StudyFollower};

use super::Failure;

/// The file formats `--out` may name, by extension.
enum Format {
    Svg,
    Png,
    Html,
}

impl Format {
    fn of(path: &Path) -> Result<Self, Failure> {
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("html" | "htm") => Ok(Format::Html),
            Some("png") => Ok(Format::Png),
            _ => Err(Failure::BadInput(format!(
                "--out {}: name a .svg, .png or .html file",
                path.display()
            ))),
        }
    }
}

/// Draws figure `kind` of `study` (in the database at `url`, opened read-only) into `out`.
pub async fn plot(
    url: &StorageUrl,
    study: &str,
    kind: Kind,
    history_x: HistoryX,
    out: &Path,
) -> Result<ExitCode, Failure> {
    let format = Format::of(out)?;
    let storage = Storage::open_read_only(url).await?;
    let record = super::show::find(&storage, study).await?;
    let mut follower = StudyFollower::new(record);
    storage.follow(&mut follower).await?;
    let data = StudyData::new(&follower).map_err(Failure::Other)?;
    let figure = plot::draw(kind, &data, &Options { history_x });
    let bytes = match format {
        Format::Svg => plot::standalone_svg(&figure).into_bytes(),
        Format::Png => plot::png::render(&plot::standalone_svg(&figure)).map_err(Failure::Other)?,
        Format::Html => plot::standalone_html(
            &format!("{} · {}", follower.study.name, kind.title()),
            &figure,
        )
        .into_bytes(),
    };
    std::fs::write(out, bytes)
        .map_err(|e| Failure::Other(format!("cannot write {}: {e}", out.display())))?;
    println!("wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}
