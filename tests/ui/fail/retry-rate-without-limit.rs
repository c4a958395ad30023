use resilience::retry;

// A rate of no limiter: which dependency's quota is it?
#[retry(rate = "100/s", burst = 20)]
async fn get_quote(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

// A burst of no rate.
#[retry(limit = "partner", burst = 20)]
async fn get_price(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

fn main() {}
