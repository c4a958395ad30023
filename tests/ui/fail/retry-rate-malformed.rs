use resilience::retry;

// Words instead of the grammar the config file's `rate` uses too.
#[retry(limit = "partner", rate = "100 per second")]
async fn get_quote(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

// A period that is no unit or duration.
#[retry(limit = "partner", rate = "100/fortnight")]
async fn get_price(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

// A bare number: calls per what?
#[retry(limit = "partner", rate = 100)]
async fn get_stock(sku: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(sku)).await
}

fn main() {}
