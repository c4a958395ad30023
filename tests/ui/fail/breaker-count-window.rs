use resilience::circuit_breaker;

// A time window and a count window at once: one of them would be ignored.
#[circuit_breaker(name = "user", window = "60s", window_calls = 100)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

// The last 5 calls can never reach the 20 calls `min` asks for.
#[circuit_breaker(name = "order", window_calls = 5)]
async fn get_order(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
