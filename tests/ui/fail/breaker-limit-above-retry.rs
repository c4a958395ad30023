use resilience::{circuit_breaker, retry};

#[circuit_breaker(name = "ledger", limit = "ledger")]
#[retry(max = 3)]
async fn get_balance(account: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(account)).await
}

fn main() {}
