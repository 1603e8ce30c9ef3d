//! Every request to etcd has a deadline: one that takes longer is an
//! error like any other, and ends the session that made it.

use std::time::Duration;

/// How long one request may take.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// `request` within `REQUEST_TIMEOUT`, its error as text.
pub(super) async fn within<T>(
    what: &str,
    request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: no answer within {}s",
            REQUEST_TIMEOUT.as_secs()
        )),
    }
}
