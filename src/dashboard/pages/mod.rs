//! The dashboard's HTML: the page frame, the studies list, a study's page ([`trial`]: a
//! trial's details), and the pages that say what is wrong. Figures come from [`crate::plot`];
//! the trial table is drawn by the page's script from the trials' JSON.

mod trial;

use std::fmt::Write;

pub(crate) use trial::{trial_detail, trial_page};

use super::source::Followed;
use crate::plot::axis::format_number;
use crate::plot::svg::escape;
use crate::plot::{FIGURE_CSS, FrontSummary, Kind, Options};
use crate::storage::{StudyOverview, StudyRecord, TrialRecord, TrialState};
use crate::study::space::Assignment;

const STYLE: &str = include_str!("../assets/style.css");
const SCRIPT: &str = include_str!("../assets/app.js");

/// A whole page: the frame (header, styles, script) around `body`.
pub(super) fn layout(title: &str, crumbs: &str, body: &str, page: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · hptune</title><style>{STYLE}{FIGURE_CSS}</style></head>
<body data-page="{page}"><header class="top"><a class="brand" href="/"><span class="logo">◆</span> hptune</a><nav class="crumbs">{crumbs}</nav><span class="live" id="live" hidden>live</span></header>
<div class="banner" id="banner" hidden></div>
<main>{body}</main>
<aside class="drawer" id="drawer" hidden><button class="close" id="drawer-close" aria-label="Close">×</button><div id="drawer-body"></div></aside>
<script>{SCRIPT}</script></body></html>"#,
        title = escape(title)
    )
}

/// A page that says one thing (a refused token, an unknown page); `message` is HTML.
pub(super) fn message_page(title: &str, message: &str) -> String {
    layout(
        title,
        "",
        &format!(
            r#"<section class="card notice"><h1>{}</h1><p>{message}</p></section>"#,
            escape(title)
        ),
        "message",
    )
}

/// The page of a database that cannot be read: it says why and tries again by itself.
pub(super) fn database_error_page(error: &str) -> String {
    let hint = if error.contains("locked") {
        "Another program holds a lock on the database; the page tries again by itself."
    } else {
        "The dashboard keeps running and tries again by itself every few seconds."
    };
    layout(
        "Cannot read the database",
        "",
        &format!(
            r#"<section class="card notice error" data-state="database-error"><h1>Cannot read the database</h1><p class="mono">{}</p><p>{hint}</p></section><meta http-equiv="refresh" content="5">"#,
            escape(error)
        ),
        "message",
    )
}

