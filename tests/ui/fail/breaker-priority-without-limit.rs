use resilience::circuit_breaker;

#[circuit_breaker(name = "ledger", priority = "critical")]
async fn get_balance(account: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(account)).await
}

fn main() {}
