use resilience::{circuit_breaker, hedge, retry};

#[hedge(delay = "50ms")]
#[retry]
async fn get_user(id: u64) -> Result<u64, resilience::Error> {
    std::future::ready(Ok(id)).await
}

#[circuit_breaker(name = "orders")]
#[hedge(delay = "50ms")]
async fn get_order(id: u64) -> Result<u64, resilience::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
