use resilience::circuit_breaker;

// One key for every call is a breaker of its own, not a family.
#[circuit_breaker(name = "hosts", key = "eu.example")]
async fn fetch(host: &str) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(host.len() as u64)).await
}

#[circuit_breaker(name = "tenants", key = 42)]
async fn invoices(tenant: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(tenant)).await
}

fn main() {}
