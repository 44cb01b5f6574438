//! Time and liveness of a trial's attempt: whether the controller that runs it is gone, when
//! the attempt began and how long it has run.

use std::time::{Duration, SystemTime};

use crate::executor::process::controller_is_gone;
use crate::storage::TrialRecord;

/// A trial whose controller sent no heartbeat for this long is adopted by another controller.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// Whether a running trial's controller is gone: a process of this machine that is no more,
/// or a controller elsewhere whose heartbeats stopped.
pub(super) fn is_orphan(owner: Option<&str>, heartbeat: Option<&str>) -> bool {
    if let Some(gone) = owner.and_then(controller_is_gone) {
        return gone;
    }
    let stale = chrono::Duration::from_std(STALE_AFTER).unwrap_or_default();
    heartbeat
        .and_then(|h| chrono::DateTime::parse_from_rfc3339(h).ok())
        .is_none_or(|h| chrono::Utc::now().signed_duration_since(h) > stale)
}

/// When the trial's current attempt began, if recorded.
fn started_at(trial: &TrialRecord) -> Option<chrono::DateTime<chrono::Utc>> {
    trial
        .started_at
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.to_utc())
}

/// How long the trial's current attempt has been running (zero if unknown): an adopted
/// worker keeps the time it had left.
pub(super) fn running_for(trial: &TrialRecord) -> Duration {
    started_at(trial)
        .and_then(|t| (chrono::Utc::now() - t).to_std().ok())
        .unwrap_or_default()
}

/// When the trial's current attempt began; if that is not recorded, any output of the
/// attempt's files counts as the attempt's (`UNIX_EPOCH`).
pub(super) fn attempt_began(trial: &TrialRecord) -> SystemTime {
    started_at(trial).map_or(SystemTime::UNIX_EPOCH, SystemTime::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::process::controller_id;

    fn ago(seconds: i64) -> String {
        (chrono::Utc::now() - chrono::Duration::seconds(seconds))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    #[test]
    fn a_controller_of_this_machine_is_judged_by_its_process_not_its_heartbeats() {
        assert!(!is_orphan(Some(&controller_id()), Some(&ago(3600))));
    }

    #[test]
    fn a_controller_elsewhere_is_gone_when_its_heartbeats_stopped() {
        let elsewhere = Some("another-machine:12@34");
        assert!(!is_orphan(elsewhere, Some(&ago(10))));
        assert!(is_orphan(elsewhere, Some(&ago(61))));
        assert!(is_orphan(elsewhere, None));
        // A trial handed back by an interrupted controller has neither.
        assert!(is_orphan(None, None));
    }

    #[test]
    fn an_attempt_s_time_comes_from_its_start() {
        let mut trial = TrialRecord::for_test(0);
        assert_eq!(running_for(&trial), Duration::ZERO);
        assert_eq!(attempt_began(&trial), SystemTime::UNIX_EPOCH);
        trial.started_at = Some(ago(30));
        assert!(running_for(&trial) >= Duration::from_secs(30));
        let began = SystemTime::now()
            .duration_since(attempt_began(&trial))
            .unwrap();
        assert!(began >= Duration::from_secs(30));
    }
}
