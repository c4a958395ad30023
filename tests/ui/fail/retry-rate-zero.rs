use resilience::retry;

// No call at all would go through.
#[retry(limit = "partner", rate = "0/s")]
async fn get_quote(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

// A period of nothing.
#[retry(limit = "partner", rate = "100/0ms")]
async fn get_price(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

fn main() {}
