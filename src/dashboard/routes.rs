//! The dashboard's routes: each reads from the [`Source`] and answers a page, a figure or
//! JSON; a database that cannot be read is a page that says so (503), never a crash.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::logs;
use super::pages;
use super::source::Source;
use crate::plot::{HistoryX, Kind, Options};
use crate::storage::StorageError;

type Shared = State<Arc<Source>>;

/// Why a request could not be answered.
enum Failure {
    /// The database cannot be read now.
    Database(String),
    /// No study of this name.
    UnknownStudy(String, Vec<String>),
    /// No such page, figure or trial.
    NotFound(String),
}

impl From<StorageError> for Failure {
    fn from(e: StorageError) -> Self {
        Failure::Database(e.to_string())
    }
}

impl Failure {
    fn status(&self) -> StatusCode {
        match self {
            Failure::Database(_) => StatusCode::SERVICE_UNAVAILABLE,
            Failure::UnknownStudy(..) | Failure::NotFound(_) => StatusCode::NOT_FOUND,
        }
    }

    /// As a page.
    fn page(self) -> Response {
        let status = self.status();
        let body = match self {
            Failure::Database(e) => pages::database_error_page(&e),
            Failure::UnknownStudy(name, known) => pages::unknown_study_page(&name, &known),
            Failure::NotFound(what) => {
                pages::message_page("Not found", &crate::plot::svg::escape(&what))
            }
        };
        (status, Html(body)).into_response()
    }

    /// As JSON, for the page's script.
    fn json(self) -> Response {
        let status = self.status();
        let message = match self {
            Failure::Database(e) => e,
            Failure::UnknownStudy(name, _) => format!("no study named '{name}' in this database"),
            Failure::NotFound(what) => what,
        };
        (status, Json(json!({ "error": message }))).into_response()
    }
}

/// The followed study `name`, or why not.
async fn followed(
    source: &Source,
    name: &str,
) -> Result<Arc<tokio::sync::Mutex<super::source::Followed>>, Failure> {
    match source.study(name).await? {
        Some(study) => Ok(study),
        None => {
            let storage = source.storage().await?;
            let known = storage
                .study_overviews()
                .await?
                .into_iter()
                .map(|o| o.study.name)
                .collect();
            Err(Failure::UnknownStudy(name.to_string(), known))
        }
    }
}

/// `?fragment=...`: only part of a page.
#[derive(Deserialize)]
pub(super) struct Fragment {
    fragment: Option<String>,
}

/// The studies list (`?fragment=studies`: its rows only, for polling).
pub(super) async fn studies(State(source): Shared, Query(q): Query<Fragment>) -> Response {
    let result = async {
        let overviews = source.storage().await?.study_overviews().await?;
        Ok::<_, Failure>(match q.fragment {
            Some(_) => pages::studies_rows(&overviews),
            None => pages::studies_page(&overviews),
        })
    };
    match result.await {
        Ok(html) => Html(html).into_response(),
        Err(e) => e.page(),
    }
}

/// The studies as JSON.
pub(super) async fn studies_json(State(source): Shared) -> Response {
    let result = async {
        let overviews = source.storage().await?.study_overviews().await?;
        let list: Vec<_> = overviews
            .iter()
            .map(|o| {
                json!({
                    "name": o.study.name, "metric": o.study.metric, "goal": o.study.goal.as_str(),
                    "trials": o.total(), "best": o.best, "last_activity": o.last_activity,
                    "states": crate::storage::TrialState::ALL.iter().map(|s| (s.as_str(), o.count(*s))).collect::<std::collections::BTreeMap<_, _>>(),
                })
            })
            .collect();
        Ok::<_, Failure>(list)
    };
    match result.await {
        Ok(list) => Json(list).into_response(),
        Err(e) => e.json(),
    }
}

/// A study's page.
pub(super) async fn study(State(source): Shared, Path(name): Path<String>) -> Response {
    match followed(&source, &name).await {
        Ok(study) => Html(pages::study_page(&mut *study.lock().await)).into_response(),
        Err(e) => e.page(),
    }
}

