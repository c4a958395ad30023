use resilience::circuit_breaker;

#[circuit_breaker(name = "partner", rate = "25/s")]
async fn get_quote(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

fn main() {}
