use super::*;
use crate::protocol::Measurement;
use crate::study::Goal;

/// The budget of a study of `max_trial_count` trials (five failures allowed), and the
/// empty views of two controllers of it.
fn two_controllers(id: i64, max_trial_count: u64) -> (ClaimRules, StudyView, StudyView) {
    let budget = ClaimRules {
        budget: Budget {
            max_trial_count: Some(max_trial_count),
            max_failed_trial_count: 5,
        },
        queue: Queue::RunFirst,
    };
    let view = || StudyView::new(id, Goal::Minimize);
    (budget, view(), view())
}

/// A controller suspended while it holds the study's lock in PostgreSQL holds the other
/// controllers of the study only until the server closes its idle connection: the lock is
/// released, the others claim, and the suspended one gets an error when it goes on.
#[tokio::test]
async fn a_connection_idle_in_the_studys_lock_is_closed_and_the_lock_released() {
    let Some(url) = crate::storage::test_postgres() else {
        return;
    };
    let (suspended, peer) = (
        Storage::open(&url).await.unwrap(),
        Storage::open(&url).await.unwrap(),
    );
    let name = format!("idle-lock-{}", std::process::id());
    let yaml = format!(
        "name: {name}\nmax_trial_count: 2\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: x, type: double, min: 0, max: 1}}\ntrial: {{command: [w]}}\n"
    );
    let study = crate::spec::parse(std::path::Path::new("s.yaml"), &yaml).unwrap();
    let id = suspended.ensure_study(&study).await.unwrap().id;

    let mut held = suspended.lock_study(id).await.unwrap();
    let limit: (String,) = sqlx::query_as("SHOW idle_in_transaction_session_timeout")
        .fetch_one(&mut *held)
        .await
        .unwrap();
    assert_eq!(limit.0, "1min", "every session of the pool has the limit");
    // The limit of this transaction shortened, so that the test need not wait a minute.
    sqlx::query("SET LOCAL idle_in_transaction_session_timeout = '1s'")
        .execute(&mut *held)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let peer_lock = tokio::time::timeout(std::time::Duration::from_secs(20), peer.lock_study(id))
        .await
        .expect("the peer waits only until the idle connection is closed")
        .unwrap();
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "the lock was held meanwhile"
    );
    peer_lock.commit().await.unwrap();
    assert!(
        held.commit().await.is_err(),
        "the ended session's transaction fails"
    );
    // The suspended controller's storage goes on with a new connection.
    assert!(
        suspended
            .lock_study(id)
            .await
            .unwrap()
            .commit()
            .await
            .is_ok()
    );
}

