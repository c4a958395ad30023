use resilience::retry;

// The clock of a rate limit is the build's choice (tokio's paused clock in
// tests, the CPU's counter in production), not one call site's.
#[retry(limit = "partner", rate = "100/s", clock = "tsc")]
async fn get_quote(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

fn main() {}
