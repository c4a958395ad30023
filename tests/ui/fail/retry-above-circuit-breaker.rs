use resilience::{circuit_breaker, retry};

#[retry(max = 3)]
#[circuit_breaker(name = "user")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