/// Two controllers on one SQLite file, each with its own view: a claim on a view that
/// another controller made stale must read the change before it proposes (the one-call
/// claim is refused), the ends given to a claim are written whether or not the one-call
/// claim goes through, and an end writes the measurements, the handle and the state.
#[tokio::test]
async fn a_claim_on_a_stale_view_reads_what_another_controller_did() {
    let (_dir, storage, id) = crate::storage::test_study(4).await;
    let (budget, mut a, mut b) = two_controllers(id, 4);
    // What each proposal saw: (number, finished trials, running trials).
    let mut seen = Vec::new();
    let claim =
        async |view: &mut StudyView, ends: Vec<TrialEnd>, seen: &mut Vec<(u64, usize, usize)>| {
            let mut ends = ends;
            for end in &ends {
                view.update(end.trial.clone());
            }
            let claimed = storage
                .claim_trials(
                    view,
                    budget,
                    Holder::controller("me"),
                    1,
                    &mut ends,
                    |number, view, claimed| {
                        assert!(claimed.is_empty());
                        seen.push((number, view.history().len(), view.unfinished_params().len()));
                        Ok::<_, ()>(Some(Assignment::default()))
                    },
                )
                .await
                .unwrap();
            assert!(ends.is_empty(), "the claim writes every end");
            match &claimed[..] {
                [Claim::Started(trial)] => Some((**trial).clone()),
                _ => None,
            }
        };
    let mut first = claim(&mut a, vec![], &mut seen).await.unwrap();
    first.worker = Some("pid:1@2".into());
    first.log_path = Some("trial-0.log".into());
    let reported = vec![
        Measurement {
            step: Some(1),
            metric: "loss".into(),
            value: 2.0,
        },
        Measurement {
            step: None,
            metric: "loss".into(),
            value: 1.5,
        },
        Measurement {
            step: None,
            metric: "acc".into(),
            value: f64::NAN,
        },
    ];
    let mut ends = vec![TrialEnd::now(
        first.clone(),
        TrialState::Succeeded,
        Some(1.5),
        None,
        reported,
    )];
    a.update(ends[0].trial.clone());
    storage.finish_trials(&mut ends).await.unwrap();
    // B has read nothing: its claim must see trial 0 finished, and take number 1.
    let second = claim(&mut b, vec![], &mut seen).await.unwrap();
    assert_eq!(second.number, 1);
    // A's view misses trial 1: its claim reads it and takes number 2.
    assert_eq!(claim(&mut a, vec![], &mut seen).await.unwrap().number, 2);
    // B ends trial 1 with its next claim, on a view that misses trial 2: the one-call
    // claim is refused, trial 1's end is written all the same, and B takes number 3.
    let failed = TrialEnd::now(second, TrialState::Failed, None, Some("no".into()), vec![]);
    assert_eq!(
        claim(&mut b, vec![failed], &mut seen).await.unwrap().number,
        3
    );
    assert!(
        claim(&mut a, vec![], &mut seen).await.is_none(),
        "the budget is 4"
    );
    // Each stale proposal is followed by one on the view brought up to date.
    let expected = [
        (0, 0, 0), // A, on an empty study: claimed in one call
        (0, 0, 0), // B, stale: refused
        (1, 1, 0), // B, having read trial 0's end
        (1, 1, 0), // A, stale (trial 1 new): refused
        (2, 1, 1), // A, up to date
        (2, 2, 0), // B, trial 1 ended, stale (trial 2 new): refused
        (3, 2, 1), // B, up to date
        (3, 1, 2), // A, stale: refused; up to date the budget is spent
    ];
    assert_eq!(seen, expected);
    let trials = storage.trials(id).await.unwrap();
    assert_eq!(trials[1].state, TrialState::Failed);
    assert_eq!(trials[1].error.as_deref(), Some("no"));
    let rows: Vec<(Option<i64>, String, f64)> = sqlx::query_as(
        "SELECT step, metric, value FROM measurements WHERE trial_id = $1 ORDER BY id",
    )
    .bind(first.id)
    .fetch_all(&storage.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [(Some(1), "loss".into(), 2.0), (None, "loss".into(), 1.5)]
    );
    let trials = storage.trials(id).await.unwrap();
    assert_eq!(trials[0].state, TrialState::Succeeded);
    assert_eq!(trials[0].worker.as_deref(), Some("pid:1@2"));
    assert_eq!(trials[0].log_path.as_deref(), Some("trial-0.log"));
    let attempt: (String, Option<String>) =
        sqlx::query_as("SELECT outcome, worker FROM attempts WHERE trial_id = $1")
            .bind(first.id)
            .fetch_one(&storage.pool)
            .await
            .unwrap();
    assert_eq!(attempt, ("succeeded".into(), Some("pid:1@2".into())));
}

