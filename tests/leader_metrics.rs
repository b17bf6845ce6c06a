//! Leader election's metrics (feature `metrics`): a won term counts in
//! `distributed_lock_leadership_gained_total` and shows in the gauges while
//! it lasts; its end counts by outcome and times the term.

use std::time::Duration;

use distlock::metrics::{
    IS_LEADER, LEADERSHIP_ENDED, LEADERSHIP_GAINED, LEADER_SECONDS, LEADER_TERM,
};
use distlock::{LockClient, Wait};
use metrics_exporter_prometheus::PrometheusBuilder;

/// The value of the series of `name` whose labels include all of `labels`,
/// summed over the series (0 when there is none).
fn value(scrape: &str, name: &str, labels: &[&str]) -> f64 {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|label| rest.contains(label)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_is_counted_timed_and_shown_by_role() {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let client = LockClient::memory();
    let role = r#"role="metrics""#;

    let leading = client
        .election("metrics")
        .campaign(Wait::Once)
        .await
        .unwrap();
    let scrape = handle.render();
    assert_eq!(value(&scrape, LEADERSHIP_GAINED, &[role]), 1.0, "{scrape}");
    assert_eq!(value(&scrape, IS_LEADER, &[role]), 1.0);
    assert_eq!(value(&scrape, LEADER_TERM, &[role]), leading.term() as f64);
    tokio::time::sleep(Duration::from_millis(50)).await;
    leading.resign().await.unwrap();

    // Lost: the role's lock deleted behind the leader's back, found by the watchdog.
    let client = LockClient::builder()
        .lease(Duration::from_millis(300))
        .memory(distlock::MemoryStore::new())
        .unwrap();
    let lost = client
        .election("metrics")
        .campaign(Wait::Once)
        .await
        .unwrap();
    assert!(client
        .admin()
        .force_release("leader:metrics")
        .await
        .unwrap());
    tokio::time::timeout(Duration::from_secs(5), lost.lost())
        .await
        .unwrap();
    drop(lost);
    // The drop's ending runs in the background.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let scrape = loop {
        let scrape = handle.render();
        if value(&scrape, LEADERSHIP_ENDED, &[role, r#"outcome="lost""#]) >= 1.0 {
            break scrape;
        }
        assert!(tokio::time::Instant::now() < deadline, "{scrape}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(value(&scrape, LEADERSHIP_GAINED, &[role]), 2.0);
    assert_eq!(
        value(&scrape, LEADERSHIP_ENDED, &[role, r#"outcome="resigned""#]),
        1.0
    );
    assert_eq!(value(&scrape, IS_LEADER, &[role]), 0.0);
    assert_eq!(value(&scrape, LEADER_TERM, &[role]), 0.0);
    // Two terms timed; the first lasted at least its 50 ms.
    assert_eq!(
        value(&scrape, &format!("{LEADER_SECONDS}_count"), &[role]),
        2.0,
        "{scrape}"
    );
    assert!(value(&scrape, &format!("{LEADER_SECONDS}_sum"), &[role]) >= 0.05);
}
