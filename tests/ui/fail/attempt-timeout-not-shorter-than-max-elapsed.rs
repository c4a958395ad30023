use resilience::retry;

#[retry(attempt_timeout = "5s")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

#[retry(attempt_timeout = "3s", max_elapsed = "2s")]
async fn get_order(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
