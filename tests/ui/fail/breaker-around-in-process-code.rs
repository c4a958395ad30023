use resilience::circuit_breaker;
use std::collections::HashMap;

struct Prices {
    cache: HashMap<String, u64>,
}

impl Prices {
    // A map lookup: nothing over the network, nothing to protect.
    #[circuit_breaker(name = "price-cache")]
    async fn cached_price(&self, sku: &str) -> Result<u64, std::io::Error> {
        self.cache
            .get(sku)
            .copied()
            .ok_or_else(|| std::io::ErrorKind::NotFound.into())
    }
}

fn main() {}
