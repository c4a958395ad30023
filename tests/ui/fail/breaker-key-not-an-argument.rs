use resilience::circuit_breaker;

// The key is read from the call's arguments: `hots` is none of them.
#[circuit_breaker(name = "hosts", key = hots)]
async fn fetch(host: &str, path: &str) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(host.len() as u64 + path.len() as u64)).await
}

fn main() {}
