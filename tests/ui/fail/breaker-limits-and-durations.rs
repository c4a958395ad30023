use resilience::circuit_breaker;

// More probes than the 16-bit probe counter holds: the breaker could never close.
#[circuit_breaker(name = "user", half_open = 70000)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

// A duration whose fraction pushes it past what a Duration holds (it used to
// panic the attribute, or compile to 231.788543ms in a release build).
#[circuit_breaker(name = "order", cooldown = "340282366920938463463374607431.999999999s")]
async fn get_order(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

// More calls than a breaker should need to judge a dependency.
#[circuit_breaker(name = "stock", min = 2000000, window_calls = 5000000)]
async fn get_stock(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
