//! `hptune session`: one process that answers a client's requests, one JSON line each, over
//! its standard input and output, for as long as the client keeps it open. It does what the
//! commands `ask`, `tell`, `best` and `trials` do, each request under the study's lock in the
//! database as theirs, without a process start per request: the study file is read, the
//! database opened and the study's trials read once, and each `ask` reads only what changed
//! since the last.

use std::io::BufRead;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use hptune::ops::{self, Asker, BestBy, Report, Teller};
use hptune::storage::{Storage, StorageUrl};

use super::show::{best_json, output, trials_json};
use super::{EXIT_STOPPED, Failure};

/// The lease of an `ask` that names none, as `hptune ask --lease`'s default.
const DEFAULT_LEASE: &str = "1h";

/// Answers the requests on standard input about the study of the study file `path`, in the
/// database at `url`, one line each, until standard input ends; see docs/ask-tell.md.
pub async fn session(path: &Path, url: &StorageUrl) -> Result<ExitCode, Failure> {
    let storage = Storage::open(url).await?;
    // The study file is read and the study created before the first request: a file that
    // cannot serve ends the session here, as a database that cannot be opened does, rather
    // than answering every request with the same error.
    let asker = Asker::open(path, url, storage.clone()).await?;
    let mut session = Session {
        path,
        url,
        storage: storage.clone(),
        asker,
        teller: None,
    };
    let mut lines = stdin_lines();
    let mut number = 0;
    while let Some(line) = lines.recv().await {
        number += 1;
        let answer = match request(&line, number) {
            Ok(request) => session.answer(request).await,
            Err(message) => error_answer(&Failure::BadInput(message)),
        };
        output(&format!("{answer}\n"))?;
    }
    storage.close().await;
    Ok(ExitCode::SUCCESS)
}

/// The lines of standard input (without their line ends), read on a thread of their own;
/// the channel closes when standard input ends (or cannot be read).
fn stdin_lines() -> mpsc::UnboundedReceiver<Vec<u8>> {
    let (send, receive) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        loop {
            let mut line = Vec::new();
            match input.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                        line.pop();
                    }
                    if send.send(line).is_err() {
                        return;
                    }
                }
            }
        }
    });
    receive
}

/// What a session holds between requests.
struct Session<'a> {
    /// The study file.
    path: &'a Path,
    /// The database's URL (`best` and `trials` open it read-only, as their commands do).
    url: &'a StorageUrl,
    /// The database.
    storage: Storage,
    /// The study opened for asking.
    asker: Asker,
    /// The study found for telling, from the first `tell` that found it on.
    teller: Option<Teller>,
}

/// One request.
#[derive(Debug, PartialEq)]
enum Request {
    /// `ask`: claim up to `count` trials, each under a lease of `lease`.
    Ask { count: usize, lease: Duration },
    /// `tell`: record `report` for trial `trial`.
    Tell { trial: u64, report: Report },
    /// `best`: the best trial (or the Pareto front), by `by`.
    Best { by: BestBy },
    /// `trials`: every trial.
    Trials,
}

impl Session<'_> {
    /// The answer to `request`: `{"exit": 0, "result": ...}` (exit 3 for a trial the
    /// stopping rule stopped), or `{"exit": CODE, "error": MESSAGE}` with the code and message
    /// of the command that failed so.
    async fn answer(&mut self, request: Request) -> Value {
        let answered = match request {
            Request::Ask { count, lease } => self.ask(count, lease).await,
            Request::Tell { trial, report } => self.tell(trial, &report).await,
            Request::Best { by } => self.best(by).await,
            Request::Trials => self.trials().await,
        };
        match answered {
            Ok((exit, result)) => json!({"exit": exit, "result": result}),
            Err(failure) => error_answer(&failure),
        }
    }

    async fn ask(&mut self, count: usize, lease: Duration) -> Result<(u8, Value), Failure> {
        let asked = self.asker.ask(count, lease).await?;
        Ok((0, json!(asked.trials)))
    }

    async fn tell(&mut self, trial: u64, report: &Report) -> Result<(u8, Value), Failure> {
        let teller = match &self.teller {
            Some(teller) => teller,
            None => {
                let found = Teller::find(&self.storage, &self.study()).await?;
                self.teller.insert(found)
            }
        };
        let told = teller.tell(&self.storage, trial, report).await?;
        let exit = if told.stop.is_some() { EXIT_STOPPED } else { 0 };
        Ok((exit, super::ask::told_json(&told)))
    }

    async fn best(&self, by: BestBy) -> Result<(u8, Value), Failure> {
        Ok((0, best_json(ops::best(self.url, &self.study(), by).await?)))
    }

    async fn trials(&self) -> Result<(u8, Value), Failure> {
        let list = ops::trials(self.url, &self.study(), None, None).await?;
        Ok((0, trials_json(&list)))
    }

    /// The study as the read commands name it: its study file.
    fn study(&self) -> String {
        self.path.display().to_string()
    }
}

