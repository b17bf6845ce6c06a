//! The axum example with the `metrics` feature: payments through its router
//! over real HTTP, then a scrape of `GET /metrics` (Prometheus' text format)
//! whose lock counters match the answers.

use std::time::Duration;

use distlock::metrics::{ACQUISITIONS, HELD, HOLD_SECONDS};
use distlock::LockClient;
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::net::TcpListener;

#[allow(dead_code)] // its `main` and the demo's helpers
#[path = "../examples/axum_orders.rs"]
mod axum_orders;

use axum_orders::http;

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
async fn the_metrics_endpoint_counts_the_payments() {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let app = axum_orders::with_metrics(
        axum_orders::router(
            LockClient::memory(),
            axum_orders::payments::Payments::memory(),
        ),
        handle,
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // Three payments of order 1 at once (one pays, the others find the lock
    // busy: 409), one of order 2.
    let calls: Vec<_> = [
        "/orders/1/pay",
        "/orders/1/pay",
        "/orders/1/pay",
        "/orders/2/pay",
    ]
    .into_iter()
    .map(|path| tokio::spawn(http::post(addr, path)))
    .collect();
    let mut statuses = Vec::new();
    for call in calls {
        statuses.push(call.await.unwrap().unwrap().1);
    }
    let ok = statuses.iter().filter(|s| **s == 200).count() as f64;
    let busy = statuses.iter().filter(|s| **s == 409).count() as f64;
    assert_eq!(ok + busy, 4.0, "{statuses:?}");
    assert!(ok >= 2.0 && busy >= 1.0, "{statuses:?}");

    // The guards are given back as the responses go out: wait for the last.
    let mut scrape = String::new();
    for _ in 0..100 {
        scrape = http::get(addr, "/metrics").await.unwrap().3;
        if value(&scrape, HELD, &[]) == 0.0
            && value(&scrape, &format!("{HOLD_SECONDS}_count"), &[]) >= ok
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let acquisitions = |outcome: &str| {
        value(
            &scrape,
            ACQUISITIONS,
            &["kind=\"lock\"", &format!("outcome=\"{outcome}\"")],
        )
    };
    assert_eq!(acquisitions("acquired"), ok, "{scrape}");
    assert_eq!(acquisitions("busy"), busy, "{scrape}");
    assert_eq!(acquisitions("timed_out"), 0.0, "{scrape}");
    assert_eq!(acquisitions("error"), 0.0, "{scrape}");
    assert_eq!(
        value(&scrape, &format!("{HOLD_SECONDS}_count"), &[]),
        ok,
        "{scrape}"
    );
    assert_eq!(value(&scrape, HELD, &["kind=\"lock\""]), 0.0, "{scrape}");
    // No lock names unless the client asks for them.
    assert!(!scrape.contains("order:1"), "{scrape}");
    server.abort();
}
