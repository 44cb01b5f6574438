//! Timeline: every attempt of every trial as a bar over time, coloured by how it ended; a
//! retried attempt and its retry are both shown. An attempt that held GPUs is on its
//! device's row (one per slot of a shared GPU: the timeline per device); any other on a
//! worker slot, the first free when it started. A large study's attempts are those of its
//! newest trials and its running ones (what the [`crate::storage::StudyFollower`] holds).

use super::axis::Axis;
use super::svg::{Frame, Svg, WIDE, escape};
use super::{MOST_MARKS, StudyData, seconds, time_unit};
use crate::storage::TrialState;

const ROW: f64 = 20.0;

/// The GPUs an attempt held, as recorded, and its slot on a shared one.
type Device = (String, Option<u32>);

pub(super) fn draw(data: &StudyData) -> String {
    let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
    let mut bars: Vec<(f64, f64, String, String, u64, Option<Device>)> = Vec::new();
    for attempt in data.follower.all_attempts() {
        let Some(start) = seconds(&attempt.started_at) else {
            continue;
        };
        let running = attempt.finished_at.is_none()
            && data
                .follower
                .trial(attempt.number)
                .is_some_and(|t| t.state == TrialState::Running && t.attempt == attempt.attempt);
        let end = match attempt.finished_at.as_deref().and_then(seconds) {
            Some(end) => end,
            None if running => now,
            None => continue,
        };
        let outcome = match (running, attempt.outcome.as_deref()) {
            (true, _) => "running",
            (false, Some(outcome)) => outcome,
            (false, None) => "retried",
        };
        let tip = format!(
            "Trial {} · attempt {} · {outcome} · {:.1} s{}{}",
            attempt.number,
            attempt.attempt,
            end - start,
            attempt
                .worker
                .as_deref()
                .map(|w| format!("\nworker {w}"))
                .unwrap_or_default()
                + &attempt
                    .gpus
                    .as_deref()
                    .map(|g| match attempt.gpu_slot {
                        Some(slot) => format!(" on GPU {g}, slot {}", slot + 1),
                        None => format!(" on GPUs {g}"),
                    })
                    .unwrap_or_default(),
            attempt
                .error
                .as_deref()
                .map(|e| format!("\n{e}"))
                .unwrap_or_default()
        );
        bars.push((
            start,
            end.max(start),
            outcome.to_string(),
            tip,
            attempt.number,
            attempt.gpus.clone().map(|gpus| (gpus, attempt.gpu_slot)),
        ));
    }
    if bars.is_empty() {
        return super::svg::message("No trial has started yet.");
    }
    bars.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The latest attempts, when there are more than marks.
    let total = bars.len();
    bars.drain(..total.saturating_sub(MOST_MARKS));
    let origin = bars[0].0;
    let last = bars.iter().map(|b| b.1).fold(origin, f64::max);
    let (unit, unit_name) = time_unit(last - origin);
    let mut devices: Vec<&Device> = bars.iter().filter_map(|bar| bar.5.as_ref()).collect();
    devices.sort();
    devices.dedup();
    let mut slot_ends: Vec<f64> = Vec::new();
    let slots: Vec<usize> = bars
        .iter()
        .map(|(start, end, .., device)| match device {
            Some(device) => devices
                .binary_search(&device)
                .expect("every device is listed"),
            None => {
                let free = slot_ends.iter().position(|e| *e <= *start);
                let slot = free.unwrap_or(slot_ends.len());
                if slot == slot_ends.len() {
                    slot_ends.push(*end);
                } else {
                    slot_ends[slot] = *end;
                }
                devices.len() + slot
            }
        })
        .collect();
    let rows = devices.len() + slot_ends.len();
    let height = 16.0 + 48.0 + rows as f64 * ROW + 8.0;
    let frame = Frame::standard(WIDE, height);
    let x_axis = Axis::Linear {
        low: 0.0,
        high: ((last - origin) / unit).max(1e-3),
    };
    let mut svg = Svg::new(WIDE, height);
    let note = match data.follower.details_from() {
        // A large study: only its newest trials' attempts were read.
        Some(from) => Some(format!(
            "{} attempts drawn: the latest, of the trials from {from} on and the running ones",
            bars.len()
        )),
        None if bars.len() < total => Some(format!(
            "{} of {total} attempts drawn: the latest",
            bars.len()
        )),
        None => None,
    };
    if let Some(note) = note {
        svg.text(frame.left, 11.0, "start", "caption", &note);
    }
    svg.x_axis(
        &frame,
        &x_axis,
        &format!("{unit_name} since the first trial started"),
    );
    for row in 0..rows {
        let y = frame.top + row as f64 * ROW + ROW / 2.0 + 4.0;
        let label = match devices.get(row) {
            Some((gpus, Some(slot))) => format!("GPU {gpus}·{}", slot + 1),
            Some((gpus, None)) if gpus.contains(',') => format!("GPUs {gpus}"),
            Some((gpus, None)) => format!("GPU {gpus}"),
            None => format!("slot {}", row - devices.len() + 1),
        };
        svg.text(frame.left - 8.0, y, "end", "tick", &label);
    }
    for ((start, end, outcome, tip, number, _), slot) in bars.iter().zip(&slots) {
        let x0 = frame.x(x_axis.position((start - origin) / unit).unwrap_or(0.0));
        let x1 = frame.x(x_axis.position((end - origin) / unit).unwrap_or(0.0));
        svg.raw(&format!(
            r#"<rect class="span {}" data-trial="{number}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="3"><title>{}</title></rect>"#,
            escape(outcome),
            frame.top + *slot as f64 * ROW + 3.0,
            (x1 - x0).max(2.0),
            ROW - 6.0,
            escape(tip)
        ));
    }
    svg.finish("timeline")
}