/// The answer of a request that failed so.
fn error_answer(failure: &Failure) -> Value {
    json!({"exit": failure.code(), "error": failure.to_string()})
}

/// Request number `number` read from its line; bad input names the line and the field.
fn request(line: &[u8], number: usize) -> Result<Request, String> {
    let at = |field: &str, problem: &str| format!("request line {number}: {field}: {problem}");
    let object = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(object)) => object,
        Ok(other) => return Err(at("the request", &format!("not a JSON object: {other}"))),
        Err(e) => return Err(at("the request", &format!("not JSON: {e}"))),
    };
    const OPS: &str = "\"ask\", \"tell\", \"best\" or \"trials\"";
    let op = match object.get("op") {
        Some(Value::String(op)) => op.clone(),
        Some(other) => {
            return Err(at(
                "field 'op'",
                &format!("{other} is not a request: {OPS}"),
            ));
        }
        None => return Err(at("field 'op'", &format!("missing: {OPS}"))),
    };
    let takes: &[&str] = match op.as_str() {
        "ask" => &["op", "count", "lease"],
        "tell" => &["op", "trial", "value", "metrics", "step", "fail"],
        "best" => &["op", "by"],
        "trials" => &["op"],
        other => {
            return Err(at(
                "field 'op'",
                &format!("'{other}' is not a request: {OPS}"),
            ));
        }
    };
    let fields = Fields { object, at: &at };
    if let Some(unknown) = fields.object.keys().find(|k| !takes.contains(&k.as_str())) {
        let takes = takes.join(", ");
        return Err(fields.bad(
            unknown,
            &format!("{op} takes no such field (it takes: {takes})"),
        ));
    }
    Ok(match op.as_str() {
        "ask" => Request::Ask {
            count: fields.whole("count")?.unwrap_or(1),
            lease: fields.lease()?,
        },
        "tell" => Request::Tell {
            trial: fields
                .whole("trial")?
                .ok_or_else(|| at("field 'trial'", "missing: the trial's number"))?,
            report: fields.report()?,
        },
        "best" => Request::Best { by: fields.by()? },
        _ => Request::Trials,
    })
}

/// The fields of a request (only those its `op` takes).
struct Fields<'a> {
    /// The request.
    object: Map<String, Value>,
    /// The message of bad input at a field: `at("field 'x'", problem)`.
    at: &'a dyn Fn(&str, &str) -> String,
}

