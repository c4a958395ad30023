use resilience::circuit_breaker;

// A burst of 0 refuses every call.
#[circuit_breaker(name = "partner", limit = "partner", rate = "100/s", burst = 0)]
async fn get_quote(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

// A burst of two million lets through whatever is sent at once.
#[circuit_breaker(name = "payments", limit = "payments", rate = "25/s", burst = 2000000)]
async fn charge(amount: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(amount)).await
}

fn main() {}
