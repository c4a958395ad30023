use resilience::circuit_breaker;

pub struct Host {
    pub name: String,
}

// A key is text, an integer or an address: `Host` is none of them.
#[circuit_breaker(name = "hosts", key = host)]
async fn fetch(host: &Host) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(host.name.len() as u64)).await
}

fn main() {}
