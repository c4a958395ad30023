use resilience::hedge;

// A hedge sends the request again while the first is still running: a fn
// that creates something needs an idempotency key.
#[hedge(delay = "50ms")]
async fn create_order(cents: u64) -> Result<u64, resilience::Error> {
    std::future::ready(Ok(cents)).await
}

fn main() {}
