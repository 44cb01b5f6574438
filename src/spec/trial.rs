//! The `trial` block: the worker's command line and its argument template, its environment,
//! its time limits (the executor block is `executor.rs`).

use std::time::Duration;

use super::raw::RawTrial;
use super::{Checker, DEFAULT_GRACE_PERIOD, quoted};
use crate::executor::is_protocol_variable;
use crate::study::space::Space;
use crate::study::{TEMPLATE_BUILTINS, TemplatePart, TrialTemplate, template_parts};

impl Checker<'_> {
    /// Checks the `trial` block (the parameters' ids are needed by argument templates).
    pub(super) fn trial(&mut self, raw: RawTrial, space: Option<&Space>) -> Option<TrialTemplate> {
        let mut ok = true;
        if raw.command.first().is_none_or(|c| c.trim().is_empty()) {
            self.report(
                "trial.command",
                "must name the worker program, e.g. [python, train.py]",
            );
            ok = false;
        }
        if let (Some(args), Some(space)) = (&raw.args, space) {
            for (i, arg) in args.iter().enumerate() {
                if let Err(message) = check_template(arg, space) {
                    self.report(format!("trial.args[{i}]"), message);
                    ok = false;
                }
            }
        }
        for (key, value) in &raw.env {
            if let Err(message) = check_env(key, value) {
                self.report(format!("trial.env.{key}"), message);
                ok = false;
            }
        }
        let timeout = self.duration("trial.timeout", raw.timeout.as_deref());
        let grace = self.duration("trial.grace_period", raw.grace_period.as_deref());
        let executor = self.executor(raw.executor.as_ref(), timeout.flatten());
        if !ok {
            return None;
        }
        Some(TrialTemplate {
            command: raw.command,
            args: raw.args,
            env: raw.env,
            timeout: timeout?,
            grace_period: grace?.unwrap_or(DEFAULT_GRACE_PERIOD),
            executor: executor?,
        })
    }

    /// Reads a duration field (`30s`, `2h`), absent or longer than zero.
    pub(super) fn duration(&mut self, field: &str, text: Option<&str>) -> Option<Option<Duration>> {
        let Some(text) = text else {
            return Some(None);
        };
        match humantime::parse_duration(text) {
            Ok(d) if !d.is_zero() => Some(Some(d)),
            Ok(_) => {
                self.report(field, "must be longer than zero");
                None
            }
            Err(e) => {
                self.report(
                    field,
                    format!("'{text}' is not a duration ({e}): write e.g. 90s, 30m or 2h"),
                );
                None
            }
        }
    }
}

/// Checks a `trial.env` entry: a name a process environment can hold, not one of the worker
/// protocol's (a worker must see its own trial, and a lost worker is found by them).
fn check_env(key: &str, value: &str) -> Result<(), String> {
    if is_protocol_variable(key) {
        Err(format!(
            "{key} is set by hptune for every worker (the worker protocol): give the variable another name"
        ))
    } else if key.is_empty() || key.contains(['=', '\0']) {
        Err(format!(
            "{} is not a variable name: it must be non-empty, without '=' or NUL",
            quoted(key)
        ))
    } else if value.contains('\0') {
        Err("the value holds a NUL character, which no environment variable can".into())
    } else {
        Ok(())
    }
}

fn check_template(template: &str, space: &Space) -> Result<(), String> {
    for part in template_parts(template)? {
        if let TemplatePart::Placeholder(name) = part
            && space.get(name).is_none()
            && !TEMPLATE_BUILTINS.contains(&name)
        {
            let ids: Vec<&str> = space.parameters().iter().map(|p| p.id.as_str()).collect();
            return Err(format!(
                "'{{{name}}}' names no parameter (parameters: {}; also {{trial_id}}, {{study}})",
                ids.join(", ")
            ));
        }
    }
    Ok(())
}