impl Fields<'_> {
    /// Field `name`; `None` when absent or `null`.
    fn get(&self, name: &str) -> Option<&Value> {
        self.object.get(name).filter(|v| !v.is_null())
    }

    /// Bad input at field `name`.
    fn bad(&self, name: &str, problem: &str) -> String {
        (self.at)(&format!("field '{name}'"), problem)
    }

    /// A whole number of at least 0 (`count` at least 1).
    fn whole<T: TryFrom<u64>>(&self, name: &str) -> Result<Option<T>, String> {
        let Some(value) = self.get(name).cloned() else {
            return Ok(None);
        };
        let whole = value.as_u64().and_then(|v| T::try_from(v).ok());
        whole.map(Some).ok_or_else(|| {
            self.bad(
                name,
                &format!("{value} is not a whole number of at least 0"),
            )
        })
    }

    /// A number: JSON's, or text as the commands' flags read it (`nan`, `inf`, `-inf`).
    fn number(&self, name: &str, value: &Value) -> Result<f64, String> {
        let number = match value {
            Value::Number(n) => n.as_f64(),
            Value::String(text) => text.trim().parse().ok(),
            _ => None,
        };
        number.ok_or_else(|| self.bad(name, &format!("{value} is not a number")))
    }

    /// `lease`: a duration as `--lease` reads it (`30s`, `1h`), `1h` when absent.
    fn lease(&self) -> Result<Duration, String> {
        let text = match self.get("lease").cloned() {
            None => DEFAULT_LEASE.to_string(),
            Some(Value::String(text)) => text,
            Some(other) => {
                return Err(self.bad(
                    "lease",
                    &format!("{other} is not a duration such as \"30s\" or \"1h\""),
                ));
            }
        };
        humantime::parse_duration(&text).map_err(|e| self.bad("lease", &format!("'{text}': {e}")))
    }

    /// `by`: how `best` chooses (`observed`, `model`), `observed` when absent.
    fn by(&self) -> Result<BestBy, String> {
        match self.get("by").cloned() {
            None => Ok(BestBy::Observed),
            Some(Value::String(text)) => clap::ValueEnum::from_str(&text, false)
                .map_err(|_| self.bad("by", &format!("'{text}' is not observed or model"))),
            Some(other) => Err(self.bad("by", &format!("{other} is not observed or model"))),
        }
    }

    /// A `tell`'s result: `value`, `metrics` (an object of numbers by name) and `step`, or
    /// `fail` (the reason), as the flags of `hptune tell`.
    fn report(&self) -> Result<Report, String> {
        let value = match self.get("value").cloned() {
            Some(v) => Some(self.number("value", &v)?),
            None => None,
        };
        let metrics = match self.get("metrics").cloned() {
            None => Vec::new(),
            Some(Value::Object(metrics)) => metrics
                .iter()
                .map(|(name, v)| Ok((name.clone(), self.number(&format!("metrics.{name}"), v)?)))
                .collect::<Result<_, String>>()?,
            Some(other) => {
                return Err(self.bad(
                    "metrics",
                    &format!("{other} is not an object of numbers by metric"),
                ));
            }
        };
        let step = match self.get("step").cloned() {
            None => None,
            Some(v) => Some(
                v.as_i64()
                    .ok_or_else(|| self.bad("step", &format!("{v} is not a whole number")))?,
            ),
        };
        let fail = match self.get("fail").cloned() {
            None => None,
            Some(Value::String(reason)) => Some(reason),
            Some(other) => {
                return Err(self.bad(
                    "fail",
                    &format!("{other} is not text: the reason the trial failed"),
                ));
            }
        };
        match fail {
            Some(_) if value.is_some() || !metrics.is_empty() || step.is_some() => Err(self.bad(
                "fail",
                "cannot be given with value, metrics or step: a trial fails or has a result",
            )),
            Some(reason) => Ok(Report::Failed(reason)),
            None if value.is_none() && metrics.is_empty() => Err((self.at)(
                "fields 'value', 'metrics', 'fail'",
                "a tell needs one of them",
            )),
            None => Ok(Report::Metrics {
                value,
                metrics,
                step,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> Result<Request, String> {
        request(line.as_bytes(), 4)
    }

    #[test]
    fn requests_are_read_as_the_commands_flags() {
        assert_eq!(
            read(r#"{"op": "ask"}"#),
            Ok(Request::Ask {
                count: 1,
                lease: Duration::from_secs(3600)
            })
        );
        assert_eq!(
            read(r#"{"op": "ask", "count": 3, "lease": "30s"}"#),
            Ok(Request::Ask {
                count: 3,
                lease: Duration::from_secs(30)
            })
        );
        assert_eq!(
            read(
                r#"{"op": "tell", "trial": 2, "value": "nan", "metrics": {"memory": 3}, "step": 1}"#
            )
            .map(|r| format!("{r:?}")),
            Ok(format!(
                "{:?}",
                Request::Tell {
                    trial: 2,
                    report: Report::Metrics {
                        value: Some(f64::NAN),
                        metrics: vec![("memory".into(), 3.0)],
                        step: Some(1)
                    }
                }
            ))
        );
        assert_eq!(
            read(r#"{"op": "tell", "trial": 0, "fail": "oom"}"#),
            Ok(Request::Tell {
                trial: 0,
                report: Report::Failed("oom".into())
            })
        );
        assert_eq!(
            read(r#"{"op": "best", "by": "model"}"#),
            Ok(Request::Best { by: BestBy::Model })
        );
        assert_eq!(read(r#"{"op": "trials"}"#), Ok(Request::Trials));
    }

    #[test]
    fn bad_requests_name_the_line_and_the_field() {
        for (line, says) in [
            ("{\"op\": \"ask\"", "request line 4: the request: not JSON"),
            ("[1]", "request line 4: the request: not a JSON object"),
            (r#"{"count": 1}"#, "request line 4: field 'op': missing"),
            (r#"{"op": "run"}"#, "field 'op': 'run' is not a request"),
            (
                r#"{"op": "ask", "count": -1}"#,
                "field 'count': -1 is not a whole number",
            ),
            (r#"{"op": "ask", "lease": "soon"}"#, "field 'lease': 'soon'"),
            (
                r#"{"op": "ask", "trial": 1}"#,
                "field 'trial': ask takes no such field (it takes: op, count, lease)",
            ),
            (r#"{"op": "tell", "value": 1}"#, "field 'trial': missing"),
            (
                r#"{"op": "tell", "trial": 1, "valeu": 1}"#,
                "field 'valeu': tell takes no such field",
            ),
            (
                r#"{"op": "tell", "trial": 1, "value": "x"}"#,
                "field 'value': \"x\" is not a number",
            ),
            (
                r#"{"op": "tell", "trial": 1, "metrics": {"loss": true}}"#,
                "field 'metrics.loss': true is not a number",
            ),
            (
                r#"{"op": "tell", "trial": 1, "step": 2}"#,
                "fields 'value', 'metrics', 'fail': a tell needs one of them",
            ),
            (
                r#"{"op": "tell", "trial": 1, "value": 1, "fail": "oom"}"#,
                "field 'fail': cannot be given with value",
            ),
            (
                r#"{"op": "best", "by": "luck"}"#,
                "field 'by': 'luck' is not observed or model",
            ),
        ] {
            let message = read(line).expect_err(line);
            assert!(message.contains(says), "{line}: {message}");
        }
    }
}
