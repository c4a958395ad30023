use resilience::retry;

#[retry(max = 3)]
async fn create_order(amount: u64) -> Result<u64, std::io::Error> {
    Ok(amount)
}

fn main() {}