/// A claim of several slots proposes each trial with the ones before it as running and
/// inserts them in one call; on a stale view none of them is inserted (each insert waits
/// for the one before it: without that, the second would pass its guard, the other
/// controller's trial standing in for the first), and the claim goes on under the lock.
#[tokio::test]
async fn a_claim_of_several_slots_inserts_them_in_one_call_or_none() {
    let (_dir, storage, id) = crate::storage::test_study(6).await;
    let (budget, mut a, mut b) = two_controllers(id, 6);
    // What each proposal saw: (number, finished, running in the view, claimed before it).
    let mut seen = Vec::new();
    let claim = async |view: &mut StudyView,
                       slots: usize,
                       mut ends: Vec<TrialEnd>,
                       seen: &mut Vec<(u64, usize, usize, usize)>| {
        let claimed = storage
            .claim_trials(
                view,
                budget,
                Holder::controller("me"),
                slots,
                &mut ends,
                |number, view, claimed| {
                    let (history, running) = (view.history().len(), view.unfinished_params().len());
                    seen.push((number, history, running, claimed.len()));
                    Ok::<_, ()>(Some(Assignment::default()))
                },
            )
            .await
            .unwrap();
        claimed
            .into_iter()
            .map(|claim| match claim {
                Claim::Started(trial) => Ok(*trial),
                other => Err(other),
            })
            .collect::<Vec<_>>()
    };
    let numbers = |claims: &[Result<TrialRecord, Claim>]| -> Vec<u64> {
        claims.iter().map(|c| c.as_ref().unwrap().number).collect()
    };
    let first = claim(&mut a, 3, vec![], &mut seen).await;
    assert_eq!(numbers(&first), [0, 1, 2]);
    assert_eq!(numbers(&claim(&mut b, 1, vec![], &mut seen).await), [3]);
    // A ends trial 0 and claims three more on a view that misses trial 3: none is
    // inserted in one call, the end is written, and the locked claim takes number 4.
    let end = TrialEnd::now(
        first[0].clone().unwrap(),
        TrialState::Succeeded,
        Some(1.0),
        None,
        vec![],
    );
    a.update(end.trial.clone());
    assert_eq!(numbers(&claim(&mut a, 3, vec![end], &mut seen).await), [4]);
    // Up to date, A plans two, and the budget stops it at one.
    assert_eq!(numbers(&claim(&mut a, 2, vec![], &mut seen).await), [5]);
    let spent = claim(&mut b, 1, vec![], &mut seen).await;
    assert_eq!(spent, [Err(Claim::BudgetSpent)]);
    let expected = [
        (0, 0, 0, 0), // A: three in one call, each seeing the ones before it running
        (1, 0, 0, 1),
        (2, 0, 0, 2),
        (0, 0, 0, 0), // B, on an empty view: refused
        (3, 0, 3, 0), // B, up to date
        (3, 1, 2, 0), // A, stale: refused, the three of them
        (4, 1, 2, 1),
        (5, 1, 2, 2),
        (4, 1, 3, 0), // A, up to date, under the lock
        (5, 1, 4, 0), // A, one slot left in the budget
        (4, 0, 4, 0), // B, stale: refused; up to date the budget is spent
    ];
    assert_eq!(seen, expected);
    let trials = storage.trials(id).await.unwrap();
    let stored: Vec<(u64, TrialState)> = trials.iter().map(|t| (t.number, t.state)).collect();
    let mut wanted = vec![(0, TrialState::Succeeded)];
    wanted.extend((1..6).map(|n| (n, TrialState::Running)));
    assert_eq!(stored, wanted);
}

#[test]
fn a_client_takes_a_handed_back_trial_first_and_no_more_trials_than_its_lease_allows() {
    let (rules, mut view, _) = two_controllers(1, 10);
    let client = Holder::client(ClientLease {
        length: Duration::from_secs(60),
        at_most: 2,
    });
    let leased = TrialRecord {
        owner: Some(CLIENT.into()),
        lease_expires_at: Some("2100-01-01T00:00:00.000Z".into()),
        ..TrialRecord::for_test(0)
    };
    let handed_back = TrialRecord {
        started_at: Some("2026-01-01T00:00:00.000Z".into()),
        attempt: 2,
        ..TrialRecord::in_state(1, TrialState::Pending, None)
    };
    view.update(leased);
    view.update(handed_back.clone());
    let mut proposed = |_, _: &StudyView, _: &[Assignment]| Ok::<_, ()>(Some(Assignment::new()));
    assert!(matches!(
        decide(&view, rules, client, &[], &mut proposed),
        Ok(Decision::Waiting(Waits::HandedBack, id)) if id == handed_back.id
    ));
    // A controller leaves it to adoption, and claims a new trial.
    assert!(matches!(
        decide(&view, rules, Holder::controller("me"), &[], &mut proposed),
        Ok(Decision::Run(2, _))
    ));
    // One trial leased and one planned: the client's two slots are full.
    assert!(matches!(
        decide(&view, rules, client, &[Assignment::new()], &mut proposed),
        Ok(Decision::Not(Claim::AllLeased))
    ));
}

