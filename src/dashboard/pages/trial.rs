//! A trial's details: its value, error, parameters, attempts, measurements and log tails, in
//! the study page's drawer or as a page of its own.

use std::fmt::Write;

use super::{layout, short_time, url_part};
use crate::dashboard::logs::LogTail;
use crate::gpus::placement;
use crate::plot::axis::format_number;
use crate::plot::svg::escape;
use crate::storage::{AttemptRecord, MeasurementRecord, TrialRecord, TrialState};

/// Everything about one trial: parameters, value, error, attempts, measurements, logs.
pub(crate) fn trial_detail(
    study: &str,
    trial: &TrialRecord,
    attempts: &[AttemptRecord],
    measurements: &[MeasurementRecord],
    logs: &[(u32, Vec<LogTail>)],
) -> String {
    let mut html = format!(
        r#"<div class="trial-detail" data-trial-detail="{n}"><div class="detail-head"><h2>Trial {n}</h2><span class="badge {s}">{s}</span><a class="open-link" href="/studies/{href}/trials/{n}">open as page</a></div>"#,
        n = trial.number,
        s = trial.state.as_str(),
        href = url_part(study),
    );
    let value = trial.value.map(format_number).unwrap_or_else(|| "—".into());
    let _ = write!(
        html,
        r#"<dl class="facts"><dt>Value</dt><dd class="mono">{value}</dd><dt>Started</dt><dd>{}</dd><dt>Finished</dt><dd>{}</dd><dt>Worker</dt><dd class="mono">{}</dd></dl>"#,
        trial
            .started_at
            .as_deref()
            .map(short_time)
            .unwrap_or_else(|| "—".into()),
        trial
            .finished_at
            .as_deref()
            .map(short_time)
            .unwrap_or_else(|| "—".into()),
        escape(trial.worker.as_deref().unwrap_or("—"))
    );
    if let Some(error) = &trial.error {
        let _ = write!(
            html,
            r#"<div class="error-box"><strong>Why it {}</strong><pre>{}</pre></div>"#,
            if trial.state == TrialState::Stopped {
                "was stopped"
            } else {
                "failed"
            },
            escape(error)
        );
    }
    html.push_str(r#"<h3>Parameters</h3><table class="kv">"#);
    for (id, v) in &trial.params {
        let _ = write!(
            html,
            r#"<tr><th>{}</th><td class="mono">{}</td></tr>"#,
            escape(id),
            escape(&v.to_string())
        );
    }
    html.push_str("</table><h3>Attempts</h3>");
    html.push_str(&attempts_table(attempts));
    html.push_str(&measurements_table(measurements));
    for (attempt, tails) in logs {
        for tail in tails {
            let name = tail
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let body = match &tail.text {
                Ok(text) if text.is_empty() => r#"<p class="muted">(empty)</p>"#.to_string(),
                Ok(text) => format!(
                    r#"<pre class="log">{}{}</pre>"#,
                    if tail.cut { "…\n" } else { "" },
                    escape(text)
                ),
                Err(why) => format!(r#"<p class="muted">{}</p>"#, escape(why)),
            };
            let _ = write!(
                html,
                r#"<h3>Log tail · attempt {attempt} · <span class="mono">{}</span></h3>{body}"#,
                escape(&name)
            );
        }
    }
    html.push_str("</div>");
    html
}

fn attempts_table(attempts: &[AttemptRecord]) -> String {
    if attempts.is_empty() {
        return r#"<p class="muted">None recorded.</p>"#.into();
    }
    let mut html = String::from(
        r#"<table class="grid-table compact"><thead><tr><th>#</th><th>Outcome</th><th>Started</th><th>Finished</th><th>Worker</th><th>GPUs</th><th>Resumed</th><th>Error</th></tr></thead><tbody>"#,
    );
    for a in attempts {
        let outcome = a.outcome.as_deref().unwrap_or("running");
        let _ = write!(
            html,
            r#"<tr><td>{}</td><td><span class="badge {o}">{o}</span></td><td>{}</td><td>{}</td><td class="mono">{}</td><td class="mono">{}</td><td>{}</td><td>{}</td></tr>"#,
            a.attempt,
            short_time(&a.started_at),
            a.finished_at
                .as_deref()
                .map(short_time)
                .unwrap_or_else(|| "—".into()),
            escape(a.worker.as_deref().unwrap_or("—")),
            escape(
                &a.gpus
                    .as_deref()
                    .map_or_else(|| "—".into(), |gpus| placement(gpus, a.gpu_slot))
            ),
            match (&a.resumed_from, a.resumed_at) {
                (None, _) => "—".to_string(),
                (Some(dir), Some(step)) =>
                    format!(r#"<span title="{}">at step {step}</span>"#, escape(dir)),
                (Some(dir), None) => format!(r#"<span title="{}">yes</span>"#, escape(dir)),
            },
            escape(
                a.error
                    .as_deref()
                    .or(a.last_output.as_deref())
                    .unwrap_or("")
            ),
            o = escape(outcome)
        );
    }
    html.push_str("</tbody></table>");
    html
}

fn measurements_table(measurements: &[MeasurementRecord]) -> String {
    let mut html = format!(
        "<h3>Measurements <span class=\"muted\">({})</span></h3>",
        measurements.len()
    );
    if measurements.is_empty() {
        html.push_str(r#"<p class="muted">None recorded.</p>"#);
        return html;
    }
    html.push_str(r#"<div class="scroll"><table class="grid-table compact"><thead><tr><th>Attempt</th><th>Step</th><th>Metric</th><th class="num">Value</th><th>Recorded</th></tr></thead><tbody>"#);
    for m in measurements {
        let _ = write!(
            html,
            r#"<tr><td>{}</td><td>{}</td><td>{}</td><td class="num mono">{}</td><td class="muted">{}</td></tr>"#,
            m.attempt,
            m.step
                .map(|s| s.to_string())
                .unwrap_or_else(|| "final".into()),
            escape(&m.metric),
            format_number(m.value),
            short_time(&m.recorded_at)
        );
    }
    html.push_str("</tbody></table></div>");
    html
}

/// A trial's own page: its details in the page frame.
pub(crate) fn trial_page(study: &str, detail: &str, number: u64) -> String {
    layout(
        &format!("Trial {number} of {study}"),
        &format!(
            r#"<a href="/">Studies</a><span class="sep">/</span><a href="/studies/{href}">{name}</a><span class="sep">/</span><span>Trial {number}</span>"#,
            href = url_part(study),
            name = escape(study)
        ),
        &format!(r#"<section class="card">{detail}</section>"#),
        "trial",
    )
}
