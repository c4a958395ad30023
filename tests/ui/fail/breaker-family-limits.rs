use resilience::circuit_breaker;

// `max_members` and `idle` bound a family: a breaker without `key` is one
// breaker.
#[circuit_breaker(name = "user", max_members = 100, idle = "10m")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

#[circuit_breaker(name = "hosts", key = host, max_members = 0, idle = "500ms")]
async fn fetch(host: &str) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(host.len() as u64)).await
}

fn main() {}