/// A client whose view missed another client taking a handed-back trial leases no more trials
/// than its lease allows. Taking a handed-back trial neither adds nor finishes one, so the
/// one-call claim's guard cannot see it: clients claim under the study's lock, where the view
/// reads its running trials again.
#[tokio::test]
async fn a_client_on_a_stale_view_leases_no_more_trials_than_its_lease_allows() {
    let (_dir, storage, id) = crate::storage::test_study(10).await;
    let (rules, mut controller, mut a) = two_controllers(id, 10);
    let mut b = StudyView::new(id, Goal::Minimize);
    let client = Holder::client(ClientLease {
        length: Duration::from_secs(60),
        at_most: 2,
    });
    let claim = async |view: &mut StudyView, holder: Holder<'_>| {
        let propose = |_, _: &StudyView, _: &[Assignment]| Ok::<_, ()>(Some(Assignment::new()));
        let claimed = storage
            .claim_trials(view, rules, holder, 1, &mut Vec::new(), propose)
            .await
            .unwrap();
        match &claimed[..] {
            [Claim::Started(trial)] => Some(trial.number),
            [Claim::AllLeased] => None,
            other => panic!("unexpected claim {other:?}"),
        }
    };
    // A controller runs trial 0; client A leases trial 1 (one leased: room for one more).
    assert_eq!(
        claim(&mut controller, Holder::controller("c")).await,
        Some(0)
    );
    assert_eq!(claim(&mut a, client).await, Some(1));
    // The controller is interrupted, trial 0 is handed back, and client B leases it.
    sqlx::query(
        "UPDATE trials SET state = 'pending', owner = NULL WHERE study_id = $1 AND number = 0",
    )
    .bind(id)
    .execute(&storage.pool)
    .await
    .unwrap();
    assert_eq!(claim(&mut b, client).await, Some(0));
    // A's view still has trial 0 running for the controller: two are leased already.
    assert_eq!(claim(&mut a, client).await, None);
    let trials = storage.trials(id).await.unwrap();
    let leased = trials
        .iter()
        .filter(|t| t.lease_expires_at.is_some())
        .count();
    assert_eq!((trials.len(), leased), (2, 2));
}

/// A client's counting view (a sampler that reads no history) is read by its first claim,
/// under the study's lock: the finished trials counted, the running ones read, the budget and
/// the numbers as a view of every row would have them.
#[tokio::test]
async fn a_counting_view_is_read_by_its_first_claim_under_the_lock() {
    let (_dir, storage, id) = crate::storage::test_study(4).await;
    let (rules, mut controller, _) = two_controllers(id, 4);
    let propose = |_, _: &StudyView, _: &[Assignment]| Ok::<_, ()>(Some(Assignment::new()));
    let claimed = storage
        .claim_trials(
            &mut controller,
            rules,
            Holder::controller("c"),
            3,
            &mut Vec::new(),
            propose,
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    // Trials 0 and 2 end; trial 1 still runs for the controller.
    sqlx::query("UPDATE trials SET state = 'succeeded', value = 1.0, finished_at = '2026-01-01T00:00:00Z' WHERE study_id = $1 AND number IN (0, 2)")
        .bind(id)
        .execute(&storage.pool)
        .await
        .unwrap();
    let client = Holder::client(ClientLease {
        length: Duration::from_secs(60),
        at_most: 4,
    });
    let mut view = StudyView::counting(id, Goal::Minimize);
    let claimed = storage
        .claim_trials(&mut view, rules, client, 2, &mut Vec::new(), propose)
        .await
        .unwrap();
    let numbers: Vec<_> = claimed
        .iter()
        .map(|c| match c {
            Claim::Started(trial) => Some(trial.number),
            _ => None,
        })
        .collect();
    assert_eq!(numbers, [Some(3)]);
    assert!(!view.counts_first());
    assert_eq!(
        (
            view.count(TrialState::Succeeded),
            view.count(TrialState::Running)
        ),
        (2, 2)
    );
    assert!(
        view.trial(0).is_none(),
        "a finished trial is counted, not read"
    );
    assert_eq!(view.trial(1).map(|t| t.state), Some(TrialState::Running));
    let spent = storage
        .claim_trials(&mut view, rules, client, 1, &mut Vec::new(), propose)
        .await
        .unwrap();
    assert_eq!(spent, [Claim::BudgetSpent]);
}
