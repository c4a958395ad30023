use resilience::circuit_breaker;

#[circuit_breaker(name = "user", ratio = 0.0, min = 0, half_open = 0, window = "5ms")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

#[circuit_breaker(name = "order", ratio = 1.5, slow_call(threshold = "2s", ratio = 2.0), preset = "critcal")]
async fn get_order(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

#[circuit_breaker(name = "stock", probe_timeout = "0s")]
async fn get_stock(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

#[circuit_breaker(name = "price", call_timeout = "0s")]
async fn get_price(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