/// `?since=REVISION`.
#[derive(Deserialize)]
pub(super) struct Since {
    since: Option<u64>,
}

/// What changed in a study after a revision: its summary, the trials on its Pareto front
/// (with several objectives) and the trials that changed.
pub(super) async fn changes(
    State(source): Shared,
    Path(name): Path<String>,
    Query(q): Query<Since>,
) -> Response {
    let since = q.since.unwrap_or(0);
    match followed(&source, &name).await {
        Ok(study) => {
            let study = study.lock().await;
            let revision = study.follower.revision();
            let trials: Vec<_> = study
                .follower
                .changed_since(since)
                .map(pages::TableRow::from)
                .collect();
            // The front can change for trials that did not: it comes whole with the summary.
            let (summary, front) = match revision > since {
                true => {
                    let front = crate::plot::front_summary(&study.follower);
                    let summary = pages::summary_cards(&study, front.as_ref());
                    (
                        Some(summary),
                        Some(front.map(|f| f.trials).unwrap_or_default()),
                    )
                }
                false => (None, None),
            };
            let instance = pages::instance(&study.follower.study);
            Json(json!({ "instance": instance, "revision": revision, "summary": summary, "front": front, "trials": trials }))
                .into_response()
        }
        Err(e) => e.json(),
    }
}

/// `?by=time` for the history.
#[derive(Deserialize)]
pub(super) struct FigureQuery {
    by: Option<String>,
}

/// One figure of a study, as SVG.
pub(super) async fn figure(
    State(source): Shared,
    Path((name, kind)): Path<(String, String)>,
    Query(q): Query<FigureQuery>,
) -> Response {
    let kind: Kind = match kind.trim_end_matches(".svg").parse() {
        Ok(kind) => kind,
        Err(e) => return Failure::NotFound(e).json(),
    };
    let options = Options {
        history_x: match q.by.as_deref() {
            Some("time") => HistoryX::Time,
            _ => HistoryX::Number,
        },
    };
    match followed(&source, &name).await {
        Ok(study) => match study.lock().await.figures(&[kind], &options).remove(0) {
            Ok(svg) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg.to_string()).into_response(),
            Err(e) => Failure::Database(e).json(),
        },
        Err(e) => e.json(),
    }
}

/// A trial: its page, or (`?fragment=1`) its details for the study page's drawer.
pub(super) async fn trial(
    State(source): Shared,
    Path((name, number)): Path<(String, String)>,
    Query(q): Query<Fragment>,
) -> Response {
    let result = async {
        let study = followed(&source, &name).await?;
        let study = study.lock().await;
        let trial = number
            .parse::<u64>()
            .ok()
            .and_then(|n| study.follower.trial(n))
            .ok_or_else(|| Failure::NotFound(format!("study '{name}' has no trial {number}")))?
            .clone();
        drop(study);
        let storage = source.storage().await?;
        let attempts = storage.trial_attempts(trial.id).await?;
        let measurements = storage.trial_measurements(trial.id).await?;
        let tails = match trial.log_path.as_deref() {
            Some(log) => {
                let latest_first: Vec<u32> = attempts.iter().rev().map(|a| a.attempt).collect();
                logs::attempt_tails(log, trial.number, &latest_first).await
            }
            None => Vec::new(),
        };
        let detail = pages::trial_detail(&name, &trial, &attempts, &measurements, &tails);
        Ok::<_, Failure>(match q.fragment {
            Some(_) => detail,
            None => pages::trial_page(&name, &detail, trial.number),
        })
    };
    match result.await {
        Ok(html) => Html(html).into_response(),
        Err(e) => e.page(),
    }
}

/// Any other path.
pub(super) async fn not_found(uri: axum::http::Uri) -> Response {
    Failure::NotFound(format!("nothing at {}", uri.path())).page()
}
