use resilience::retry;

#[retry(method = "POST")]
async fn orders(amount: u64) -> Result<u64, std::io::Error> {
    Ok(amount)
}

fn main() {}