/// The page of a study the database does not have.
pub(super) fn unknown_study_page(name: &str, known: &[String]) -> String {
    let list = match known.is_empty() {
        true => "The database has no study yet.".to_string(),
        false => {
            let links: Vec<String> = known
                .iter()
                .map(|k| format!(r#"<a href="/studies/{}">{}</a>"#, url_part(k), escape(k)))
                .collect();
            format!("Its studies: {}.", links.join(", "))
        }
    };
    layout(
        "Study not found",
        r#"<a href="/">Studies</a>"#,
        &format!(
            r#"<section class="card notice" data-state="not-found"><h1>No study named “{}”</h1><p>{list}</p></section>"#,
            escape(name)
        ),
        "message",
    )
}

/// The list of studies.
pub(super) fn studies_page(overviews: &[StudyOverview]) -> String {
    let body = format!(
        r#"<section class="page-head"><h1>Studies</h1><p class="muted">Every study in this database. The list updates by itself.</p></section>
<section class="card flush"><table class="grid-table"><thead><tr><th>Study</th><th>Objective</th><th class="num">Trials</th><th>By state</th><th class="num">Best</th><th>Last activity</th></tr></thead><tbody id="studies-body">{}</tbody></table></section>"#,
        studies_rows(overviews)
    );
    layout("Studies", "", &body, "studies")
}

/// The rows of the studies list (also what its page polls).
pub(super) fn studies_rows(overviews: &[StudyOverview]) -> String {
    if overviews.is_empty() {
        return r#"<tr><td colspan="6" class="empty-row">No studies yet: run <code>hptune run STUDY.yaml</code> on this database.</td></tr>"#.into();
    }
    let mut rows = String::new();
    for o in overviews {
        let running = o.count(TrialState::Running);
        let _ = write!(
            rows,
            r#"<tr class="study-row" data-href="/studies/{href}"><td><a href="/studies/{href}" class="strong">{name}</a>{live}</td><td>{objectives}</td><td class="num">{total}</td><td>{states}</td><td class="num mono">{best}</td><td class="muted">{last}</td></tr>"#,
            href = url_part(&o.study.name),
            name = escape(&o.study.name),
            live = if running > 0 {
                format!(r#" <span class="pill running">{running} running</span>"#)
            } else {
                String::new()
            },
            objectives = objective_chips(&o.study),
            total = o.total(),
            states = state_bar(&o.counts),
            best = o.best.map(format_number).unwrap_or_else(|| "—".into()),
            last = o
                .last_activity
                .as_deref()
                .map(short_time)
                .unwrap_or_else(|| "—".into()),
        );
    }
    rows
}

/// What a study optimises, one chip per objective (`maximize accuracy`).
fn objective_chips(study: &StudyRecord) -> String {
    study
        .objectives
        .iter()
        .map(|o| {
            format!(
                r#"<span class="chip">{} {}</span>"#,
                o.goal.as_str(),
                escape(&o.metric)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A bar of the trials by state, with the counts as text.
fn state_bar(counts: &[usize; 5]) -> String {
    let total: usize = counts.iter().sum();
    let mut bar = String::from(r#"<div class="state-bar">"#);
    let mut legend = String::new();
    for (state, count) in TrialState::ALL.iter().zip(counts) {
        if *count == 0 {
            continue;
        }
        let share = 100.0 * *count as f64 / total.max(1) as f64;
        let _ = write!(
            bar,
            r#"<span class="{}" style="width:{share:.2}%"></span>"#,
            state.as_str()
        );
        let _ = write!(
            legend,
            r#"<span class="count {s}">{count} {s}</span>"#,
            s = state.as_str()
        );
    }
    format!(r#"{bar}</div><div class="state-legend">{legend}</div>"#)
}

/// A study's page: summary cards, every figure, and the trial table.
pub(super) fn study_page(study: &mut Followed) -> String {
    let follower = &study.follower;
    let name = follower.study.name.clone();
    let front = crate::plot::front_summary(&study.follower);
    let cards = summary_cards(study, front.as_ref());
    let mut figures = String::new();
    let several = follower.study.objectives.len() > 1;
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|kind| several || !kind.needs_several_objectives())
        .collect();
    let drawn = study.figures(&kinds, &Options::default());
    for (kind, svg) in kinds.into_iter().zip(drawn) {
        let svg = svg.unwrap_or_else(|e| crate::plot::svg::message(&e).into());
        let wide = kind.is_wide();
        let toggle = match kind {
            Kind::History => {
                r#"<div class="toggle" id="history-by"><button data-by="number" class="on">by trial</button><button data-by="time">by time</button></div>"#
            }
            _ => "",
        };
        let _ = write!(
            figures,
            r#"<section class="card figure-card{}" id="figure-{k}"><div class="card-head"><h2>{}</h2>{toggle}</div><div class="figure-slot" data-kind="{k}">{svg}</div></section>"#,
            if wide { " wide" } else { "" },
            kind.title(),
            k = kind.as_str(),
        );
    }
    let follower = &study.follower;
    let ids: Vec<String> = follower
        .study
        .space()
        .map(|s| s.parameters().iter().map(|p| p.id.clone()).collect())
        .unwrap_or_default();
    let init = PageData {
        study: &name,
        metric: &follower.study.metric,
        objectives: follower
            .study
            .objectives
            .iter()
            .map(|o| o.metric.as_str())
            .collect(),
        goal: follower.study.goal.as_str(),
        params: ids,
        instance: instance(&follower.study),
        revision: follower.revision(),
        trials: follower.trials().map(TableRow::from).collect(),
        front: front.map(|f| f.trials).unwrap_or_default(),
    };
    let body = format!(
        r#"<section class="page-head"><h1>{title}</h1><p class="muted">{objectives} created {created}</p></section>
<section class="cards" id="summary">{cards}</section>
<section class="figures">{figures}</section>
<section class="card flush" id="trials"><div class="card-head pad"><h2>Trials</h2><div class="tools"><input id="filter" type="search" placeholder="Filter: text, or param&gt;value, value&lt;0.5"><select id="state-filter"><option value="">all states</option>{states}</select></div></div>
<div class="table-wrap"><table class="grid-table" id="trial-table"><thead></thead><tbody></tbody></table></div><div class="pager" id="pager"></div></section>
<script type="application/json" id="study-data">{data}</script>"#,
        title = escape(&name),
        objectives = objective_chips(&follower.study),
        created = short_time(&follower.study.created_at),
        states = TrialState::ALL
            .iter()
            .map(|s| format!(r#"<option value="{s}">{s}</option>"#, s = s.as_str()))
            .collect::<String>(),
        data = script_json(&init),
    );
    layout(
        &name,
        &format!(
            r#"<a href="/">Studies</a><span class="sep">/</span><span>{}</span>"#,
            escape(&name)
        ),
        &body,
        "study",
    )
}

/// What a study page's script starts from (written straight to JSON: a large study's trials
/// are megabytes).
#[derive(serde::Serialize)]
struct PageData<'a> {
    study: &'a str,
    metric: &'a str,
    /// Every objective's metric, in order (one: `metric`).
    objectives: Vec<&'a str>,
    goal: &'a str,
    params: Vec<String>,
    instance: String,
    revision: u64,
    trials: Vec<TableRow<'a>>,
    /// The numbers of the trials on the Pareto front (none with one objective).
    front: Vec<u64>,
}

/// Which study of its name a page shows: its row id and creation time. A database deleted
/// or replaced under the dashboard may hold another study of the same name, whose revisions
/// count from 1 again: a page whose instance is not the server's reloads.
pub(super) fn instance(study: &crate::storage::StudyRecord) -> String {
    format!("{}@{}", study.id, study.created_at)
}

/// A trial as the page's table shows, sorts and filters it: a large study's page is mostly
/// these, so they carry nothing else (a trial's drawer reads the rest from the server).
#[derive(serde::Serialize)]
pub(super) struct TableRow<'a> {
    number: u64,
    state: TrialState,
    params: &'a Assignment,
    value: Option<f64>,
    /// Its value of every objective of a study with several (none before it ends).
    #[serde(skip_serializing_if = "<[f64]>::is_empty")]
    values: &'a [f64],
    error: Option<&'a str>,
    /// Why the trial is infeasible (the page's badge; never the best).
    infeasible: Option<&'a str>,
    started_at: Option<&'a str>,
    finished_at: Option<&'a str>,
}

impl<'a> From<&'a TrialRecord> for TableRow<'a> {
    fn from(t: &'a TrialRecord) -> Self {
        TableRow {
            number: t.number,
            state: t.state,
            params: &t.params,
            value: t.value,
            values: &t.objective_values,
            error: t.error.as_deref(),
            infeasible: t.infeasible.as_deref(),
            started_at: t.started_at.as_deref(),
            finished_at: t.finished_at.as_deref(),
        }
    }
}

/// The summary cards of a study: trials by state, the best trial (with several objectives,
/// the front's size and hypervolume: `front`, [`crate::plot::front_summary`]'s), last
/// activity.
pub(super) fn summary_cards(study: &Followed, front: Option<&FrontSummary>) -> String {
    let f = &study.follower;
    let total = f.trials().count();
    let best = match (front, f.best()) {
        (Some(front), _) => format!(
            r#"<div class="stat-label">Pareto front</div><div class="stat-value" id="front-size">{} trials</div><div class="stat-sub">hypervolume {}</div>"#,
            front.trials.len(),
            format_number(front.hypervolume)
        ),
        (None, Some((number, value))) => format!(
            r##"<div class="stat-label">Best {}</div><div class="stat-value mono">{}</div><div class="stat-sub"><a href="#" data-trial="{number}">trial {number}</a></div>"##,
            escape(&f.study.metric),
            format_number(value)
        ),
        (None, None) => format!(
            r#"<div class="stat-label">Best {}</div><div class="stat-value">—</div><div class="stat-sub">no result yet</div>"#,
            escape(&f.study.metric),
        ),
    };
    let last = f
        .trials()
        .filter_map(|t| t.finished_at.as_deref().or(t.started_at.as_deref()))
        .max()
        .map(short_time)
        .unwrap_or_else(|| "—".into());
    let stat = |label: &str, value: usize, class: &str| {
        format!(
            r#"<div class="card stat {class}"><div class="stat-label">{label}</div><div class="stat-value">{value}</div></div>"#
        )
    };
    format!(
        r#"<div class="card stat best">{best}</div>{}{}{}{}{}<div class="card stat"><div class="stat-label">Last activity</div><div class="stat-value small">{last}</div></div>"#,
        stat("Trials", total, "total"),
        stat("Succeeded", f.count(TrialState::Succeeded), "succeeded"),
        stat("Running", f.count(TrialState::Running), "running"),
        stat("Failed", f.count(TrialState::Failed), "failed"),
        stat("Stopped", f.count(TrialState::Stopped), "stopped"),
    )
}

/// A stored time as shown: date and time to the second, UTC.
pub(super) fn short_time(time: &str) -> String {
    let trimmed = time.get(..19).unwrap_or(time).replace('T', " ");
    format!("{trimmed} UTC")
}

/// A study name as a URL path segment.
pub(super) fn url_part(name: &str) -> String {
    // Study names are `[A-Za-z0-9][A-Za-z0-9._-]*`: nothing to encode but what a stray one holds.
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// JSON safe inside a `<script>` element.
fn script_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value)
        .expect("page data serialises")
        .replace('<', "\\u003c")
}
