use resilience::circuit_breaker;

#[circuit_breaker(ratio = 0.5, fallbak = cached_user)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
